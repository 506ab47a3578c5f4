#!/usr/bin/env bash
# Measurements of `vlbiflow pathemu` (docs/pathemu.md): accuracy with `vlbiflow net` through the emulator,
# and the most it forwards (UDP with gen -> sink, TCP with iperf3 when installed) at MTU 9000 with no
# impairment. Needs root. Namespaces vf-pe-bench-a/b are made and removed for each run.
#
#   bench/pathemu.sh [SECONDS]      (default 4 s per throughput point)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-4}
cargo build --release -q -p vlbiflow
BIN=$PWD/target/release/vlbiflow
A=vf-pe-bench-a
B=vf-pe-bench-b
TMP=$(mktemp -d)
sysctl -qw net.core.rmem_max=268435456 net.core.wmem_max=268435456 2>/dev/null || true
EMU=
cleanup() {
  [ -n "$EMU" ] && kill "$EMU" 2>/dev/null && wait "$EMU" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_emu ARGS...: starts the emulator in the background and waits for its ready line.
start_emu() {
  "$BIN" pathemu --ns-a $A --ns-b $B --json --duration 600 "$@" >"$TMP/emu.json" 2>"$TMP/emu.err" &
  EMU=$!
  for _ in $(seq 100); do grep -q '^pathemu: ready' "$TMP/emu.err" 2>/dev/null && return; sleep 0.1; done
  echo "pathemu did not start:" >&2; cat "$TMP/emu.err" >&2; exit 1
}
stop_emu() { kill "$EMU"; wait "$EMU" || true; EMU=; }
field() { python3 -c "import json,sys; d=json.load(open('$TMP/emu.json'))['report']; print(eval(sys.argv[1]))" "$1"; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## Accuracy"
start_emu --rtt 20ms
ip netns exec $B "$BIN" net responder --listen 10.77.0.2:14233 >/dev/null 2>&1 &
RESP=$!
sleep 0.3
echo '### net lat, --rtt 20ms'
ip netns exec $A "$BIN" net lat 10.77.0.2 --no-archive --quiet --sizes 64,1472,8192 --count 200
kill $RESP; wait $RESP 2>/dev/null || true
stop_emu

start_emu --delay 1ms --loss 1%
ip netns exec $B "$BIN" net responder --listen 10.77.0.2:14233 >/dev/null 2>&1 &
RESP=$!
sleep 0.3
echo '### net bw, --loss 1%, 20000 frames of 8192 bytes at 1 Gb/s'
ip netns exec $A "$BIN" net bw 10.77.0.2 --no-archive --quiet --size 8192 --rate 1Gbps --count 20000
kill $RESP; wait $RESP 2>/dev/null || true
stop_emu
echo "emulator a-b: in $(field "d['a_to_b']['in_packets']"), dropped $(field "d['a_to_b']['dropped_random']")"

start_emu --rate 200Mbps --queue 2MB --delay 5ms
ip netns exec $B "$BIN" net responder --listen 10.77.0.2:14233 >/dev/null 2>&1 &
RESP=$!
sleep 0.3
echo '### net bw, --rate 200Mbps --queue 2MB, offered 400 Mb/s, 20000 frames of 8192 bytes'
ip netns exec $A "$BIN" net bw 10.77.0.2 --no-archive --quiet --size 8192 --rate 400Mbps --count 20000
kill $RESP; wait $RESP 2>/dev/null || true
stop_emu
echo "emulator a-b: queue drops $(field "d['a_to_b']['dropped_queue']"), max queue $(field "d['a_to_b']['queue_max_bytes']") B"

echo
echo "## Forwarding ceiling, MTU 9000, no impairment"
echo "| offered (gen, 8224-byte frames) | emulator out | dropped by the kernel before the emulator | received by sink |"
echo "| --- | --- | --- | --- |"
for rate in 1 2 3 4 5 6; do
  start_emu
  ip netns exec $B "$BIN" sink --listen 10.77.0.2:4001 --psn --idle-timeout 2 --json >"$TMP/sink.json" 2>/dev/null &
  SINK=$!
  sleep 0.3
  ip netns exec $A "$BIN" gen --dest 10.77.0.2:4001 --rate ${rate}Gbps --duration "$SECS" --psn >/dev/null 2>&1
  wait $SINK || true
  stop_emu
  out=$(field "round(d['a_to_b']['out_bytes']*8/$SECS/1e9, 2)")
  kin=$(field "d['a_to_b']['kernel_dropped_in']")
  inn=$(field "d['a_to_b']['in_packets']")
  recv=$(python3 -c "
import json
s=[json.loads(l) for l in open('$TMP/sink.json') if '\"summary\"' in l][-1]
print(s['datagrams'], 'lost', s.get('lost'))" 2>/dev/null || { echo "sink output:" >&2; cat "$TMP/sink.json" >&2; echo '?'; })
  echo "| ${rate} Gb/s | ${out} Gb/s | ${kin} of $((inn + kin)) | ${recv} |"
done

if command -v iperf3 >/dev/null; then
  echo
  echo "## TCP (iperf3, 1 stream, ${SECS} s)"
  for args in "" "--rtt 20ms" "--rtt 20ms --loss 0.01%"; do
    # shellcheck disable=SC2086
    start_emu $args
    ip netns exec $B iperf3 -s -1 -B 10.77.0.2 >/dev/null 2>&1 &
    sleep 0.3
    r=$(ip netns exec $A iperf3 -c 10.77.0.2 -t "$SECS" -w 32M 2>/dev/null | awk '/receiver/ {print $7, $8}')
    stop_emu
    echo "- pathemu ${args:-(no impairment)}: $r"
  done
fi
