"""vlbiflow's Python package against real recordings and the independent baseband reader."""

import io
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time
from baseband import vdif

import vlbiflow
from conftest import ROOT, record_scan, run, vlbiflow_bin

JIVE5AB = ROOT / "crates" / "checker" / "tests" / "fixtures" / "jive5ab"


def baseband_read(path):
    with vdif.open(str(path), "rs") as fh:
        data = fh.read()
        return data, fh


def test_mark6_scan_decodes_like_baseband_reads_the_gathered_file(mark6_scan):
    scan = vlbiflow.open(mark6_scan["scan"], disks=mark6_scan["disks"])
    assert scan.info["threads"] == [0, 1]
    assert scan.info["bits"] == 2 and scan.dtype == np.float32
    x = scan.read()
    ref, fh = baseband_read(mark6_scan["gathered"])
    assert x.shape == (ref.shape[0], 2, 1)
    assert scan.sample_rate == fh.sample_rate and isinstance(scan.sample_rate, u.Quantity)
    assert isinstance(scan.start_time, Time)
    assert abs(scan.start_time - fh.start_time) < 1 * u.ns
    assert scan.info["start_time"] == pytest.approx(fh.start_time.unix, abs=1e-6)
    np.testing.assert_allclose(x, ref.reshape(x.shape), rtol=1e-6, atol=0)
    assert not np.isnan(x).any()
    assert scan.counts["frames"] == 2400 and scan.counts["fill"] == 0


def test_flexbuff_scan_decodes_like_baseband_in_bounded_pieces(flexbuff_scan):
    scan = vlbiflow.open(flexbuff_scan["scan"], disks=flexbuff_scan["disks"])
    assert scan.info["threads"] == [0, 1, 2, 3]
    ref, _ = baseband_read(flexbuff_scan["gathered"])
    pieces = list(scan.iter_read(10_000))
    assert all(p.shape[0] == 10_000 for p in pieces[:-1])
    x = np.concatenate(pieces)
    np.testing.assert_allclose(x, ref.reshape(x.shape), rtol=1e-6, atol=0)
    assert scan.counts["frames"] == 2400


def test_raw_stream_is_the_gathered_file_and_baseband_reads_it(mark6_scan):
    scan = vlbiflow.open(mark6_scan["scan"], disks=mark6_scan["disks"])
    gathered = mark6_scan["gathered"].read_bytes()
    raw = scan.raw()
    assert raw.read() == gathered
    raw.seek(1032 * 3 + 5)
    assert raw.read(100) == gathered[1032 * 3 + 5 : 1032 * 3 + 105]
    ref, _ = baseband_read(mark6_scan["gathered"])
    with vdif.open(scan.raw(), "rs") as fh:
        np.testing.assert_array_equal(fh.read(), ref)


def test_headers_name_every_frame_with_file_and_offset(mark6_scan):
    scan = vlbiflow.open(mark6_scan["scan"], disks=mark6_scan["disks"])
    h = scan.headers()
    assert len(h["seconds"]) == 2400
    assert sorted(set(h["thread_id"].tolist())) == [0, 1]
    assert not h["fill"].any() and not h["invalid"].any()
    assert set(h["files"]) == {str(f) for f in mark6_scan["files"]}
    # Each frame's bytes at (file, offset) are the frame's bytes in the gathered file, in order.
    gathered = mark6_scan["gathered"].read_bytes()
    for i in (0, 1, 999, 2399):
        with open(h["files"][h["file"][i]], "rb") as f:
            f.seek(int(h["offset"][i]))
            assert f.read(1032) == gathered[1032 * i : 1032 * (i + 1)]
    for t in (0, 1):
        times = h["time"][h["thread_id"] == t]
        assert (np.diff(times) > 0).all()
    assert h["station_id"][0] == int.from_bytes(b"Py", "big")


