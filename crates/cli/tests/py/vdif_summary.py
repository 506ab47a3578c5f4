"""Summarise a VDIF file with the independent `baseband` reader, as JSON on stdout.

Used by the Rust tests to cross-check what vlbiflow writes: every frame's time, thread and station, and
the decoded sample statistics. Exit 3 with a message when baseband is missing.
"""
import json
import sys

try:
    import numpy as np
    from baseband import vdif
except ImportError as e:  # the test turns this into a clear failure
    print(f"baseband not importable ({e}); install it with: pip install baseband", file=sys.stderr)
    sys.exit(3)

import astropy.units as u

path = sys.argv[1]
frame_rate = float(sys.argv[2]) * u.Hz
frames = []
levels = {}
with open(path, "rb") as raw:
    fh = vdif.open(raw, "rb")
    while True:
        try:
            frame = fh.read_frame()
        except EOFError:
            break
        h = frame.header
        frames.append({
            "thread": int(h["thread_id"]),
            "station": h.station,
            "seconds": int(h["seconds"]),
            "epoch": int(h["ref_epoch"]),
            "frame_nr": int(h["frame_nr"]),
            "time_unix": float(h.get_time(frame_rate=frame_rate).unix),
            "invalid": bool(h["invalid_data"]),
            "bps": int(h.bps),
            "length": int(h.frame_nbytes),
        })
        data = frame.data  # decoded samples, shape (samples, channels)
        values, counts = np.unique(np.asarray(data).ravel(), return_counts=True)
        for v, c in zip(values.tolist(), counts.tolist()):
            key = f"{v:.4f}"
            levels[key] = levels.get(key, 0) + int(c)

total = sum(levels.values())
samples = []
for k, c in levels.items():
    samples.append((float(k), c))
mean = sum(v * c for v, c in samples) / total
var = sum((v - mean) ** 2 * c for v, c in samples) / total
print(json.dumps({
    "frames": frames,
    "levels": {k: c / total for k, c in sorted(levels.items(), key=lambda kv: float(kv[0]))},
    "mean": mean,
    "std": var ** 0.5,
}))
