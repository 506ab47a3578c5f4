#!/usr/bin/env bash
# Benchmark of `vlbiflow xfer` (docs/bench/xfer.md): through `vlbiflow pathemu` (2 Gb/s bottleneck, MTU 9000),
# vlbiflow xfer (file to file on disk) against TCP CUBIC and TCP BBR (memory to memory, iperf3 -C when installed,
# and BBR file to file with iperf3 -F),
# alternating in one run, over RTT 0/20/100 ms and random loss 0/0.1/1/5 %, with CPU seconds per GB at both
# ends; then disk to disk on loopback against cp. Needs root. Namespaces vf-bx-<pid>-a/b and a subnet from
# the pid are made and removed for each point. Data goes to a scratch directory on disk (not tmpfs) that is
# removed at the end.
#
#   bench/xfer.sh [SIZE_MB] [RTTS] [LOSSES]     e.g. bench/xfer.sh 2000 "0 20 100" "0 0.1 1 5"
#   ROUNDS=3 NO_MEM=1 bench/xfer.sh 3000 "0 20 100" "0 0.1 1 5"   xfer against TCP BBR file to file, 3 runs each
#   per point in alternating order, and a summary of their medians
#
# Optional peer: Tsunami, if TSUNAMI_DIR names a build of its public source (tsunamid and tsunami binaries);
# this script neither fetches nor builds it (docs/bench/xfer.md says how it was built). Its row: a pull at a
# fixed 1900M, file on disk to file on disk; sender CPU is tsunamid's child, receiver CPU the client.
# EMU_OPTS: extra options for the emulator (e.g. --realtime).
# PUSH_OPTS / SERVE_OPTS: extra options for xfer's client and daemon on the emulated path (e.g. both
# --realtime: the data threads in the real-time class).
# TRACE_DIR=DIR: each xfer push's rate-control trace (DIR/RTT-LOSS-N.csv, docs/xfer-protocol.md) and its
# JSON summary (DIR/RTT-LOSS-N.json), to look into a run that fell short.
# COLD=1: the page cache is dropped before each file-to-file run (xfer, TCP BBR file to file, Tsunami), so
# each tool reads a source file the cache does not hold, as a station sends a recording made hours before
# (default: the source stays in the page cache, so the numbers measure the transfer rather than the disk).
# Machine CPU s/GB (every row): what the whole machine spent per GB over the run (bench/cpu.sh: /proc/stat
# less its background measured before the grid), the emulator and kernel threads included. Per-process
# figures put TCP's kernel work where it ran: through the emulator, its writes into the TUN devices run the
# TCP receive path and the ACK-clocked sending in the emulator's context. The TCP file-to-file runs end
# with a `sync` inside the measured interval (xfer's receiver has synced when it reports); the medians
# table also has TCP's goodput until its received file is durable (iperf3's seconds plus an fsync of the
# file, as Tsunami's row and xfer's own figure count), beside iperf3's own figure. The last column
# has the load average and the CPU seconds the hypervisor took from the machine during the run (steal):
# a run that lost seconds to it was slowed by the host, whatever the tool.
# QUEUE=BYTES: the bottleneck's queue at every point instead of one bandwidth-delay product (e.g. 262144,
# a shallow switch buffer).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SIZE_MB=${1:-2000}
RTTS=${2-"0 20 100"}     # an empty list skips the emulator grid: bench/xfer.sh 3000 "" "" runs the loopback part alone
LOSSES=${3-"0 0.1 1 5"}
TCP_SECS=${TCP_SECS:-10}
NO_TCP=${NO_TCP:-0}        # 1: xfer only (for quick before/after runs)
if [ "$NO_TCP" != 1 ] && ! command -v iperf3 >/dev/null; then
  echo "needs iperf3 for the TCP peers (apt-get install iperf3), or NO_TCP=1 for xfer alone" >&2; exit 2
