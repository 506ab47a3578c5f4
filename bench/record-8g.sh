#!/usr/bin/env bash
# Issue 10's acceptance run: a stream faster than this VM's disk (8 Gb/s of 8224-byte frames with PSN for
# 15 s, about 15 GB) recorded by `vlbiflow record` with its DEFAULT pool onto four directories on the
# disk. Prints gen's count of frames sent, the recorder's stored / lost / dropped for want of a buffer /
# kernel drops, and checks lost == sent - stored exactly; then `vlbiflow check` on the scan.
#
# Usage: bench/record-8g.sh [DIR (default /var/tmp/vf-8g)] [RATE (default 8Gbps)] [SECONDS (default 15)]
# Needs about RATE x SECONDS / 8 bytes of free disk in DIR; deletes the scan afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/vlbiflow
dir=${1:-/var/tmp/vf-8g}
rate=${2:-8Gbps}
secs=${3:-15}
port=4811
rm -rf "$dir"; mkdir -p "$dir"/{0,1,2,3}
trap 'rm -rf "$dir"' EXIT
echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
"$bin" record --stream a=vdif@127.0.0.1:$port,psn --disk "$dir"/0 --disk "$dir"/1 --disk "$dir"/2 --disk "$dir"/3 \
  --scan t8g_xx_001 --json >"$dir/record.json" 2>"$dir/record.log" &
rpid=$!
for _ in $(seq 100); do [ -e "$dir/0/t8g_xx_001.vlbiflow.json" ] && break; sleep 0.1; done
"$bin" gen --dest 127.0.0.1:$port --rate "$rate" --duration "$secs" --psn --json >"$dir/gen.json" 2>/dev/null
sleep 1
kill -INT $rpid; wait $rpid || true
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
g = json.load(open(f"{d}/gen.json"))
r = json.load(open(f"{d}/record.json"))
c = r["streams"][0]["counters"]
sent = g["frames"]
stored = c["packets"]
print(f"gen: {sent} frames sent, {g['achieved_bps'] / 1e9:.3f} Gb/s")
print(f"record: stored {stored}, lost {c['lost']}, dropped for want of a buffer {c['dropped_no_buffer']}, "
      f"kernel drops {c['kernel_drops']}, rejected {c['rejected']}")
print(f"sent - stored = {sent - stored}; lost = {c['lost']}: {'EXACT' if sent - stored == c['lost'] else 'MISMATCH'}")
PY
grep -v "^ *[0-9.]*s |" "$dir/record.log" | tail -20
"$bin" check t8g_xx_001 --disk "$dir/*" | tail -4 || true
