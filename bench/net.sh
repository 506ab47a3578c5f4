#!/usr/bin/env bash
# `vlbiflow net` side by side with iperf3 on loopback, same frame sizes, socket buffers, trial lengths
# and CPU pinning:
#   1. highest loss-free UDP rate (RFC 2544 binary search) at 1472 and 8192 bytes;
#   2. TCP memory-to-memory rate, one stream;
#   3. CPU seconds per GB moved (the measuring processes' user+system time).
#
#   bench/net.sh [TRIAL_SECONDS] [TCP_SECONDS] [OUT.md]   (defaults: 1 s trials, 5 s TCP, docs/bench/net.md)
#   BUF=bytes   UDP socket buffers for both tools (default 64 MiB; net.core.[rw]mem_max is raised to it)
#   TCP_REPS=n  TCP runs per tool, alternating (default 3; the median is reported)
#
# Fairness on a machine that may be shared: the two searches run in lockstep, one vlbiflow trial then
# one iperf3 trial, so a busy spell hits both; each search starts from 1.25 x the rate its own tool
# received in a flat-out probe (or the probe's send rate when it lost nothing) and bisects down to 2%
# resolution with trials of the same length; a trial passes only with zero datagrams lost. A vlbiflow
# trial is exactly what `vlbiflow net bw --find-zero-loss` runs per step (`--rate R`, frames for the
# trial length). Sender and responder/server are pinned to cores 0 and 1.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
TRIAL=${1:-1}
TCPSECS=${2:-5}
# iperf3 takes whole seconds (and -t 0 means "forever").
[[ "$TRIAL" =~ ^[1-9][0-9]*$ && "$TCPSECS" =~ ^[1-9][0-9]*$ ]] || { echo "bench: TRIAL_SECONDS and TCP_SECONDS must be whole seconds >= 1" >&2; exit 2; }
OUT=${3:-docs/bench/net.md}
BUF=${BUF:-67108864}
TCP_REPS=${TCP_REPS:-3}
VPORT=14299
IPORT=5299
command -v iperf3 >/dev/null || { echo "bench: installing iperf3"; apt-get install -y iperf3 >/dev/null; }
# Both tools ask for BUF; the kernel caps requests at net.core.[rw]mem_max.
raise_socket_buffers "$BUF"
bench_build
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

taskset -c 1 "$BIN" net responder --listen 127.0.0.1:$VPORT --recv-buffer "$BUF" 2>"$TMP/responder.log" &
taskset -c 1 iperf3 -s -p $IPORT >/dev/null 2>&1 &
for _ in $(seq 50); do
  grep -q listening "$TMP/responder.log" 2>/dev/null && break
  sleep 0.1
done
sleep 0.3

export BIN TRIAL TCPSECS BUF TCP_REPS VPORT IPORT TMP OUT
python3 - <<'PY'
import json, math, os, platform, subprocess, datetime, statistics

BIN, TRIAL, TCPSECS, BUF = os.environ["BIN"], float(os.environ["TRIAL"]), float(os.environ["TCPSECS"]), int(os.environ["BUF"])
VPORT, IPORT, OUT, REPS = os.environ["VPORT"], os.environ["IPORT"], os.environ["OUT"], int(os.environ["TCP_REPS"])
RES, MAX_TRIALS = 0.02, 24

def loadavg():
    return open("/proc/loadavg").read().split()[0]

LOAD_BEFORE = loadavg()

def run(cmd):
    p = subprocess.run(["taskset", "-c", "0"] + cmd, capture_output=True, text=True, timeout=4 * max(TRIAL, TCPSECS) + 60)
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)

class Search:
    """RFC 2544 bisection, the same rule as vlbiflow_net::ZeroLossSearch: first trial at the top,
    then halve the bracket between the best pass (or 0) and the lowest failure."""
    def __init__(self, top):
        self.top, self.lo, self.hi, self.best, self.trials = top, 0.0, top, None, []
        self.best_sent = None  # highest rate actually sent in a lossless trial, whatever was offered
    def next_rate(self):
        if len(self.trials) >= MAX_TRIALS:
            return None
        if not self.trials:
            return self.hi
        if self.best == self.hi or self.hi - self.lo <= RES * self.top:
            return None
        return (self.lo + self.hi) / 2
    def record(self, rate, lost, sent_bps, cpu):
        self.trials.append((rate, lost, sent_bps))
        if lost == 0 and (self.best_sent is None or sent_bps > self.best_sent):
            self.best_sent = sent_bps
        if lost == 0 and sent_bps >= 0.98 * rate:
            self.lo = max(self.lo, rate)
            if self.best is None or rate > self.best:
                self.best, self.best_cpu = rate, cpu
        else:
            self.hi = min(self.hi, rate)

