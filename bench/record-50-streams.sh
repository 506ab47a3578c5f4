#!/usr/bin/env bash
# 50 streams of VDIF thread 0, station Xx (as many backends send), recorded together into one Mark6 scan on
# four disk directories; then `check` must give each stream's loss equal to the recorder's own count, and
# `gather` per stream must be byte-identical to what `gen --output` writes for that stream.
# Usage: bench/record-50-streams.sh [DIR] [RATE per stream] [SECONDS]   (DIR on a real disk, not tmpfs)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
dir=${1:-/var/tmp/vlbiflow-50}
rate=${2:-40Mbps}
secs=${3:-5}
n=50
bench_build
bin=$BIN
rm -rf "$dir"; mkdir -p "$dir"/{0,1,2,3} "$dir/out"
start=2026-06-01T00:00:00Z
streams=(); dests=()
for i in $(seq 0 $((n - 1))); do
  streams+=(--stream "s$i=vdif@127.0.0.1:$((41000 + i)),psn")
  dests+=(--dest "127.0.0.1:$((41000 + i))")
done
"$bin" record "${streams[@]}" --disk "$dir/0" --disk "$dir/1" --disk "$dir/2" --disk "$dir/3" \
  --scan t50 --duration $((secs + 8)) --json > "$dir/record.json" 2> "$dir/record.log" &
rec=$!
sleep 2
gen=(--rate "$rate" --psn --start "$start" --drop-every 997 --payload noise --frame-size 8224)
"$bin" gen "${dests[@]}" "${gen[@]}" --duration "$secs" --json > "$dir/gen.json"
wait "$rec" || true
"$bin" check t50 --disk "$dir/*" --json > "$dir/check.json" || true
"$bin" gather t50 --disk "$dir/*" -o "$dir/out/g.vdif" --quiet || true
"$bin" gen --output "$dir/out/ref.vdif" "${gen[@]}" --duration "$secs" > /dev/null 2>&1
same=0
for i in $(seq 0 $((n - 1))); do
  if cmp -s "$dir/out/g.s$i.vdif" "$dir/out/ref.vdif"; then same=$((same + 1)); fi
done
echo "gathered streams byte-identical to gen --output: $same of $n"
python3 - "$dir" <<'PY'
import json, sys, subprocess, filecmp, os
d = sys.argv[1]
rec = json.load(open(f"{d}/record.json"))
chk = json.load(open(f"{d}/check.json"))
gen = json.load(open(f"{d}/gen.json"))
print("gen:", json.dumps(gen)[:400])
rec_lost = {s["label"]: s["counters"]["lost"] for s in rec["streams"]}
rec_stored = {s["label"]: s["counters"]["packets"] for s in rec["streams"]}
bad = 0
for s in chk["streams"]:
    ok = s["missing"] == rec_lost[s["label"]] and s["frames"] == rec_stored[s["label"]] and s["out_of_order"] == 0 and s["duplicates"] == 0
    bad += not ok
    if not ok:
        print("MISMATCH", s, "recorder lost", rec_lost[s["label"]], "stored", rec_stored[s["label"]])
print(f"streams checked: {len(chk['streams'])}, mismatches with the recorder: {bad}")
print("total: recorder lost", sum(rec_lost.values()), "stored", sum(rec_stored.values()), "| check missing", chk["missing"], "frames", chk["frames"])
PY
