#!/usr/bin/env bash
# A/B comparison of two variants of `vlbiflow xfer push` through `vlbiflow pathemu` (docs/bench/xfer.md):
# one emulator for the whole run (default 2 Gb/s, 50 ms RTT, 1% random loss each way, MTU 9000, queue one
# bandwidth-delay product), rounds alternating A, B, B, A, ..., each a push of the same file on disk into a
# daemon writing to disk; per round the goodput, the retransmitted fraction, CPU seconds and major page
# faults at both ends (the client from /usr/bin/time, the daemon from /proc/PID/stat), the time the
# sender's pacing thread ran late, the CPU time the hypervisor took from the machine (steal) and the load; a
# warm-up push of A before the rounds is not counted (WARMUP=0 leaves it out); then the median per
# variant and the emulator's queue drops over the run. A variant is a binary and push options
# (e.g. the same binary with and without --rate 2Gbps, or builds before and after a change). Needs root.
#
# COLD=1 drops the page cache before each push (a recording the cache does not hold); by default the
# source file stays in the cache. EMU_PER_ROUND=1 starts an emulator for each push instead of one for the
# run, so that the table gets each push's drops at the bottleneck's queue (the emulator reports them when
# it stops). FLOOD=1 sends 100,000 random datagrams at the transfer's data port FLOOD_AT seconds (default 2)
# into each push, as the acceptance's attack does (a third with a well-formed header of the transfer, so
# that they reach the tag check), to measure how the rate control comes back from that flood.
# QUEUE=BYTES sets the bottleneck's queue (default one bandwidth-delay product, at least 4 MB), e.g. a
# shallow switch buffer to see what the senders' bursts cost.
# SERVE_A / SERVE_B add options to the daemon of variant A / B (e.g. SERVE_B=--realtime with OPTS_B
# --realtime: the data threads of both ends in the real-time class).
#
#   bench/xfer-path-ab.sh BIN_A "OPTS_A" BIN_B "OPTS_B" [SIZE_MB] [ROUNDS] [RTT_MS] [LOSS_%]
#   e.g. bench/xfer-path-ab.sh target/release/vlbiflow "" target/release/vlbiflow "--rate 2Gbps" 2000 4
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
A=$(realpath "$1"); OA=$2
B=$(realpath "$3"); OB=$4
SIZE_MB=${5:-2000}
ROUNDS=${6:-4}
RTT=${7:-50}
LOSS=${8:-1}
ns_pair pab 100
scratch_dirs vf-xfer-pab
raise_socket_buffers
EMU= SRV=
on_exit_kill SRV EMU
q=${QUEUE:-$(path_queue "$RTT")}
start_emu() {
  # shellcheck disable=SC2086
  EMU_BIN=$A emu_start "$SCRATCH/emu.out" "$SCRATCH/emu.err" ${EMU_OPTS:-} --ns-a $NA --ns-b $NB --addr-a $NET.1 \
    --addr-b $NET.2 --mtu 9000 --duration 3600 --rtt ${RTT}ms --rate 2Gbps --queue $q --loss ${LOSS}% --json
}
# drops at the queue of the data direction, as the emulator reported them when it stopped
# settle: sync and wait for the disk's discards before a run (bench/lib.sh says why)
# machine_mark and machine_steal: the CPU time the hypervisor took from this machine during each push
queue_drops() { python3 -c "import json; print(json.load(open('$SCRATCH/emu.out'))['report']['a_to_b']['dropped_queue'])"; }
# the flood: waits for the push's data port (the daemon's UDP socket) and transfer id (its metrics), then
# FLOOD_AT seconds more
flood() { # flood BIN: the protocol version of the well-formed third is BIN's (`vlbiflow --version`)
  local port= tid= version
  version=${FLOOD_VERSION:-$("$1" --version | sed -n 's/.*xfer protocol \([0-9]*\).*/\1/p')}
  version=${version:-4} # builds before the version was printed: 4 (3 before a662e2f)
  for _ in $(seq 300); do
    port=$(ip netns exec $NB ss -Huanp 2>/dev/null | awk -v p="pid=$SRV," '!done && index($0, p) {n = split($4, a, ":"); print a[n]; done = 1}')
    [ -n "$port" ] && break; sleep 0.1
  done
  if [ -z "$port" ]; then echo "flood: the push has no data port (it failed early?): no flood this round" >&2; return 0; fi
  tid=$(ip netns exec $NB curl -s --max-time 2 http://127.0.0.1:9477/metrics | sed -n 's/.*transfer_bytes_total{id="\([0-9a-f]*\)".*/\1/p' | head -1) || true
  [ -n "$tid" ] || echo "flood: no transfer id in the daemon's metrics: the well-formed third will not reach the tag check" >&2
  sleep "${FLOOD_AT:-2}"
  ip netns exec $NA python3 - $NET.2 "$port" "${tid:-0}" "$version" <<'PY' || true
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dst = (sys.argv[1], int(sys.argv[2])); tid = int(sys.argv[3], 16); version = int(sys.argv[4])
for i in range(100_000):
    n = 8256 if i % 3 == 0 else [64, 100, 1500, 9000][i % 4]
    b = bytearray(os.urandom(n))
    if i % 3 == 0:  # a well-formed header of this transfer: reaches the tag check
        b[0:4] = b"XF" + bytes([version, 0]); b[4:8] = tid.to_bytes(4, "big"); b[16:20] = bytes(4); b[20:24] = (n - 64).to_bytes(4, "big")
        b[24:32] = bytes(8); b[40:48] = bytes(8)
    try:
        s.sendto(b, dst)
    except OSError:
        pass
PY
}
PER_ROUND=${EMU_PER_ROUND:-0}
[ "$PER_ROUND" = 1 ] || start_emu
source_file "$SIZE_MB" "$SCRATCH/src/data.bin"
echo "# xfer A/B through pathemu (2 Gb/s, ${RTT} ms RTT, ${LOSS}% loss each way, MTU 9000, queue $q B), $(machine_line)"
echo "# A = $A $OA${SERVE_A:+ (serve $SERVE_A)}"
echo "# B = $B $OB${SERVE_B:+ (serve $SERVE_B)}"
echo "# ${SIZE_MB} MB file, ${ROUNDS} rounds per variant, source $([ "${COLD:-0}" = 1 ] && echo "dropped from the page cache before each push" || echo "in the page cache")"
# one push of variant $1 (A or B) into a daemon started for it; leaves x.json, the client's CPU and major
# faults in $SCRATCH/time, and the daemon's CPU and major faults in SRV_CPU and SRV_FAULTS
push_once() {
  local v=$1 bin opts sopts c0 c1 f0 f1 m0
  if [ "$v" = A ]; then bin=$A; opts=$OA; sopts=${SERVE_A:-}; else bin=$B; opts=$OB; sopts=${SERVE_B:-}; fi
  rm -rf "$SCRATCH/dst"/*
  if [ "$PER_ROUND" = 1 ]; then start_emu; fi
  # shellcheck disable=SC2086
  ip netns exec $NB "$bin" xfer serve --listen $NET.2:46230 --root data="$SCRATCH/dst" --metrics 127.0.0.1:9477 $sopts 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  settle
  if [ "${COLD:-0}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
  c0=$(awk '{print ($14 + $15) / 100}' /proc/$SRV/stat); f0=$(awk '{print $12}' /proc/$SRV/stat)
  m0=$(machine_mark)
  # shellcheck disable=SC2086
  /usr/bin/time -f "%U %S %F" -o "$SCRATCH/time" ip netns exec $NA "$bin" xfer push "$SCRATCH/src/data.bin" $NET.2:46230/data $opts --json \
    >"$SCRATCH/x.json" 2>"$SCRATCH/x.err" &
  PUSH=$!
  if [ "${FLOOD:-0}" = 1 ]; then flood "$bin"; fi
  wait $PUSH || cat "$SCRATCH/x.err" >&2
  STEAL=$(machine_steal "$m0" "$(machine_mark)")
  # the daemon's CPU for this push: it waits idle before and after (a round of the tail timer at most)
  c1=$(awk '{print ($14 + $15) / 100}' /proc/$SRV/stat); f1=$(awk '{print $12}' /proc/$SRV/stat)
  SRV_CPU=$(python3 -c "print(round($c1 - $c0, 2))"); SRV_FAULTS=$((f1 - f0))
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  DROPS=-
  if [ "$PER_ROUND" = 1 ]; then emu_stop; DROPS=$(queue_drops); fi
}
# WARMUP=1 (the default): one push of A before the rounds, not counted: the first push after the script
# started was slower in every A/B (a fresh emulator, binaries not yet read), and the alternation gives
# round 1 to A
if [ "${WARMUP:-1}" = 1 ]; then
  unset VLBIFLOW_XFER_TRACE
  push_once A
  echo "# warm-up push of A (not counted): $(python3 -c "import json; print(round(json.load(open('$SCRATCH/x.json'))['goodput_bps'] / 1e6))" 2>/dev/null || echo failed) Mb/s"
fi
echo
echo "| round | variant | goodput Mb/s | % of 2 Gb/s | retransmitted | seconds | of which after the last chunk verified | sender CPU s | receiver CPU s | major faults sender/receiver | rate cuts queue/loss | queue drops | dropped by the receiver | sender late s | steal s | load |"
echo "| --: | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |"
: >"$SCRATCH/results"
i=0
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for v in $order; do
    i=$((i + 1))
    # TRACE_DIR=DIR: the rate control's trace of each push in DIR/round-N-V.csv (docs/xfer-protocol.md)
    if [ -n "${TRACE_DIR:-}" ]; then export VLBIFLOW_XFER_TRACE=$TRACE_DIR/round-$i-$v.csv; fi
    push_once $v
    python3 - "$SCRATCH/x.json" $i $v "$(cut -d' ' -f1 /proc/loadavg)" "$SCRATCH/results" "$(awk '{print $1 + $2}' "$SCRATCH/time")" "$SRV_CPU" "$SIZE_MB" "$DROPS" "$(awk '{print $3}' "$SCRATCH/time")/$SRV_FAULTS" "$STEAL" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    gp = d["goodput_bps"] / 1e6
    rtx = 100 * d["retransmits"] / max(1, d["datagrams"])
    s, vs = d["seconds"], d["verified_seconds"]
    r = d.get("receiver")  # protocol version 4 on
    dropped = sum(r[k] for k in ("bad_tag", "malformed", "wrong_transfer", "unknown_file")) if r else "-"
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {gp:.0f} | {gp / 20:.1f} | {rtx:.2f} % | {s:.1f} | {s - vs:.2f} | {sys.argv[6]} | {sys.argv[7]} | {sys.argv[10]} | {d.get('rate_cuts_queue', '?')}/{d.get('rate_cuts_loss', '?')} | {sys.argv[9]} | {dropped} | {d.get('pacing_late_ms', 0) / 1000:.2f} | {sys.argv[11]} | {sys.argv[4]} |")
    gb = float(sys.argv[8]) / 1000
    open(sys.argv[5], "a").write(f"{sys.argv[3]} {gp} {rtx} {float(sys.argv[6]) / gb} {float(sys.argv[7]) / gb}\n")
except Exception as e:
    print(f"| {sys.argv[2]} | {sys.argv[3]} | failed ({e}) | | | | | | | | | | | | | |")
PY
  done
done
python3 - "$SCRATCH/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for v in "AB":
    g = sorted(float(r[1]) for r in rows if r[0] == v)
    x = sorted(float(r[2]) for r in rows if r[0] == v)
    cs = sorted(float(r[3]) for r in rows if r[0] == v)
    cr = sorted(float(r[4]) for r in rows if r[0] == v)
    if g:
        print(f"{v}: goodput median {statistics.median(g):.0f} Mb/s (range {g[0]:.0f}-{g[-1]:.0f}), retransmitted median {statistics.median(x):.2f} %, "
              f"CPU s/GB sender {statistics.median(cs):.2f} ({cs[0]:.2f}-{cs[-1]:.2f}), receiver {statistics.median(cr):.2f} ({cr[0]:.2f}-{cr[-1]:.2f})")
PY
if [ "$PER_ROUND" != 1 ]; then
  emu_stop
  echo "emulator, the whole run: $(grep -o '"dropped_queue": [0-9]*' "$SCRATCH/emu.out" | tr '\n' ' ')"
fi
