#!/usr/bin/env bash
# Capture ceiling: the highest rate `vlbiflow record --discard` (one capture thread, nothing written) takes
# without loss, against the null receiver `vlbiflow sink` fed the same way, on loopback. For every row
# (sender mode, GRO, streams) and every rate of its ladder, sink and record run alternately, REPS times;
# a point is loss-free when the median of its runs lost no frame (frames gen sent minus frames received
# and, for record, stored). Prints per point the median rate gen achieved and the median loss of each
# receiver, and per row the highest loss-free rate of each and their ratio record / sink.
#
#   bench/capture-ceiling.sh [OUT.md]          (default: print only)
#
# Environment: SECS (default 5) seconds per run, REPS (3), ROWS (a space-separated subset of the row
# names below), LADDER_SENDMMSG (Gb/s, default "10 15 20"), LADDER_GSO ("15 20 25 30 35 40"), STREAMS50_LADDER
# (total Gb/s over 50 streams, default "5 10 15"), BIN (the binary; default: this checkout's release
# build), BIN_SINK (default BIN), PIN (default 1 on a machine of 2 or more CPUs: gen on CPU 0, the receiver on
# CPU 1, so that a receiver that spends more CPU does not slow the sender it is measured against; 0: no pinning),
# RECORD_ARGS (more arguments for record, e.g. "--block-size 1MB"), BUDGET (percent of one core, 10 to 100, that
# the receiver may use, all its threads or all the sinks together: a cpu cgroup with a 10 ms period, cgroup v2 or
# v1; root only). Without a budget a receiver pinned to a core of its own is rarely the limit on this 2-core
# machine: neither receiver loses a frame, and the loss-free rate is what gen sends beside it. Under a budget
# smaller than what either receiver needs the loss-free rates are the receivers' own ceilings.
# Each run also reads the receiver's CPU time (user + system, /proc/PID/stat) and prints it per GB received:
# what the receiver would need of a core of its own, the figure that matters when the sender is another host.
# Rows:
#   sendmmsg       1 stream, gen sendmmsg (one datagram per call slot), GRO on in both receivers
#   gso            1 stream, gen --gso 7, GRO on in both receivers
#   gso-nogro      1 stream, gen --gso 7, GRO off in both receivers (sink without --gro, record --no-gro)
#   gso-50         50 streams, gen --gso 7, GRO on: 50 sink processes against one record capture thread
#   threads-1      4 streams, gen --gso 7, GRO on: 4 sink processes against record --capture-threads 1
#   threads-2      the same against record --capture-threads 2
#   threads-4      the same against record --capture-threads 4
#   split-1        1 stream, gen --gso 7, GRO on: sink --split 1 against record with the stream's split=1
#   split-2        the same at split 2: two sockets steered by PSN runs, a thread each (sink --split 2, split=2)
#   split-4        the same at split 4
#   split-nogro-1, split-nogro-2, split-nogro-4   the same with GRO off in both receivers
# The threads-* rows (ladder LADDER_THREADS, total Gb/s over the 4 streams, default "20 30 40") and split-* rows
# (LADDER_SPLIT, default "20 30") pin only gen, so
# that the receivers' threads and processes may use every CPU gen leaves; they also print the busiest capture
# thread's CPU time as a share of the run (1.00: a core of its own all the time), the figure that says how far
# one more core would carry each thread.
# 8224-byte VDIF frames with an 8-byte PSN. The machine is shared: read the ratios, within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
OUT=${1:-}
SECS=${SECS:-5}
REPS=${REPS:-3}
ROWS=${ROWS:-sendmmsg gso gso-nogro gso-50}
LADDER_SENDMMSG=${LADDER_SENDMMSG:-10 15 20}
LADDER_GSO=${LADDER_GSO:-15 20 25 30 35 40}
STREAMS50_LADDER=${STREAMS50_LADDER:-5 10 15}
LADDER_THREADS=${LADDER_THREADS:-20 30 40}
LADDER_SPLIT=${LADDER_SPLIT:-20 30}
PIN=${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}
PIN_GEN=() PIN_RX=()
[ "$PIN" = 1 ] && PIN_GEN=(taskset -c 0) PIN_RX=(taskset -c 1)
TICK=$(getconf CLK_TCK)
bench_build
BIN_SINK=${BIN_SINK:-$BIN}
raise_socket_buffers
SCRATCH=$(mktemp -d /var/tmp/capture-ceiling-XXXXXX)
BUDGET=${BUDGET:-}
CG=
if [ -n "$BUDGET" ]; then
  [ "$BUDGET" -ge 10 ] && [ "$BUDGET" -le 100 ] || { echo "bench: BUDGET is a percent of one core, 10 to 100" >&2; exit 2; }
  budget_fail() { echo "bench: BUDGET needs a cpu cgroup this user may create ($1)" >&2; exit 2; }
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/vlbiflow-bench
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    mkdir -p "$CG" 2>/dev/null || budget_fail "cannot create $CG"
    echo "$((BUDGET * 100)) 10000" 2>/dev/null >"$CG/cpu.max" || budget_fail "no cpu controller in $CG"
  else
    CG=/sys/fs/cgroup/cpu/vlbiflow-bench
    mkdir -p "$CG" 2>/dev/null || budget_fail "cannot create $CG"
    { echo 10000 >"$CG/cpu.cfs_period_us" && echo $((BUDGET * 100)) >"$CG/cpu.cfs_quota_us"; } 2>/dev/null ||
      budget_fail "cannot set the quota of $CG"
  fi
