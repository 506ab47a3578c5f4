#!/usr/bin/env bash
# Real-time e-VLBI benchmarks (results in docs/bench/realtime.md):
#
#   bench/realtime.sh forward [DIR] [SECONDS]   record alone vs record + forward (udps) at 1, 2, 4 Gb/s on
#                                               loopback: CPU seconds per GB of the recorder, loss on each side
#   bench/realtime.sh accept  [DIR] [SECONDS]   (root) the acceptance run: gen 2 Gb/s, 2 threads -> record on
#                                               four directories forwarding udps through pathemu (30 ms RTT,
#                                               0.1% loss, 2.5 Gb/s) -> receive into one VDIF file; then the
#                                               same with the forward link limited to 1 Gb/s
#   bench/realtime.sh position [DIR] [SECONDS] (root) every forwarded frame in its place: gen 1 Gb/s, 2 threads
#                                               -> pathemu (input loss 0.1%) -> record --forward udps,psn=input
#                                               on a host loaded with LOAD (default 2) busy loops ->
#                                               pathemu (30 ms RTT, 0.5% loss) -> receive --first-psn 0
#                                               --count N; checks every output frame against its position
#                                               and fill = the sum of each stage's own drop count
#   bench/realtime.sh replay  [DIR] [SECONDS]   gen 2 Gb/s, 2 threads -> record scan A; play A at its original rate
#                                               -> record scan B; check both, compare them frame for frame, and
#                                               the replay's per-second rate against the recording's
#   bench/realtime.sh relay   [DIR] [SECONDS]   vlbiflow relay vs jive5ab (net2mem + mem2net, set JIVE5AB=path
#                                               to a jive5ab binary you built) at 1, 2, 4 Gb/s on loopback
#
# DIR (default /var/tmp/vlbiflow-rt) must be on a disk, not tmpfs; big files are deleted at the end.
# Needs GNU time (/usr/bin/time) and python3 for the tables. VLBIFLOW=path overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

WHAT=${1:-forward}
EMU_EXTRA=${EMU_EXTRA:-}   # e.g. --realtime (pathemu's forwarding threads SCHED_FIFO)
# accept only: GEN_OPTS (extra gen options, default "--gso 7": the backend's frames handed to the kernel in
# super-datagrams, which takes most of the simulated backend's CPU off the two cores it shares with the
# station, the emulator and the correlator; a real backend is a machine of its own; GEN_OPTS= for none), ACCEPT_RUNS (default "lossy slow"), HOSTILE=0 (no garbage or port scan),
# HOSTILE_COUNT (random datagrams per end, default 20000)
DIR=${2:-/var/tmp/vlbiflow-rt}
SECS=${3:-${SECS:-}}
BIN=${VLBIFLOW:-${BIN:-}}
bench_build
VLBIFLOW=$BIN
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 1; }
mkdir -p "$DIR"
RUN="$DIR/run-$$"
mkdir -p "$RUN"
PIDS=()
cleanup() {
    # Children first: GNU time does not pass a signal on to the program it runs.
    for p in "${PIDS[@]}"; do pkill -TERM -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    # Recordings and outputs are deleted as each run ends; the logs and JSON stay.
    find "$RUN" -name corr.vdif -delete 2>/dev/null || true
    echo "# logs and JSON in $RUN"
}
trap cleanup EXIT

echo "# $(uname -n), $(machine_line)"
echo "# $VLBIFLOW ($("$VLBIFLOW" --version))"


disks() { # PREFIX -> four --disk options (directories created)
    local out=()
    for i in 0 1 2 3; do mkdir -p "$1/$i"; out+=(--disk "$1/$i"); done
    echo "${out[@]}"
}

# Hostile traffic from inside namespace NS while a run goes on: COUNT datagrams of random bytes and random
# sizes (1-9000) at HOST:PORT, paced to about 2000 per second so that they do not crowd the stream out of
# the socket buffer, then a UDP and TCP connect scan of every port 1-65535 of HOST. Prints the number of
# datagrams that reached PORT (garbage + the scan's one), the figure the receiving side must count as
# rejected, and nothing else.
hostile() { # NS HOST PORT COUNT
    ip netns exec "$1" python3 - "$2" "$3" "$4" <<'EOF'
import os, random, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rng = random.Random(int.from_bytes(os.urandom(8), "little"))
sent = 0
t0 = time.monotonic()
for i in range(count):
    try:
        u.sendto(os.urandom(rng.randint(1, 9000)), (host, port)); sent += 1
    except OSError:
        pass
    if i % 100 == 99:
        time.sleep(max(0.0, t0 + (i + 1) / 2000 - time.monotonic()))
for p in range(1, 65536):
    try:
        u.sendto(b"scan", (host, p))
        if p == port: sent += 1
    except OSError:
        pass
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.settimeout(0.2)
    try:
        t.connect((host, p))
    except OSError:
        pass
    t.close()
print(sent)
EOF
}

