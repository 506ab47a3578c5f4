#!/usr/bin/env bash
# One stream over several receiving threads: `vlbiflow sink --split N` (SO_REUSEPORT group steered by PSN
# runs) fed by one `gen --psn --gso 7` stream. For each N and round: the rate received, the sink's lost
# and kernel drops, how many datagrams were handed on to their run's thread, and the CPU of the busiest
# receiving thread (from /proc/PID/task/*/stat, in cores over the run).
#
#   bench/sink-split.sh
#
# Environment: RATE (Gb/s, default 30), SECS (5), ROUNDS (3), SPLITS ("1 2 4"), BIN (default: this
# checkout's release build), PORT (4222), GEN_ARGS (more arguments for gen, e.g. "--batch 1000" so that
# its GSO trains cross the runs' boundaries and their tails are handed on between threads). gen runs on CPU 0 and the sink on CPU 1. Root raises
# net.core.rmem_max to 256 MiB for the sink's 64 MiB buffer (said when it does).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/vlbiflow}
RATE=${RATE:-30} SECS=${SECS:-5} ROUNDS=${ROUNDS:-3} SPLITS=${SPLITS:-"1 2 4"} PORT=${PORT:-4222}
[ -x "$BIN" ] || cargo build --release --locked -p vlbiflow
if [ "$(id -u)" = 0 ] && [ "$(sysctl -n net.core.rmem_max)" -lt 268435456 ]; then
  echo "raising net.core.rmem_max to 268435456 (was $(sysctl -n net.core.rmem_max))"
  sysctl -qw net.core.rmem_max=268435456
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
hz=$(getconf CLK_TCK)
echo "| split | round | sink Gb/s | lost | kernel drops | handed on | busiest thread | its CPU (cores) |"
echo "|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for n in $SPLITS; do
    taskset -c 1 "$BIN" sink --listen "127.0.0.1:$PORT" --psn --gro --split "$n" --idle-timeout 1 \
      --recv-buffer 64MiB --json >"$out" 2>/dev/null &
    pid=$!
    # Until the sink's port is bound (at most 10 s).
    for _ in $(seq 100); do ss -Hlun "sport = :$PORT" | grep -q . && break; sleep 0.1; done
    taskset -c 0 "$BIN" gen --dest "127.0.0.1:$PORT" --psn --gso 7 --rate "${RATE}Gbps" --duration "$SECS" \
      ${GEN_ARGS:-} >/dev/null 2>&1
    # Every thread's CPU ticks while the sink still runs (it stops 1 s after the stream).
    busiest=$(for t in /proc/"$pid"/task/*; do
      read -r -a s <<<"$(sed 's/.*) //' "$t/stat")"
      echo "$(cat "$t/comm") $((s[11] + s[12]))"
    done | sort -k2 -n | tail -1)
    wait "$pid" || true
    python3 - "$n" "$round" "$busiest" "$hz" "$SECS" "$out" <<'PY'
import json, sys
n, rnd, busiest, hz, secs, path = sys.argv[1:]
s = [json.loads(l) for l in open(path) if '"summary"' in l][0]
name, ticks = busiest.split()
print(f"| {n} | {rnd} | {s['gbps']:.1f} | {s.get('lost')} | {s['kernel_drops']} | "
      f"{s.get('handed_on', 0)} | {name} | {int(ticks) / int(hz) / float(secs):.2f} |")
PY
  done
done
