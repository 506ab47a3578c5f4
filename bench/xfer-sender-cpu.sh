#!/usr/bin/env bash
# The sender's CPU per byte of `vlbiflow xfer` (docs/bench/xfer.md, "Sender CPU"): pushes of one file on
# disk (read through the page cache before each push, which then holds it unless --cold; the share it
# holds at the push's start is the "cached" column) to a daemon on loopback at a fixed 2 Gb/s, and per
# push the sender's CPU seconds per GB (user + system time of the client, its rusage as /usr/bin/time
# reports it), the receiver's (the daemon's, from /proc/PID/stat) and the goodput; with two builds, rounds alternate before, after,
# after, before, ... in one run and the medians per build follow. Each sender thread's CPU (from
# /proc/PID/task/*/stat, sampled every 0.1 s, the last sample of each thread kept) is summed per thread
# name: data (the pacing and sending thread, xfer-client), read (xfer-read: reads and hashes the windows),
# hash (xfer-hash: chunk hashes for a resume), feedback (xfer-feedback), other (control, main).
#
#   bench/xfer-sender-cpu.sh [--before BIN] [--after BIN] [--size MB (default 3000)] [--rounds N (default 3)]
#                            [--rate RATE (default 2Gbps)] [--dir DIR (default /var/tmp, on disk)] [--cold]
#
# --cold: the file is dropped from the page cache before each push (posix_fadvise DONTNEED) instead.
#
# Without --after the release build of this checkout (bench_build); without --before only that build runs.
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
BEFORE= AFTER= SIZE_MB=3000 ROUNDS=3 RATE=2Gbps DIR=/var/tmp COLD=
while [ $# -gt 0 ]; do
  case $1 in
    --before) BEFORE=$(realpath "$2"); shift 2 ;;
    --after) AFTER=$(realpath "$2"); shift 2 ;;
    --size) SIZE_MB=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --cold) COLD=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$AFTER" ]; then bench_build; AFTER=$BIN; fi