forward_bench() {
    local secs=${SECS:-10}
    echo "## record alone vs record + forward (udps to vlbiflow receive on loopback), $secs s per run, 2 threads"
    printf '%s\n' "rate,mode,frames,recorded_GB,record_lost,record_kernel_drops,record_cpu_s,cpu_s_per_GB,fwd_sent,fwd_dropped,far_delivered,far_filled,far_kernel_drops" >"$RUN/forward.csv"
    for rate in 1 2 4; do
        for mode in record forward; do
            local tag="r${rate}-$mode" port=$((47100 + rate * 10)) fport=$((47101 + rate * 10))
            rm -rf "$RUN/$tag"; mkdir -p "$RUN/$tag"
            local fwd=() recvpid=
            if [ "$mode" = forward ]; then
                "$VLBIFLOW" receive --listen 127.0.0.1:$fport --output null --first-psn 0 --idle-timeout 4s --json \
                    >"$RUN/$tag/recv.json" 2>"$RUN/$tag/recv.err" &
                recvpid=$!
                PIDS+=($recvpid)
                need_line "$RUN/$tag/recv.err" "receive: ready"
                fwd=(--forward "corr=udps@127.0.0.1:$fport")
            fi
            # shellcheck disable=SC2046
            /usr/bin/time -o "$RUN/$tag/time" -f '%U %S %e' \
                "$VLBIFLOW" record --stream "a=vdif@127.0.0.1:$port,psn" $(disks "$RUN/$tag/d") --scan "b_$tag" \
                --duration $((secs + 4)) --json "${fwd[@]}" >"$RUN/$tag/rec.json" 2>"$RUN/$tag/rec.err" &
            local rec=$!
            PIDS+=($rec)
            need_line "$RUN/$tag/rec.err" "stream a: Vdif"
            "$VLBIFLOW" gen --dest 127.0.0.1:$port --psn --threads 2 --rate "${rate}Gbps" --duration "$secs" --quiet \
                >/dev/null 2>"$RUN/$tag/gen.err"
            wait "$rec" || true
            if [ -n "$recvpid" ]; then wait "$recvpid" || true; fi
            python3 - "$RUN/$tag" "$rate" "$mode" >>"$RUN/forward.csv" <<'EOF'
import json, os, sys
d, rate, mode = sys.argv[1:4]
rec = json.load(open(os.path.join(d, "rec.json")))
u, s, e = map(float, open(os.path.join(d, "time")).read().split()[-3:])
c = rec["streams"][0]["counters"]
gb = c["bytes"] / 1e9
f = (rec.get("forward") or [{}])[0]
far = {}
p = os.path.join(d, "recv.json")
if os.path.exists(p):
    far = json.load(open(p))
r = far.get("reorder", {})
print(",".join(str(x) for x in [rate, mode, c["packets"], f"{gb:.3f}", c["lost"], c["kernel_drops"], f"{u+s:.2f}",
      f"{(u+s)/gb:.3f}" if gb else "-", f.get("sent", "-"),
      sum(f.get(k, 0) for k in ("dropped_queue_full", "dropped_send_error", "dropped_disconnected", "dropped_at_stop")) if f else "-",
      r.get("delivered", "-"), r.get("filled", "-"), far.get("kernel_drops", "-")]))
EOF
            rm -rf "$RUN/$tag/d"
            tail -1 "$RUN/forward.csv"
        done
    done
    column -s, -t "$RUN/forward.csv"
}

