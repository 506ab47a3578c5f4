#!/usr/bin/env bash
# Responder receive time stamps, before and after per-datagram kernel stamps:
# a paced UDP stream (1472-byte frames every 20 µs, and every 200 µs) from `vlbiflow net bw` to a
# `vlbiflow net responder` on loopback, with two vlbiflow binaries alternating in the same run. Prints, per
# run, the inter-arrival mode and median, the RFC 3550 jitter and the median 1-way delay above its minimum
# the responder reported. A paced stream with a known spacing should show that spacing as the mode, and
# jitter and delay near zero.
#
# Usage: bench/responder-timestamps.sh OLD_BINARY NEW_BINARY [REPEATS]
#   e.g. git worktree add /tmp/old 4c2ca61 && (cd /tmp/old && cargo build --release -p vlbiflow)
#        bench/responder-timestamps.sh /tmp/old/target/release/vlbiflow target/release/vlbiflow 3
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
old=${1:?old vlbiflow binary}
new=${2:?new vlbiflow binary}
repeats=${3:-3}
port=$(( 20000 + RANDOM % 20000 ))
echo "# $(machine_line)"
printf '%-4s %-8s %8s %10s %10s %10s %12s %8s\n' run binary spacing_us mode_us p50_us jitter_us delay_p50_us sent_ok
for r in $(seq 1 "$repeats"); do
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    port=$(( port + 1 ))
    "$bin" net responder --listen 127.0.0.1:$port >/dev/null 2>&1 &
    rpid=$!
    for _ in $(seq 50); do "$bin" net bw 127.0.0.1:$port --sizes 64 --count 1 --no-archive -q --json >/dev/null 2>&1 && break; sleep 0.1; done
    for spacing in 20 200; do
      count=$(( spacing == 20 ? 20000 : 2000 ))
      "$bin" net bw 127.0.0.1:$port --sizes 1472 --wait "$spacing" --count "$count" --no-gso --batch 1 --json --no-archive -q \
        | python3 -c '
import json, sys
d = json.load(sys.stdin)["results"][0]
a = d["remote"]["arrivals"]
ia = a["inter_arrival"]
# mode: centre of the fullest histogram bin (the new responder also reports it directly)
mode = ia.get("mode")
if mode is None:
    i = max(range(len(ia["bins"])), key=lambda k: ia["bins"][k])
    mode = ia["bin_start"] + (i + 0.5) * ia["bin_width"]
delay = a["delay"]["hist"]["p50"] if a.get("delay") else float("nan")
spacing = float(sys.argv[3])
# whether the sender kept its schedule (its own send rate within 2% of the paced rate)
ok = abs(d["local"]["send_user_rate_mbps"] - 1472 * 8 / spacing) / (1472 * 8 / spacing) < 0.02
p50, jitter = ia["p50"], a["jitter_us"]
print(f"{sys.argv[1]:<4} {sys.argv[2]:<8} {spacing:8.0f} {mode:10.2f} {p50:10.2f} {jitter:10.3f} {delay:12.2f} {str(ok):>8}")
' "$r" "$which" "$spacing"
    done
    kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
  done
done
