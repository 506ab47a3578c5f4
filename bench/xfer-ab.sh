#!/usr/bin/env bash
# A/B comparison of two builds of `vlbiflow xfer` on loopback (docs/bench/xfer.md):
# rounds alternate A, B, B, A, ... in one run, each pushing the same file on disk into a daemon writing to
# disk, and print goodput and CPU seconds per GB at the sender (client) and the receiver (daemon), then the
# median and range per build. Give the two binaries (e.g. one built before a change, copied aside, and one
# after). The source file stays in the page cache unless COLD=1 (then caches are dropped before each
# round, which needs root), so the numbers measure the CPU of the transfer rather than the disk.
#
#   bench/xfer-ab.sh BIN_A BIN_B [SIZE_MB] [ROUNDS]     e.g. bench/xfer-ab.sh /tmp/vf-old target/release/vlbiflow 1000 6
#
# Extra push options (e.g. RATE=4Gbps for a fixed ceiling; default automatic) through RATE and OPTS.
# PEER=1 adds TCP as a peer to each round: iperf3 -F at both ends (the client reads the same file, the
# server writes it into the same directory; not hashed), then `sync` (xfer's receiver syncs before it
# reports), at RATE if given, with iperf3's own CPU report for the two ends (apt-get install iperf3);
# TCP_CC=cubic|bbr sets its congestion control (default: the system's).
# Every row also has what the whole machine spent per GB (bench/cpu.sh): from /proc/stat over the run,
# less the machine's background measured before the rounds, so that kernel work charged to neither end
# (writeback threads, softirq in other tasks) counts too.
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
if [ "${PEER:-0}" = 1 ] && ! command -v iperf3 >/dev/null; then
  echo "PEER=1 needs iperf3 (apt-get install iperf3)" >&2
  exit 1
fi
A=$(realpath "$1")
B=$(realpath "$2")
SIZE_MB=${3:-1000}
ROUNDS=${4:-6}
RATE=${RATE:-}
OPTS=${OPTS:-}
PORT=$((47000 + $$ % 1000))
scratch_dirs vf-xfer-ab
SRV=
on_exit_kill SRV