def vlbi_trial(size, rate_bps, count=None):
    """One `net bw` test; rate 0 = flat out. Returns (lost, send bps, receive bps, CPU s/GB, buffer)."""
    args = [BIN, "net", "bw", f"127.0.0.1:{VPORT}", "--sizes", str(size),
            "--send-buffer", str(BUF), "--recv-buffer", str(BUF), "--json", "-q", "--no-archive"]
    if rate_bps > 0:
        count = max(100, math.ceil(rate_bps * TRIAL / (8 * size)))
        args += ["--rate", f"{rate_bps:.0f}bps"]
    else:
        args += ["--wait", "0"]
    args += ["--count", str(count)]
    r = run(args)["results"][0]
    gb = r["remote"]["bytes"] / 1e9
    p = lambda h: h["host"]["process"]["user_s"] + h["host"]["process"]["system_s"]
    cpu = (p(r["local"]) + p(r["remote"])) / gb if gb > 0 else None
    return r["lost"], r["send_user_rate_mbps"] * 1e6, r["recv_user_rate_mbps"] * 1e6, cpu, r["local"]["remote_buffer"]

def iperf_trial(size, rate_bps, secs=None):
    v = run(["iperf3", "-c", "127.0.0.1", "-p", IPORT, "-u", "-l", str(size), "-w", str(BUF),
             "-b", str(int(rate_bps)), "-t", str(secs or TRIAL), "-J"])
    s = v["end"]["sum"]
    cpu = v["end"].get("cpu_utilization_percent", {})
    secs = s.get("seconds", TRIAL)
    recv_bytes = s["bytes"] * (1 - s.get("lost_percent", 0) / 100)
    cpu_s = (cpu.get("host_total", 0) + cpu.get("remote_total", 0)) / 100 * secs
    recv_bps = 8 * recv_bytes / secs if secs else 0
    return (s["lost_packets"], s["bits_per_second"], recv_bps, (cpu_s / (recv_bytes / 1e9) if recv_bytes else None),
            v["start"].get("rcvbuf_actual"))

def top_of(lost, send_bps, recv_bps):
    return send_bps if lost == 0 else recv_bps * 1.25

udp = []
for size in (1472, 8192):
    # Flat-out probes (up to about 1 s each) set each search's upper end.
    vl, vs, vr, _, vbuf = vlbi_trial(size, 0, count=int(5e9 / (8 * size)))
    il, is_, ir, _, ibuf = iperf_trial(size, 0, secs=1)
    sv, si = Search(top_of(vl, vs, vr)), Search(top_of(il, is_, ir))
    while True:
        rv, ri = sv.next_rate(), si.next_rate()
        if rv is None and ri is None:
            break
        # A trial passes only if nothing was lost and the tool really offered the rate (within 2%).
        if rv is not None:
            lost, sent_bps, _, cpu, _ = vlbi_trial(size, rv)
            sv.record(rv, lost, sent_bps, cpu)
        if ri is not None:
            lost, sent_bps, _, cpu, _ = iperf_trial(size, ri)
            si.record(ri, lost, sent_bps, cpu)
    udp.append(dict(size=size, v=sv, i=si, vprobe=(vl, vs, vr), iprobe=(il, is_, ir), vbuf=vbuf, ibuf=ibuf))
    b = lambda s: "none" if s.best is None else f"{s.best / 1e6:.0f}"
    print(f"UDP {size} B: vlbiflow {b(sv)} Mb/s ({len(sv.trials)} trials), iperf3 {b(si)} Mb/s ({len(si.trials)} trials)")

# TCP, one stream, kernel buffer autotuning for both (no -w, no --send/--recv-buffer), 128 KiB writes,
# runs alternating between the tools.
tcp_v, tcp_i = [], []
for _ in range(REPS):
    t = run([BIN, "net", "tcp", f"127.0.0.1:{VPORT}", "--duration", str(TCPSECS), "--write-size", "131072",
             "--json", "-q", "--no-archive"])["results"][0]
    tcp_v.append((8 * t["bytes_received"] / t["duration_s"] / 1e6, t["rate_mbps"],
                  t["sender_cpu_s_per_gb"] + t["receiver_cpu_s_per_gb"]))
    e = run(["iperf3", "-c", "127.0.0.1", "-p", IPORT, "-t", str(TCPSECS), "-l", "131072", "-J"])["end"]
    rcv = e["sum_received"]
    cpu = e.get("cpu_utilization_percent", {})
    tcp_i.append((rcv["bits_per_second"] / 1e6, rcv["bits_per_second"] / 1e6,
                  (cpu.get("host_total", 0) + cpu.get("remote_total", 0)) / 100 * rcv["seconds"] / (rcv["bytes"] / 1e9)))
    print(f"TCP: vlbiflow {tcp_v[-1][0]:.0f} Mb/s, iperf3 {tcp_i[-1][0]:.0f} Mb/s")
