"""Cross-check of vlbiflow-formats against baseband, driven by tests/baseband.rs.

Usage: baseband_check.py <dir>. <dir>/cases.json describes files the Rust side wrote:
  {"vdif": [{"file", "values", "frames", "bits", "nchan", "complex", "scale", "headers": [{...}, ...]}],
   "mark5b": {"file", "frame_rate", "kday", "headers": [{...}]}}
For each VDIF case this reads every frame with baseband, compares header fields, decodes the payload
and compares it with the values the Rust encoder quantised (scaled to baseband units), and re-encodes
those values with baseband to compare the bytes. Mismatches are allowed only for values within 1e-4 of
a quantiser threshold. Prints one line per check; exits non-zero with a reason on the first failure.
"""
import json
import os
import sys

import numpy as np
import astropy.units as u
from baseband import vdif, mark5b
from baseband.mark5b.header import crc16


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check_vdif(d, case):
    values = np.fromfile(os.path.join(d, case["values"]), dtype="<f4") * case["scale"]
    nchan, cx = case["nchan"], case["complex"]
    per_frame = values.size // case["frames"]
    with open(os.path.join(d, case["file"]), "rb") as fh:
        for i, want in enumerate(case["headers"]):
            frame = vdif.VDIFFrame.fromfile(fh, verify=True)
            h = frame.header
            got = {
                "seconds": int(h["seconds"]),
                "ref_epoch": int(h["ref_epoch"]),
                "frame_nr": int(h["frame_nr"]),
                "vdif_version": int(h["vdif_version"]),
                "nchan": int(h.nchan),
                "frame_nbytes": int(h.frame_nbytes),
                "bps": int(h.bps),
                "complex_data": bool(h["complex_data"]),
                "thread_id": int(h["thread_id"]),
                "station": str(h.station),
                "invalid_data": bool(h["invalid_data"]),
                "edv": int(h.edv),
            }
            for k, v in want.items():
                if got[k] != v:
                    fail(f"{case['file']} frame {i}: header {k} = {got[k]!r}, ours {v!r}")
            x = values[i * per_frame:(i + 1) * per_frame]
            data = x.reshape(-1, nchan * 2).view("<c8") if cx else x.reshape(-1, nchan)
            decoded = frame.data
            # What baseband makes of the same values: encode, then decode.
            ref_payload = vdif.VDIFPayload.fromdata(data, header=h)
            ref = ref_payload.data
            if decoded.shape != ref.shape:
                fail(f"{case['file']} frame {i}: shape {decoded.shape} vs {ref.shape}")
            diff = decoded != ref
            if diff.any():
                # Allowed only where a nudge of the input by 1e-4 moves baseband to our level.
                lo = vdif.VDIFPayload.fromdata(data - 1e-4 * (1 + 1j if cx else 1), header=h).data
                hi = vdif.VDIFPayload.fromdata(data + 1e-4 * (1 + 1j if cx else 1), header=h).data
                bad = diff & (decoded != lo) & (decoded != hi)
                if bad.any():
                    idx = np.argwhere(bad)[0]
                    fail(f"{case['file']} frame {i}: sample {tuple(idx)} ours {decoded[tuple(idx)]} "
                         f"baseband {ref[tuple(idx)]} for input {data[tuple(idx)]}")
            ours_bytes = frame.payload.words.tobytes()
            if ours_bytes != ref_payload.words.tobytes() and not diff.any():
                fail(f"{case['file']} frame {i}: same levels but different bytes")
    print(f"ok vdif {case['file']}: {case['frames']} frames, {case['bits']}-bit "
          f"{nchan}ch {'complex' if cx else 'real'}")


def check_mark5b(d, case):
    rate = case["frame_rate"] * u.Hz
    with open(os.path.join(d, case["file"]), "rb") as fh:
        for i, want in enumerate(case["headers"]):
            frame = mark5b.Mark5BFrame.fromfile(fh, kday=case["kday"], verify=True)
            h = frame.header
            stream = (((h["bcd_jday"] << 20) + h["bcd_seconds"]) << 16) + h["bcd_fraction"]
            if crc16(stream) != h["crc"]:
                fail(f"mark5b frame {i}: CRC {h['crc']:#06x}, baseband computes {crc16(stream):#06x}")
            again = mark5b.Mark5BHeader.fromvalues(
                user=want["user"], time=h.get_time(frame_rate=rate), frame_rate=rate)
            if list(again.words) != list(h.words):
                fail(f"mark5b frame {i}: words {[hex(w) for w in h.words]}, baseband builds "
                     f"{[hex(w) for w in again.words]}")
            got = {
                "user": int(h["user"]),
                "frame_nr": int(h["frame_nr"]),
                "jday": int(h.jday),
                "seconds": int(h.seconds),
                "time": h.get_time(frame_rate=rate).isot,
            }
            for k, v in want.items():
                if got[k] != v:
                    fail(f"mark5b frame {i}: {k} = {got[k]!r}, ours {v!r}")
            if not np.all(frame.payload.words == 0x11223344):
                fail(f"mark5b frame {i}: payload is not the fill pattern")
    print(f"ok mark5b {case['file']}: {len(case['headers'])} frames")


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "cases.json")) as f:
        cases = json.load(f)
    for case in cases["vdif"]:
        check_vdif(d, case)
    check_mark5b(d, cases["mark5b"])


if __name__ == "__main__":
    main()
