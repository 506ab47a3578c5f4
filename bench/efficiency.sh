#!/usr/bin/env bash
# Transport efficiency (docs/bench/efficiency.md), between two network namespaces joined by veth
# (MTU 9000), as root:
#   1. one flow of 8232-byte datagrams flat out, every transport (`net efficiency`, alternating repeats)
#   2. a LOFAR-like load: 50 flows at $LOFAR_RATE in total, every transport, received by one thread
#   2b. 4 flows of 1472-byte datagrams at $SMALL_RATE (default 1Gbps), every transport including AF_XDP
#   3. the recorder on the same load from `gen` (50 streams, GSO 7): capture only and writing to disk,
#      alternating, with the recorder's CPU per GB
#   4. bandwidth against random loss on the path (vlbiflow pathemu, 0..5%), udp/uring/tcp (host default
#      congestion control) and tcp with CUBIC, all offered $LOSS_RATE, and vlbiflow xfer (a file of
#      $LOSS_RATE x SECONDS pushed with --rate $LOSS_RATE: verified goodput)
# Results (JSON, tables, PNG) go to OUTDIR.
# Usage: bench/efficiency.sh [OUTDIR] [SECONDS per test] [REPEATS]
# Environment: LOFAR_RATE (default 6Gbps), LOSS_LEVELS (default "0 0.5% 1% 2% 5%"), LOSS_RATE (1Gbps),
#              SMALL_RATE (1Gbps), SKIP (space-separated parts to leave out: single lofar small record loss)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
out=${1:-/var/tmp/vlbiflow-eff}
secs=${2:-5}
reps=${3:-3}
lofar_rate=${LOFAR_RATE:-6Gbps}
loss_levels=${LOSS_LEVELS:-"0 0.5% 1% 2% 5%"}
loss_rate=${LOSS_RATE:-1Gbps}
skip=" ${SKIP:-} "
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
bench_build
bin=$BIN
mkdir -p "$out"
raise_socket_buffers

id=$$
A=vfeff-a-$id; B=vfeff-b-$id; net=10.235.$((id % 250))
va=vefa$id; vb=vefb$id
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add "${va:0:15}" type veth peer name "${vb:0:15}"
ip link set "${va:0:15}" netns "$A"; ip link set "${vb:0:15}" netns "$B"
ip -n "$A" addr add "$net.1/24" dev "${va:0:15}"; ip -n "$B" addr add "$net.2/24" dev "${vb:0:15}"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "${va:0:15}" mtu 9000 up; ip -n "$B" link set "${vb:0:15}" mtu 9000 up

start_responder() { # NS ADDR LOG
  ip netns exec "$1" "$bin" net responder --listen "$2:14233" --idle-timeout 600 2> "$3" &
  pids+=($!)
  need_line "$3" "listening on" 100
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "kernel: $(uname -r); cpus: $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: bench/efficiency.sh $out $secs $reps (LOFAR_RATE=$lofar_rate LOSS_RATE=$loss_rate)"
} > "$out/machine.txt"
cat "$out/machine.txt"

start_responder "$B" "$net.2" "$out/responder.log"
eff() { ip netns exec "$A" "$bin" net efficiency "$net.2" --duration "$secs" --repeats "$reps" "$@"; }

if [[ $skip != *" single "* ]]; then
  echo "== 1. one flow of 8232-byte datagrams, flat out, every transport"
  eff --json --plot "$out/single.png" > "$out/single.json"
  "$bin" net efficiency --from "$out/single.json" | tee "$out/single.txt"
fi

if [[ $skip != *" lofar "* ]]; then
  echo "== 2. LOFAR-like: 50 flows, $lofar_rate in total, one receiving thread"
  eff --streams 50 --rate "$lofar_rate" --json --plot "$out/lofar.png" > "$out/lofar.json"
  "$bin" net efficiency --from "$out/lofar.json" | tee "$out/lofar.txt"
