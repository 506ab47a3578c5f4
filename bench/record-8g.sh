#!/usr/bin/env bash
# The recorder's acceptance run: a stream faster than this VM's disk (8 Gb/s of 8224-byte frames with PSN for
# 15 s, about 15 GB) recorded by `vlbiflow record` with its DEFAULT pool onto four directories on the
# disk. Prints gen's count of frames sent, the recorder's stored / lost / dropped for want of a buffer /
# kernel drops, and checks lost == sent - stored exactly; then `vlbiflow check` on the scan.
#
# Usage: bench/record-8g.sh [DIR (default /var/tmp/vf-8g)] [RATE (default 8Gbps)] [SECONDS (default 15)]
# Needs about RATE x SECONDS / 8 bytes of free disk in DIR; deletes the scan afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_build
bin=$BIN
dir=${1:-/var/tmp/vf-8g}
rate=${2:-8Gbps}
secs=${3:-15}
port=4811
rm -rf "$dir"; mkdir -p "$dir"/{0,1,2,3}
trap 'rm -rf "$dir"' EXIT
echo "machine: $(machine_line), $(free -g | awk '/Mem:/{print $2}') GiB"
record_scan "$dir/" t8g_xx_001 $port "$rate" "$secs" "$dir"
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