# Compares the fill log with the emulator's drop log (a-b datagrams to PORT). Every frame the correlator filled
# must be one the emulator logged as dropped, or one lost where no log names it: lost by the recorder or
# dropped by the station's forward queue (REC.json), by the kernel before the emulator (EMU.json kernel_dropped_in) or at the
# receiving socket (RECV.json kernel_drops). Prints the verdict of the acceptance criterion (fill = drop log).
compare_fill() { # FILLS DROPLOG PORT REC.json EMU.json RECV.json [slow]
    python3 - "$@" <<'EOF'
import csv, json, sys
fills = {int(l) for l in open(sys.argv[1]) if l.strip()}
drops = set()
with open(sys.argv[2]) as f:
    for row in csv.DictReader(f):
        # Gap notices (the forwarder's declarations, "vfgaps" magic) are not frames.
        if row["dir"] == "a-b" and row["dport"] == sys.argv[3] and not row["payload_hex"].startswith("766667617073"):
            drops.add(int.from_bytes(bytes.fromhex(row["payload_hex"][:16]), "little"))
rec = json.load(open(sys.argv[4]))
fw = rec["forward"][0]
# Frames the recorder never got (its socket, no buffer) are holes at their own place, filled too.
station_lost = rec["streams"][0]["counters"]["lost"]
# Keys at or beyond what the station offered were never sent (gen fell behind and stopped short of the
# length the receiver was told): filled by the receiver's --count, not losses.
tail = {k for k in fills if k >= fw["offered"]}
fills -= tail
if tail:
    print(f"{len(tail)} frames past the station's last were never sent (gen could not keep up); left out below")
station = sum(fw[k] for k in ("dropped_queue_full", "dropped_send_error", "dropped_disconnected", "dropped_at_stop"))
kin = json.load(open(sys.argv[5]))["report"]["a_to_b"].get("kernel_dropped_in", 0)
kr = json.load(open(sys.argv[6]))["kernel_drops"]
unlogged = station_lost + station + kin + kr
ok = drops <= fills and len(fills) == len(drops) + unlogged
print(f"fill frames {len(fills)} = drop-log frames {len(drops)} (every one filled: {drops <= fills}) + unlogged losses "
      f"{unlogged} (recorder {station_lost}, station forward queue {station}, kernel before the emulator {kin}, "
      f"receiving socket {kr}): {ok}")
if len(sys.argv) > 7 and sys.argv[7] == "slow":
    exact = ok and kin == 0 and kr == 0 and station > 0
    print(f"ACCEPTANCE (forward drops counted at the station, every other fill in the drop log): {'PASS' if exact else 'FAIL'}")
else:
    exact = fills == drops
    print(f"ACCEPTANCE (the filled frames are exactly the emulator's drop log): {'PASS' if exact else 'FAIL'}"
          + ("" if exact or unlogged == 0 else " (losses outside the emulator: the machine could not keep up)"))
sys.exit(0 if ok else 1)
EOF
}

