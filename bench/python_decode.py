#!/usr/bin/env python3
"""2-bit VDIF decode throughput: vlbiflow.open().read() against baseband and against numpy.fromfile alone.

Makes a file of 2-bit noise with `vlbiflow gen --output`, then decodes all of it with each reader, several
times, and prints the best time of each in samples per second (time samples x channels x threads).

    python bench/python_decode.py                       # 2000 frames of 8224 bytes, 1 thread
    python bench/python_decode.py --frames 4000 --threads 2 --repeat 5 --json

Needs the vlbiflow package, baseband and the vlbiflow binary (target/release/vlbiflow or $VLBIFLOW_BIN).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import vlbiflow

ROOT = Path(__file__).resolve().parents[1]


def best_of(repeat, fn):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=2000, help="frames in the file, all threads together")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--frame-size", type=int, default=8224)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    exe = os.environ.get("VLBIFLOW_BIN") or str(ROOT / "target" / "release" / "vlbiflow")
    from baseband import vdif

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.vdif"
        subprocess.run(
            [exe, "gen", "--output", str(path), "--threads", str(args.threads), "--pps", "1000",
             "--count", str(args.frames), "--payload", "noise", "--frame-size", str(args.frame_size),
             "--bits", "2"],
            check=True, capture_output=True,
        )
        nbytes = path.stat().st_size
        # Page the file in once so that every reader starts from the page cache.
        np.fromfile(path, dtype=np.uint8)

        t_np, raw = best_of(args.repeat, lambda: np.fromfile(path, dtype=np.uint8))
        t_vf, x = best_of(args.repeat, lambda: vlbiflow.open(path).read())
        samples = x.size

        def baseband_read():
            with vdif.open(str(path), "rs") as fh:
                return fh.read()

        t_bb, y = best_of(args.repeat, baseband_read)
        same = bool(np.array_equal(x.reshape(y.shape), y))

    res = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.processor() or platform.system()}",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "file_bytes": nbytes,
        "samples": samples,
        "numpy_fromfile_s": t_np,
        "vlbiflow_s": t_vf,
        "baseband_s": t_bb,
        "numpy_fromfile_samples_per_s": samples / t_np,
        "vlbiflow_samples_per_s": samples / t_vf,
        "baseband_samples_per_s": samples / t_bb,
        "vlbiflow_over_baseband": t_bb / t_vf,
        "identical_to_baseband": same,
    }
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['date']}  {res['machine']}  python {res['python']}  numpy {res['numpy']}")
        print(f"file: {nbytes / 1e6:.1f} MB, {samples / 1e6:.1f} M 2-bit samples, best of {args.repeat}")
        print(f"  numpy.fromfile (bytes only): {t_np * 1e3:8.1f} ms  {samples / t_np / 1e6:9.1f} Msamples/s")
        print(f"  vlbiflow.open().read():      {t_vf * 1e3:8.1f} ms  {samples / t_vf / 1e6:9.1f} Msamples/s")
        print(f"  baseband vdif.open().read(): {t_bb * 1e3:8.1f} ms  {samples / t_bb / 1e6:9.1f} Msamples/s")
        print(f"  vlbiflow / baseband: {t_bb / t_vf:.1f}x faster; decoded samples identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
