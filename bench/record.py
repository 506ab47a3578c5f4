#!/usr/bin/env python3
"""Benchmark of `vlbiflow record`: gen -> record over loopback at rising rates, with peers in the same run.

    bench/record.py [--seconds 60] [--rates 1,2,4,6,8,10] [--targets tmpfs,disk] [--out docs/bench/record.md]

For every rate (8224-byte frames, one datagram per frame, 8-byte PSN, one stream):
  * gen (core 0) -> `vlbiflow record` (core 1) into 4 directories on tmpfs and on the work tree's disk;
  * gen -> `vlbiflow sink` (recvmmsg, count, discard): the ceiling of any receiver here;
  * iperf3 -u -l 8192 at the same rate: what today's default tool manages.
Loss is frames sent by gen minus frames stored (or received), over frames sent: the "packet loss" of the
Mark6 tables. CPU seconds per GB come from the receiving process's rusage (wait4). With --dd, the disk's
`dd oflag=direct bs=8M` write rate is measured in the same run, and the recorder's write rate compared.

tmpfs lives in RAM and the disk has finite room, so a point writes at most --max-gb (default 12) GB:
at high rates the run is shorter than --seconds, and the table says how long each point ran.
The machine is shared and noisy: compare rows of one run, as ratios.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "vlbiflow")
FRAME = 8224
PORT = 4801


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def spawn(core, args, **kw):
    return subprocess.Popen(["taskset", "-c", str(core)] + args, **kw)


def reap(proc, timeout):
    """Waits for proc with a timeout and returns (status, cpu seconds user+sys)."""
    deadline = time.time() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        if time.time() > deadline:
            proc.kill()
        time.sleep(0.05)


def run_gen(rate_gbps, seconds):
    out = subprocess.run(
        ["taskset", "-c", "0", BIN, "gen", "--dest", f"127.0.0.1:{PORT}", "--psn", "--rate", f"{rate_gbps}Gbps",
         "--duration", str(seconds), "--json", "--quiet", "--batch", "32"],
        capture_output=True, text=True, timeout=seconds + 30)
    if out.returncode != 0:
        raise RuntimeError(f"gen failed: {out.stderr}")
    return json.loads(out.stdout)


def point_record(target_dir, rate, seconds):
    disks = [os.path.join(target_dir, f"d{i}") for i in range(4)]
    for d in disks:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    scan = "bench_xx_001"
    args = [BIN, "record", "--stream", f"a=vdif@127.0.0.1:{PORT},psn", "--scan", scan, "--json"]
    for d in disks:
        args += ["--disk", d]
    rec = spawn(1, args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    gen = run_gen(rate, seconds)
    time.sleep(1.0)
    rec.send_signal(signal.SIGINT)
    status, cpu = reap(rec, 60)
    out = rec.stdout.read()
    meta = json.loads(out) if out.strip() else {}
    stored = sum(s["counters"]["packets"] for s in meta.get("streams", []))
    lost_seq = sum(s["counters"]["lost"] for s in meta.get("streams", []))
    disk_bytes = sum(d["bytes"] for d in meta.get("disks", []))
    for d in disks:
        shutil.rmtree(d, ignore_errors=True)
    return {
        "sent": gen["frames"], "stored": stored, "lost_by_psn": lost_seq,
        "loss": 1 - stored / gen["frames"] if gen["frames"] else float("nan"),
        "gen_gbps": gen["achieved_bps"] / 1e9, "seconds": gen["elapsed_s"],
        "cpu_s_per_gb": cpu / (stored * FRAME / 1e9) if stored else float("nan"),
        "write_gbs": disk_bytes / 1e9 / gen["elapsed_s"], "status": status,
        "stderr_tail": rec.stderr.read()[-300:],
    }


def point_sink(rate, seconds):
    sink = spawn(1, [BIN, "sink", "--listen", f"127.0.0.1:{PORT}", "--psn", "--idle-timeout", "2", "--json",
                     "--recv-buffer", "256MiB"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.5)
    gen = run_gen(rate, seconds)
    status, cpu = reap(sink, 30)
    lines = [json.loads(l) for l in sink.stdout.read().splitlines() if l.strip()]
    summ = [l for l in lines if l.get("summary")][-1]
    got = summ["datagrams"]
    return {"sent": gen["frames"], "stored": got, "loss": 1 - got / gen["frames"],
            "gen_gbps": gen["achieved_bps"] / 1e9, "seconds": gen["elapsed_s"],
            "cpu_s_per_gb": cpu / (got * FRAME / 1e9) if got else float("nan")}


def point_iperf(rate, seconds):
    srv = spawn(1, ["iperf3", "-s", "-1", "-p", str(PORT + 1)], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    out = subprocess.run(["taskset", "-c", "0", "iperf3", "-c", "127.0.0.1", "-p", str(PORT + 1), "-u", "-l", "8192",
                          "-b", f"{rate}G", "-w", "128M", "-t", str(int(seconds)), "-J"],
                         capture_output=True, text=True, timeout=seconds + 30)
    status, cpu = reap(srv, 30)
    j = json.loads(out.stdout)
    s = j["end"]["sum"]
    recv = j["end"].get("sum_received", s)
    got_bytes = recv.get("bytes", 0)
    return {"sent": s.get("packets", 0), "stored": s.get("packets", 0) - s.get("lost_packets", 0),
            "loss": s.get("lost_percent", float("nan")) / 100, "gen_gbps": j["end"].get("sum_sent", s)["bits_per_second"] / 1e9,
            "seconds": s.get("seconds", seconds),
            "cpu_s_per_gb": cpu / (got_bytes / 1e9) if got_bytes else float("nan")}


def dd_rate(directory):
    path = os.path.join(directory, "dd.test")
    t0 = time.time()
    sh("dd", "if=/dev/zero", f"of={path}", "bs=8M", "count=512", "oflag=direct", stdout=subprocess.DEVNULL,
       stderr=subprocess.DEVNULL)
    gbs = 512 * 8 * 1024 * 1024 / (time.time() - t0) / 1e9
    os.unlink(path)
    return gbs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rates", default="1,2,4,6,8,10")
    ap.add_argument("--targets", default="tmpfs,disk")
    ap.add_argument("--max-gb", type=float, default=12)
    ap.add_argument("--peers", default="sink,iperf3")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "record.md"))
    a = ap.parse_args()
    sh("cargo", "build", "--release", "-q", "-p", "vlbiflow", cwd=ROOT)
    subprocess.run(["sysctl", "-qw", "net.core.rmem_max=268435456", "net.core.wmem_max=268435456"])
    if shutil.which("iperf3") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "iperf3"], stdout=subprocess.DEVNULL)
    rates = [float(r) for r in a.rates.split(",")]
    tmp = tempfile.mkdtemp(prefix="vlbiflow-bench-")
    tmpfs = os.path.join(tmp, "tmpfs")
    os.makedirs(tmpfs)
    targets = {}
    if "tmpfs" in a.targets:
        sh("mount", "-t", "tmpfs", "-o", f"size={int(a.max_gb + 2)}g", "tmpfs", tmpfs)
        targets["tmpfs"] = tmpfs
    if "disk" in a.targets:
        disk = os.path.join(ROOT, "target", "bench-disk")
        os.makedirs(disk, exist_ok=True)
        targets["disk"] = disk
    rows = []
    dd = dd_rate(targets["disk"]) if "disk" in targets else None
    try:
        for rate in rates:
            secs = min(a.seconds, a.max_gb * 8 / rate)
            for name, path in targets.items():
                r = point_record(path, rate, secs)
                r.update(kind=f"record -> {name}", rate=rate)
                rows.append(r)
                print(json.dumps(r), flush=True)
            peers = a.peers.split(",")
            if "sink" in peers:
                r = point_sink(rate, secs)
                r.update(kind="null receiver (vlbiflow sink)", rate=rate)
                rows.append(r)
                print(json.dumps(r), flush=True)
            if "iperf3" in peers:
                r = point_iperf(rate, secs)
                r.update(kind="iperf3 -s (UDP)", rate=rate)
                rows.append(r)
                print(json.dumps(r), flush=True)
    finally:
        if "tmpfs" in targets:
            subprocess.run(["umount", tmpfs])
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(os.path.join(ROOT, "target", "bench-disk"), ignore_errors=True)
    write_doc(a, rows, dd)


def write_doc(a, rows, dd):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    lines = [
        "# `vlbiflow record` benchmark", "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {os.cpu_count()} vCPU ({cpu}), kernel {platform.release()}, loopback",
        f"- command: `bench/record.py --seconds {a.seconds:g} --rates {a.rates} --targets {a.targets} --max-gb {a.max_gb:g}`",
        "- 8224-byte VDIF frames, one datagram per frame, 8-byte PSN, one stream; gen pinned to core 0, receivers to core 1",
        "- recorder: 4 disk directories on the target, Mark6 scatter-gather, 10 MB blocks, 256 MiB socket buffer",
        "- loss = 1 - frames stored / frames sent by gen; CPU = user+system seconds of the receiving process per GB stored",
        f"- each point writes at most {a.max_gb:g} GB (tmpfs is RAM), so fast points run shorter than {a.seconds:g} s",
        "- the machine is shared and noisy: compare rows of one run",
    ]
    if dd:
        lines.append(f"- disk: `dd if=/dev/zero bs=8M count=512 oflag=direct` on the same filesystem: {dd:.2f} GB/s")
    lines += ["", "| receiver | rate Gb/s | ran s | gen sent Gb/s | frames sent | stored/received | loss | CPU s/GB | disk write GB/s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = f"{r['write_gbs']:.2f}" if "write_gbs" in r else ""
        lines.append(f"| {r['kind']} | {r['rate']:g} | {r['seconds']:.1f} | {r['gen_gbps']:.2f} | {r['sent']} | {r['stored']} | "
                     f"{r['loss']:.2e} | {r['cpu_s_per_gb']:.3f} | {w} |")
    best = {}
    for r in rows:
        if r["loss"] < 1e-4:
            best[r["kind"]] = max(best.get(r["kind"], 0), r["rate"])
    lines += ["", "Highest rate with loss < 1e-4 in this run:", ""]
    for k, v in best.items():
        lines.append(f"- {k}: {v:g} Gb/s")
    if dd and any("disk" in r["kind"] for r in rows):
        top = max((r for r in rows if r["kind"] == "record -> disk"), key=lambda r: r.get("write_gbs", 0))
        limited = top["loss"] > 1e-4
        lines.append(f"- recorder write rate to disk at its best point: {top['write_gbs']:.2f} GB/s = "
                     f"{top['write_gbs'] / dd:.0%} of dd's O_DIRECT rate"
                     + ("" if limited else " (no loss there: the disk was not the limit, the recorder wrote all "
                        "it received; `cargo run --release -p vlbiflow-recorder --example mark6_write` "
                        "measures the writer against the disk alone)"))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"bench: wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