LOAD_AFTER = loadavg()

def f(x, p=0):
    return "none" if x is None else f"{x:.{p}f}"

def med(rows, k):
    return statistics.median(r[k] for r in rows)

cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
iv = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
mib = BUF / 1048576
md = f"""# `vlbiflow net` against iperf3 on loopback

Generated by `bench/net.sh {os.environ['TRIAL']} {os.environ['TCPSECS']}` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.

Machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu_model}), Linux {platform.release()}, {iv}.
Load average (1 min) before / after the run: {LOAD_BEFORE} / {LOAD_AFTER}.

| test | vlbiflow net | iperf3 | ratio |
|---|---|---|---|
"""
for u in udp:
    v, i = u["v"], u["i"]
    ratio = f"{v.best / i.best:.2f}" if v.best and i.best else "-"
    md += (f"| UDP {u['size']} B loss-free rate (Mb/s) | {f(v.best and v.best / 1e6)} ({len(v.trials)} trials)"
           f" | {f(i.best and i.best / 1e6)} ({len(i.trials)} trials) | {ratio} |\n")
    r2 = f"{v.best_sent / i.best_sent:.2f}" if v.best_sent and i.best_sent else "-"
    md += (f"| UDP {u['size']} B highest rate sent in a lossless trial (Mb/s) | {f(v.best_sent and v.best_sent / 1e6)}"
           f" | {f(i.best_sent and i.best_sent / 1e6)} | {r2} |\n")
    md += (f"| UDP {u['size']} B CPU s/GB | {f(getattr(v, 'best_cpu', None), 2)} | "
           f"{f(getattr(i, 'best_cpu', None), 2)} | |\n")
tv, ti = med(tcp_v, 0), med(tcp_i, 0)
md += f"| TCP 1 stream (Mb/s, median of {REPS}) | {tv:.0f} | {ti:.0f} | {tv / ti:.2f} |\n"
md += f"| TCP CPU s/GB (median) | {med(tcp_v, 2):.3f} | {med(tcp_i, 2):.3f} | |\n"
md += "\nEvery trial (offered Mb/s: datagrams lost):\n\n"
for u in udp:
    for name, s, probe in (("vlbiflow", u["v"], u["vprobe"]), ("iperf3", u["i"], u["iprobe"])):
        tr = ", ".join(f"{r / 1e6:.0f}: {l}" + ("" if sb >= 0.98 * r else f" (sent only {sb / 1e6:.0f})")
                       for r, l, sb in s.trials)
        md += (f"- {u['size']} B {name}: flat-out probe sent {probe[1] / 1e6:.0f}, received {probe[2] / 1e6:.0f}, "
               f"lost {probe[0]}; trials {tr}\n")
md += "- TCP vlbiflow runs (Mb/s): " + ", ".join(f"{r[0]:.0f}" for r in tcp_v) + "\n"
md += "- TCP iperf3 runs (Mb/s): " + ", ".join(f"{r[0]:.0f}" for r in tcp_i) + "\n"
md += f"""
Targets: a loss-free UDP rate at least twice iperf3's in the same run; TCP within 10% of iperf3.

Method: each tool against its own server on 127.0.0.1, client pinned to core 0 and responder/server to
core 1 (`taskset`).
- UDP: both tools ask for {mib:g} MiB socket buffers on both ends (`--send-buffer/--recv-buffer`, iperf3
  `-w`); the kernel granted the receivers {f(udp[0]['vbuf'])} (vlbiflow) and {f(udp[0]['ibuf'])} (iperf3)
  bytes. Highest loss-free rate: RFC 2544 binary search, first trial at the top (1.25 x the rate received
  in a flat-out probe, or the probe's send rate if it lost nothing), then bisection to 2% of the top; a
  trial lasts {os.environ['TRIAL']} s for both tools and passes only with zero datagrams lost and the
  offered rate really sent (within 2%). The two
  searches run in lockstep (one vlbiflow trial, then one iperf3 trial) so load from other jobs falls on
  both. vlbiflow spaces datagrams evenly on an absolute schedule (one datagram per send when on time;
  when several are due at once, e.g. flat out or behind schedule, they go out as GSO super-datagrams
  that the kernel cuts into the same datagrams); iperf3 `-b` sends bursts, one `write` per datagram.
- TCP: one stream, {os.environ['TCPSECS']} s, 128 KiB writes, kernel buffer autotuning for both (no `-w`),
  {REPS} runs per tool alternating; rate = bytes received / sending time (iperf3's `sum_received`).
- "Highest rate sent in a lossless trial" credits each tool with what it really sent in any
  full-length trial without loss, even one that fell short of its offered rate.
- CPU s/GB: user+system seconds of the client and server processes over GB received (UDP: at the best
  loss-free trial).
"""
open(OUT, "w").write(md)
print(f"written {OUT}")
PY
