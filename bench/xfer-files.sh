#!/usr/bin/env bash
# Many small files: `vlbiflow xfer push` of a directory of N files on loopback into a daemon writing to
# disk, against `cp -r` + `sync` of the same tree (docs/bench/xfer.md). Each xfer push ends only when
# every file is verified, synced and renamed to its name with its manifest beside it; `cp` leaves the
# files in the page cache until the `sync`. Rounds alternate A, B, B, A, ... with `cp` after each; give
# the same binary twice to measure one build. Prints per round the seconds, files per second and MB/s,
# then the median per variant.
#
#   bench/xfer-files.sh BIN_A BIN_B [FILES] [SIZE_KB] [ROUNDS]
#   e.g. bench/xfer-files.sh /var/tmp/vf-old target/release/vlbiflow 2000 64 3
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
A=$(realpath "$1")
B=$(realpath "$2")
FILES=${3:-2000}
SIZE_KB=${4:-64}
ROUNDS=${5:-3}
PORT=$((48000 + $$ % 1000))
scratch_dirs vf-xfer-files
SRV=
on_exit_kill SRV

python3 - "$SCRATCH/src/tree" "$FILES" "$SIZE_KB" <<'PY'
import os, sys
root, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, f"d{i // 500:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
        f.write(os.urandom(kb * 1024))
PY
sync
MB=$(python3 -c "print($FILES * $SIZE_KB * 1024 / 1e6)")
echo "# many small files on loopback, $(machine_line)"
echo "# A = $A"
echo "# B = $B"
echo "# $FILES files of $SIZE_KB KiB ($MB MB) in $(((FILES + 499) / 500)) directories on $(df --output=source "$SCRATCH" | tail -1), $ROUNDS rounds per variant"
echo
echo "| round | variant | seconds | files/s | MB/s | load |"
echo "| --: | --- | --: | --: | --: | --: |"
: >"$SCRATCH/results"
row() { # row ROUND NAME SECONDS
  python3 - "$@" "$FILES" "$MB" "$(cut -d' ' -f1 /proc/loadavg)" "$SCRATCH/results" <<'PY'
import sys
rnd, name, secs, n, mb, load, res = sys.argv[1:]
s = float(secs)
print(f"| {rnd} | {name} | {s:.2f} | {int(n) / s:.0f} | {float(mb) / s:.1f} | {load} |")
open(res, "a").write(f"{name} {s}\n")
PY
}
push() { # push ROUND NAME BIN
  rm -rf "$SCRATCH/dst"/*
  sync # as before cp: the previous round's deletions are not this round's to write
  "$3" xfer serve --listen 127.0.0.1:$PORT --root data="$SCRATCH/dst" 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$3" xfer push "$SCRATCH/src/tree" 127.0.0.1:$PORT/data --json >"$SCRATCH/xfer.json" 2>"$SCRATCH/xfer.err"; then
    cat "$SCRATCH/xfer.err" >&2
    echo "| $1 | $2 | failed | | | |"
  else
    t1=$(date +%s.%N)
    row "$1" "$2" "$(python3 -c "print($t1 - $t0)")"
  fi
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  local got
  got=$(find "$SCRATCH/dst" -name '*.bin' | wc -l)
  [ "$got" = "$FILES" ] || echo "# round $1: $got of $FILES files committed" >&2
}
copy() { # copy ROUND
  rm -rf "$SCRATCH/dst"/*
  sync
  local t0 t1
  t0=$(date +%s.%N)
  cp -r "$SCRATCH/src/tree" "$SCRATCH/dst/"
  sync
  t1=$(date +%s.%N)
  row "$1" "cp -r + sync" "$(python3 -c "print($t1 - $t0)")"
}
r=0
for i in $(seq "$ROUNDS"); do
  if [ $((i % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for v in $order; do
    r=$((r + 1))
    if [ $v = A ]; then push $r A "$A"; else push $r B "$B"; fi
    copy $r
  done
done
echo
python3 - "$SCRATCH/results" "$FILES" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, s = line.rsplit(" ", 1)
    rows.setdefault(name, []).append(float(s))
for name, v in rows.items():
    m = statistics.median(v)
    print(f"{name}: median {m:.2f} s ({int(sys.argv[2]) / m:.0f} files/s), range {min(v):.2f}-{max(v):.2f} s")
PY