fi
NO_LOOPBACK=${NO_LOOPBACK:-0}
bench_build   # BIN=path: benchmark that build instead (e.g. one kept from before a change)
PID=$$
A=vf-bx-$PID-a
B=vf-bx-$PID-b
NET=10.$((130 + PID % 100)).$(((PID / 100) % 250))
IA=$NET.1
IB=$NET.2
scratch_dirs vf-bench-xfer
raise_socket_buffers
EMU= SRV=
on_exit_kill SRV EMU

start_emu() {
  # shellcheck disable=SC2086
  emu_start "$SCRATCH/emu.json" "$SCRATCH/emu.err" ${EMU_OPTS:-} --ns-a $A --ns-b $B --addr-a $IA --addr-b $IB \
    --mtu 9000 --json --duration 3600 "$@"
}
# settle: sync and wait for the disk's discards before a run (bench/lib.sh says why)
cold() { settle; if [ "${COLD:-0}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }

echo "# vlbiflow xfer benchmark, $(machine_line)"
echo "# file ${SIZE_MB} MB on $(df --output=source "$SCRATCH" | tail -1), bottleneck 2 Gb/s, MTU 9000, source file $([ "${COLD:-0}" = 1 ] && echo "dropped from the page cache before each file-to-file run" || echo "in the page cache")"
echo "# xfer push options: ${PUSH_OPTS:-none}; serve options: ${SERVE_OPTS:-none}; emulator options: ${EMU_OPTS:-none}"
source_file "$SIZE_MB" "$SCRATCH/src/data.bin"
BG=$(machine_background 5)
echo "# the machine's background before the grid: $BG busy CPU s/s, subtracted from each run's machine CPU"

# one run of a tool at the current point ($rtt, $loss) each: a row of the table; the file-to-file runs of
# xfer and TCP BBR also go to $SCRATCH/grid for the summary of medians
run_xfer() {
  rm -rf "$SCRATCH/dst"/*
  # shellcheck disable=SC2086
  ip netns exec $B "$BIN" xfer serve --listen $IB:46230 --root data="$SCRATCH/dst" ${SERVE_OPTS:-} 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  cold
  c0=$(cpu_of $SRV)
  e0=$(cpu_of $EMU)
  local m0 m1
  m0=$(machine_mark)
  local trace=
  if [ -n "${TRACE_DIR:-}" ]; then
    mkdir -p "$TRACE_DIR"; XFER_RUN=$((${XFER_RUN:-0} + 1)); trace=$TRACE_DIR/$rtt-$loss-$XFER_RUN
    export VLBIFLOW_XFER_TRACE=$trace.csv
  fi
  # shellcheck disable=SC2086
  /usr/bin/time -f "%U %S" -o "$SCRATCH/time" ip netns exec $A "$BIN" xfer push "$SCRATCH/src/data.bin" \
    $IB:46230/data ${PUSH_OPTS:-} --json >"$SCRATCH/xfer.json" 2>"$SCRATCH/xfer.err" || { cat "$SCRATCH/xfer.err"; }
  if [ -n "$trace" ]; then unset VLBIFLOW_XFER_TRACE; cp "$SCRATCH/xfer.json" "$trace.json" 2>/dev/null || true; fi
  c1=$(cpu_of $SRV)
  e1=$(cpu_of $EMU)
  m1=$(machine_mark)
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  if [ -s "$SCRATCH/xfer.json" ]; then
    scpu=$(awk '{print $1 + $2}' "$SCRATCH/time")
    python3 - "$SCRATCH/xfer.json" "$rtt" "$loss" "$scpu" "$c0" "$c1" "$SIZE_MB" "$e0" "$e1" "$(cut -d' ' -f1 /proc/loadavg) / $(machine_steal "$m0" "$m1")" "$SCRATCH/grid" \
      "$(machine_cpu "$m0" "$m1" "$BG")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rtt, loss, scpu, c0, c1, mb = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
e0, e1, load = float(sys.argv[8]), float(sys.argv[9]), sys.argv[10]
gp = d["goodput_bps"] / 1e6
rtx = 100 * d["retransmits"] / max(1, d["datagrams"])
gb = mb / 1000
mach = f"{float(sys.argv[12]) / gb:.2f}"
print(f"| {rtt} ms | {loss} % | xfer | {gp:.0f} | {gp/20:.1f} | {scpu/gb:.2f} | {(c1-c0)/gb:.2f} | {(e1-e0)/gb:.2f} | {mach} | {rtx:.2f} % | {load} |")
open(sys.argv[11], "a").write(f"{rtt} {loss} xfer {gp} {scpu/gb} {(c1-c0)/gb} {mach} {gp}\n")
PY
  else
    echo "| $rtt ms | $loss % | xfer | failed | | | | | | | |"
  fi
}
run_tcp_memory() {
  ip netns exec $B iperf3 -s -B $IB -p 15201 >/dev/null 2>&1 &
  SRV=$!
  sleep 0.5
  for cc in cubic bbr; do
    e0=$(cpu_of $EMU)
    m0=$(machine_mark)
    ip netns exec $A iperf3 -c $IB -p 15201 -C $cc -t $TCP_SECS -J >"$SCRATCH/tcp.json" 2>/dev/null || true
    m1=$(machine_mark)
    e1=$(cpu_of $EMU)
    python3 - "$SCRATCH/tcp.json" "$rtt" "$loss" "$cc" "$TCP_SECS" "$e0" "$e1" "$(cut -d' ' -f1 /proc/loadavg) / $(machine_steal "$m0" "$m1")" "$(machine_cpu "$m0" "$m1" "$BG")" <<'PY'
import json, sys
try:
    e0, e1, load = float(sys.argv[6]), float(sys.argv[7]), sys.argv[8]
    d = json.load(open(sys.argv[1]))
    e = d["end"]
    mbps = e["sum_received"]["bits_per_second"] / 1e6
    gb = e["sum_received"]["bytes"] / 1e9
    secs = float(sys.argv[5])
    cpu = e["cpu_utilization_percent"]
    snd = cpu["host_total"] / 100 * secs / max(gb, 1e-9)
    rcv = cpu["remote_total"] / 100 * secs / max(gb, 1e-9)
    rtx = e["sum_sent"].get("retransmits", 0)
    mach = float(sys.argv[9]) / max(gb, 1e-9)
    print(f"| {sys.argv[2]} ms | {sys.argv[3]} % | TCP {sys.argv[4]} | {mbps:.0f} | {mbps/20:.1f} | {snd:.2f} | {rcv:.2f} | {(e1-e0)/max(gb, 1e-9):.2f} | {mach:.2f} | {rtx} segments | {load} |")
except Exception as ex:
    print(f"| {sys.argv[2]} ms | {sys.argv[3]} % | TCP {sys.argv[4]} | failed ({ex}) | | | | | | | |")
PY
  done
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
}
run_tcp_file() {
  # TCP BBR file to file: iperf3 -F reads the source file at the client and writes it at the server
  # (page cache; iperf3's own rate and CPU report, so its goodput does not wait for the sync that ends the
  # machine's interval)
  rm -f "$SCRATCH/dst/tcp.bin"
  ip netns exec $B iperf3 -s -1 -B $IB -p 15202 -F "$SCRATCH/dst/tcp.bin" >/dev/null 2>&1 &
  SRV=$!
  sleep 0.5
  cold
  e0=$(cpu_of $EMU)
  local m0 m1
  m0=$(machine_mark)
  timeout 300 ip netns exec $A iperf3 -c $IB -p 15202 -C bbr -F "$SCRATCH/src/data.bin" -J >"$SCRATCH/tcpf.json" 2>/dev/null || true
  e1=$(cpu_of $EMU)
  wait $SRV 2>/dev/null || true; SRV=
  # the time to make the received file durable (fsync of it), as xfer's goodput waits for its sync
  local s0 s1
  s0=$(date +%s.%N); sync "$SCRATCH/dst/tcp.bin" 2>/dev/null || true; s1=$(date +%s.%N)
  sync
  m1=$(machine_mark)
  python3 - "$SCRATCH/tcpf.json" "$rtt" "$loss" "$e0" "$e1" "$(cut -d' ' -f1 /proc/loadavg) / $(machine_steal "$m0" "$m1")" "$SCRATCH/grid" "$(machine_cpu "$m0" "$m1" "$BG")" "$s0" "$s1" <<'PY'
import json, sys
try:
    e0, e1, load = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    e = json.load(open(sys.argv[1]))["end"]
    r = e["sum_received"]
    mbps = r["bits_per_second"] / 1e6
    gb = r["bytes"] / 1e9
    secs = r["seconds"]
    synced = r["bytes"] * 8 / (secs + float(sys.argv[10]) - float(sys.argv[9])) / 1e6
    cpu = e["cpu_utilization_percent"]
    snd, rcv = cpu['host_total'] / 100 * secs / gb, cpu['remote_total'] / 100 * secs / gb
    mach = float(sys.argv[8]) / gb
    print(f"| {sys.argv[2]} ms | {sys.argv[3]} % | TCP bbr, file to file | {mbps:.0f} | {mbps/20:.1f} | {snd:.2f} | {rcv:.2f} | {(e1-e0)/gb:.2f} | {mach:.2f} | {e['sum_sent'].get('retransmits', 0)} segments | {load} |")
    open(sys.argv[7], "a").write(f"{sys.argv[2]} {sys.argv[3]} bbr-file {mbps} {snd} {rcv} {mach:.2f} {synced}\n")
except Exception as ex:
    print(f"| {sys.argv[2]} ms | {sys.argv[3]} % | TCP bbr, file to file | failed ({ex}) | | | | | | | |")
PY
  rm -f "$SCRATCH/dst/tcp.bin"
}
run_tsunami() {
  # Tsunami (a pull: tsunamid serves the source directory from side A, the client writes on side B) at a
  # fixed 1900M (its ipd of 8e6 x 8192 / rate rounds down to whole µs: 2000M would pace above the
  # bottleneck), 8192-byte blocks, lossless mode; goodput = file size / (client wall time + sync of the
  # file), as xfer's counts until the file is synced
  mkdir -p "$SCRATCH/dst-tsu"; rm -f "$SCRATCH/dst-tsu"/*
  (cd "$SCRATCH/src" && exec ip netns exec $A "$TSUNAMI_DIR/tsunamid" --port=46300 >"$SCRATCH/tsud.log" 2>&1) &
  SRV=$!
  sleep 0.5
  # tsunamid forks a child per transfer and reaps it: the child's CPU lands in the parent's cutime/cstime
  cold
  c0=$(awk '{print ($14 + $15 + $16 + $17) / 100}' /proc/$SRV/stat 2>/dev/null || echo 0)
  e0=$(cpu_of $EMU)
  local m0 m1
  m0=$(machine_mark)
  t0=$(date +%s.%N)
  (cd "$SCRATCH/dst-tsu" && /usr/bin/time -f "%U %S" -o "$SCRATCH/time" timeout 600 ip netns exec $B \
    "$TSUNAMI_DIR/tsunami" set port 46300 set rate 1900M set blocksize 8192 set transcript no \
    connect $IA get data.bin quit </dev/null >"$SCRATCH/tsu.log" 2>&1) || true
  sync "$SCRATCH/dst-tsu/data.bin" 2>/dev/null || true
  t1=$(date +%s.%N)
  m1=$(machine_mark)
  e1=$(cpu_of $EMU)
  for _ in $(seq 50); do pgrep -P $SRV >/dev/null || break; sleep 0.1; done
  c1=$(awk '{print ($14 + $15 + $16 + $17) / 100}' /proc/$SRV/stat 2>/dev/null || echo 0)
  pkill -P $SRV 2>/dev/null || true; kill $SRV 2>/dev/null || true; wait $SRV 2>/dev/null || true; SRV=
  pkill -x tsunamid 2>/dev/null || true
  if cmp -s "$SCRATCH/src/data.bin" "$SCRATCH/dst-tsu/data.bin"; then
    python3 - "$SCRATCH/tsu.log" "$rtt" "$loss" "$(tail -1 "$SCRATCH/time" | awk '{print $1 + $2}')" "$c0" "$c1" "$SIZE_MB" "$e0" "$e1" "$t0" "$t1" "$(cut -d' ' -f1 /proc/loadavg) / $(machine_steal "$m0" "$m1")" \
      "$(machine_cpu "$m0" "$m1" "$BG")" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
rtt, loss, ccpu, c0, c1, mb, e0, e1, t0, t1, load, mach = sys.argv[2:]
gb = float(mb) / 1000
mach = f"{float(mach) / gb:.2f}"
secs = float(t1) - float(t0)
gp = float(mb) * 8 / secs
m = re.search(r"Goodput w/ restarts\s*:\s*([0-9.]+)", log)
own = f" (its own figure {float(m.group(1)) * 1.048576:.0f})" if m else ""
dropped = re.search(r"PC performance figure\s*:\s*([0-9]+) packets dropped", log)
print(f"| {rtt} ms | {loss} % | Tsunami{own} | {gp:.0f} | {gp/20:.1f} | {(float(c1)-float(c0))/gb:.2f} | {float(ccpu)/gb:.2f} | {(float(e1)-float(e0))/gb:.2f} | {mach} | {dropped.group(1) if dropped else '?'} dropped by the client | {load} |")
PY
  else
    echo "| $rtt ms | $loss % | Tsunami | failed: $(grep -m1 -i 'error\|warning' "$SCRATCH/tsu.log" || tail -1 "$SCRATCH/tsu.log") | | | | | | | |"
  fi
  rm -f "$SCRATCH/dst-tsu/data.bin"
}

echo
echo "| RTT | loss | tool | goodput Mb/s | % of 2 Gb/s | sender CPU s/GB | receiver CPU s/GB | emulator CPU s/GB | machine CPU s/GB | retransmitted | load / steal s |"
echo "| --: | --: | --- | --: | --: | --: | --: | --: | --: | --: | --: |"
: >"$SCRATCH/grid"
for rtt in $RTTS; do
  for loss in $LOSSES; do
    # queue: one bandwidth-delay product, at least 4 MB (QUEUE=BYTES: that, e.g. a shallow switch buffer)
    q=${QUEUE:-$(path_queue "$rtt")}
    start_emu --rtt ${rtt}ms --rate 2Gbps --queue $q --loss ${loss}%
    # ROUNDS (default 1) runs of xfer and of TCP BBR file to file at each point, in alternating order
    # (xfer first in odd rounds): on this shared machine one run per point says little
    for r in $(seq "${ROUNDS:-1}"); do
      if [ $((r % 2)) = 1 ]; then run_xfer; fi
      if [ "$NO_TCP" != 1 ]; then
        # TCP buffers up to 128 MiB (the default 6 MB holds TCP to about 6 MB per RTT: 240 Mb/s at 100 ms)
        ns_tcp_buffers $A $B
        # memory to memory (CUBIC, BBR) in the first round only; NO_MEM=1 leaves it out
        if [ "$r" = 1 ] && [ "${NO_MEM:-0}" != 1 ]; then run_tcp_memory; fi
        run_tcp_file
      fi
      if [ $((r % 2)) = 0 ]; then run_xfer; fi
    done
    if [ -n "${TSUNAMI_DIR:-}" ]; then run_tsunami; fi
    emu_stop
  done
done
if [ -n "$RTTS" ]; then
  # per point, the medians of the file-to-file runs: xfer against TCP BBR (iperf3 -F)
  python3 - "$SCRATCH/grid" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
points = list(dict.fromkeys((r[0], r[1]) for r in rows))
med = lambda rs, i: statistics.median(float(r[i]) for r in rs)
span = lambda rs: f"{min(float(r[3]) for r in rs):.0f}-{max(float(r[3]) for r in rs):.0f}"
lines, ahead, ahead_synced, snd_ok, rcv_ok, mach_ok = [], 0, 0, 0, 0, 0
for p in points:
    x = [r for r in rows if (r[0], r[1]) == p and r[2] == "xfer"]
    b = [r for r in rows if (r[0], r[1]) == p and r[2] == "bbr-file"]
    if not x or not b:
        continue
    gx, gb = med(x, 3), med(b, 3)
    # TCP until its file is synced (older grid files have no such column: then iperf3's own figure)
    gs = statistics.median(float(r[7]) if len(r) > 7 else float(r[3]) for r in b)
    ahead += gx >= gb
    ahead_synced += gx >= gs
    snd_ok += med(x, 4) <= med(b, 4)
    rcv_ok += med(x, 5) <= med(b, 5)
    mach_ok += med(x, 6) <= med(b, 6)
    lines.append(f"| {p[0]} ms | {p[1]} % | {len(x)} / {len(b)} | {gx:.0f} ({span(x)}) | {gb:.0f} ({span(b)}) | {100 * gx / gb:.1f} % | {gs:.0f} | {100 * gx / gs:.1f} % "
                 f"| {med(x, 4):.2f} / {med(b, 4):.2f} | {med(x, 5):.2f} / {med(b, 5):.2f} | {med(x, 6):.2f} / {med(b, 6):.2f} |")
if lines:
    print("\nFile to file, medians per point (runs alternating):\n")
    print("| RTT | loss | runs xfer / BBR | xfer Mb/s (range) | TCP BBR -F Mb/s (range) | xfer / BBR | TCP BBR -F until synced Mb/s | xfer / that | sender CPU s/GB xfer / BBR | receiver CPU s/GB xfer / BBR | machine CPU s/GB xfer / BBR |")
    print("| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
    print("\n".join(lines))
    print(f"\nxfer's median goodput at least BBR's: {ahead} of {len(lines)} points ({ahead_synced} against BBR until its file is synced); sender CPU at most BBR's: {snd_ok}; receiver CPU at most BBR's: {rcv_ok}; machine CPU at most BBR's: {mach_ok}")
PY
fi

[ "$NO_LOOPBACK" = 1 ] && exit 0
echo
echo "## Loopback, disk to disk (no emulator)"
# LOOPBACK_ROUNDS rounds (default 3) alternating cp + sync and xfer, page cache dropped before each: this
# disk's speed moves by half between runs, so one pair says little
echo
echo "| round | tool | Mb/s |"
echo "| --: | --- | --: |"
: >"$SCRATCH/lo"
for r in $(seq "${LOOPBACK_ROUNDS:-3}"); do
  rm -rf "$SCRATCH/dst"/*
  sync; echo 3 >/proc/sys/vm/drop_caches
  t0=$(date +%s.%N); cp "$SCRATCH/src/data.bin" "$SCRATCH/dst/cp.bin"; sync; t1=$(date +%s.%N)
  cpr=$(python3 -c "print('%.0f' % ($SIZE_MB*8/($t1-$t0)))")
  echo "| $r | cp + sync | $cpr |"
  rm -f "$SCRATCH/dst/cp.bin"; sync; echo 3 >/proc/sys/vm/drop_caches
  "$BIN" xfer serve --listen 127.0.0.1:46299 --root data="$SCRATCH/dst" 2>"$SCRATCH/serve.err" &
  SRV=$!
  wait_line "$SCRATCH/serve.err" 'serving on' 100 || true
  "$BIN" xfer push "$SCRATCH/src/data.bin" 127.0.0.1:46299/data --rate 10Gbps --json >"$SCRATCH/xfer.json"
  kill $SRV; wait $SRV 2>/dev/null || true; SRV=
  xr=$(json_get "$SCRATCH/xfer.json" "'%.0f' % (d['goodput_bps']/1e6)")
  echo "| $r | xfer (fixed 10 Gb/s ceiling, verified, synced) | $xr |"
  echo "$cpr $xr" >>"$SCRATCH/lo"
done
python3 - "$SCRATCH/lo" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cp = statistics.median(float(r[0]) for r in rows)
x = statistics.median(float(r[1]) for r in rows)
print(f"\nmedians: cp + sync {cp:.0f} Mb/s, xfer {x:.0f} Mb/s: xfer at {100 * x / cp:.0f}% of cp")
PY