def test_slicing_by_sample_and_time_and_seeking_back(mark6_scan):
    scan = vlbiflow.open(mark6_scan["scan"], disks=mark6_scan["disks"])
    full = scan.read()
    spf = scan.info["samples_per_frame"]
    np.testing.assert_array_equal(scan[spf * 3 + 7 : spf * 5 + 11], full[spf * 3 + 7 : spf * 5 + 11])
    np.testing.assert_array_equal(scan[10:20], full[10:20])  # backwards: read again from the start
    t0, t1 = 0.01 * u.s, 20 * u.ms
    i0, i1 = round((t0 * scan.sample_rate).to_value(u.one)), round((t1 * scan.sample_rate).to_value(u.one))
    np.testing.assert_array_equal(scan[t0:t1], full[i0:i1])
    np.testing.assert_array_equal(scan[scan.start_time + t0 : scan.start_time + t1], full[i0:i1])
    np.testing.assert_array_equal(scan[np.int64(10) : np.uint32(20)], full[10:20])
    for bad in (0.01, np.float32(10), np.float64(10.0)):
        with pytest.raises(TypeError, match="sample number .* or a time"):
            scan[bad:20]
        with pytest.raises(TypeError, match="sample number"):
            scan.seek(bad)
    assert scan.seek(t0) == i0 and scan.tell(unit=u.ms) == 10 * u.ms
    assert abs(scan.tell(unit="time") - (scan.start_time + t0)) < 1 * u.ns
    assert scan.seek(np.int16(5), whence=1) == i0 + 5
    scan.seek(len(full) - 5)
    assert scan.read(100).shape[0] == 5
    assert scan.read(100).shape[0] == 0


