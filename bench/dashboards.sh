#!/usr/bin/env bash
# Every panel query of the Grafana dashboards (deploy/grafana/{recorder,transfers,mesh}.json) evaluated by a
# real Prometheus that scrapes live daemons, all on loopback:
#
#   serve     recording one VDIF stream fed by `gen` (--rate RATE, continuous), forwarding every frame to
#             two destinations: "mon" (unpaced, to a UDP sink) and "slow" (paced at a tenth of the input,
#             a short queue: it drops frames as queue_full, so the drop counter has series)
#   xfer      `xfer serve` receiving a `xfer push` of a PUSH_MB file at PUSH_RATE (running while the
#             queries are evaluated: per-transfer gauges exist only while a transfer runs)
#   mesh      `net hub` with agents A (127.0.0.2) and B (127.0.0.3) running a sweep, a latency test and a
#             capacity test every 20 s
#   prometheus scrape_interval 1s, each daemon scraped with its read-only metrics token, storage in DIR
#
# Once the mesh has results for all three tests, the recorder's disk writes are throttled (cgroup v1
# blkio, or v2 io.max, on the device holding DIR) to THROTTLE bytes/s, so that the disks-behind alarm is
# raised and the pool's time-to-full exists; while it is raised, every "expr" is evaluated with
# /api/v1/query ($instance -> .*, $__rate_interval -> 10s, $__range -> 5m) and a table is printed:
# dashboard, panel title, series count (and the range of their values). Then headless Chromium
# screenshots of Prometheus's graph page for the recorder's input rate and loss queries
# (DIR/recorder-{rate,lost,dropped}.png).
#
# Needs root (the blkio throttle; 127.0.0.x addresses). Usage: BIN=target/release/vlbiflow bench/dashboards.sh
# Env: DIR (default /var/tmp/dash, on disk, emptied first), PROM_PORT (9090), RATE (400Mbps),
#      THROTTLE (5000000), PUSH_MB (600), PUSH_RATE (20Mbps), WARMUP (90: s of recording before the
#      throttle), AFTER (20: s between the evaluation and the screenshots), PROMETHEUS, CHROMIUM.
# Everything it starts is killed at exit, and the recording and pushed data (a few GB) deleted; every
# wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=${BIN:-target/release/vlbiflow}
[ -x "$BIN" ] || { echo "dashboards: BIN=$BIN is not an executable" >&2; exit 2; }
BIN=$(realpath "$BIN")
DIR=${DIR:-/var/tmp/dash}
PROM_PORT=${PROM_PORT:-9090}
RATE=${RATE:-400Mbps}
THROTTLE=${THROTTLE:-5000000}
PUSH_MB=${PUSH_MB:-600}
PUSH_RATE=${PUSH_RATE:-20Mbps}
WARMUP=${WARMUP:-90}
AFTER=${AFTER:-20}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
SERVE_CTL=127.0.0.1:24242 SERVE_HTTP=127.0.0.1:24280
XFER=127.0.0.1:46330 XFER_METRICS=127.0.0.1:9566
HUB=127.0.0.1:8190
GEN_PORT=4901 SINK_PORT=4902 SLOW_PORT=4903

pids=()
cg=""
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    [ -f "$cg/blkio.throttle.write_bps_device" ] && echo "$dev 0" >"$cg/blkio.throttle.write_bps_device" || true
    [ -f "$cg/io.max" ] && echo "$dev wbps=max" >"$cg/io.max" || true
    while read -r p; do echo "$p" >"$(dirname "$cg")/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
    rmdir "$cg" 2>/dev/null || true
  fi
  # The recording, the pushed file and its copy (GBs); the logs, table, screenshots and TSDB stay.
  rm -rf "$DIR/disks" "$DIR/src" "$DIR/xfer-root"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bg() { # LOG CMD...: CMD niced in the background, its pid kept for the cleanup
  local log=$1; shift
  nice -n 10 "$@" >"$log" 2>&1 &
  pids+=($!)
}
wait_for() { # TENTHS DESCRIPTION CMD...: until CMD succeeds, at most TENTHS tenths of a second
  local n=$1 what=$2; shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "dashboards: timed out waiting for $what" >&2
  return 1
}
metric() { # URL TOKENFILE NAME: the daemon's /metrics has a sample of NAME
  curl -sf -H "Authorization: Bearer $(cat "$2")" "$1" | grep -q "^$3"
}
prom_q() { # EXPR: the JSON answer of an instant query
  curl -sf --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query"
}
prom_has() { # EXPR: the instant query returns a series
  prom_q "$1" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}

rm -rf "$DIR"; mkdir -p "$DIR"/{disks/0,disks/1,xfer-root,src,prom,state/hub,state/a,state/b,state/xfer}
cd "$DIR"
echo "dashboards: $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); binary $BIN ($("$BIN" --version))"
umask 077
for t in serve xfer hub; do head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$t.metrics-token"; done
umask 022

