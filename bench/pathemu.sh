#!/usr/bin/env bash
# Measurements of `vlbiflow pathemu` (docs/pathemu.md): accuracy with `vlbiflow net` through the emulator,
# and the most it forwards (UDP with gen -> sink, TCP with iperf3 when installed) at MTU 9000 with no
# impairment. Needs root. Namespaces vf-pe-bench-a/b are made and removed for each run.
#
#   bench/pathemu.sh [SECONDS]      (default 4 s per throughput point)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-4}
bench_build
A=vf-pe-bench-a
B=vf-pe-bench-b
TMP=$(mktemp -d)
raise_socket_buffers
EMU=
cleanup() {
  emu_stop
  rm -rf "$TMP"
}
trap cleanup EXIT

# start_emu ARGS...: starts the emulator in the background and waits for its ready line.
start_emu() { emu_start "$TMP/emu.json" "$TMP/emu.err" --ns-a $A --ns-b $B --json --duration 600 "$@"; }

field() { json_get "$TMP/emu.json" "(lambda d: $1)(d['report'])"; }
# net_through TITLE EMU-ARGS... -- NET-ARGS...: `vlbiflow net NET-ARGS` from A to a responder in B,
# through an emulator started with EMU-ARGS
net_through() {
  local title=$1 emu=()
  shift
  while [ "$1" != -- ]; do emu+=("$1"); shift; done
  shift
  start_emu "${emu[@]}"
  ip netns exec $B "$BIN" net responder --listen 10.77.0.2:14233 >/dev/null 2>&1 &
  RESP=$!
  sleep 0.3
  echo "$title"
  ip netns exec $A "$BIN" net "$@"
  kill $RESP; wait $RESP 2>/dev/null || true
  emu_stop
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## Accuracy"
net_through '### net lat, --rtt 20ms' --rtt 20ms -- \
  lat 10.77.0.2 --no-archive --quiet --sizes 64,1472,8192 --count 200

net_through '### net bw, --loss 1%, 20000 frames of 8192 bytes at 1 Gb/s' --delay 1ms --loss 1% -- \
  bw 10.77.0.2 --no-archive --quiet --sizes 8192 --rate 1Gbps --count 20000
echo "emulator a-b: in $(field "d['a_to_b']['in_packets']"), dropped $(field "d['a_to_b']['dropped_random']")"

net_through '### net bw, --rate 200Mbps --queue 2MB, offered 400 Mb/s, 20000 frames of 8192 bytes' \
  --rate 200Mbps --queue 2MB --delay 5ms -- bw 10.77.0.2 --no-archive --quiet --sizes 8192 --rate 400Mbps --count 20000
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
  emu_stop
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
    emu_stop
    echo "- pathemu ${args:-(no impairment)}: $r"
  done
fi