fi
# in_budget PID: the process (every thread it has and will start) into the budget's cgroup, if any
in_budget() { [ -z "$CG" ] || echo "$1" >"$CG/cgroup.procs"; }
REC=
SINKS=
on_exit_kill REC SINKS
PORT=47100
RESULTS=$SCRATCH/results.tsv
: >"$RESULTS"
echo "# $(machine_line)"

# rx_ticks: the receivers' CPU time so far (utime + stime of every sink or the recorder, clock ticks)
rx_ticks() {
  local t=0 p
  for p in $SINKS $REC; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo $t
}

# capture_ticks: CPU time so far of the recorder's capture threads (vf-capture*), clock ticks; 0 for sinks
capture_ticks() {
  local t=0 task
  [ -n "$REC" ] || { echo 0; return; }
  for task in /proc/"$REC"/task/*; do
    case $(cat "$task/comm" 2>/dev/null) in
      vf-capture*) t=$((t + $(awk '{print $14 + $15}' "$task/stat" 2>/dev/null || echo 0))) ;;
    esac
  done
  echo $t
}

# capture_each: "TID TICKS" per capture thread of the recorder so far
capture_each() {
  local task
  [ -n "$REC" ] || return 0
  for task in /proc/"$REC"/task/*; do
    case $(cat "$task/comm" 2>/dev/null) in
      vf-capture*) echo "${task##*/} $(awk '{print $14 + $15}' "$task/stat" 2>/dev/null || echo 0)" ;;
    esac
  done
}

