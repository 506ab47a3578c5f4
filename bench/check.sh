#!/usr/bin/env bash
# Benchmark of `vlbiflow check` and `gather` against `cat` reading the same files, from the page cache and
# from disk, on a Mark6 scan across four disk directories (recorded by `vlbiflow demo --keep`) and on one
# plain VDIF file of the same frames. The plain file is checked as `check` does by default (one validation
# thread per core, each reading its own range of the file) and in one pass (`--threads 1`).
#
#   bench/check.sh [SECONDS] [OUT.md]      (defaults: 8 s of data at 4 Gb/s = 4 GB; docs/bench/check.md)
#
# BEFORE=path: also the `check` of the scan (page cache and disk) and the one-pass check of the plain file
# (page cache) by that binary (a build from before a change), alternating with cat in the same run, as
# rows marked "before".
#
# Everything lives under target/bench-check on the work tree's disk and is removed afterwards. "From disk"
# drops the page cache first (root only: echo 3 > /proc/sys/vm/drop_caches).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-8}
OUT=${2:-docs/bench/check.md}
DIR=$PWD/target/bench-check
command -v bc >/dev/null || apt-get install -y -qq bc >/dev/null
bench_build
rm -rf "$DIR"
trap 'rm -rf "$DIR"' EXIT
raise_socket_buffers

"$BIN" demo --rate 4Gbps --duration "$SECS" --keep "$DIR" >/dev/null
FILES=("$DIR"/disk*/demo_xx_001.vdif)
"$BIN" gather demo_xx_001 --disk "$DIR/disk*" -o "$DIR/plain.vdif" 2>/dev/null
BYTES=$(stat -c %s "${FILES[@]}" | awk '{s+=$1} END {printf "%.0f", s}')

drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "bench: cannot drop caches (not root)" >&2; }
# Seconds of wall time of a command.
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || [ $? -eq 1 ] || { echo "bench: $* failed" >&2; exit 1; }; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
med3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
# Median of 3 of two commands run alternately (the machine is shared: both see the same noise), from the
# page cache (COLD unset) or from disk (COLD=1: the page cache dropped before every run). Sets A and B.
alt3() {
  local a=() b=() i
  for i in 1 2 3; do
    [ -n "${COLD:-}" ] && drop; a+=("$(t "$1")")
    [ -n "${COLD:-}" ] && drop; b+=("$(t "$2")")
  done
  A=$(med3 "${a[@]}"); B=$(med3 "${b[@]}")
}

cat_all() { cat "${FILES[@]}" >/dev/null; }
catp() { cat "$DIR/plain.vdif" >/dev/null; }
check_scan() { "$BIN" check demo_xx_001 --disk "$DIR/disk*" --quiet; }
check_plain() { "$BIN" check "$DIR/plain.vdif" --quiet; }
check_plain1() { "$BIN" check "$DIR/plain.vdif" --quiet --threads 1; }
before_scan() { "$BEFORE" check demo_xx_001 --disk "$DIR/disk*" --quiet; }
before_plain1() { "$BEFORE" check "$DIR/plain.vdif" --quiet --threads 1; }
gather_null() { "$BIN" gather demo_xx_001 --disk "$DIR/disk*" -o - > /dev/null; }

cat_all; check_scan; catp  # warm the cache
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
alt3 cat_all check_scan; C_CAT=$A; C_CHK=$B; alt3 cat_all gather_null; C_GAT=$B
alt3 catp check_plain; C_CATP=$A; C_CHKP=$B; alt3 catp check_plain1; C_CATP1=$A; C_CHKP1=$B
B_ROWS=""
if [ -n "${BEFORE:-}" ]; then
  alt3 cat_all before_scan; B_ROWS+="(\"Mark6 scan, 4 files, before\", \"page cache\", $A, $B, None),"
  alt3 catp before_plain1; B_ROWS+="(\"plain VDIF, 1 file, --threads 1, before\", \"page cache\", $A, $B, None),"
fi
COLD=1
alt3 cat_all check_scan; D_CAT=$A; D_CHK=$B; alt3 cat_all gather_null; D_GAT=$B
alt3 catp check_plain; D_CATP=$A; D_CHKP=$B; alt3 catp check_plain1; D_CATP1=$A; D_CHKP1=$B
if [ -n "${BEFORE:-}" ]; then
  alt3 cat_all before_scan; B_ROWS+="(\"Mark6 scan, 4 files, before\", \"disk\", $A, $B, None),"
fi
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$OUT" "$BYTES" "$SECS" "$LOAD0" "$LOAD1" <<EOF
import sys, os, platform, datetime
out, n, secs, load0, load1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = [("Mark6 scan, 4 files", "page cache", $C_CAT, $C_CHK, $C_GAT),
        ("Mark6 scan, 4 files", "disk", $D_CAT, $D_CHK, $D_GAT),
        ("plain VDIF, 1 file", "page cache", $C_CATP, $C_CHKP, None),
        ("plain VDIF, 1 file", "disk", $D_CATP, $D_CHKP, None),
        ("plain VDIF, 1 file, --threads 1", "page cache", $C_CATP1, $C_CHKP1, None),
        ("plain VDIF, 1 file, --threads 1", "disk", $D_CATP1, $D_CHKP1, None), $B_ROWS]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
L = ["# \`vlbiflow check\` and \`gather\` against \`cat\`", "",
     f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
     f"- machine: {os.cpu_count()} vCPU ({cpu}), kernel {platform.release()}, ext4 on the work tree's virtual disk",
     f"- command: \`bench/check.sh {secs}\`: a {n/1e9:.2f} GB scan (8224-byte frames, 2 threads) recorded by \`vlbiflow demo --keep\`, and the same frames gathered into one file",
     "- page cache: after a warm-up; disk: the page cache dropped before every run; each figure the median of 3 runs, cat and the tool alternating",
     f"- load average (1, 5, 15 min) at the start and the end: {load0}; {load1}",
     "- the machine is shared and noisy: read the ratios", "",
     "| data | from | cat GB/s | check GB/s | check / cat | gather to /dev/null GB/s |", "|---|---|---|---|---|---|"]
for name, src, c, k, g in rows:
    gs = f"{n/g/1e9:.2f}" if g else ""
    L.append(f"| {name} | {src} | {n/c/1e9:.2f} | {n/k/1e9:.2f} | {c/k:.2f} | {gs} |")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