# --- recorder
# The slow destination's rate: a tenth of RATE (e.g. 400Mbps -> 40Mbps).
slow_rate=$(python3 - "$RATE" <<'PY'
import re, sys
m = re.fullmatch(r"([0-9.]+)([KMG]?)bps", sys.argv[1])
print(f"{float(m.group(1)) / 10:g}{m.group(2)}bps")
PY
)
cat >serve.toml <<EOF
control = "$SERVE_CTL"
http = "$SERVE_HTTP"
metrics_token = "$(cat serve.metrics-token)"
open_group = "g"
streams = ["s1=vdif@127.0.0.1:$GEN_PORT,psn"]
experiment = "dash"
station = "Xx"
forward = ["mon=vdif@127.0.0.1:$SINK_PORT", "slow=vdif@127.0.0.1:$SLOW_PORT,rate=$slow_rate,queue=64"]
forward_on = true
[groups]
g = ["$DIR/disks/*"]
[recorder]
block_size = "10MB"
recv_buffer = "64MiB"
pool_blocks = 48
direct_io = true
EOF
# UDP sinks for the forwarded frames (what a correlator would read).
for port in $SINK_PORT $SLOW_PORT; do
  bg "sink-$port.log" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
while True: s.recv(65536)' "$port"
done
bg serve.log "$BIN" serve --config serve.toml
serve_pid=${pids[-1]}
wait_for 200 "serve's /metrics" metric "http://$SERVE_HTTP/metrics" serve.metrics-token vlbiflow_record_state

# --- xfer
bg xfer.log env XDG_STATE_HOME="$DIR/state/xfer" "$BIN" xfer serve --listen "$XFER" --root "data=$DIR/xfer-root" \
  --key "$DIR/xfer.key" --metrics "$XFER_METRICS" --metrics-token-file "$DIR/xfer.metrics-token" \
  --archive "$DIR/state/xfer/xfer.sqlite"
wait_for 200 "xfer's /metrics" metric "http://$XFER_METRICS/metrics" xfer.metrics-token vlbiflow_xfer_active_transfers

# --- mesh
cat >mesh.toml <<'EOF'
[mesh]
name = "dash"
seed = 1
guard = "1s"
grace = "1m"

[[host]]
name = "A"
address = "127.0.0.2"
port = 24233

[[host]]
name = "B"
address = "127.0.0.3"
port = 24233

[[test]]
name = "bw"
kind = "sweep"
interval = "20s"
slot = "4s"
slip = "0s"
sizes = [1472]
rates = ["200Mbps"]
count = 5000

[[test]]
name = "lat"
kind = "latency"
interval = "20s"
requests = 20

[[test]]
name = "cap"
kind = "capacity"
interval = "20s"
slot = "6s"
slip = "0s"
EOF
bg hub.log "$BIN" net hub --config mesh.toml --listen "$HUB" --archive "$DIR/state/hub/mesh.sqlite" \
  --metrics-token-file "$DIR/hub.metrics-token"
wait_for 200 "the hub's /metrics" metric "http://$HUB/metrics" hub.metrics-token vlbiflow_mesh_pending_runs
for h in A:127.0.0.2:a B:127.0.0.3:b; do
  IFS=: read -r name addr st <<<"$h"
  bg "agent-$st.log" "$BIN" net agent --name "$name" --hub "http://$HUB" --state-dir "$DIR/state/$st" \
    --listen "$addr:24233" --sync-every 2s
done

# --- prometheus
cat >prometheus.yml <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vlbiflow-serve
    authorization: {credentials_file: $DIR/serve.metrics-token}
    static_configs: [{targets: ["$SERVE_HTTP"]}]
  - job_name: vlbiflow-xfer
    authorization: {credentials_file: $DIR/xfer.metrics-token}
    static_configs: [{targets: ["$XFER_METRICS"]}]
  - job_name: vlbiflow-hub
    authorization: {credentials_file: $DIR/hub.metrics-token}
    static_configs: [{targets: ["$HUB"]}]
EOF
bg prometheus.log "$PROMETHEUS" --config.file=prometheus.yml --storage.tsdb.path="$DIR/prom" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --storage.tsdb.retention.time=1d
wait_for 300 "Prometheus's three targets up" prom_has 'count(up == 1) == 3'

# --- recording, fed and forwarded
bg gen.log "$BIN" gen --dest "127.0.0.1:$GEN_PORT" --rate "$RATE" --psn --continuous
"$BIN" ctl --host "$SERVE_CTL" 'record=on:900:scan1:dash:Xx' | tee record-on.txt
grep -q 'recording' record-on.txt
rec_t0=$(date +%s)

# --- a push that runs through the evaluation
head -c "$((PUSH_MB * 1000000))" /dev/urandom >src/push.bin
bg push.log env XDG_STATE_HOME="$DIR/state/xfer" "$BIN" xfer push --key "$DIR/xfer.key" --rate "$PUSH_RATE" \
  src/push.bin "$XFER/data/in"
wait_for 300 "a running transfer" prom_has 'vlbiflow_xfer_active_transfers > 0'