# run_point ROW RECEIVER GBPS STREAMS GSO GRO THREADS PIN_RX SPLIT: one run; appends "row rate receiver
# sent_gbps sent lost cpu capture busiest".
run_point() {
  local row=$1 who=$2 gbps=$3 n=$4 gso=$5 gro=$6 threads=$7 pin_rx=$8 split=${9:-1} i dests=() streams=() per rec_gro=() sink_gro=()
  local d=$SCRATCH/run rx=()
  [ "$pin_rx" = 1 ] && rx=("${PIN_RX[@]}")
  rm -rf "$d"; mkdir -p "$d"
  PORT=$((PORT + n)); [ $PORT -gt 60000 ] && PORT=47100
  for i in $(seq 0 $((n - 1))); do
    dests+=(--dest "127.0.0.1:$((PORT + i))")
    streams+=(--stream "s$i=vdif@127.0.0.1:$((PORT + i)),psn,split=$split")
  done
  [ "$gro" = on ] && sink_gro=(--gro) || rec_gro=(--no-gro)
  if [ "$who" = sink ]; then
    SINKS=
    for i in $(seq 0 $((n - 1))); do
      "${rx[@]}" "$BIN_SINK" sink --listen "127.0.0.1:$((PORT + i))" --psn "${sink_gro[@]}" --idle-timeout 0 \
        --split "$split" --json >"$d/sink$i.json" 2>/dev/null &
      SINKS="$SINKS $!"
      in_budget $!
    done
    sleep 0.5
  else
    "${rx[@]}" "$BIN" record "${streams[@]}" --capture-threads "$threads" --discard ${RECORD_ARGS:-} "${rec_gro[@]}" --json >"$d/record.json" 2>"$d/record.log" &
    REC=$!
    in_budget "$REC"
    need_line "$d/record.log" 'ready: receiving' 200
  fi
  per=$(python3 -c "print(f'{$gbps / $n:.6f}Gbps')")
  local ticks0 cap0
  ticks0=$(rx_ticks)
  cap0=$(capture_ticks)
  capture_each >"$d/each0"
  local g=()
  [ "$gso" = 0 ] || g=(--gso "$gso")
  "${PIN_GEN[@]}" "$BIN" gen "${dests[@]}" --rate "$per" --duration "$SECS" --psn --frame-size 8224 "${g[@]}" --quiet \
    --json >"$d/gen.json" 2>/dev/null || true
  sleep 0.5
  # the receiver's CPU time while gen sent (its start-up, the block pool's first touch, is not in it)
  local ticks=$(($(rx_ticks) - ticks0)) cap=$(($(capture_ticks) - cap0))
  capture_each >"$d/each1"
  # the busiest capture thread's CPU ticks while gen sent
  local busiest
  busiest=$(awk 'NR == FNR { t0[$1] = $2; next } { d = $2 - t0[$1]; if (d > m) m = d } END { print m + 0 }' "$d/each0" "$d/each1")
  if [ "$who" = sink ]; then
    for i in $SINKS; do kill -INT "$i" 2>/dev/null || true; wait "$i" 2>/dev/null || true; done
    SINKS=
  else
    kill -INT "$REC" 2>/dev/null || true
    wait "$REC" 2>/dev/null || true
    REC=
  fi
  python3 - "$d" "$who" "$row" "$gbps" "$ticks" "$TICK" "$cap" "$busiest" "$SECS" >>"$RESULTS" <<'PY'
import glob, json, sys
d, who, row, gbps, ticks, tick, cap, busiest, secs = sys.argv[1:]
gen = json.load(open(f"{d}/gen.json"))
sent = gen["frames"]
if who == "sink":
    got = 0
    for f in glob.glob(f"{d}/sink*.json"):
        for line in open(f):
            v = json.loads(line)
            if v.get("summary"):
                got += v["datagrams"]
else:
    rec = json.load(open(f"{d}/record.json"))
    got = sum(s["counters"]["packets"] for s in rec["streams"])
gb = got * 8224 / 1e9
cpu_per_gb = int(ticks) / int(tick) / gb if got else 0
cap_per_gb = int(cap) / int(tick) / gb if got else 0
print(row, gbps, who, f"{gen['achieved_bps'] / 1e9:.2f}", sent, max(sent - got, 0), f"{cpu_per_gb:.4f}", f"{cap_per_gb:.4f}",
      f"{int(busiest) / int(tick) / float(secs):.3f}", sep="\t")
PY
}

row_params() {  # ROW -> "STREAMS GSO GRO CAPTURE_THREADS PIN_RX SPLIT LADDER"
  case $1 in
    sendmmsg) echo "1 0 on 1 $PIN 1 $LADDER_SENDMMSG" ;;
    gso) echo "1 7 on 1 $PIN 1 $LADDER_GSO" ;;
    gso-nogro) echo "1 7 off 1 $PIN 1 $LADDER_GSO" ;;
    gso-50) echo "50 7 on 1 $PIN 1 $STREAMS50_LADDER" ;;
    threads-1 | threads-2 | threads-4) echo "4 7 on ${1#threads-} 0 1 $LADDER_THREADS" ;;
    split-1 | split-2 | split-4) echo "1 7 on 1 0 ${1#split-} $LADDER_SPLIT" ;;
    split-nogro-1 | split-nogro-2 | split-nogro-4) echo "1 7 off 1 0 ${1#split-nogro-} $LADDER_SPLIT" ;;
    *) echo "bench: unknown row $1" >&2; exit 2 ;;
  esac
}

for row in $ROWS; do
  read -r n gso gro threads pin_rx split ladder <<<"$(row_params "$row")"
  for gbps in $ladder; do
    for _ in $(seq "$REPS"); do
      run_point "$row" sink "$gbps" "$n" "$gso" "$gro" "$threads" "$pin_rx" "$split"
      run_point "$row" record "$gbps" "$n" "$gso" "$gro" "$threads" "$pin_rx" "$split"
    done
    echo "# $row $gbps Gb/s done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  done