source_file "$SIZE_MB" "$SCRATCH/src/data.bin"
BG=$(machine_background 5)
echo "# xfer A/B on loopback, $(machine_line)"
echo "# A = $A"
echo "# B = $B"
echo "# ${SIZE_MB} MB file on $(df --output=source "$SCRATCH" | tail -1), ${ROUNDS} rounds per build, rate ${RATE:-automatic} ${OPTS}"
echo "# the machine's background before the rounds: $BG busy CPU s/s (subtracted from each run's machine CPU)"
echo
echo "| round | build | goodput Mb/s | sender CPU s/GB | receiver CPU s/GB | machine CPU s/GB | retransmitted | load |"
echo "| --: | --- | --: | --: | --: | --: | --: | --: |"
: >"$SCRATCH/results"
run() { # run ROUND NAME BIN
  local bin=$3
  rm -rf "$SCRATCH/dst"/*
  [ "${COLD:-0}" = 1 ] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
  "$bin" xfer serve --listen 127.0.0.1:$PORT --root data="$SCRATCH/dst" 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  local c0 c1 m0 m1
  c0=$(cpu_of $SRV)
  m0=$(machine_mark)
  # shellcheck disable=SC2086
  /usr/bin/time -f "%U %S" -o "$SCRATCH/time" "$bin" xfer push "$SCRATCH/src/data.bin" 127.0.0.1:$PORT/data \
    ${RATE:+--rate $RATE} $OPTS --json >"$SCRATCH/xfer.json" 2>"$SCRATCH/xfer.err" || cat "$SCRATCH/xfer.err" >&2
  c1=$(cpu_of $SRV)
  m1=$(machine_mark)
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  python3 - "$SCRATCH/xfer.json" "$SCRATCH/time" "$c0" "$c1" "$SIZE_MB" "$1" "$2" "$(cut -d' ' -f1 /proc/loadavg)" \
    "$SCRATCH/results" "$(machine_cpu "$m0" "$m1" "$BG")" <<'PY'
import json, sys
js, tf, c0, c1, mb, rnd, name, load, res, mach = sys.argv[1:]
try:
    d = json.load(open(js))
except Exception:
    print(f"| {rnd} | {name} | failed | | | | | {load} |")
    sys.exit(0)
u, s = map(float, open(tf).read().split()[-2:])
gb = float(mb) / 1000
gp = d["goodput_bps"] / 1e6
snd = (u + s) / gb
rcv = (float(c1) - float(c0)) / gb
mach = f"{float(mach) / gb:.2f}"
rtx = 100 * d["retransmits"] / max(1, d["datagrams"])
print(f"| {rnd} | {name} | {gp:.0f} | {snd:.2f} | {rcv:.2f} | {mach} | {rtx:.2f} % | {load} |")
open(res, "a").write(f"{name} {gp} {snd} {rcv} {mach}\n")
PY
}
run_tcp() { # run_tcp ROUND: iperf3 -F file to file as the TCP peer
  rm -rf "$SCRATCH/dst"/*
  [ "${COLD:-0}" = 1 ] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
  iperf3 -s -1 -B 127.0.0.1 -p $((PORT + 1)) -F "$SCRATCH/dst/tcp.bin" >/dev/null 2>&1 &
  local ips=$!
  for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$((PORT + 1))")" ] && break; sleep 0.1; done
  local m0 m1
  m0=$(machine_mark)
  iperf3 -c 127.0.0.1 -p $((PORT + 1)) -F "$SCRATCH/src/data.bin" ${RATE:+-b ${RATE%bps}} ${TCP_CC:+-C $TCP_CC} \
    -J >"$SCRATCH/tcp.json" 2>/dev/null || true
  # the one-off server ends with the test; bounded, in case the client never reached it
  for _ in $(seq 100); do kill -0 $ips 2>/dev/null || break; sleep 0.1; done
  kill $ips 2>/dev/null || true
  wait $ips 2>/dev/null || true
  sync
  m1=$(machine_mark)
  python3 - "$SCRATCH/tcp.json" "$1" "$(cut -d' ' -f1 /proc/loadavg)" "$SCRATCH/results" \
    "${TCP_CC:-$(cat /proc/sys/net/ipv4/tcp_congestion_control)}" "$(machine_cpu "$m0" "$m1" "$BG")" <<'PY'
import json, sys
js, rnd, load, res, cc, cpu = sys.argv[1:]
name = f"TCP {cc} (iperf3 -F, sync)"
try:
    e = json.load(open(js))["end"]
    secs, gb = e["sum_sent"]["seconds"], e["sum_sent"]["bytes"] / 1e9
    c = e["cpu_utilization_percent"]
except Exception:
    print(f"| {rnd} | {name} | failed | | | | | {load} |")
    sys.exit(0)
gp = e["sum_sent"]["bits_per_second"] / 1e6
snd = c["host_total"] / 100 * secs / gb
rcv = c["remote_total"] / 100 * secs / gb
mach = float(cpu) / gb
print(f"| {rnd} | {name} | {gp:.0f} | {snd:.2f} | {rcv:.2f} | {mach:.2f} | {e['sum_sent'].get('retransmits', 0)} segments | {load} |")
open(res, "a").write(f"TCP {gp} {snd} {rcv} {mach}\n")
PY
}
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run "$r" A "$A"; run "$r" B "$B"; else run "$r" B "$B"; run "$r" A "$A"; fi
  if [ "${PEER:-0}" = 1 ]; then run_tcp "$r"; fi
done
echo
python3 - "$SCRATCH/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| build | goodput Mb/s median (range) | sender CPU s/GB median (range) | receiver CPU s/GB median (range) | machine CPU s/GB median (range) |")
print("| --- | --: | --: | --: | --: |")
for b in ("A", "B", "TCP"):
    v = [list(map(float, r[1:])) for r in rows if r[0] == b]
    if not v:
        continue
    cols = list(zip(*v))
    f = lambda c, p: f"{statistics.median(c):.{p}f} ({min(c):.{p}f}-{max(c):.{p}f})"
    print(f"| {b} | {f(cols[0], 0)} | {f(cols[1], 2)} | {f(cols[2], 2)} | {f(cols[3], 2)} |")
PY