# --- mesh results for every test (first cycles take up to a minute)
wait_for 1200 "mesh results of the sweep, latency and capacity tests" prom_has \
  'count(count by (test) (vlbiflow_mesh_throughput_bytes_per_second or vlbiflow_mesh_rtt_seconds or vlbiflow_mesh_capacity_bytes_per_second)) >= 3' ||
  echo "dashboards: continuing without all mesh results" >&2

# --- at least WARMUP s of recording before the throttle (for the graphs)
while [ $(( $(date +%s) - rec_t0 )) -lt "$WARMUP" ]; do sleep 1; done

# --- disks behind: throttle the recorder's writes
src_dev=$(df --output=source "$DIR" | tail -1)
dev=$(lsblk -no PKNAME "$src_dev" 2>/dev/null | head -1)
[ -n "$dev" ] && dev=$(cat "/sys/block/$dev/dev") || dev=$(cat "/sys/class/block/$(basename "$src_dev")/dev")
if [ -d /sys/fs/cgroup/blkio ]; then
  cg=/sys/fs/cgroup/blkio/vf-dash-$$; mkdir -p "$cg"; echo "$serve_pid" >"$cg/cgroup.procs"
  echo "$dev $THROTTLE" >"$cg/blkio.throttle.write_bps_device"
else
  cg=/sys/fs/cgroup/vf-dash-$$; echo +io >/sys/fs/cgroup/cgroup.subtree_control; mkdir -p "$cg"
  echo "$serve_pid" >"$cg/cgroup.procs"; echo "$dev wbps=$THROTTLE" >"$cg/io.max"
fi
echo "dashboards: recorder's writes to $dev throttled to $THROTTLE B/s"
wait_for 300 "the disks-behind alarm" prom_has 'vlbiflow_pool_time_to_full_seconds' ||
  echo "dashboards: the disks-behind alarm was not raised" >&2
sleep 3

# --- evaluate every panel query
python3 - "$REPO/deploy/grafana" "$PROM_PORT" <<'PY' | tee table.txt
import json, sys, urllib.parse, urllib.request
gdir, port = sys.argv[1], sys.argv[2]
subst = {"$__rate_interval": "10s", "$__range": "5m", "$instance": ".*", "${instance}": ".*"}
rows, total, nonempty = [], 0, 0
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
for dash in ("recorder", "transfers", "mesh"):
    for p in panels(json.load(open(f"{gdir}/{dash}.json"))["panels"]):
        for t in p.get("targets", []):
            expr = t.get("expr")
            if not expr:
                continue
            q = expr
            for k, v in subst.items():
                q = q.replace(k, v)
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            try:
                r = json.load(urllib.request.urlopen(url, timeout=10))
                res = r["data"]["result"] if r.get("status") == "success" else None
                n = len(res) if res is not None else -1
                vals = sorted(float(x["value"][1]) for x in res or [])
            except Exception as e:
                n, vals = -1, []
            total += 1
            nonempty += n > 0
            rng = "" if not vals else f"{vals[0]:.4g}" if vals[0] == vals[-1] else f"{vals[0]:.4g} .. {vals[-1]:.4g}"
            rows.append((dash, p.get("title", "?"), t.get("refId", ""), n, expr, rng))
w = max(len(r[1]) for r in rows)
print(f"{'dashboard':<10} {'panel':<{w}} {'ref':<3} {'series':>6}  values")
for d, title, ref, n, expr, rng in rows:
    print(f"{d:<10} {title:<{w}} {ref:<3} {n if n >= 0 else 'error':>6}  {rng}")
empty = [r for r in rows if r[3] <= 0]
for d, title, ref, n, expr, rng in empty:
    print(f"EMPTY {d} / {title} / {ref}: {expr}")
print(f"{nonempty} of {total} panel queries return series")
PY

# --- screenshots of Prometheus's graph page (5 min): the recorder's input rate per stream, and its two loss
# ratios (frames missing from the sequence; frames dropped for want of a block or by the kernel)
sleep "$AFTER"
shot() { # NAME EXPR
  local url
  url=$(python3 -c 'import sys, urllib.parse; print(f"http://127.0.0.1:{sys.argv[1]}/graph?" + urllib.parse.urlencode(
      {"g0.expr": sys.argv[2], "g0.tab": "0", "g0.range_input": "5m"}))' "$PROM_PORT" "$2")
  timeout 60 nice -n 10 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --virtual-time-budget=8000 --screenshot="$DIR/$1.png" --window-size=1400,900 "$url" >"chromium-$1.log" 2>&1 ||
    echo "dashboards: chromium failed (chromium-$1.log)" >&2
  if [ -s "$DIR/$1.png" ]; then echo "screenshot: $DIR/$1.png: $2"; fi
}
shot recorder-rate 'rate(vlbiflow_stream_bytes_total[10s])'
shot recorder-lost 'rate(vlbiflow_stream_lost_packets_total[10s]) / (rate(vlbiflow_stream_packets_total[10s]) + rate(vlbiflow_stream_lost_packets_total[10s]))'
shot recorder-dropped 'rate(vlbiflow_stream_dropped_packets_total[10s]) / (rate(vlbiflow_stream_packets_total[10s]) + rate(vlbiflow_stream_dropped_packets_total[10s]))'
tail -1 table.txt
