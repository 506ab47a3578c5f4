#!/usr/bin/env bash
# Where the threads of one `vlbiflow xfer push` sleep and wake (docs/bench/xfer.md): one push of a SIZE_MB
# file on disk through `vlbiflow pathemu` (2 Gb/s, RTT_MS, LOSS_% each way, MTU 9000, queue one
# bandwidth-delay product but at least 4 MB) into a daemon writing to disk, the page cache dropped before
# it. While it runs, every thread of both ends is read from /proc/PID/task/*/status five times a second;
# the table has each thread's voluntary and involuntary context switches (per second of the push) and
# CPU seconds, as last read. Threads that ended between two readings show what they had then. Needs root.
#
# PERF=1 also counts the client's system calls that sleep or send (futex, sched_yield, sendmmsg, recvfrom,
# pread64) and its context switches with `perf stat` (which itself raises the client's CPU: compare the
# counts, not the CPU, under it). PUSH_OPTS and SERVE_OPTS add options (default --realtime at both ends,
# as the emulator's EMU_OPTS; empty strings leave them out). PROFILE=sender or PROFILE=receiver samples that
# end with `perf record -g` for the whole push and prints where its CPU went (`perf report`, top symbols).
#
#   bench/xfer-wakeups.sh BIN [SIZE_MB] [RTT_MS] [LOSS_%]
#   e.g. bench/xfer-wakeups.sh target/release/vlbiflow 3000 20 0
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: bench/xfer-wakeups.sh BIN [SIZE_MB] [RTT_MS] [LOSS_%] (BIN: a vlbiflow binary; got: ${1:-nothing})" >&2
  exit 2
fi
BIN=$(realpath "$1")
SIZE_MB=${2:-3000}
RTT=${3:-20}
LOSS=${4:-0}
PUSH_OPTS=${PUSH_OPTS---realtime}
SERVE_OPTS=${SERVE_OPTS---realtime}
EMU_OPTS=${EMU_OPTS---realtime}
ns_pair wk 100
scratch_dirs vf-xfer-wakeups
raise_socket_buffers
EMU= SRV=
on_exit_kill SRV EMU
q=$(path_queue "$RTT")
# shellcheck disable=SC2086
# shellcheck disable=SC2086
emu_start /dev/null "$SCRATCH/emu.err" $EMU_OPTS --ns-a $NA --ns-b $NB --addr-a $NET.1 --addr-b $NET.2 --mtu 9000 \
  --duration 3600 --rtt "${RTT}ms" --rate 2Gbps --queue "$q" --loss "${LOSS}%"
head -c $((SIZE_MB * 1000000)) /dev/urandom >"$SCRATCH/src/data.bin"
# shellcheck disable=SC2086
ip netns exec $NB "$BIN" xfer serve --listen $NET.2:46230 --root data="$SCRATCH/dst" $SERVE_OPTS 2>"$SCRATCH/serve.err" &
SRV=$!
wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
settle
sync; echo 3 >/proc/sys/vm/drop_caches
echo "# xfer push wake-ups through pathemu (2 Gb/s, ${RTT} ms RTT, ${LOSS}% loss each way, MTU 9000, queue $q B), $(machine_line)"
echo "# $BIN, ${SIZE_MB} MB cold; push: ${PUSH_OPTS:-(none)}, serve: ${SERVE_OPTS:-(none)}"
PERF_CMD=()
if [ "${PERF:-0}" = 1 ]; then
  PERF_CMD=(perf stat -o "$SCRATCH/perf" -e syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvfrom,syscalls:sys_enter_pread64,context-switches --)
fi
# shellcheck disable=SC2086
/usr/bin/time -f "%U %S" -o "$SCRATCH/time" "${PERF_CMD[@]}" ip netns exec $NA "$BIN" xfer push "$SCRATCH/src/data.bin" \
  $NET.2:46230/data $PUSH_OPTS --json >"$SCRATCH/x.json" 2>"$SCRATCH/x.err" &
PUSH=$!
REC=
if [ -n "${PROFILE:-}" ]; then
  # perf attaches to the threads there are: wait for the one that moves the data
  if [ "$PROFILE" = receiver ]; then target=$SRV; thread=xfer-session; else target=; thread=xfer-read; fi
  for _ in $(seq 200); do
    [ -n "$target" ] || target=$(pgrep -n -f "xfer push $SCRATCH/src/data.bin" || true)
    [ -n "$target" ] && grep -qx "$thread" /proc/"$target"/task/*/comm 2>/dev/null && break
    sleep 0.02
  done
  perf record -q -F 1999 -g -o "$SCRATCH/perf.data" -p "$target" 2>/dev/null &
  REC=$!
fi
: >"$SCRATCH/samples"
while kill -0 $PUSH 2>/dev/null; do
  # the processes of BIN but the emulator: the daemon and the client
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$BIN" ] || continue
    pid=${p#/proc/}
    [ "$pid" = "$EMU" ] && continue
    if [ "$pid" = "$SRV" ]; then who=receiver; else who=sender; fi
    for t in "$p"/task/*; do
      comm=$(cat "$t/comm" 2>/dev/null) || continue
      st=$(awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary/ {n = $2} END {print v, n}' "$t/status" 2>/dev/null) || continue
      cpu=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) || continue
      echo "$who ${t##*/} $comm $st $cpu" >>"$SCRATCH/samples"
    done
  done
  sleep 0.2
done
wait $PUSH || { cat "$SCRATCH/x.err" >&2; exit 1; }
if [ -n "$REC" ]; then kill -INT "$REC" 2>/dev/null || true; wait "$REC" || true; fi
python3 - "$SCRATCH/samples" "$SCRATCH/x.json" "$SCRATCH/time" "$SIZE_MB" <<'PY'
import json, sys
last = {}
for l in open(sys.argv[1]):
    w = l.split()
    if len(w) == 6:
        last[(w[0], int(w[1]))] = (w[2], int(w[3]), int(w[4]), int(w[5]) / 100)
d = json.load(open(sys.argv[2]))
sec = d["seconds"]
user, system = (float(x) for x in open(sys.argv[3]).read().split()[:2])
print(f"\npush: {d['goodput_bps'] / 1e6:.0f} Mb/s in {sec:.1f} s; sender CPU {user + system:.2f} s "
      f"({(user + system) / (float(sys.argv[4]) / 1000):.2f} s/GB)\n")
print("| end | thread | voluntary switches | per second | involuntary | CPU s |")
print("| --- | --- | --: | --: | --: | --: |")
for (who, tid), (comm, v, n, cpu) in sorted(last.items()):
    if v + n > 0 or cpu > 0:
        print(f"| {who} | {comm} ({tid}) | {v} | {v / sec:.0f} | {n} | {cpu:.2f} |")
PY
if [ "${PERF:-0}" = 1 ]; then
  echo
  grep -E "syscalls|context-switches" "$SCRATCH/perf" | awk '{print "    " $1, $2}'
fi
if [ -n "$REC" ]; then
  echo
  echo "where the $PROFILE's CPU went (perf record -F 1999 -g, self time, top 30):"
  perf report -q -i "$SCRATCH/perf.data" --no-children --sort comm,sym --percent-limit ${PCT_LIMIT:-0.7} 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | head -${TOP:-30}
fi