PORT=$((46000 + $$ % 1000))
SCRATCH=$DIR/vf-sender-cpu-$$
scratch_dirs vf-sender-cpu
SRV= PUSH=
on_exit_kill PUSH SRV
source_file "$SIZE_MB" "$SCRATCH/src/data.bin"
echo "# xfer sender CPU on loopback, $(machine_line)"
echo "# before = ${BEFORE:-none}"
echo "# after  = $AFTER"
echo "# ${SIZE_MB} MB file on $(df --output=source "$SCRATCH" | tail -1), rate $RATE, $ROUNDS rounds per build"
echo
echo "| round | build | goodput Gb/s | sender CPU s/GB | receiver CPU s/GB | sender threads s/GB: data, read, hash, feedback, other | cached | load |"
echo "| --: | --- | --: | --: | --: | --- | --: | --: |"
: >"$SCRATCH/results"
# threads PID OUT: until PID ends, every 0.1 s each of its threads' "name cpu-ticks" into OUT (one line a
# thread, the last sample of each kept); then the client's own total on the last line
threads() {
  local pid=$1 out=$2
  python3 - "$pid" "$out" <<'PY'
import os, sys, time
pid, out = sys.argv[1], sys.argv[2]
seen = {}
total = 0
while True:
    try:
        st = open(f"/proc/{pid}/stat").read()
        if st.rsplit(")", 1)[1].split()[0] == "Z":
            break
        f = st.rsplit(")", 1)[1].split()
        total = int(f[11]) + int(f[12])
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                s = open(f"/proc/{pid}/task/{t}/stat").read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")]
            g = s.rsplit(")", 1)[1].split()
            seen[t] = (name, int(g[11]) + int(g[12]))
    except (OSError, IndexError):
        break
    time.sleep(0.1)
with open(out, "w") as o:
    for name, ticks in seen.values():
        o.write(f"{name} {ticks}\n")
    o.write(f"TOTAL {total}\n")
PY
}
run() { # run ROUND NAME BIN
  local bin=$3
  rm -rf "$SCRATCH/dst"/*
  settle
  # the source in the page cache (or not), and the share of it that is
  python3 - "$SCRATCH/src/data.bin" "$COLD" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
if sys.argv[2]:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
else:
    while os.read(fd, 8 << 20):
        pass
PY
  local cached
  cached=$(fincore --bytes --noheadings --output RES "$SCRATCH/src/data.bin" 2>/dev/null |
    awk -v s="$(stat -c %s "$SCRATCH/src/data.bin")" '{printf "%.0f%%", 100 * $1 / s}')
  "$bin" xfer serve --listen 127.0.0.1:$PORT --root data="$SCRATCH/dst" 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  local c0 c1
  c0=$(cpu_of $SRV)
  /usr/bin/time -f "%U %S" -o "$SCRATCH/time" "$bin" xfer push "$SCRATCH/src/data.bin" 127.0.0.1:$PORT/data \
    --rate "$RATE" --json >"$SCRATCH/xfer.json" 2>"$SCRATCH/xfer.err" &
  PUSH=$!
  # /usr/bin/time's child is the client
  local cpid=
  for _ in $(seq 200); do cpid=$(pgrep -P $PUSH | head -1) && [ -n "$cpid" ] && break; sleep 0.01; done
  [ -n "$cpid" ] && threads "$cpid" "$SCRATCH/threads" &
  local tp=$!
  wait $PUSH || cat "$SCRATCH/xfer.err" >&2
  PUSH=
  wait $tp 2>/dev/null || true
  c1=$(cpu_of $SRV)
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  python3 - "$SCRATCH/xfer.json" "$SCRATCH/time" "$c0" "$c1" "$1" "$2" "$(cut -d' ' -f1 /proc/loadavg)" \
    "$SCRATCH/results" "$SCRATCH/threads" "$(getconf CLK_TCK)" "${cached:-?}" <<'PY'
import json, sys
js, tf, c0, c1, rnd, name, load, res, th, hz, cached = sys.argv[1:]
try:
    d = json.load(open(js))
except Exception:
    print(f"| {rnd} | {name} | failed | | | | {cached} | {load} |")
    sys.exit(0)
u, s = map(float, open(tf).read().split()[-2:])
gb = d["bytes_total"] / 1e9
gp = d["goodput_bps"] / 1e9
snd = (u + s) / gb
rcv = (float(c1) - float(c0)) / gb
groups = {"data": 0, "read": 0, "hash": 0, "feedback": 0, "other": 0}
key = {"xfer-client": "data", "xfer-read": "read", "xfer-hash": "hash", "xfer-feedback": "feedback"}
try:
    for line in open(th):
        n, t = line.rsplit(" ", 1)
        if n != "TOTAL":
            groups[key.get(n, "other")] += int(t) / float(hz)
except OSError:
    pass
per = ", ".join(f"{v / gb:.2f}" for v in groups.values())
print(f"| {rnd} | {name} | {gp:.3f} | {snd:.2f} | {rcv:.2f} | {per} | {cached} | {load} |")
open(res, "a").write(f"{name} {gp} {snd} {rcv} " + " ".join(str(v / gb) for v in groups.values()) + "\n")
PY
}
for r in $(seq "$ROUNDS"); do
  if [ -z "$BEFORE" ]; then
    run "$r" after "$AFTER"
  elif [ $((r % 2)) = 1 ]; then
    run "$r" before "$BEFORE"; run "$r" after "$AFTER"
  else
    run "$r" after "$AFTER"; run "$r" before "$BEFORE"
  fi
done
echo
python3 - "$SCRATCH/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| build | goodput Gb/s | sender CPU s/GB | receiver CPU s/GB | data | read | hash | feedback | other |")
print("| --- | --: | --: | --: | --: | --: | --: | --: | --: |")
for b in ("before", "after"):
    v = [list(map(float, r[1:])) for r in rows if r[0] == b]
    if not v:
        continue
    cols = list(zip(*v))
    f = lambda c, p: f"{statistics.median(c):.{p}f} ({min(c):.{p}f}-{max(c):.{p}f})"
    print(f"| {b} | {f(cols[0], 3)} | " + " | ".join(f(c, 2) for c in cols[1:3]) + " | "
          + " | ".join(f"{statistics.median(c):.2f}" for c in cols[3:]) + " |")
PY
echo "# done $(machine_line)"