accept_run() { # NAME PATHEMU-ARGS FORWARD-OPTIONS RATE
    local name=$1 emuargs=$2 fopts=$3 rate=$4 secs=${SECS:-60}
    local pid=$$ ns_a="vf-rtb-$$-${name}a" ns_b="vf-rtb-$$-${name}b" port=46400
    local net="10.$((64 + pid % 64)).$(((pid / 64) % 250))"
    local out="$RUN/$name"
    mkdir -p "$out"
    echo "## $name: pathemu $emuargs; gen $rate 2 threads ${GEN_OPTS---gso 7} for $secs s; record on 4 directories --forward udps$fopts"
    # shellcheck disable=SC2086
    emu_start "$out/emu.json" "$out/emu.err" --ns-a "$ns_a" --ns-b "$ns_b" --addr-a "$net.1" --addr-b "$net.2" \
        --impair a-b $emuargs --drop-log "$out/drops.csv" --json
    local emu=$EMU
    PIDS+=($emu)
    # gen sends whole frames per second per thread: the stream's length is known, so the receiver fills a
    # lost tail too (--count).
    local frames
    frames=$(python3 -c "import sys; r=float(sys.argv[1].rstrip('Gbps'))*1e9; print(int(r/8/8224/2)*2*int(sys.argv[2]))" "$rate" "$secs")
    ip netns exec "$ns_b" "$VLBIFLOW" receive --listen "$net.2:$port" --first-psn 0 --count "$frames" --output "$out/corr.vdif" \
        --fill-log "$out/fills.txt" --deadline 200ms --idle-timeout 5s --json >"$out/recv.json" 2>"$out/recv.err" &
    local recv=$!
    PIDS+=($recv)
    need_line "$out/recv.err" "receive: ready"
    # shellcheck disable=SC2046
    ip netns exec "$ns_a" /usr/bin/time -o "$out/time" -f '%U %S %e' \
        "$VLBIFLOW" record --stream a=vdif@127.0.0.1:4001,psn $(disks "$out/st") --scan "accept_$name" \
        --forward "corr=udps@$net.2:$port$fopts" --json >"$out/rec.json" 2>"$out/rec.err" &
    local rec=$!
    PIDS+=($rec)
    need_line "$out/rec.err" "stream a: Vdif"
    # Garbage and a full port scan at both ends while the stream runs (HOSTILE=0 leaves them out).
    local garbage=${HOSTILE_COUNT:-20000} hostile_pids=()
    if [ "${HOSTILE:-1}" = 1 ]; then
        (sleep 5; hostile "$ns_a" 127.0.0.1 4001 "$garbage" >"$out/garbage_a") &
        hostile_pids+=($!)
        (sleep 5; hostile "$ns_b" "$net.2" "$port" "$garbage" >"$out/garbage_b") &
        hostile_pids+=($!)
        PIDS+=("${hostile_pids[@]}")
    fi
    # shellcheck disable=SC2086
    ip netns exec "$ns_a" "$VLBIFLOW" gen --dest 127.0.0.1:4001 --psn --threads 2 --rate "$rate" --duration "$secs" \
        ${GEN_OPTS---gso 7} --json >"$out/gen.json" 2>"$out/gen.err"
    for p in "${hostile_pids[@]}"; do wait "$p" || true; done
    wait "$recv" || true
    # The recorder has every frame the receiver could get; stop it (Ctrl-C: flush and final metadata). GNU
    # time ignores SIGINT: signal the recorder, its child.
    sleep 1
    local child
    child=$(pgrep -P "$rec" || true)
    [ -n "$child" ] && kill -INT "$child"
    wait "$rec" || true
    kill -TERM "$emu"; wait "$emu" || true
    python3 - "$out" <<'EOF'
import json, os, sys
d = sys.argv[1]
g = json.load(open(os.path.join(d, "gen.json")))
rec = json.load(open(os.path.join(d, "rec.json")))
far = json.load(open(os.path.join(d, "recv.json")))
emu = json.load(open(os.path.join(d, "emu.json")))
u, s, e = map(float, open(os.path.join(d, "time")).read().split()[-3:])
c = rec["streams"][0]["counters"]; f = rec["forward"][0]; r = far["reorder"]; ab = emu["report"]["a_to_b"]
print(f"gen: {g['frames']} frames sent, {g['achieved_bps']/1e9:.3f} Gb/s, worst 1 s window {g['worst_window_error']*100:+.3f}%")
print(f"station: recorded {c['packets']} frames ({c['bytes']/1e9:.2f} GB), lost {c['lost']}, kernel drops {c['kernel_drops']}; "
      f"recorder CPU {u+s:.1f} s = {(u+s)/(c['bytes']/1e9):.3f} s/GB")
dropped = f['dropped_queue_full'] + f['dropped_send_error'] + f['dropped_disconnected'] + f['dropped_at_stop']
print(f"forward: offered {f['offered']}, sent {f['sent']}, dropped {dropped} (queue full {f['dropped_queue_full']}, at stop {f['dropped_at_stop']})")
print(f"path: in {ab['in_packets']}, dropped random {ab.get('dropped_random')}, queue {ab.get('dropped_queue')}, "
      f"kernel in/out {ab.get('kernel_dropped_in')}/{ab.get('kernel_dropped_out')}")
print(f"correlator: out {far['output_frames']} = delivered {r['delivered']} + filled {r['filled']}; late {r['late']}, "
      f"kernel drops {far['kernel_drops']}, output stalls {far['output_stalls']}; latency p50 {far['latency']['p50_ns']/1e6 if far['latency']['p50_ns'] else 0:.1f} ms "
      f"p99 {far['latency']['p99_ns']/1e6 if far['latency']['p99_ns'] else 0:.1f} ms (clock offset {far['latency']['clock_offset_ns']} ns stated)")
for side, path, got in (("station", "garbage_a", c["rejected"]),
                        ("correlator", "garbage_b", far["rejected"] + r["malformed"] + r["stray"] + r.get("unknown_thread", 0))):
    p = os.path.join(d, path)
    if os.path.exists(p) and open(p).read().strip():
        n = int(open(p).read())
        print(f"hostile at the {side}: {n} garbage datagrams and a full UDP/TCP port scan; counted as rejected {got}: "
              f"{'only counted' if got == n else 'MISMATCH'}")
print(f"delivered + filled = sent by gen: {r['delivered'] + r['filled'] == g['frames']} "
      f"({r['delivered'] + r['filled']} vs {g['frames']}; a tail lost after the last frame received is not filled without --count)")
EOF
    # shellcheck disable=SC2046
    "$VLBIFLOW" check "accept_$name" $(disks "$out/st") | head -3 || true
    compare_fill "$out/fills.txt" "$out/drops.csv" "$port" "$out/rec.json" "$out/emu.json" "$out/recv.json" "$name" || true
    rm -rf "$out/st" "$out/corr.vdif"
}

