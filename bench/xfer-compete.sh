#!/usr/bin/env bash
# Does `vlbiflow xfer` in automatic mode leave a competing TCP flow its share? (the target: the TCP flow
# keeps >= 40% of the bottleneck). Through `vlbiflow pathemu` (default 2 Gb/s, 50 ms RTT, no random loss,
# MTU 9000, drop-tail queue of one bandwidth-delay product): for TCP CUBIC and TCP BBR in turn, an iperf3
# flow runs alone for 10 s, then `xfer push` of a file on disk into a daemon runs beside it until it is
# verified; the table gives TCP alone, TCP while xfer ran (from iperf3's 1 s intervals inside the push) and
# xfer's goodput. Needs root and iperf3 (apt-get install iperf3).
#
# PUSH_OPTS / SERVE_OPTS: extra options for xfer's client and daemon (e.g. both --realtime).
#
#   bench/xfer-compete.sh [BIN] [SIZE_MB] [RTT_MS] [LOSS_%]
#   e.g. bench/xfer-compete.sh target/release/vlbiflow 1000 50 0
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
BIN=${1:+$(realpath "$1")}
bench_build
SIZE_MB=${2:-1000}
RTT=${3:-50}
LOSS=${4:-0}
command -v iperf3 >/dev/null || { echo "needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
ns_pair cmp 130
scratch_dirs vf-xfer-cmp
raise_socket_buffers
EMU='' SRV='' IPS='' IPC=
on_exit_kill IPC IPS SRV EMU
q=$(path_queue "$RTT")
# shellcheck disable=SC2086
emu_start "$SCRATCH/emu.out" "$SCRATCH/emu.err" ${EMU_OPTS:-} --ns-a $NA --ns-b $NB --addr-a $NET.1 --addr-b $NET.2 \
  --mtu 9000 --duration 3600 --rtt "${RTT}ms" --rate 2Gbps --queue "$q" --loss "${LOSS}%" --json
# TCP buffers up to 128 MiB in both namespaces (a BDP at 2 Gb/s and 100 ms is 25 MB; the default 6 MB caps
# TCP at about 1 Gb/s at 50 ms)
ns_tcp_buffers $NA $NB
source_file "$SIZE_MB" "$SCRATCH/src/data.bin"
echo "# xfer (automatic rate) beside one TCP flow through pathemu (2 Gb/s, ${RTT} ms RTT, ${LOSS}% loss each way, MTU 9000, queue $q B), $(machine_line)"
echo "# $BIN, ${SIZE_MB} MB file on disk into a daemon writing to disk; push options: ${PUSH_OPTS:-none}, serve options: ${SERVE_OPTS:-none}"
echo
echo "| TCP | TCP alone Mb/s | TCP beside xfer Mb/s | TCP share of 2 Gb/s | xfer goodput Mb/s | xfer retransmitted | together Mb/s | seconds beside | load |"
echo "| --- | --: | --: | --: | --: | --: | --: | --: | --: |"
# shellcheck disable=SC2086
ip netns exec $NB "$BIN" xfer serve --listen $NET.2:46230 --root data="$SCRATCH/dst" ${SERVE_OPTS:-} 2>"$SCRATCH/serve.err" &
SRV=$!
wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
ip netns exec $NB iperf3 -s -B $NET.2 -p 15301 >/dev/null 2>&1 &
IPS=$!
sleep 0.5
for cc in cubic bbr; do
  rm -rf "$SCRATCH/dst"/*
  t_ip=$(date +%s.%N)
  ip netns exec $NA iperf3 -c $NET.2 -p 15301 -C $cc -t 150 -i 1 -J >"$SCRATCH/tcp.json" 2>/dev/null &
  IPC=$!
  sleep 10
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  ip netns exec $NA "$BIN" xfer push "$SCRATCH/src/data.bin" $NET.2:46230/data ${PUSH_OPTS:-} --json >"$SCRATCH/x.json" 2>"$SCRATCH/x.err" \
    || { cat "$SCRATCH/x.err" >&2; tail -5 "$SCRATCH/serve.err" >&2; }
  t1=$(date +%s.%N)
  kill -INT $IPC 2>/dev/null || true
  wait $IPC 2>/dev/null || true
  IPC=
  python3 - "$SCRATCH/tcp.json" "$SCRATCH/x.json" "$t_ip" "$t0" "$t1" $cc "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
tcp_path, x_path, t_ip, t0, t1, cc, load = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:6]), sys.argv[6], sys.argv[7]
try:
    x = json.load(open(x_path))
    gp = x["goodput_bps"] / 1e6
    rtx = 100 * x["retransmits"] / max(1, x["datagrams"])
    # the push's data phase: from its end back by its own duration (the handshake before it is excluded)
    a, b = t1 - x["seconds"], t1
except Exception as e:
    print(f"| {cc} | | | | failed ({e}) | | | | {load} |")
    sys.exit()
try:
    t = json.load(open(tcp_path))
    alone, beside = [], []
    for iv in t["intervals"]:
        s = iv["sum"]
        st, en = t_ip + s["start"], t_ip + s["end"]
        if en <= t0 and s["start"] >= 2:
            alone.append(s["bits_per_second"] / 1e6)
        elif st >= a and en <= b:
            beside.append(s["bits_per_second"] / 1e6)
    al = sum(alone) / max(1, len(alone))
    bs = sum(beside) / max(1, len(beside))
    print(f"| {cc} | {al:.0f} | {bs:.0f} | {bs / 20:.1f} % | {gp:.0f} | {rtx:.2f} % | {bs + gp:.0f} | {len(beside)} | {load} |")
except Exception as e:
    print(f"| {cc} | failed ({e}) | | | {gp:.0f} | {rtx:.2f} % | | | {load} |")
PY
done
kill $EMU; wait $EMU || true; EMU=
echo "emulator: $(grep -o '"dropped_queue": [0-9]*' "$SCRATCH/emu.out" | tr '\n' ' ')"
