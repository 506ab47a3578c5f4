"""vlbiflow's Python package against real recordings and the independent baseband reader."""

import json
import shutil
import subprocess

import numpy as np
import pytest
from baseband import vdif

import vlbiflow
from conftest import run, vlbiflow_bin


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
    assert scan.sample_rate == fh.sample_rate.to_value("Hz")
    assert scan.start_time == pytest.approx(fh.start_time.unix, abs=1e-6)
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
    t0, t1 = 0.01, 0.02
    i0, i1 = round(t0 * scan.sample_rate), round(t1 * scan.sample_rate)
    np.testing.assert_array_equal(scan[t0:t1], full[i0:i1])
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
    assert scan.info["threads"] == [0, 1] and scan.sample_rate == 64_000
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
    nan = vlbiflow.open(path).read()
    np.testing.assert_array_equal(np.isnan(nan), np.ma.getmaskarray(x))
    zero = vlbiflow.open(path, fill="zero").read()
    assert (zero[np.ma.getmaskarray(x)] == 0).all()
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
    with pytest.raises(vlbiflow.VlbiflowError, match=str(f)):
        vlbiflow.open("t_py_001", disks=str(disks / "*")).read()


def test_not_vdif_raises_instead_of_crashing(tmp_path):
    path = tmp_path / "junk.vdif"
    path.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(vlbiflow.VlbiflowError, match=str(path)):
        vlbiflow.open(path)
