#!/usr/bin/env python3
"""2-bit VDIF decode throughput: vlbiflow against baseband on the same file, in the same run.

Makes a file of 2-bit noise with `vlbiflow gen --output`, pages it in, then measures in rounds, each
reader once per round in turn, the order rotating from round to round (so that a shared, noisy machine
affects them alike):

  fresh    the whole file into a new array: `vlbiflow.open(f).read()` and
           `baseband.vdif.open(f, "rs").read()` (both pay the kernel for 4 bytes of fresh memory per
           sample, which on a virtual machine can cost more than the decoding);
  stream   the whole file in pieces of --piece samples into one array allocated before the round:
           `scan.read(out=buf)` and `fh.read(out=buf)` (decoding, not memory allocation);
  numpy.fromfile of the bytes alone (no decoding): the floor of any reader;
  plugin   the same frames written as a Mark6 scatter-gather scan (blocks of --block-frames frames dealt
           round robin to 4 disk directories), read through vlbiflow's baseband format:
           `baseband.open(scan, "rs", format="mark6sg", disks=...).read()` (fresh) and `fh.read(out=buf)`
           in pieces (stream), against baseband's VDIF reader on the file (the scan gathered); baseband's
           interface costs the plugin its shape (one pass over the frames, not decoded) at each open.

It prints, per measurement, the median and range over the rounds of the wall time, and of the ratio
baseband / vlbiflow taken within each round (three decimals, never rounded up), plus the CPU time of each
(all threads). Every round also checks that vlbiflow's samples (and the plugin's) equal baseband's.

    python bench/python_decode.py                          # 4000 frames of 8224 bytes, 1 thread, 7 rounds
    python bench/python_decode.py --threads 2 --rounds 11 --json
    python bench/python_decode.py --no-plugin              # without the Mark6 scan and baseband plugin

Needs the vlbiflow package, baseband and the vlbiflow binary (target/release/vlbiflow or $VLBIFLOW_BIN).
"""

import argparse
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import vlbiflow

ROOT = Path(__file__).resolve().parents[1]