accept_bench() {
    [ "$(id -u)" = 0 ] || { echo "accept needs root (namespaces)" >&2; exit 1; }
    local rate=${RATE:-2Gbps}
    local runs=" ${ACCEPT_RUNS:-lossy slow} "
    [[ $runs == *" lossy "* ]] && accept_run lossy "--rtt 30ms --loss 0.1% --rate 2.5Gbps --queue 16MB $EMU_EXTRA" ",rate=2.4Gbps${FWD_EXTRA:-}" "$rate"
    [[ $runs == *" slow "* ]] && accept_run slow "--rtt 30ms --loss 0.1% --rate 1Gbps --queue 16MB $EMU_EXTRA" ",rate=990Mbps" "$rate"
    return 0
}

position_bench() {
    [ "$(id -u)" = 0 ] || { echo "position needs root (namespaces)" >&2; exit 1; }
    local secs=${SECS:-10} pid=$$ port=46500 load=${LOAD:-2} rate=${RATE:-1Gbps}
    local ns_g="vf-rtp-$$-g" ns_s="vf-rtp-$$-s" ns_c="vf-rtp-$$-c"
    local net_in="10.$((128 + pid % 60)).$(((pid / 60) % 250))" net_out="10.$((192 + pid % 60)).$(((pid / 60) % 250))"
    local out="$RUN/position"
    mkdir -p "$out"
    echo "## position: gen $rate 2 threads for $secs s -> pathemu (${IN_LOSS:-0.1%} loss) -> record + forward (load: $load busy loops, --recv-buffer ${RECV_BUFFER:-4MB}) -> pathemu (30 ms RTT, ${PATH_LOSS:-0.5%} loss) -> receive"
    emu_start "$out/emu_in.json" "$out/emu_in.err" --ns-a "$ns_g" --ns-b "$ns_s" --addr-a "$net_in.1" \
        --addr-b "$net_in.2" --impair a-b --loss "${IN_LOSS:-0.1%}" --seed 3 --drop-log "$out/drops_in.csv" --json
    local emu_in=$EMU
    PIDS+=($emu_in)
    # shellcheck disable=SC2086
    emu_start "$out/emu_out.json" "$out/emu_out.err" --ns-a "$ns_s" --ns-b "$ns_c" --addr-a "$net_out.1" \
        --addr-b "$net_out.2" --impair a-b --rtt 30ms --loss "${PATH_LOSS:-0.5%}" --seed 5 $EMU_EXTRA \
        --drop-log "$out/drops_out.csv" --json
    local emu_out=$EMU
    PIDS+=($emu_out)
    local frames
    frames=$(python3 -c "import sys; r=float(sys.argv[1].rstrip('Gbps'))*1e9; print(int(r/8/8224/2)*2*int(sys.argv[2]))" "$rate" "$secs")
    ip netns exec "$ns_c" "$VLBIFLOW" receive --listen "$net_out.2:$port" --first-psn 0 --count "$frames" \
        --output "$out/corr.vdif" --fill-log "$out/fills.txt" --deadline 200ms --idle-timeout 5s --json >"$out/recv.json" 2>"$out/recv.err" &
    local recv=$!
    PIDS+=($recv)
    need_line "$out/recv.err" "receive: ready"
    # shellcheck disable=SC2046
    ip netns exec "$ns_s" "$VLBIFLOW" record --stream a=vdif@0.0.0.0:4001,psn $(disks "$out/st") --scan position \
        --recv-buffer "${RECV_BUFFER:-4MB}" --forward "corr=udps@$net_out.2:$port,psn=input" --json >"$out/rec.json" 2>"$out/rec.err" &
    local rec=$!
    PIDS+=($rec)
    need_line "$out/rec.err" "stream a: Vdif"
    local loaders=()
    for _ in $(seq "$load"); do (while :; do :; done) & loaders+=($!); done
    PIDS+=("${loaders[@]}")
    ip netns exec "$ns_g" "$VLBIFLOW" gen --dest "$net_in.2:4001" --psn --threads 2 --rate "$rate" --duration "$secs" \
        --json >"$out/gen.json" 2>"$out/gen.err"
    for p in "${loaders[@]}"; do kill "$p" 2>/dev/null || true; done
    wait "$recv" || true
    # The kernel's own count of datagrams dropped at the recorder's socket (the drops column of
    # /proc/net/udp for port 4001): SO_RXQ_OVFL reaches the recorder only with a later datagram, so drops
    # after the last one it received are in this count and not in its own.
    ip netns exec "$ns_s" awk 'NR > 1 && $2 ~ /:0FA1$/ {d += $NF} END {print d + 0}' /proc/net/udp >"$out/socket_drops"
    kill -INT "$rec"; wait "$rec" || true
    kill -TERM "$emu_in" "$emu_out"; wait "$emu_in" "$emu_out" || true
    python3 - "$out" "$port" <<'EOF'
import csv, json, os, sys
d, port = sys.argv[1], sys.argv[2]
g = json.load(open(os.path.join(d, "gen.json")))
rec = json.load(open(os.path.join(d, "rec.json")))
far = json.load(open(os.path.join(d, "recv.json")))
def rows(name, dport):
    with open(os.path.join(d, name)) as f:
        return sum(1 for r in csv.DictReader(f) if r["dir"] == "a-b" and r["dport"] == dport
                   and not r["payload_hex"].startswith("766667617073"))
emu_in = json.load(open(os.path.join(d, "emu_in.json")))["report"]["a_to_b"]
emu_out = json.load(open(os.path.join(d, "emu_out.json")))["report"]["a_to_b"]
c = rec["streams"][0]["counters"]; f = rec["forward"][0]; r = far["reorder"]
n = far["output_frames"]
inp = rows("drops_in.csv", "4001") + emu_in.get("kernel_dropped_in", 0) + emu_in.get("kernel_dropped_out", 0)
kern, nobuf = int(open(os.path.join(d, "socket_drops")).read()), c["dropped_no_buffer"]
if kern != c["kernel_drops"]:
    print(f"recorder socket: the kernel counted {kern} drops, the recorder saw {c['kernel_drops']} "
          f"(drops after its last datagram reach it with no later one)")
queue = f["dropped_queue_full"] + f["dropped_send_error"] + f["dropped_disconnected"] + f["dropped_at_stop"]
# The emulator's and the receiving socket's kernel drops are counts of datagrams, gap notices included: the
# notices lost outside the drop log (sent - received - logged) are taken out.
with open(os.path.join(d, "drops_out.csv")) as fh:
    notice_rows = sum(1 for r in csv.DictReader(fh) if r["dir"] == "a-b" and r["dport"] == port
                      and r["payload_hex"].startswith("766667617073"))
notices_unlogged = f["notices_sent"] - far["forwarder"]["notices"] - notice_rows
path = (rows("drops_out.csv", port) + emu_out.get("kernel_dropped_in", 0) + emu_out.get("kernel_dropped_out", 0)
        + far["kernel_drops"] - notices_unlogged)
tail = max(0, n - g["frames"])  # positions gen never sent (it stopped short of the count)
print(f"gen: {g['frames']} frames, {g['achieved_bps']/1e9:.3f} Gb/s; receive --count {n}")
print(f"drops by stage (each its own count): input {inp} (emulator log), recorder socket {kern} (/proc/net/udp), "
      f"no buffer {nobuf}, forward queue {queue}, path {path} (emulator log + receiving socket), never sent {tail}")
total = inp + kern + nobuf + queue + path + tail
print(f"recorder: {c['packets']} frames recorded, lost {c['lost']}; forwarder: offered {f['offered']}, sent {f['sent']}, "
      f"skipped lost-before-capture {f['skipped_captured_lost']}, no buffer {f['skipped_no_buffer']}, gap notices {f['notices_sent']}")
fw = far["forwarder"]
print(f"receive: out {n} = delivered {r['delivered']} + filled {r['filled']}; fill declared by the station "
      f"{far['fill_declared']}, on the path {far['fill_path']}; notices {fw['notices']} ({fw['notices_missing']} missing)")
# Every output frame against its position: time index and thread follow from it, payload as generated (zeros).
rate = round(g["requested_bps"] / (8224 * 8) / 2)
base = None; misplaced = 0; real = 0
with open(os.path.join(d, "corr.vdif"), "rb") as fh:
    i = 0
    while True:
        fr = fh.read(8224)
        if len(fr) < 8224:
            break
        w = [int.from_bytes(fr[k:k + 4], "little") for k in range(0, 16, 4)]
        fill = (w[0] >> 31) and fr[16:20] == bytes.fromhex("44332211")
        if not fill:
            real += 1
            index = (w[0] & 0x3fffffff) * rate + (w[1] & 0xffffff)
            thread = (w[3] >> 16) & 0x3ff
            if base is None:
                base = (index - i // 2, thread ^ (i % 2))
            if (index - i // 2, thread ^ (i % 2)) != base or any(fr[32:]):
                misplaced += 1
        i += 1
print(f"output frames not the generator's frame of their position: {misplaced} of {real} real frames")
ok = misplaced == 0 and r["filled"] == total and r["delivered"] + r["filled"] == n
print(f"fill {r['filled']} = {inp} + {kern} + {nobuf} + {queue} + {path} + {tail} = {total}: {r['filled'] == total}")
print(f"ACCEPTANCE (every frame in its place, fill = the drops of every stage): {'PASS' if ok else 'FAIL'}")
EOF
    rm -rf "$out/st" "$out/corr.vdif"
}

relay_bench() {
    local secs=${SECS:-10}
    echo "## relay: gen -> relay -> receive (null), loopback, $secs s per run, 1 thread; CPU of the relay process"
    printf '%s\n' "rate,relay,frames_in,cpu_s,cpu_s_per_GB,far_delivered,far_filled,far_kernel_drops" >"$RUN/relay.csv"
    for rate in 1 2 4; do
        for who in vlbiflow jive5ab; do
            [ "$who" = jive5ab ] && [ -z "${JIVE5AB:-}" ] && continue
            local tag="relay-r$rate-$who" in=$((47300 + rate * 10)) out=$((47301 + rate * 10)) ctl=$((47302 + rate * 10))
            mkdir -p "$RUN/$tag"
            "$VLBIFLOW" receive --listen 127.0.0.1:$out --output null --idle-timeout 4s --duration $((secs + 30)) --json \
                >"$RUN/$tag/recv.json" 2>"$RUN/$tag/recv.err" &
            local recv=$!
            PIDS+=($recv)
            need_line "$RUN/$tag/recv.err" "receive: ready"
            if [ "$who" = vlbiflow ]; then
                /usr/bin/time -o "$RUN/$tag/time" -f '%U %S %e' "$VLBIFLOW" relay --listen 127.0.0.1:$in \
                    --to "udps@127.0.0.1:$out" --idle-timeout 4s --json >"$RUN/$tag/relay.json" 2>"$RUN/$tag/relay.err" &
                local rel=$!
                PIDS+=($rel)
                need_line "$RUN/$tag/relay.err" "relay: ready"
            else
                /usr/bin/time -o "$RUN/$tag/time" -f '%U %S %e' "$JIVE5AB" -m 1 -p $ctl \
                    >"$RUN/$tag/relay.err" 2>&1 &
                local rel=$!
                PIDS+=($rel)
                for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$ctl) 2>/dev/null && break; sleep 0.1; done
                # One connection per command: the runtime is chosen on the same line (it is per connection).
                j5() { exec 3<>/dev/tcp/127.0.0.1/$ctl; printf 'runtime = %s ; %s\n' "$1" "$2" >&3; IFS= read -r -t 30 r <&3; exec 3>&-; echo "$1: $2 -> $r" >>"$RUN/$tag/j5.log"; }
                local mode="VDIF_8192-$((rate * 1000))-1-2"
                j5 in "mode = $mode"; j5 in "mtu = 9000"; j5 in "net_protocol = udps : 64M"; j5 in "net_port = $in"
                j5 in "net2mem = open"
                j5 out "mode = $mode"; j5 out "mtu = 9000"; j5 out "net_protocol = udps : 64M"; j5 out "net_port = $out"
                j5 out "ipd = 0"
                j5 out "mem2net = connect : 127.0.0.1"; j5 out "mem2net = on"
            fi
            "$VLBIFLOW" gen --dest 127.0.0.1:$in --psn --rate "${rate}Gbps" --duration "$secs" --quiet 2>/dev/null
            wait "$recv" || true
            if [ "$who" = vlbiflow ]; then
                wait "$rel" || true
            else
                j5 out "mem2net = disconnect"; j5 in "net2mem = close"
                # GNU time passes on nothing: signal jive5ab, its child, and let time report.
                local child
                child=$(pgrep -P "$rel" || true)
                [ -n "$child" ] && kill -TERM "$child"
                wait "$rel" || true
            fi
            python3 - "$RUN/$tag" "$rate" "$who" "$secs" >>"$RUN/relay.csv" <<'EOF'
import json, os, sys
d, rate, who, secs = sys.argv[1:5]
far = json.load(open(os.path.join(d, "recv.json")))
r = far["reorder"]
t = open(os.path.join(d, "time")).read().split()
u, s = float(t[-3]), float(t[-2])
frames = None
p = os.path.join(d, "relay.json")
if os.path.exists(p):
    frames = json.load(open(p))["datagrams"]
gb = float(rate) * float(secs) / 8  # what gen sent, GB
print(",".join(str(x) for x in [rate, who, frames if frames is not None else "-", f"{u+s:.2f}", f"{(u+s)/gb:.3f}",
      r["delivered"], r["filled"], far["kernel_drops"]]))
EOF
            tail -1 "$RUN/relay.csv"
        done
    done
    column -s, -t "$RUN/relay.csv"
}

replay_bench() {
    local secs=${SECS:-20} port=47600 out="$RUN/replay"
    mkdir -p "$out"
    echo "## replay: gen 2 Gb/s 2 threads $secs s -> record A; play A (original rate) -> record B; check, compare"
    rec() { # SCAN DIRPREFIX
        # shellcheck disable=SC2046
        "$VLBIFLOW" record --stream "a=vdif@127.0.0.1:$port,psn" $(disks "$out/$2") --scan "$1" \
            --duration $((secs + 6)) --json >"$out/$1.json" 2>"$out/$1.err" &
        RECPID=$!
        PIDS+=($RECPID)
        need_line "$out/$1.err" "stream a: Vdif"
    }
    rec replay_a a
    "$VLBIFLOW" gen --dest 127.0.0.1:$port --psn --threads 2 --rate 2Gbps --duration "$secs" --payload noise \
        --json >"$out/gen.json" 2>/dev/null
    wait "$RECPID" || true
    rec replay_b b
    # shellcheck disable=SC2046
    "$VLBIFLOW" play replay_a $(disks "$out/a") --dest 127.0.0.1:$port --json >"$out/play.json" 2>"$out/play.err"
    wait "$RECPID" || true
    # shellcheck disable=SC2046
    "$VLBIFLOW" check replay_a $(disks "$out/a") | head -3 || true
    # shellcheck disable=SC2046
    "$VLBIFLOW" check replay_b $(disks "$out/b") | head -3 || true
    # shellcheck disable=SC2046
    "$VLBIFLOW" gather replay_a $(disks "$out/a") -o "$out/a.vdif" >/dev/null 2>&1
    # shellcheck disable=SC2046
    "$VLBIFLOW" gather replay_b $(disks "$out/b") -o "$out/b.vdif" >/dev/null 2>&1
    if cmp -s "$out/a.vdif" "$out/b.vdif"; then echo "scans identical frame for frame: yes ($(stat -c %s "$out/a.vdif") bytes)"
    else echo "scans identical frame for frame: NO"; fi
    python3 - "$out" <<'EOF'
import json, os, sys
d = sys.argv[1]
g = json.load(open(os.path.join(d, "gen.json")))
p = json.load(open(os.path.join(d, "play.json")))
a = json.load(open(os.path.join(d, "replay_a.json")))["streams"][0]["counters"]
b = json.load(open(os.path.join(d, "replay_b.json")))["streams"][0]["counters"]
print(f"gen: {g['frames']} frames at {g['achieved_bps']/1e9:.4f} Gb/s, worst whole 1 s window {g['worst_window_error']*100:+.4f}%")
print(f"record A: {a['packets']} frames, lost {a['lost']}; record B: {b['packets']} frames, lost {b['lost']}")
print(f"play: {p['frames']} frames at {p['achieved_bps']/1e9:.4f} Gb/s (target {p['target_bps']/1e9:.4f}), "
      f"worst whole 1 s window {p['worst_window_error']*100:+.4f}% over {p['windows']} windows, latest batch {p['max_late_s']*1e3:.2f} ms late")
EOF
    rm -rf "$out/a" "$out/b" "$out/a.vdif" "$out/b.vdif"
}

case $WHAT in
    forward) forward_bench ;;
    accept) accept_bench ;;
    position) position_bench ;;
    relay) relay_bench ;;
    replay) replay_bench ;;
    *) echo "usage: bench/realtime.sh forward|accept|position|replay|relay [DIR] [SECONDS]" >&2; exit 2 ;;
esac