def test_check_and_ls_equal_the_cli_json(mark6_scan):
    report = vlbiflow.check(mark6_scan["scan"], disks=mark6_scan["disks"])
    cli = subprocess.run(
        [vlbiflow_bin(), "check", mark6_scan["scan"], "--disk", mark6_scan["disks"], "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    timing = ("elapsed_s", "read_rate_bytes_per_s")
    strip = lambda r: {k: v for k, v in r.items() if k not in timing}
    assert strip(report) == strip(json.loads(cli.stdout))
    assert report["loss_fraction"] == 0
    scans = vlbiflow.ls(mark6_scan["disks"])
    assert scans == json.loads(run("ls", mark6_scan["disks"], "--json").stdout)
    assert [s["name"] for s in scans] == ["t_py_001"]


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("complex_", [False, True])
def test_write_vdif_round_trips_and_baseband_agrees(tmp_path, bits, complex_):
    rng = np.random.default_rng(bits)
    shape = (4096, 2, 4)
    x = rng.normal(0, 2.0, shape).astype(np.float32)
    if complex_:
        x = (x + 1j * rng.normal(0, 2.0, shape)).astype(np.complex64)
    path = tmp_path / "w.vdif"
    n = vlbiflow.write_vdif(path, x, bits=bits, sample_rate=64_000, samples_per_frame=512, station="Wr")
    assert n == 4096 // 512 * 2
    scan = vlbiflow.open(path)
    assert scan.info["bits"] == bits and scan.info["complex"] == complex_ and scan.info["channels"] == 4
    assert scan.info["threads"] == [0, 1] and scan.sample_rate == 64_000 * u.Hz
    assert scan.info["sample_rate"] == 64_000
    y = scan.read()
    assert y.shape == shape and y.dtype == (np.complex64 if complex_ else np.float32)
    ref, _ = baseband_read(path)
    np.testing.assert_allclose(y, ref.reshape(shape), rtol=1e-6, atol=1e-6)
    # Quantisation is idempotent: writing the decoded levels gives the same levels back.
    vlbiflow.write_vdif(tmp_path / "again.vdif", y, bits=bits, sample_rate=64_000, samples_per_frame=512)
    np.testing.assert_array_equal(vlbiflow.open(tmp_path / "again.vdif").read(), y)


def test_fill_frames_are_masked_nan_or_zero(tmp_path):
    x = np.ma.masked_array(np.ones((8 * 256, 2, 1), np.float32), mask=False)
    x.mask[2 * 256 : 3 * 256, 1] = True  # frame 2 of thread 1
    x.mask[5 * 256 : 6 * 256, :] = True  # frame 5 of both threads
    path = tmp_path / "fill.vdif"
    vlbiflow.write_vdif(path, x, bits=2, sample_rate=256 * 100, samples_per_frame=256)
    scan = vlbiflow.open(path, fill="mask")
    assert scan.info["threads"] == [0, 1]
    m = scan.read()
    assert isinstance(m, np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(m), np.ma.getmaskarray(x))
    assert scan.counts["fill"] == 3
    assert (m.compressed() == 1.0).all()
    nan = vlbiflow.open(path, fill="nan").read()
    np.testing.assert_array_equal(np.isnan(nan), np.ma.getmaskarray(x))
    zero = vlbiflow.open(path, fill="zero").read()
    assert (zero[np.ma.getmaskarray(x)] == 0).all()
    # baseband's fill value, 0, is the default.
    np.testing.assert_array_equal(vlbiflow.open(path).read(), zero)
    h = vlbiflow.open(path).headers()
    assert h["fill"].tolist() == [i in (5, 10, 11) for i in range(16)]
    # The checker agrees: 3 fill frames.
    assert vlbiflow.check(path)["threads"] is not None


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.vdif"):
        vlbiflow.open(tmp_path / "nope.vdif")
    with pytest.raises(FileNotFoundError):
        vlbiflow.open("no_such_scan", disks=str(tmp_path))


def plain_file(tmp_path, frames=40):
    path = tmp_path / "p.vdif"
    run("gen", "--output", str(path), "--pps", "1000", "--count", str(frames), "--payload", "noise",
        "--frame-size", "1032")
    return path


def test_corrupted_header_raises_naming_file_and_offset(tmp_path):
    path = plain_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[1032 * 10 : 1032 * 10 + 32] = b"\xff" * 32
    path.write_bytes(bytes(data))
    with pytest.raises(vlbiflow.VlbiflowError, match=rf"{path}@{1032 * 10}"):
        vlbiflow.open(path).read()
    # Not strict: the damage is skipped (its frame masked) and listed.
    scan = vlbiflow.open(path, strict=False, fill="mask")
    x = scan.read()
    assert x.shape[0] == 40 * scan.info["samples_per_frame"]
    assert np.ma.getmaskarray(x)[10 * scan.info["samples_per_frame"]].all()
    assert any(f"{path}@{1032 * 10}" in f for f in scan.findings)


def test_sample_format_options_must_agree_with_vdif_headers(tmp_path):
    path = plain_file(tmp_path)
    assert vlbiflow.open(path, bits=2, nchan=1).info["bits"] == 2
    with pytest.raises(ValueError, match="say 2 bits per sample, not 4 as given"):
        vlbiflow.open(path, bits=4)
    with pytest.raises(ValueError, match="say 1 channels, not 8 as given"):
        vlbiflow.open(path, nchan=8)


def test_damage_seen_while_probing_is_reported_once(tmp_path):
    # Long enough that open() learns the stream within the first piece it reads and reading starts there.
    path = plain_file(tmp_path, frames=1500)
    data = bytearray(path.read_bytes())
    data[1032 * 10 : 1032 * 10 + 32] = b"\xff" * 32
    path.write_bytes(bytes(data))
    with pytest.raises(vlbiflow.VlbiflowError, match=rf"{path}@{1032 * 10}"):
        vlbiflow.open(path)
    scan = vlbiflow.open(path, strict=False, fill="mask")
    x = scan.read()
    spf = scan.info["samples_per_frame"]
    assert x.shape[0] == 1500 * spf
    assert np.ma.getmaskarray(x)[:, 0, 0].sum() == spf
    assert np.ma.getmaskarray(x)[10 * spf : 11 * spf].all()
    assert [f for f in scan.findings if f"{path}@{1032 * 10}" in f] == scan.findings[:1]
    assert len(scan.findings) == 1


def test_truncated_frame_raises_naming_file_and_offset(tmp_path):
    path = plain_file(tmp_path)
    with open(path, "ab") as f:
        f.write(path.read_bytes()[:500])  # half a frame at the end
    with pytest.raises(vlbiflow.VlbiflowError, match=rf"{path}@{1032 * 40}.*ends inside a frame"):
        vlbiflow.open(path).read()


def test_wrong_frame_size_in_mark6_header_raises(tmp_path, mark6_scan):
    # A Mark6 file whose file header announces another packet size than its frames have.
    disks = tmp_path / "d"
    shutil.copytree(mark6_scan["files"][0].parent.parent, disks)
    f = sorted(disks.glob("*/t_py_001.vdif"))[1]
    b = bytearray(f.read_bytes())
    b[16:20] = (8224).to_bytes(4, "little")  # packet_size field of the file header
    f.write_bytes(bytes(b))
    with pytest.raises(vlbiflow.VlbiflowError, match=rf"{f}@0: file header .*packet size 8224.* differs"):
        vlbiflow.open("t_py_001", disks=str(disks / "*")).read()


def test_frame_with_wrong_frame_size_raises_naming_file_and_offset(tmp_path):
    # A frame whose header announces 8224 bytes in a stream of 1032-byte frames.
    path = plain_file(tmp_path)
    data = bytearray(path.read_bytes())
    at = 1032 * 10 + 8
    word = int.from_bytes(data[at : at + 4], "little")
    data[at : at + 4] = ((word & ~0xFFFFFF) | (8224 // 8)).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(vlbiflow.VlbiflowError, match=rf"{path}@{1032 * 10}: "):
        vlbiflow.open(path).read()


def test_not_vdif_raises_instead_of_crashing(tmp_path):
    path = tmp_path / "junk.vdif"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(vlbiflow.VlbiflowError, match=str(path)):
        vlbiflow.open(path)


def frames_by_slot(scan):
    """Each data frame of a scan decoded by baseband from its bytes in the files (via headers()), keyed by
    (frame set index from the start, thread column)."""
    h = scan.headers()
    rate, start = scan.info["frame_rate"], scan.info["start_time"]
    cols = {t: i for i, t in enumerate(scan.info["threads"])}
    out = {}
    for i in np.flatnonzero(~h["fill"] & ~h["invalid"]):
        with open(h["files"][h["file"][i]], "rb") as f:
            f.seek(int(h["offset"][i]))
            frame = vdif.VDIFFrame.fromfile(f)
        k = round((h["time"][i] - start) * rate)
        out[(k, cols[int(h["thread_id"][i])])] = frame.data
    return out


@pytest.mark.parametrize("name", ["j5_mk6_loss", "j5_mk6_t5_loss", "j5_fb_loss"])
def test_jive5ab_fill_frames_are_masked_at_exactly_their_samples(name):
    """Scans jive5ab 3.1.0 wrote with real fill frames (crates/checker/tests/fixtures/jive5ab)."""
    truth = json.loads((JIVE5AB / "EXPECTED.json").read_text())
    fx = next(f for f in truth["fixtures"] if f["name"] == name)
    disks = [str(JIVE5AB / name / f"disk{d}") for d in range(fx["disks"])]
    rate = fx["frame_rate_per_thread"]
    scan = vlbiflow.open(fx["scan"], disks=disks, fill="mask", frame_rate=rate)
    # jive5ab's fill frames say thread 0: no thread is invented for them.
    assert scan.info["threads"] == fx["threads"]
    spf = scan.info["samples_per_frame"]
    x = scan.read()
    assert x.shape == (fx["frames_in_excerpt"] * spf, 1, 1)
    assert scan.counts["fill"] == fx["fill_frames"] > 0
    want = np.zeros(x.shape[0], bool)
    for k in fx["fill_positions"]:  # frame index = time slot: jive5ab fills a lost frame where it stood
        want[k * spf : (k + 1) * spf] = True
    np.testing.assert_array_equal(np.ma.getmaskarray(x)[:, 0, 0], want)
    # Every other sample is its frame's, as baseband decodes that frame's bytes.
    frames = frames_by_slot(scan)
    assert len(frames) == fx["real_frames"]
    for (k, col), data in frames.items():
        np.testing.assert_array_equal(x.data[k * spf : (k + 1) * spf, col], data)
    nan = vlbiflow.open(fx["scan"], disks=disks, frame_rate=rate, fill="nan").read()
    np.testing.assert_array_equal(np.isnan(nan[:, 0, 0]), want)


def test_recording_with_loss_has_nan_at_exactly_the_lost_frames(tmp_path):
    """vlbiflow gen leaves out every 7th frame it sends (2 threads: thread and time alternate); vlbiflow
    record stores the rest across 4 disks; the lost frames' samples are NaN, nothing else is."""
    threads, frames, every = 2, 1200, 7
    disks = record_scan(tmp_path, "t_py_loss", threads=threads, frames=frames, payload="noise",
                        gen_args=("--drop-every", str(every)))
    scan = vlbiflow.open("t_py_loss", disks=str(disks / "*"), fill="nan")
    assert scan.info["threads"] == [0, 1]
    spf = scan.info["samples_per_frame"]
    x = scan.read()
    # gen sends frame k (0-based) as time slot k // threads of thread k % threads.
    lost = [(k // threads, k % threads) for k in range(every - 1, frames, every)]
    assert x.shape == (frames // threads * spf, threads, 1)
    want = np.zeros(x.shape[:2], bool)
    for slot, thread in lost:
        want[slot * spf : (slot + 1) * spf, thread] = True
    np.testing.assert_array_equal(np.isnan(x[:, :, 0]), want)
    assert scan.counts["frames"] == frames - len(lost)
    # The samples around the holes are each frame's own.
    got = frames_by_slot(scan)
    assert sorted(got) == sorted({(s, t) for s in range(frames // threads) for t in range(threads)} - set(lost))
    for (k, col), data in got.items():
        np.testing.assert_array_equal(x[k * spf : (k + 1) * spf, col], data)
    # The checker counts the same loss.
    assert vlbiflow.check("t_py_loss", disks=str(disks / "*"))["missing"] == len(lost)


def test_reading_releases_the_gil(tmp_path):
    """While one thread is inside scan.read(), another runs Python code and sees the output half written.

    With the GIL held for the whole read, the watching thread could only run before the read starts (the
    buffer all +inf) or after it returns (all written), never in between."""
    path = tmp_path / "gil.vdif"
    run("gen", "--output", str(path), "--pps", "1000", "--count", "1000", "--payload", "noise",
        "--frame-size", "8224")
    scan = vlbiflow.open(path)
    out = np.empty((1000 * scan.info["samples_per_frame"], 1, 1), np.float32)
    state = {"attempt": 0, "seen": False}

    def reader():
        for attempt in range(1, 101):
            if state["seen"]:
                return
            out.fill(np.inf)
            scan.seek(0)
            state["attempt"] = attempt
            assert scan.read(out=out).shape[0] == out.shape[0]
            state["attempt"] = 0

    t = threading.Thread(target=reader)
    t.start()
    while t.is_alive() and not state["seen"]:
        attempt = state["attempt"]
        first, last = out[0, 0, 0], out[-1, 0, 0]
        if attempt and state["attempt"] == attempt and np.isfinite(first) and np.isinf(last):
            state["seen"] = True
    t.join(timeout=300)
    assert not t.is_alive()
    assert state["seen"], "no Python code ran while scan.read() was decoding"


def test_iter_read_streams_a_long_scan_in_bounded_memory(tmp_path):
    """A 49 MB scan decodes to 786 MB of float32; read piece by piece, the process grows by far less (its
    peak RSS, measured in a fresh interpreter)."""
    path = tmp_path / "long.vdif"
    frames = 6000
    run("gen", "--output", str(path), "--pps", "1000", "--count", str(frames), "--payload", "noise",
        "--frame-size", "8224")
    script = f"""
import resource, vlbiflow
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
scan = vlbiflow.open({str(path)!r})
first = scan.read(1 << 20)
before, rows, power = peak(), first.shape[0], float((first ** 2).sum())
for x in scan.iter_read(1 << 20):
    rows += x.shape[0]
    power += float((x ** 2).sum())
print(rows, before, peak(), power)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows, before, after, power = out.stdout.split()
    samples = frames * 32768
    assert int(rows) == samples
    assert np.isfinite(float(power)) and float(power) > samples  # all of it decoded (mean power ~ 3.3)
    growth = int(after) - int(before)
    assert growth < 128 << 20, f"peak RSS grew by {growth / 2**20:.0f} MiB while streaming {samples * 4 / 2**20:.0f} MiB"


def baseband_mark5b(path, nchan, bps, rate, kday):
    import astropy.units as u
    from baseband import mark5b

    with mark5b.open(str(path), "rs", sample_rate=rate * u.Hz, kday=kday, nchan=nchan, bps=bps,
                     squeeze=False) as fh:
        return fh.read(), fh.start_time


def test_baseband_sample_mark5b_decodes_sample_for_sample():
    """baseband's sample.m5b: a real Mark5B recording (8 channels, 2 bits, 32 MHz, MJD 56821)."""
    from baseband.data import SAMPLE_MARK5B

    with pytest.raises(ValueError, match="nchan"):
        vlbiflow.open(SAMPLE_MARK5B)  # Mark5B headers do not carry the sample format
    ref, start = baseband_mark5b(SAMPLE_MARK5B, 8, 2, 32_000_000, 56000)
    scan = vlbiflow.open(SAMPLE_MARK5B, nchan=8, bits=2, kday=56000, frame_rate=6400)
    assert scan.info["kind"] == "m5b" and scan.info["samples_per_frame"] == 5000
    assert scan.sample_rate == 32 * u.MHz and abs(scan.start_time - start) < 1 * u.ns
    x = scan.read()
    assert x.shape == (ref.shape[0], 1, 8)
    np.testing.assert_array_equal(x[:, 0, :], ref)
    h = scan.headers()
    assert h["mjd"].tolist() == [56821] * 4 and h["frame_number"].tolist() == [0, 1, 2, 3]
    # The same day from a reference time instead of kday.
    assert vlbiflow.open(SAMPLE_MARK5B, nchan=8, bits=2, ref_time=start.unix + 400 * 86400,
                         frame_rate=6400).info["start_time"] == scan.info["start_time"]


@pytest.mark.parametrize("nchan,bps", [(4, 2), (16, 1), (1, 2)])
def test_mark5b_written_by_baseband_decodes_sample_for_sample(tmp_path, nchan, bps):
    """Mark5B files baseband writes from noise, over a second boundary (frame rate learned from the
    headers), with one frame replaced by fill (jive5ab's pattern) which must come back masked."""
    import astropy.units as u
    from astropy.time import Time
    from baseband import mark5b

    spf = 10000 * 8 // (nchan * bps)
    rate = 200  # frames per second
    frames = rate + 40
    rng = np.random.default_rng(nchan * 10 + bps)
    data = rng.normal(0, 2, (frames * spf, nchan)).astype(np.float32)
    path = tmp_path / "w.m5b"
    start = Time("2025-03-01T11:59:59", scale="utc")
    with mark5b.open(str(path), "ws", sample_rate=rate * spf * u.Hz, nchan=nchan, bps=bps, time=start,
                     squeeze=False) as fw:
        fw.write(data)
    kday = int(start.mjd) // 1000 * 1000
    ref, _ = baseband_mark5b(path, nchan, bps, rate * spf, kday)
    scan = vlbiflow.open(path, nchan=nchan, bits=bps, ref_time=start)
    assert scan.info["frame_rate"] == rate and scan.info["frame_rate_source"].startswith("highest frame")
    assert scan.info["start_time"] == start.unix and abs(scan.start_time - start) < 1 * u.ns
    x = scan.read()
    assert x.shape == (frames * spf, 1, nchan)
    np.testing.assert_array_equal(x[:, 0, :], ref)
    # Frame 7's payload becomes fill words: its samples are masked, the rest unchanged.
    raw = bytearray(path.read_bytes())
    raw[7 * 10016 + 16 : 8 * 10016] = b"\x44\x33\x22\x11" * 2500
    path.write_bytes(bytes(raw))
    m = vlbiflow.open(path, nchan=nchan, bits=bps, ref_time=start, fill="mask").read()
    want = np.zeros(frames * spf, bool)
    want[7 * spf : 8 * spf] = True
    np.testing.assert_array_equal(np.ma.getmaskarray(m)[:, 0, 0], want)
    np.testing.assert_array_equal(m.data[~want], x[~want])


def test_read_into_a_given_array(mark6_scan):
    scan = vlbiflow.open(mark6_scan["scan"], disks=mark6_scan["disks"])
    full = scan.read()
    scan.seek(0)
    buf = np.full((5000, 2, 1), 7.0, np.float32)
    pieces = []
    while (x := scan.read(out=buf)).shape[0]:
        assert x.base is buf or x.base is buf.base or np.shares_memory(x, buf)
        pieces.append(x.copy())
    np.testing.assert_array_equal(np.concatenate(pieces), full)
    with pytest.raises(ValueError, match="out must be"):
        scan.read(out=np.empty((10, 1, 1), np.float32))  # wrong number of threads
    with pytest.raises(ValueError, match="does not fit"):
        scan.read(20, out=np.empty((10, 2, 1), np.float32))