def timed(fn):
    """(wall seconds, CPU seconds of the whole process, result) of fn()."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def floor3(x):
    """x with three decimals, truncated: a ratio of 2.9996 prints as 2.999, not 3.000."""
    return f"{np.floor(x * 1000) / 1000:.3f}"


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def write_mark6(vdif_path, root, scan, frame_size, per_block, disks=4):
    """Writes the frames of a VDIF file as a Mark6 scatter-gather scan (file header version 2: sync word
    0xfeed6666, version, block size, packet format 0 (VDIF), packet size; then blocks of block number and
    size, header included, followed by the frames), block k on disk k mod `disks`. Returns the disks."""
    import struct

    data = np.fromfile(vdif_path, dtype=np.uint8)
    block = per_block * frame_size
    dirs = [root / f"disk{d}" for d in range(disks)]
    files = []
    for d in dirs:
        d.mkdir(parents=True)
        f = open(d / f"{scan}.vdif", "wb")
        f.write(struct.pack("<Iiiii", 0xFEED6666, 2, block + 8, 0, frame_size))
        files.append(f)
    for k, at in enumerate(range(0, len(data), block)):
        part = data[at : at + block]
        files[k % disks].write(struct.pack("<ii", k, len(part) + 8))
        files[k % disks].write(part.tobytes())
    for f in files:
        f.close()
    for d in dirs:
        np.fromfile(d / f"{scan}.vdif", dtype=np.uint8)  # page in
    return [str(d) for d in dirs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=4000, help="frames in the file, all threads together")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--frame-size", type=int, default=8224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--piece", type=int, default=1 << 20, help="time samples per piece when streaming")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--block-frames", type=int, default=128, help="frames per Mark6 block (plugin)")
    ap.add_argument("--no-plugin", action="store_true", help="skip the baseband plugin measurements")
    args = ap.parse_args()

    exe = os.environ.get("VLBIFLOW_BIN") or str(ROOT / "target" / "release" / "vlbiflow")
    from baseband import vdif

    # vlbiflow builds before read(out=) streamed into fresh pieces (for comparing builds).
    has_out = "out" in inspect.signature(vlbiflow.Scan.read).parameters
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
        path = Path(tmp) / "bench.vdif"
        subprocess.run(
            [exe, "gen", "--output", str(path), "--threads", str(args.threads), "--pps", "1000",
             "--count", str(args.frames), "--payload", "noise", "--frame-size", str(args.frame_size),
             "--bits", "2"],
            check=True, capture_output=True,
        )
        nbytes = path.stat().st_size
        np.fromfile(path, dtype=np.uint8)  # page the file in: every reader starts from the page cache
        plugin = not args.no_plugin
        if plugin:
            import baseband

            disks = write_mark6(path, Path(tmp) / "mk6", "bench_scan", args.frame_size, args.block_frames)

        probe = vlbiflow.open(path)
        threads, spf = len(probe.info["threads"]), probe.info["samples_per_frame"]
        rows = args.frames // threads * spf
        samples = rows * threads * probe.info["channels"]
        piece = min(args.piece, rows)
        vf_buf = np.empty((piece, threads, probe.info["channels"]), np.float32)
        bb_buf = None

        def vf_fresh():
            return vlbiflow.open(path).read()

        def bb_fresh():
            with vdif.open(str(path), "rs") as fh:
                return fh.read()

        def vf_stream():
            scan = vlbiflow.open(path)
            total = 0.0
            while True:
                x = scan.read(out=vf_buf) if has_out else scan.read(piece)
                if x.shape[0] == 0:
                    return total
                total += float(x[0].sum())

        def bb_stream():
            nonlocal bb_buf
            with vdif.open(str(path), "rs") as fh:
                if bb_buf is None:
                    bb_buf = np.empty((piece,) + fh.sample_shape, np.float32)
                total = 0.0
                left = fh.shape[0]
                while left:
                    n = min(piece, left)
                    x = fh.read(n, out=bb_buf[:n])
                    left -= n
                    total += float(x[0].sum())
                return total

        bp_buf = None

        def bp_fresh():
            with baseband.open("bench_scan", "rs", format="mark6sg", disks=disks) as fh:
                return fh.read()

        def bp_stream():
            nonlocal bp_buf
            with baseband.open("bench_scan", "rs", format="mark6sg", disks=disks) as fh:
                if bp_buf is None:
                    bp_buf = np.empty((piece,) + fh.sample_shape, np.float32)
                total = 0.0
                left = fh.shape[0]
                while left:
                    n = min(piece, left)
                    x = fh.read(out=bp_buf[:n])
                    left -= n
                    total += float(x[0].sum())
                return total

        names = ["numpy", "vf_fresh", "bb_fresh", "vf_stream", "bb_stream"] + (
            ["bp_fresh", "bp_stream"] if plugin else [])
        runs = {k: {"wall": [], "cpu": []} for k in names}
        ratios = {"fresh": [], "stream": []}
        if plugin:
            ratios.update({"plugin_fresh": [], "plugin_stream": []})
        same = True
        # baseband's samples, decoded once outside the rounds: every fresh read is compared with them and
        # dropped at once, so that at most two decoded copies are alive whichever reader runs.
        ref = bb_fresh()
        fresh = [("vf_fresh", vf_fresh), ("bb_fresh", bb_fresh)] + ([("bp_fresh", bp_fresh)] if plugin else [])
        stream = [("vf_stream", vf_stream), ("bb_stream", bb_stream)] + (
            [("bp_stream", bp_stream)] if plugin else [])
        for r in range(args.rounds):
            # Rotate which reader goes first, second (and third).
            k = r % len(fresh)
            order = fresh[k:] + fresh[:k] + stream[k:] + stream[:k]
            totals = {}
            wall, cpu, _ = timed(lambda: np.fromfile(path, dtype=np.uint8))
            runs["numpy"]["wall"].append(wall)
            runs["numpy"]["cpu"].append(cpu)
            for name, fn in order:
                wall, cpu, out = timed(fn)
                runs[name]["wall"].append(wall)
                runs[name]["cpu"].append(cpu)
                if name.endswith("fresh"):
                    same = same and bool(np.array_equal(out.reshape(ref.shape), ref))
                    del out
                else:
                    totals[name] = out
            same = same and totals["vf_stream"] == totals["bb_stream"]
            if plugin:
                same = same and totals["bp_stream"] == totals["bb_stream"]
                ratios["plugin_fresh"].append(runs["bb_fresh"]["wall"][-1] / runs["bp_fresh"]["wall"][-1])
                ratios["plugin_stream"].append(runs["bb_stream"]["wall"][-1] / runs["bp_stream"]["wall"][-1])
            ratios["fresh"].append(runs["bb_fresh"]["wall"][-1] / runs["vf_fresh"]["wall"][-1])
            ratios["stream"].append(runs["bb_stream"]["wall"][-1] / runs["vf_stream"]["wall"][-1])
        del ref

    load = os.getloadavg()
    res = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_1_5_15": [round(v, 2) for v in load],
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "vlbiflow_read_out": has_out,
        "command": " ".join(["python", "bench/python_decode.py", *sys.argv[1:]]),
        "file_bytes": nbytes,
        "samples": samples,
        "rounds": args.rounds,
        "piece_samples": piece,
        "wall_s": {k: summary(v["wall"]) for k, v in runs.items()},
        "cpu_s": {k: summary(v["cpu"]) for k, v in runs.items()},
        "samples_per_s_median": {k: samples / statistics.median(v["wall"]) for k, v in runs.items()},
        "baseband_over_vlbiflow": {k: summary(v) for k, v in ratios.items()},
        "per_round": {"wall_s": {k: v["wall"] for k, v in runs.items()},
                      "cpu_s": {k: v["cpu"] for k, v in runs.items()},
                      "baseband_over_vlbiflow": ratios},
        "identical_to_baseband": same,
    }
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['date']}  {res['machine']}  load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  "
              f"python {res['python']}  numpy {res['numpy']}")
        print(f"file: {nbytes / 1e6:.1f} MB, {samples / 1e6:.1f} M 2-bit samples, {threads} thread(s); "
              f"{args.rounds} rounds; stream pieces of {piece} samples")
        print(f"  {'':30s} {'wall median (min-max) ms':>27s} {'Msamples/s':>11s} {'CPU median ms':>14s}")
        names = {
            "numpy": "numpy.fromfile (bytes only)",
            "vf_fresh": "vlbiflow  open().read()",
            "bb_fresh": "baseband  open().read()",
            "vf_stream": "vlbiflow  read(out=buf) pieces" if has_out else "vlbiflow  read(n) pieces",
            "bb_stream": "baseband  read(n, out=buf)",
        }
        if plugin:
            names["bp_fresh"] = "mark6sg   baseband.open().read()"
            names["bp_stream"] = "mark6sg   read(out=buf) pieces"
        for k, label in names.items():
            w, c = res["wall_s"][k], res["cpu_s"][k]
            print(f"  {label:30s} {w['median'] * 1e3:9.1f} ({w['min'] * 1e3:7.1f}-{w['max'] * 1e3:7.1f}) "
                  f"{samples / w['median'] / 1e6:11.1f} {c['median'] * 1e3:14.1f}")
        for k in ratios:
            q = res["baseband_over_vlbiflow"][k]
            print(f"  baseband / vlbiflow, {k:13s}: median {floor3(q['median'])}x "
                  f"(min {floor3(q['min'])}x, max {floor3(q['max'])}x over {args.rounds} rounds)")
        print(f"  decoded samples identical to baseband's: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
