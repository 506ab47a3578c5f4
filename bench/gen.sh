#!/usr/bin/env bash
# Benchmark of `vlbiflow gen` against a null receiver (`vlbiflow sink`: recvmmsg, count, discard) over
# loopback, 8224-byte frames, with iperf3 `-u -l 8192` at the same rates in the same run.
#
#   bench/gen.sh [SECONDS] [OUT.md]      (defaults: 10 s per point, docs/bench/gen.md)
#
# What it measures:
#   1. the highest rate gen sustains with one datagram per frame (asked for far more than it can do), and
#      the same with UDP GSO (--gso 7: seven frames per super-datagram, still one frame per datagram on
#      the wire; on loopback the receiver may get them coalesced);
#   2. pacing at 1, 4 and 10 Gb/s: gen's own worst 1 s window, and the receiver's per-second counts;
#   3. iperf3 at the same rates: what it sent and what arrived.
# Sender and receiver are pinned to different cores. The machine is shared and noisy: compare within a run.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-10}
OUT=${2:-docs/bench/gen.md}
PORT=4701
command -v iperf3 >/dev/null || { echo "bench: installing iperf3"; apt-get install -y iperf3 >/dev/null; }
bench_build
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
raise_socket_buffers

# Starts a sink on core 1, runs gen on core 0 with the given arguments, prints one JSON object merging both.
gen_point() {
  local label=$1; shift
  taskset -c 1 "$BIN" sink --listen 127.0.0.1:$PORT --psn --idle-timeout 2 --recv-buffer 128MiB --json "${SINK_EXTRA[@]}" \
    >"$TMP/sink.jsonl" 2>"$TMP/sink.err" &
  local sink=$!
  sleep 0.5
  taskset -c 0 "$BIN" gen --dest 127.0.0.1:$PORT --psn --duration "$SECS" --json --quiet "$@" >"$TMP/gen.json" 2>"$TMP/gen.err" || true
  wait $sink || true
  python3 - "$label" "$TMP/gen.json" "$TMP/sink.jsonl" <<'EOF'
import json, sys
label, genf, sinkf = sys.argv[1:4]
g = json.load(open(genf))
lines = [json.loads(l) for l in open(sinkf) if l.strip()]
# gen starts on a whole UTC second and the sink counts per UTC second, so the seconds with traffic are gen's
# windows; idle seconds before and after do not count.
secs = [l for l in lines if not l.get("summary") and l.get("complete") and l["datagrams"] > 0]
summ = [l for l in lines if l.get("summary")][-1]
req_frames = g["requested_bps"] / 8 / 8224
worst_rx = max((abs(s["datagrams"] - req_frames) / req_frames for s in secs), default=float("nan"))
print(json.dumps({
  "label": label, "requested_gbps": g["requested_bps"] / 1e9, "sent_gbps": g["achieved_bps"] / 1e9,
  "received_gbps": summ["bytes"] * 8 / 8232 * 8224 / max(summ["active_s"], 1e-9) / 1e9,
  "frames": g["frames"], "received": summ["datagrams"], "lost": summ.get("lost", 0),
  "kernel_drops": summ["kernel_drops"],
  "gen_worst_window_pct": g["worst_window_error"] * 100, "rx_worst_second_pct": worst_rx * 100,
  "rx_seconds": len(secs), "cannot_keep_up": g["cannot_keep_up"]}))
EOF
}

iperf_point() {
  local rate=$1
  taskset -c 1 iperf3 -s -1 -p $((PORT + 1)) >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  taskset -c 0 iperf3 -c 127.0.0.1 -p $((PORT + 1)) -u -l 8192 -b "$rate" -w 64M -t "$SECS" -J >"$TMP/iperf.json" 2>/dev/null || true
  wait $srv || true
  python3 - "$rate" "$TMP/iperf.json" <<'EOF'
import json, sys
rate, f = sys.argv[1:3]
j = json.load(open(f))
s = j["end"]["sum"]
sent = j["end"].get("sum_sent", s)
print(json.dumps({"label": f"iperf3 -b {rate}", "sent_gbps": sent["bits_per_second"] / 1e9,
  "received_gbps": j["end"].get("sum_received", s)["bits_per_second"] / 1e9,
  "lost_pct": s.get("lost_percent", float("nan")), "packets": s.get("packets", 0)}))
EOF
}

SINK_EXTRA=()
{
  gen_point "gen max, 1 datagram per frame" --rate 100Gbps --batch 64
  SINK_EXTRA=(--gro)
  gen_point "gen max, GSO 7 frames per send" --rate 100Gbps --batch 64 --gso 7
  SINK_EXTRA=()
  for r in 1 4 10; do gen_point "gen ${r} Gb/s" --rate ${r}Gbps; done
  SINK_EXTRA=(--gro)
  gen_point "gen 10 Gb/s, GSO 7" --rate 10Gbps --gso 7 --batch 63
  SINK_EXTRA=()
  for r in 1G 4G 10G 0; do iperf_point "$r"; done
} | tee "$TMP/results.jsonl"

python3 - "$TMP/results.jsonl" "$OUT" "$SECS" <<'EOF'
import json, sys, platform, subprocess, datetime, os
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out, secs = sys.argv[2], sys.argv[3]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
lines = [
  "# `vlbiflow gen` benchmark", "",
  f"- date: {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}",
  f"- machine: {os.cpu_count()} vCPU ({cpu}), kernel {platform.release()}, loopback",
  f"- command: `bench/gen.sh {secs}` ({secs} s per point; gen on core 0, receiver on core 1; 8224-byte frames + 8-byte PSN)",
  "- receiver: `vlbiflow sink` (recvmmsg, count, discard; 128 MiB socket buffer); iperf3 3.12 with `-u -l 8192 -w 64M`",
  "- the machine is shared and noisy: compare rows of one run, not across runs", "",
  "## gen", "",
  "| point | requested Gb/s | sent Gb/s | received Gb/s | frames sent | received | PSN lost | kernel drops | gen worst 1 s window | receiver worst second | behind |",
  "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
  if r["label"].startswith("gen"):
    lines.append(f"| {r['label']} | {r['requested_gbps']:.3f} | {r['sent_gbps']:.3f} | {r['received_gbps']:.3f} | {r['frames']} | {r['received']} | {r['lost']} | {r['kernel_drops']} | {r['gen_worst_window_pct']:+.4f}% | {r['rx_worst_second_pct']:.4f}% | {r['cannot_keep_up']} |")
lines += ["", "## iperf3 at the same rates (`-b 0` = flat out)", "",
  "| point | sent Gb/s | received Gb/s | lost % |", "|---|---|---|---|"]
for r in rows:
  if r["label"].startswith("iperf3"):
    lines.append(f"| {r['label']} | {r['sent_gbps']:.3f} | {r['received_gbps']:.3f} | {r['lost_pct']:.2f} |")
open(out, "w").write("\n".join(lines) + "\n")
print(f"bench: wrote {out}")
EOF
