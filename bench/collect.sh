#!/usr/bin/env bash
# The correlator's side of an experiment (docs/collect.md): STATIONS station daemons (`vlbiflow xfer
# serve`), each in its own network namespace behind its own emulated path (`vlbiflow pathemu`: round-trip
# times 10-200 ms, random loss 0-1%, rates 0.5-2 Gb/s times SCALE), each holding SCANS recorded scans
# (`vlbiflow record`) of one experiment, the first station still recording one more scan during the run;
# every path ends in one edge namespace whose link to the correlator's namespace is shaped by tbf to LINK
# (times SCALE), the correlator's link. `vlbiflow xfer collect` in the correlator's namespace pulls every
# scan of every station, sharing that link by weight.
#
# Checked, one line per check (PASS or FAIL):
#   identical   every scan at the correlator equals the station's local `vlbiflow gather` (b3sum)
#   link        utilisation of the correlator's link (bytes through the tbf per second / LINK) at least
#               90% over the seconds in which the stations with data could fill it (their paths' rates
#               add up to LINK or more)
#   fair        each station's goodput while it had data, against its share (the link divided by weight
#               among the stations with data, none above its own path's rate), within 20% of the median
#               of that ratio over the stations: its part of what the link carried. A station has data
#               while it pulls a scan, or follows one being recorded with more than a second of its share
#               still to verify (a follow that caught up waits for the recorder, not for the link)
#   page        the collect's page rendered by headless Chromium (PNG written, looked at by a person)
# FAULTS=1 adds (times below): two station daemons killed -9 and restarted mid-transfer, the collect killed and
# restarted once, one station's path down for DOWN seconds (default 60); checks that every scan still
# arrives identical, that the bytes sent beyond the scans' total are at most 5% of it, and that the
# per-station report names each fault.
#
#   sudo bench/collect.sh               # defaults below; SCALE=1 for the full rates (needs the cores)
#   STATIONS=4 SCANS=3 SCALE=0.25 bench/collect.sh
#
# Needs root (namespaces, tc), chromium for the page, b3sum (Debian package b3sum).
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
STATIONS=${STATIONS:-12}
SCANS=${SCANS:-4}             # per station: 3-5 in the acceptance; station k holds 3 + k % 3
SCALE=${SCALE:-0.25}          # rates times SCALE: this 2-core machine carries about 1 Gb/s through 12 emulators
LINK_GBPS=${LINK_GBPS:-4}
# size of a recorded scan (MB); with FAULTS=1 larger, so that every fault meets a station with work left and
# a chunk (32 MiB) in flight at a kill is a small part of a scan, as it is of real scans of GBs
SCAN_MB=${SCAN_MB:-$([ "${FAULTS:-0}" = 1 ] && echo 200 || echo 100)}
FAULTS=${FAULTS:-0}
DOWN=${DOWN:-60}
CONC=${CONC:-2}               # pulls per station at once: the next scan starts while one ends
bench_build
raise_socket_buffers
scratch_dirs vf-collect
OUT=${OUT:-$SCRATCH/out}
mkdir -p "$OUT"
TAG=vfc$$
C=$TAG-c   # the correlator
E=$TAG-e   # the edge: every station's path ends here
NSS=()
EMUS= DAEMONS= COLLECT= REC=
cleanup_ns() {
  local ns
  for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
on_exit_kill COLLECT REC DAEMONS EMUS
trap 'bench_cleanup; cleanup_ns' EXIT

gbps() { awk -v g="$1" -v s="$SCALE" 'BEGIN { printf "%.0fMbps", g * s * 1000 }'; }
LINK=$(gbps "$LINK_GBPS")
# station k: RTT, loss, path rate (before SCALE) and weight, spread over the acceptance's ranges
st_rtt() { echo $((10 + (190 * ($1 - 1)) / (STATIONS > 1 ? STATIONS - 1 : 1))); }
st_loss() { awk -v k="$1" 'BEGIN { printf "%.2f", (k % 4) * 0.33 }'; }
st_rate() { awk -v k="$1" 'BEGIN { printf "%.2f", 0.5 + ((k * 7) % 4) * 0.5 }'; }
st_weight() { echo $((1 + $1 % 2)); }
st_name() { printf 's%02d' "$1"; }
st_addr() { echo "10.201.$1.1"; }
corr_addr() { echo "10.200.0.2"; }
EXP=${EXP:-ev001}

echo "# collect: $STATIONS stations, correlator link $LINK (${LINK_GBPS} Gb/s x $SCALE), $(machine_line)"
# --- the network: correlator <-veth, tbf LINK-> edge <-pathemu k-> station k
ip netns add "$C"; NSS+=("$C")
ip netns add "$E"; NSS+=("$E")
ip -n "$C" link set lo up; ip -n "$E" link set lo up
ip link add c0 netns "$C" type veth peer name e0 netns "$E"
ip -n "$C" addr add "$(corr_addr)/24" dev c0
ip -n "$E" addr add 10.200.0.1/24 dev e0
ip -n "$C" link set c0 mtu 9000 up; ip -n "$E" link set e0 mtu 9000 up
ip -n "$C" route add 10.201.0.0/16 via 10.200.0.1
ip netns exec "$E" sysctl -qw net.ipv4.ip_forward=1
# the correlator's link, station -> correlator (the data direction): one bandwidth-delay product of queue
tc -n "$E" qdisc add dev e0 root tbf rate "$LINK" burst 256kb latency 100ms
ns_tcp_buffers "$C"
for k in $(seq "$STATIONS"); do
  s=$TAG-$(st_name "$k")
  ip netns add "$s"; NSS+=("$s")
  q=$(path_queue "$(st_rtt "$k")")
  "$BIN" pathemu --ns-a "$s" --ns-b "$E" --addr-a "$(st_addr "$k")" --addr-b "10.201.$k.2" --mtu 9000 \
    --rtt "$(st_rtt "$k")ms" --rate "$(gbps "$(st_rate "$k")")" --queue "$q" --loss "$(st_loss "$k")%" \
    --impair a-b --seed "$k" --json >"$OUT/emu-$k.json" 2>"$OUT/emu-$k.err" &
  EMUS="$EMUS $!"
  need_line "$OUT/emu-$k.err" '^pathemu: ready' 200
  ip -n "$s" route add 10.200.0.0/24 via "10.201.$k.2"
  ns_tcp_buffers "$s"
done

# --- the stations' scans: station k holds 3 + k % 3 (or SCANS) scans of SCAN_MB, recorded by `vlbiflow
# record` onto four disk directories; the reference for each is its local `vlbiflow gather`
scans_of() { echo "${SCANS:-$((3 + $1 % 3))}"; }
scan_name() { printf '%s_%s_no%04d' "$EXP" "$(st_name "$1")" "$2"; }
secs=$(awk -v m="$SCAN_MB" 'BEGIN { printf "%.2f", m * 8 / 1000 }')   # at 1 Gb/s
"$BIN" xfer key --key "$SCRATCH/xfer.key" --create >/dev/null 2>&1
total=0
for k in $(seq "$STATIONS"); do
  d=$SCRATCH/$(st_name "$k")
  mkdir -p "$d"/disk0 "$d"/disk1 "$d"/disk2 "$d"/disk3 "$OUT/ref"
  for j in $(seq "$(scans_of "$k")"); do
    sc=$(scan_name "$k" "$j")
    mkdir -p "$OUT/rec-$sc"
    record_scan "$d/disk" "$sc" $((47000 + k)) 1Gbps "$secs" "$OUT/rec-$sc"
    "$BIN" gather "$sc" --disk "$d/disk*" -o "$OUT/ref/$sc.vdif" --quiet
    total=$((total + $(stat -c %s "$OUT/ref/$sc.vdif")))
  done
done
echo "# $(ls "$OUT/ref" | wc -l) scans recorded, $((total / 1000000)) MB gathered"
(cd "$OUT/ref" && b3sum -- *.vdif | sort -k2 >"$OUT/ref.b3")

# --- the station daemons: one key for all (a correlator would hold one per station)
declare -A DPID
start_daemon() {
  local k=$1
  ip netns exec "$TAG-$(st_name "$k")" "$BIN" xfer serve --listen "$(st_addr "$k"):46230" \
    --root data="$SCRATCH/$(st_name "$k")" --key "$SCRATCH/xfer.key" --archive "$OUT/daemon-$k.sqlite" \
    2>>"$OUT/daemon-$k.err" &
  DPID[$k]=$!
  DAEMONS="$DAEMONS $!"
}
for k in $(seq "$STATIONS"); do
  start_daemon "$k"
  need_line "$OUT/daemon-$k.err" 'serving on' 100
done
echo "# $STATIONS station daemons serving"

# --- one more scan of station 1, still being recorded when the collect starts (about 200 Mb/s)
LIVE=$(scan_name 1 $(($(scans_of 1) + 1)))
LIVE_SECS=${LIVE_SECS:-40}
mkdir -p "$OUT/rec-$LIVE"
record_scan "$SCRATCH/$(st_name 1)/disk" "$LIVE" 47999 200Mbps "$LIVE_SECS" "$OUT/rec-$LIVE" &
REC=$!
for _ in $(seq 100); do [ -e "$SCRATCH/$(st_name 1)/disk0/$LIVE.vlbiflow.json" ] && break; sleep 0.1; done

# --- the experiment file and the collect, in the correlator's namespace
DEST=$SCRATCH/corr
mkdir -p "$DEST"
{
  printf 'experiment = "%s"\ndest = "%s"\ntotal_rate = "%s"\nkey = "%s"\nfollow = true\n' \
    "$EXP" "$DEST" "$LINK" "$SCRATCH/xfer.key"
  for k in $(seq "$STATIONS"); do
    printf '\n[[station]]\nname = "%s"\ndaemon = "%s:46230/data/disk*"\nweight = %s\nrate_limit = "%s"\nconcurrency = %s\n' \
      "$(st_name "$k")" "$(st_addr "$k")" "$(st_weight "$k")" "$(gbps "$(st_rate "$k")")" "$CONC"
  done
} >"$OUT/exp.toml"
METRICS=127.0.0.1:9481
STATUS=$DEST/$EXP/collect-status.json
rx_bytes() { ip netns exec "$C" cat /sys/class/net/c0/statistics/rx_bytes; }
start_collect() {
  ip netns exec "$C" "$BIN" xfer collect --config "$OUT/exp.toml" --metrics "$METRICS" \
    >>"$OUT/collect.out" 2>>"$OUT/collect.err" &
  COLLECT=$!
}
# one line per second: time, bytes received on the correlator's link, the status file as it is then
sample() {
  local t
  t=$(date +%s.%N)
  python3 -c 'import json, sys
try: st = json.load(open(sys.argv[3]))
except (OSError, ValueError): st = None
print(json.dumps({"t": float(sys.argv[1]), "rx": int(sys.argv[2]), "status": st}))' "$t" "$(rx_bytes)" "$STATUS" >>"$OUT/samples.jsonl"
}
# FAULTS=1: at 25 s the collect is killed -9 and started again; at 35 s station daemons 3 and 7 are
# killed -9, and started again 5 s later; at 30 s station 5's path goes down (its device at the edge),
# for DOWN seconds
fault() { echo "# fault at $(($(date +%s) - T0)) s: $*" | tee -a "$OUT/faults.log"; }
dev_of() { ip -n "$E" -o addr show | awk -v a="10.201.$1.2" '$4 == a || $4 == a "/32" {print $2; exit}'; }
F1= F2= F2R= F3= F3R=
inject() {
  local t=$(($(date +%s) - T0))
  if [ -z "$F1" ] && [ $t -ge 25 ]; then
    F1=1; kill -9 "$COLLECT"; wait "$COLLECT" 2>/dev/null || true
    fault "collect killed -9, started again"; start_collect
  fi
  if [ -z "$F2" ] && [ $t -ge 35 ]; then
    F2=$t; kill -9 "${DPID[3]}" "${DPID[7]}"; fault "station daemons s03 and s07 killed -9"
  fi
  if [ -n "$F2" ] && [ -z "$F2R" ] && [ $t -ge $((F2 + 5)) ]; then
    F2R=1; start_daemon 3; start_daemon 7; fault "station daemons s03 and s07 started again"
  fi
  if [ -z "$F3" ] && [ $t -ge 30 ]; then
    F3=$t; DEV5=$(dev_of 5)
    if [ -n "$DEV5" ]; then ip -n "$E" link set "$DEV5" down; fault "path of s05 down"; else F3R=1; fault "no device for s05's path: not taken down"; fi
  fi
  if [ -n "$F3" ] && [ -z "$F3R" ] && [ $t -ge $((F3 + DOWN)) ]; then
    F3R=1; ip -n "$E" link set "$DEV5" up; fault "path of s05 up again"
  fi
}
T0=$(date +%s)
start_collect
while kill -0 "$COLLECT" 2>/dev/null; do
  sample
  if [ "$FAULTS" = 1 ]; then inject; fi
  if [ -z "${SHOT:-}" ] && [ $(($(date +%s) - T0)) -ge "${SHOT_AT:-20}" ]; then
    # the page while the collect runs, as an operator sees it; in the background at the lowest priority, so
    # that neither the sampling nor the transfers wait for the browser
    SHOT=started
    (nice -n 19 ip netns exec "$C" chromium --headless --no-sandbox --disable-gpu --window-size=1400,900 \
      --screenshot="$OUT/collect-page.png" "http://$METRICS/" >/dev/null 2>&1 && touch "$OUT/shot.ok") &
    SHOTPID=$!
  fi
  sleep 1
done
wait "$COLLECT" && CRC=0 || CRC=$?
[ -n "${SHOTPID:-}" ] && { wait "$SHOTPID" 2>/dev/null || true; }
[ -e "$OUT/shot.ok" ] && SHOT=1 || SHOT=0
COLLECT=
sample
wait "$REC" 2>/dev/null || true
REC=
echo "# collect exited $CRC after $(($(date +%s) - T0)) s"
tc -n "$E" -s -j qdisc show dev e0 >"$OUT/tbf.json"
for p in $EMUS; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
EMUS=
"$BIN" gather "$LIVE" --disk "$SCRATCH/$(st_name 1)/disk*" -o "$OUT/ref/$LIVE.vdif" --quiet
(cd "$OUT/ref" && b3sum -- *.vdif | sort -k2 >"$OUT/ref.b3")
: >"$OUT/got.b3"
for k in $(seq "$STATIONS"); do
  (cd "$DEST/$EXP/$(st_name "$k")" && b3sum -- *.vdif) >>"$OUT/got.b3" 2>/dev/null || true
done
sort -k2 -o "$OUT/got.b3" "$OUT/got.b3"

python3 - "$OUT" "$LINK" "$STATIONS" "${SHOT:-0}" "$FAULTS" "$EXP" <<'PY'
import json, os, re, sys
out, link, n, shot, faults, exp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1", sys.argv[6]
link_bps = float(re.match(r"([0-9.]+)Mbps", link).group(1)) * 1e6
ref = dict(l.split()[::-1] for l in open(f"{out}/ref.b3"))
got = dict(l.split()[::-1] for l in open(f"{out}/got.b3"))
missing = sorted(set(ref) - set(got)); differ = sorted(s for s in ref if s in got and got[s] != ref[s])
ok = not missing and not differ
print(f"identical  {'PASS' if ok else 'FAIL'}  {len(ref) - len(missing) - len(differ)} of {len(ref)} scans byte-identical"
      + (f"; missing {missing}" if missing else "") + (f"; differ {differ}" if differ else ""))
rows = [json.loads(l) for l in open(f"{out}/samples.jsonl")]
rows = [r for r in rows if r["status"]]
cfg = {}
for st in rows[0]["status"]["stations"] if rows else []:
    cfg[st["name"]] = None
import tomllib
expfile = tomllib.load(open(f"{out}/exp.toml", "rb"))
spec = {s["name"]: (float(s["weight"]), float(s["rate_limit"].rstrip("Mbps")) * 1e6) for s in expfile["station"]}
def waterfill(active):
    # the link divided by weight among the active stations, none above its own path's rate
    share, left, todo = {}, link_bps, set(active)
    while todo:
        w = sum(spec[s][0] for s in todo)
        capped = [s for s in todo if spec[s][1] <= left * spec[s][0] / w]
        if not capped:
            for s in todo: share[s] = left * spec[s][0] / w
            break
        for s in capped: share[s] = spec[s][1]; left -= spec[s][1]; todo.remove(s)
    return share
def has_data(st):
    # a station has data to move in a sample when it pulls a whole scan, or follows a scan being recorded
    # with more than a second of its share not yet verified: a follow that has caught up with the recorder
    # moves what the recorder writes, not what the link would give it
    if st["state"] != "active":
        return False
    for c in st["scans"]:
        if c["state"] in ("pulling", "retrying"):
            return True
        if c["state"] == "following" and (c["bytes"] - c["bytes_verified"]) * 8 > st["share_bps"]:
            return True
    return False
def verified(r):
    return {s["name"]: sum(c["bytes_verified"] for c in s["scans"]) for s in r["status"]["stations"]}
util_num = util_den = 0.0
got_b = {s: 0.0 for s in spec}; want_b = {s: 0.0 for s in spec}
for a, b in zip(rows, rows[1:]):
    dt = b["t"] - a["t"]
    if dt <= 0: continue
    active = [s["name"] for s in a["status"]["stations"] if has_data(s)]
    # enough work: the stations with data could fill the link at their paths' rates
    if sum(spec[s][1] for s in active) >= link_bps:
        util_num += (b["rx"] - a["rx"]) * 8; util_den += link_bps * dt
    share = waterfill(active)
    va, vb = verified(a), verified(b)
    for s in active:
        got_b[s] += vb[s] - va[s]; want_b[s] += share[s] * dt / 8
util = util_num / util_den if util_den else 0
verdict = lambda ok: "info" if faults else ("PASS" if ok else "FAIL")  # a fault run checks arrival, not sharing
print(f"link       {verdict(util >= 0.9)}  {100 * util:.1f}% of {link} while the stations with data could fill it ({util_den / link_bps:.0f} s)")
ratios = {s: got_b[s] / want_b[s] for s in sorted(spec) if want_b[s] > 0}
# a station's share of what the link carried: its ratio to its scheduled share, over the median ratio (the
# whole link's goodput against its rate on the wire: headers, retransmissions, pulls starting)
mid = sorted(ratios.values())[len(ratios) // 2] if ratios else 1
worst = max((abs(r / mid - 1) for r in ratios.values()), default=1)
print(f"fair       {verdict(worst <= 0.2)}  each station's goodput / its share while active, over the median ({mid:.2f}): "
      + ", ".join(f"{s} {r / mid:.2f}" for s, r in ratios.items()))
print(f"page       {'PASS' if shot == '1' else 'FAIL'}  {out}/collect-page.png")
# bytes through the correlator's link beyond the scans, their datagram headers (64 + 28 bytes per 8192)
# and the re-sending of what the paths and the link dropped: what faults and resumes cost
total = sum(os.path.getsize(f"{out}/ref/{f}") for f in os.listdir(f"{out}/ref"))
lost = 0
for k in range(1, n + 1):
    try:
        lost += json.load(open(f"{out}/emu-{k}.json"))["report"]["a_to_b"]["dropped_bytes"]
    except (OSError, ValueError, KeyError):
        pass
tbf = json.load(open(f"{out}/tbf.json"))[0].get("drops", 0) * (8192 + 64 + 28)
carried = rows[-1]["rx"] - rows[0]["rx"]
beyond = carried - total * (1 + 92 / 8192) - lost - tbf
print(f"resent     {'PASS' if beyond <= 0.05 * total else 'FAIL'}  {100 * beyond / total:.2f}% of {total / 1e9:.2f} GB carried beyond the scans, headers and re-sent drops ({lost / 1e6:.1f} MB dropped on the paths, {tbf / 1e6:.1f} MB at the link)")
if faults:
    report = open(f"{out}/collect.err").read()
    named = {s: bool(re.search(rf"collect {exp}: {s}: \d+ errors?", report)) for s in ("s03", "s07", "s05")}
    resumed = "verified before, not pulled again" in report
    ok = all(named.values()) and resumed
    print(f"faults     {'PASS' if ok else 'FAIL'}  report names {', '.join(s for s, v in named.items() if v) or 'none'} of s03, s07, s05; restarted collect resumed: {resumed}")
PY
cp "$OUT/collect-page.png" "${PAGE_OUT:-/tmp/collect-page.png}" 2>/dev/null || true
