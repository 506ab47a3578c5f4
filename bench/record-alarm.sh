#!/usr/bin/env bash
# The recorder's disks-behind alarm against the README's `record` example (one VDIF stream with PSN onto
# four directories on the disk, 10 MB blocks, O_DIRECT):
#
#   healthy RATE: gen --rate RATE --duration 10 --psn into record --duration 12, started after record's
#                 ready line; counts the progress lines and the DISKS BEHIND lines, the least pool free.
#   throttle RATE LIMIT ON OFF: record and gen for OFF+15 s; ON s after gen starts, the recorder's writes to
#                 the disk's device are limited to LIMIT bytes/s (cgroup v1 blkio throttle, or v2 io.max),
#                 OFF s after gen starts the limit is lifted. Prints when the alarm was raised and cleared
#                 relative to those moments (from the event lines, time-stamped as they arrive).
#
# Usage (root): bench/record-alarm.sh healthy 1Gbps
#               bench/record-alarm.sh throttle 1Gbps 40000000 10 25
# Env: DIR (default /var/tmp/vf-alarm), on the disk, not tmpfs. Deletes its scan afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_build
bin=$BIN
mode=${1:?healthy or throttle}
rate=${2:-1Gbps}
dir=${DIR:-/var/tmp/vf-alarm}
port=4801
rm -rf "$dir"; mkdir -p "$dir"/{0,1,2,3}
cg=""
cleanup() {
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    [ -f "$cg/blkio.throttle.write_bps_device" ] && echo "$dev 0" >"$cg/blkio.throttle.write_bps_device" || true
    [ -f "$cg/io.max" ] && echo "$dev wbps=max" >"$cg/io.max" || true
    while read -r p; do echo "$p" >"$(dirname "$cg")/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
    rmdir "$cg" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
# The device that holds DIR (major:minor of the whole disk).
src=$(df --output=source "$dir" | tail -1)
dev=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1)
[ -n "$dev" ] && dev=$(cat "/sys/block/$dev/dev") || dev=$(cat "/sys/class/block/$(basename "$src")/dev")
echo "machine: $(machine_line), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "disk: $src ($dev), $(df -h --output=fstype,size,avail "$dir" | tail -1)"
case $mode in
  healthy) secs=10; rec_secs=12 ;;
  throttle) limit=${3:?LIMIT bytes/s}; on=${4:-10}; off=${5:-25}; secs=$((off + 15)); rec_secs=$((secs + 2)) ;;
esac
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
"$bin" record --stream a=vdif@127.0.0.1:$port,psn --disk "$dir"/0 --disk "$dir"/1 --disk "$dir"/2 --disk "$dir"/3 \
  --scan alarm_xx_001 --duration "$rec_secs" 2> >(stamp >"$dir/record.log") &
rpid=$!
until grep -q 'ready: receiving' "$dir/record.log" 2>/dev/null; do
  kill -0 $rpid 2>/dev/null || { cat "$dir/record.log"; exit 1; }
  sleep 0.05
done
if [ "$mode" = throttle ]; then
  if [ -d /sys/fs/cgroup/blkio ]; then
    cg=/sys/fs/cgroup/blkio/vf-alarm; mkdir -p "$cg"; echo $rpid >"$cg/cgroup.procs"
    limit_on() { echo "$dev $limit" >"$cg/blkio.throttle.write_bps_device"; }
    limit_off() { echo "$dev 0" >"$cg/blkio.throttle.write_bps_device"; }
  else
    cg=/sys/fs/cgroup/vf-alarm; echo +io >/sys/fs/cgroup/cgroup.subtree_control; mkdir -p "$cg"
    echo $rpid >"$cg/cgroup.procs"
    limit_on() { echo "$dev wbps=$limit" >"$cg/io.max"; }
    limit_off() { echo "$dev wbps=max" >"$cg/io.max"; }
  fi
  (
    sleep "$on"; limit_on; echo "limit_on $(date +%s.%N)" >"$dir/marks"
    sleep $((off - on)); limit_off; echo "limit_off $(date +%s.%N)" >>"$dir/marks"
  ) &
fi
t0=$(date +%s.%N)
"$bin" gen --dest 127.0.0.1:$port --rate "$rate" --duration "$secs" --psn --json >"$dir/gen.json" 2>/dev/null
wait $rpid || true
wait
echo "command: record --stream a=vdif@127.0.0.1:$port,psn --disk $dir/{0,1,2,3} --duration $rec_secs;" \
  "gen --rate $rate --duration $secs --psn${limit:+; write limit $limit B/s from ${on} s to ${off} s}"
python3 - "$dir" "$t0" "$mode" <<'PY'
import json, re, sys
d, t0, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
g = json.load(open(f"{d}/gen.json"))
lines = [l.rstrip("\n").split(" ", 1) for l in open(f"{d}/record.log")]
prog = [(float(t), l) for t, l in lines if re.match(r"\s*[0-9.]+s ", l)]
behind = [(float(t), l) for t, l in lines if "DISKS BEHIND" in l]
free = [int(a) * 100.0 / int(b) for _, l in prog for a, b in re.findall(r"pool (\d+) of (\d+) blocks free", l)]
print(f"gen sent {g.get('frames')} frames at {g.get('achieved_bps', 0) / 1e9:.3f} Gb/s")
print(f"progress lines {len(prog)}, lines with DISKS BEHIND {len(behind)}, least pool free {min(free) if free else 0:.0f}%")
for t, l in prog[-1:]:
    print(f"  last progress line: {l.strip()}")
for t, l in lines:
    if any(k in l for k in ("DISKS BEHIND:", "disks caught up", "scan alarm", "stream a:", "DROPPED", "    ")):
        print(f"  {float(t) - t0:7.2f} s  {l}")
if mode == "throttle":
    marks = dict(l.split() for l in open(f"{d}/marks"))
    on, off = float(marks["limit_on"]), float(marks["limit_off"])
    raised = [float(t) for t, l in lines if "DISKS BEHIND: streams bring" in l]
    cleared = [float(t) for t, l in lines if "disks caught up" in l]
    r = next((t for t in raised if t >= on), None)
    c = next((t for t in cleared if t >= off), None)
    print(f"limit on at {on - t0:.2f} s, off at {off - t0:.2f} s after gen started")
    print(f"alarm raised {'%.2f s after the limit' % (r - on) if r else 'never'}; "
          f"cleared {'%.2f s after it was lifted' % (c - off) if c else 'never'}; "
          f"raised before the limit: {sum(1 for t in raised if t < on)}")
PY