done

python3 - "$RESULTS" "$SECS" "$REPS" "$(machine_line)" "$OUT" "$PIN" "$BUDGET" <<'PY'
import statistics, sys
from collections import defaultdict
path, secs, reps, machine, out, pin, budget = sys.argv[1:]
runs = defaultdict(list)
order = []
for line in open(path):
    row, gbps, who, sent_gbps, sent, lost, cpu, cap, busy = line.split("\t")
    key = (row, float(gbps))
    if key not in order:
        order.append(key)
    runs[key + (who,)].append((float(sent_gbps), int(sent), int(lost), float(cpu), float(cap), float(busy)))
med = statistics.median
L = [f"- {machine} (at the end of the run)",
     f"- `bench/capture-ceiling.sh`: {secs} s per run, median of {reps} runs per point, sink and record alternating"
     + (", gen pinned to CPU 0 and the receiver to CPU 1 (threads-* and split-* rows: gen only)" if pin == "1" else "")
     + (f", the receiver limited to {budget}% of one core (cpu cgroup, 10 ms period)" if budget else ""),
     "",
     "| row | rate asked Gb/s | sink: sent Gb/s | sink: lost | sink: CPU s/GB | record: sent Gb/s | record: lost (%) | record: CPU s/GB (capture threads) | record: busiest capture thread |",
     "|---|---|---|---|---|---|---|---|---|"]
best = defaultdict(float)
cpu = defaultdict(list)
for row, g in order:
    cells = []
    for who in ("sink", "record"):
        r = runs[(row, g, who)]
        sent_gbps = med(x[0] for x in r)
        lost = med(x[2] for x in r)
        frac = med(x[2] / x[1] if x[1] else 0 for x in r)
        c = med(x[3] for x in r)
        cc = med(x[4] for x in r)
        busy = med(x[5] for x in r)
        cells.append((sent_gbps, lost, frac, c, cc, busy))
        cpu[(row, who)].append(c)
        cpu[(row, who + "-capture")].append(cc)
        if lost == 0:
            # The rate asked when gen reached it (sender noise is not the receiver's), else what gen sent.
            best[(row, who)] = max(best[(row, who)], g if sent_gbps >= 0.95 * g else sent_gbps)
    (ss, sl, _, sc, _, _), (rs, rl, rf, rc, rcc, rb) = cells
    L.append(f"| {row} | {g:g} | {ss:.1f} | {sl:,.0f} | {sc:.3f} | {rs:.1f} | {rl:,.0f} ({100 * rf:.1f}) | {rc:.3f} ({rcc:.3f}) | {rb:.2f} |")
L += ["", "| row | sink loss-free Gb/s | record loss-free Gb/s | record / sink | CPU s/GB sink / record (median over the ladder) | record's capture threads s/GB |",
      "|---|---|---|---|---|---|"]
for row in dict.fromkeys(r for r, _ in order):
    s, r = best[(row, "sink")], best[(row, "record")]
    cs, cr = med(cpu[(row, "sink")]), med(cpu[(row, "record")])
    cc = med(cpu[(row, "record-capture")])
    L.append(f"| {row} | {s:.1f} | {r:.1f} | {r / s if s else float('nan'):.2f} | {cs:.3f} / {cr:.3f} = {cs / cr if cr else float('nan'):.2f} | {cc:.3f} |")
L.append("")
L.append("Loss-free: the highest point of the ladder whose median run lost no frame (0.0: none): its asked rate when gen reached 95% of it, else the median rate gen achieved there. CPU s/GB: the receiver process's user + system time per GB received (with 50 streams, the 50 sink processes together); the kernel's work on loopback delivery runs largely in the sender's context and is not in it. In brackets and in the last column, the recorder's capture threads alone: the rest is its block pool growing at the start (at nice 19) and the thread that returns discarded blocks. Busiest capture thread: its CPU time while gen sent as a share of the run's seconds.")
text = "\n".join(L)
print(text)
if out:
    open(out, "w").write(text + "\n")
PY
# the budget's cgroup, empty again (left behind only if the run was cut short; a later run reuses it)
[ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true