fi

if [[ $skip != *" small "* ]]; then
  echo "== 2b. 4 flows of 1472-byte datagrams, ${SMALL_RATE:-1Gbps} in total, every transport (AF_XDP takes datagrams up to 3798 bytes)"
  eff --streams 4 --size 1472 --rate "${SMALL_RATE:-1Gbps}" --recv-buffer 64MiB --json --plot "$out/small.png" > "$out/small.json"
  "$bin" net efficiency --from "$out/small.json" | tee "$out/small.txt"
fi

if [[ $skip != *" record "* ]]; then
  echo "== 3. the recorder on 50 gen streams, $lofar_rate in total (GSO 7), capture only and to disk"
  per=$(python3 -c "
import re,sys
s='$lofar_rate'.lower(); m=re.match(r'([0-9.]+)\s*([kmg]?)bps',s)
v=float(m.group(1))*{'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)]
print(f'{v/50/1e6:.3f}Mbps')")
  streams=(); dests=()
  for i in $(seq 0 49); do
    streams+=(--stream "s$i=vdif@$net.2:$((43000 + i)),psn"); dests+=(--dest "$net.2:$((43000 + i))")
  done
  : > "$out/record.tsv"
  for round in $(seq 1 "$reps"); do
    for mode in discard disk disk discard; do
      d="$out/disk"; rm -rf "$d"; mkdir -p "$d"/{0,1,2,3}
      if [ "$mode" = discard ]; then where=(--discard); else where=(--disk "$d/0" --disk "$d/1" --disk "$d/2" --disk "$d/3" --scan lofar); fi
      # The recorder's own CPU (user, system) from wait4 on its process.
      ip netns exec "$B" python3 -c '
import os, sys, json, resource
pid = os.fork()
if pid == 0:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.dup2(fd, 1)
    fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.dup2(fd, 2)
    os.execv(sys.argv[3], sys.argv[3:])
_, status, ru = os.wait4(pid, 0)
json.dump({"user_s": ru.ru_utime, "system_s": ru.ru_stime, "status": status}, open(sys.argv[1] + ".cpu", "w"))
' "$out/rec-$mode.json" "$out/rec-$mode.log" "$bin" record "${streams[@]}" "${where[@]}" --duration $((secs + 6)) --json &
      rp=$!
      sleep 2
      ip netns exec "$A" "$bin" gen "${dests[@]}" --rate "$per" --psn --gso 7 --duration "$secs" --json -q > "$out/gen-$mode.json"
      wait "$rp" || true
      python3 - "$out" "$mode" "$round" >> "$out/record.tsv" <<'PY'
import json, sys
d, mode, rnd = sys.argv[1:]
r = json.load(open(f"{d}/rec-{mode}.json")); cpu = json.load(open(f"{d}/rec-{mode}.json.cpu"))
g = json.load(open(f"{d}/gen-{mode}.json"))
c = [s["counters"] for s in r["streams"]]
stored = sum(x["packets"] for x in c); lost = sum(x["lost"] for x in c)
gb = sum(x["bytes"] for x in c) / 1e9
print(f"{mode}\t{rnd}\t{len(c)}\t{g['achieved_bps']/1e9:.3f}\t{g['frames']}\t{stored}\t{lost}\t"
      f"{sum(x['dropped_no_buffer'] for x in c)}\t{sum(x['kernel_drops'] for x in c)}\t{cpu['user_s']/gb:.3f}\t{cpu['system_s']/gb:.3f}")
PY
      tail -1 "$out/record.tsv"
    done
  done
  rm -rf "$out/disk"
fi

if [[ $skip != *" loss "* ]]; then
  echo "== 4. bandwidth against random loss on the path (pathemu, 4 ms round trip, loss on the data direction)"
  pa=vfpe-a-$id; pb=vfpe-b-$id; pnet=10.236.$((id % 250))
  files=()
  # the file vlbiflow xfer moves at each loss level: what the offered rate carries in one test's time
  head -c "$(python3 -c "import sys; print(int(float(sys.argv[1].rstrip('Gbps')) * 1e9 / 8 * float(sys.argv[2])))" "$loss_rate" "$secs")" \
    /dev/urandom > "$out/xfer-src.bin"
  echo "loss_percent,gbps" > "$out/xfer-loss.csv"
  for loss in $loss_levels; do
    tag=${loss%\%}
    args=(--ns-a "$pa" --ns-b "$pb" --addr-a "$pnet.1" --addr-b "$pnet.2" --rtt 4ms --impair a-b)
    [ "$loss" != 0 ] && args+=(--loss "$loss")
    emu_start "$out/pathemu-$tag.json" "$out/pathemu-$tag.log" "${args[@]}" --json
    start_responder "$pb" "$pnet.2" "$out/responder-loss-$tag.log"
    rpid=${pids[-1]}
    common=(--rate "$loss_rate" --duration "$secs" --repeats "$reps" --path-loss "$loss" -q --json)
    ip netns exec "$pa" "$bin" net efficiency "$pnet.2" --transports udp,uring,tcp "${common[@]}" \
      --label "pathemu --rtt 4ms --loss $loss" > "$out/loss-$tag.json"
    # TCP again with CUBIC (the host's default here is BBR, which holds its rate through random loss).
    ip netns exec "$pa" "$bin" net efficiency "$pnet.2" --transports tcp --tcp-congestion cubic "${common[@]}" \
      --label "pathemu --rtt 4ms --loss $loss, TCP CUBIC" > "$out/loss-$tag-cubic.json"
    kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
    # vlbiflow xfer through the same path: the same file each time, a fixed ceiling at the offered rate;
    # its figure is verified goodput (every byte delivered and hash-checked, retransmissions included in
    # the time), where the transports above show what arrived.
    rm -rf "$out/xfer-dst"; mkdir -p "$out/xfer-dst"
    ip netns exec "$pb" "$bin" xfer serve --listen "$pnet.2:46231" --root data="$out/xfer-dst" \
      --key "$out/xfer.key" --archive "$out/xfer-archive.sqlite" 2> "$out/xfer-serve-$tag.log" &
    xs=$!
    wait_line "$out/xfer-serve-$tag.log" 'serving on' 100 || true
    if ip netns exec "$pa" "$bin" xfer push "$out/xfer-src.bin" "$pnet.2:46231/data" --key "$out/xfer.key" \
        --rate "$loss_rate" --json > "$out/xfer-$tag.json" 2> "$out/xfer-push-$tag.log"; then
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f'{sys.argv[2]},{d[\"goodput_bps\"]/1e9:.4f}')" \
        "$out/xfer-$tag.json" "$tag" >> "$out/xfer-loss.csv"
    else
      echo "xfer at loss $loss failed: $(tail -1 "$out/xfer-push-$tag.log")"
    fi
    kill "$xs" 2>/dev/null || true; wait "$xs" 2>/dev/null || true
    kill -INT "$EMU"; wait "$EMU" || true
    files+=(--from "$out/loss-$tag.json" --from "$out/loss-$tag-cubic.json")
    echo "loss $loss:"
    "$bin" net efficiency --from "$out/loss-$tag.json" | head -4
    "$bin" net efficiency --from "$out/loss-$tag-cubic.json" | sed -n 2p
  done
  "$bin" net efficiency "${files[@]}" --plot-loss "$out/loss.png" --loss-series "vlbiflow xfer (verified)=$out/xfer-loss.csv" -q > /dev/null
  echo "vlbiflow xfer, verified goodput (Gb/s) against loss (%):"; column -s, -t "$out/xfer-loss.csv"
  rm -rf "$out/xfer-src.bin" "$out/xfer-dst"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"
echo "results in $out"
