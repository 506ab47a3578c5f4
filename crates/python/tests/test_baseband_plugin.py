"""vlbiflow as baseband formats ('mark6sg', 'flexbuff'): baseband.open on Mark6 and FlexBuff scans gives
what baseband's own VDIF reader gives on the same scan gathered to plain VDIF (`vlbiflow gather`): samples,
times, rates, shapes, seeking, subsets and fill."""

import io
import json
import warnings

import astropy.units as u
import baseband
import numpy as np
import pytest
from astropy.time import Time
from baseband import vdif

import vlbiflow
from conftest import ROOT, record_scan, run

JIVE5AB = ROOT / "crates" / "checker" / "tests" / "fixtures" / "jive5ab"


def gather(scan, disks, out):
    run("gather", scan, *sum((["--disk", d] for d in disks), []), "-o", str(out))
    return out


def open_ref(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # baseband warns about the frames it fills
        return vdif.open(str(path), "rs", **kwargs)


def read_quietly(fh, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fh.read(*args, **kwargs)


def assert_same_stream(fh, ref):
    """Everything baseband defines about a stream, the plugin's against baseband's VDIF reader."""
    assert fh.sample_rate == ref.sample_rate and isinstance(fh.sample_rate, u.Quantity)
    assert fh.samples_per_frame == ref.samples_per_frame
    assert fh.shape == ref.shape and fh.sample_shape == ref.sample_shape
    assert fh.sample_shape._fields == ref.sample_shape._fields
    assert fh.dtype == ref.dtype and fh.bps == ref.bps and fh.complex_data == ref.complex_data
    half = 0.5 / ref.sample_rate
    for a in ("start_time", "stop_time", "time"):
        assert isinstance(getattr(fh, a), Time)
        assert abs(getattr(fh, a) - getattr(ref, a)) < half, a
    assert fh.header0 == ref.header0
    assert fh.fill_value == ref.fill_value == 0
    assert fh.squeeze == ref.squeeze
    x = read_quietly(fh)
    y = read_quietly(ref)
    assert x.shape == y.shape and x.dtype == y.dtype
    np.testing.assert_array_equal(x, y)
    assert fh.tell() == ref.tell() == ref.shape[0]
    # Seeking: by sample (numpy integers too), by time offset, by absolute Time; whence 1 and 2.
    spf = ref.samples_per_frame
    cases = [
        (3 * spf + 7, 0),
        (5, 1),
        (np.int64(spf // 2), 0),
        (1.5 * spf / ref.sample_rate, 0),
        (ref.start_time + 2.25 * spf / ref.sample_rate, 0),
        (-spf - 3, 2),
    ]
    for offset, whence in cases:
        assert fh.seek(offset, whence) == ref.seek(offset, whence)
        assert abs(fh.tell(unit="time") - ref.tell(unit="time")) < half
        assert fh.tell(unit=u.ms) == ref.tell(unit=u.ms)
        n = min(2 * spf + 11, ref.shape[0] - ref.tell())
        np.testing.assert_array_equal(read_quietly(fh, n), read_quietly(ref, n))
    # read(out=) and EOF beyond the end, the position unchanged.
    fh.seek(spf)
    ref.seek(spf)
    out = np.empty((spf + 3,) + fh.sample_shape, fh.dtype)
    assert read_quietly(fh, out=out) is out
    np.testing.assert_array_equal(out, read_quietly(ref, spf + 3))
    fh.seek(-5, 2)
    with pytest.raises(EOFError):
        fh.read(6)
    assert fh.tell() == fh.shape[0] - 5
    fh.seek(0)
    np.testing.assert_array_equal(read_quietly(fh, 10), y[:10])


def compare_with_options(opener, gathered, **kwargs):
    """subset, squeeze=False and fill_value, opened alike on both sides."""
    with opener(**kwargs) as fh, open_ref(gathered, **kwargs) as ref:
        assert fh.sample_shape == ref.sample_shape and fh.shape == ref.shape
        assert fh.subset == ref.subset and fh.fill_value == ref.fill_value
        np.testing.assert_array_equal(read_quietly(fh), read_quietly(ref))


def test_mark6_scan_through_baseband_open_is_baseband_reading_the_gathered_file(mark6_scan):
    def opener(**kw):
        return baseband.open(mark6_scan["scan"], "rs", format="mark6sg", disks=mark6_scan["disks"], **kw)

    with opener() as fh, open_ref(mark6_scan["gathered"]) as ref:
        assert type(fh).__name__ == "Mark6SGStreamReader"
        assert_same_stream(fh, ref)
    compare_with_options(opener, mark6_scan["gathered"], subset=1)
    compare_with_options(opener, mark6_scan["gathered"], squeeze=False)
    compare_with_options(opener, mark6_scan["gathered"], squeeze=False, subset=(slice(None), 0))
    # The Mark6 files themselves, without disks=.
    with baseband.open([str(f) for f in mark6_scan["files"]], "rs", format="mark6sg") as fh:
        with open_ref(mark6_scan["gathered"]) as ref:
            np.testing.assert_array_equal(fh.read(), ref.read())


def test_flexbuff_scan_through_baseband_open(flexbuff_scan):
    def opener(**kw):
        return baseband.open(flexbuff_scan["scan"], "rs", format="flexbuff", disks=flexbuff_scan["disks"], **kw)

    with opener() as fh, open_ref(flexbuff_scan["gathered"]) as ref:
        assert type(fh).__name__ == "FlexbuffStreamReader"
        assert_same_stream(fh, ref)
    compare_with_options(opener, flexbuff_scan["gathered"], subset=[3, 1])


def test_file_info_describes_the_scans_and_refuses_other_layouts(mark6_scan, flexbuff_scan):
    info = baseband.file_info(mark6_scan["scan"], format="mark6sg", disks=mark6_scan["disks"])
    assert info and info.format == "mark6sg"
    with open_ref(mark6_scan["gathered"]) as ref:
        assert info.shape == ref.shape and info.sample_rate == ref.sample_rate
        assert abs(info.start_time - ref.start_time) < 0.5 / ref.sample_rate
        assert abs(info.stop_time - ref.stop_time) < 0.5 / ref.sample_rate
    assert info.bps == 2 and info.complex_data is False and info.readable
    fb = baseband.file_info(flexbuff_scan["scan"], format="flexbuff", disks=flexbuff_scan["disks"])
    assert fb and fb.format == "flexbuff" and fb.shape[1:] == (4,)
    # A FlexBuff scan is not Mark6, a gathered file neither; baseband tries the formats in turn.
    assert not baseband.file_info(flexbuff_scan["scan"], format="mark6sg", disks=flexbuff_scan["disks"])
    assert not baseband.file_info(str(mark6_scan["gathered"]), format="mark6sg")
    assert not baseband.file_info(str(mark6_scan["gathered"]), format="flexbuff")
    assert baseband.file_info(str(mark6_scan["gathered"])).format == "vdif"
    assert baseband.file_info(str(mark6_scan["files"][0])).format == "mark6sg"
    with pytest.raises(ValueError, match="only mode 'rs'"):
        baseband.open(mark6_scan["scan"], "ws", format="mark6sg", disks=mark6_scan["disks"])
    assert "mark6sg" in baseband.io.FORMATS and "flexbuff" in baseband.io.FORMATS


@pytest.mark.parametrize(
    "layout,threads,channels,complex_,drop",
    [
        ("mark6", 2, 4, True, 7),
        ("flexbuff", 1, 8, False, 5),
        ("mark6", 4, 2, False, 0),
        ("flexbuff", 2, 1, True, 9),
    ],
)
def test_recorded_scans_of_every_shape_with_lost_frames(tmp_path, layout, threads, channels, complex_, drop):
    """Scans vlbiflow record wrote from vlbiflow gen (2-bit real and complex, several threads and channels;
    with every `drop`-th frame lost, which both readers fill with 0)."""
    scan = f"t_bb_{layout[:2]}{threads}{channels}"
    gen = ("--channels", str(channels)) + (("--complex",) if complex_ else ()) + (
        ("--drop-every", str(drop)) if drop else ())
    # 2400 frames at 2000 a second: 1.2 s, over a second boundary (baseband learns the frame rate there).
    disks = record_scan(tmp_path, scan, threads=threads, frames=2400, payload="noise", layout=layout,
                        gen_args=gen)
    gathered = gather(scan, [str(disks / "*")], tmp_path / "g.vdif")
    fmt = "mark6sg" if layout == "mark6" else "flexbuff"
    with baseband.open(scan, "rs", format=fmt, disks=str(disks / "*")) as fh, open_ref(gathered) as ref:
        assert fh.complex_data == complex_
        assert_same_stream(fh, ref)
    if drop:
        with vlbiflow.open(scan, disks=str(disks / "*"), fill="mask") as s:
            assert np.ma.getmaskarray(s.read()).any()
    compare_with_options(lambda **kw: baseband.open(scan, "rs", format=fmt, disks=str(disks / "*"), **kw),
                         gathered, fill_value=-7.0, squeeze=False)


@pytest.mark.parametrize("name,fmt", [("j5_mk6_loss", "mark6sg"), ("j5_fb_loss", "flexbuff"),
                                      ("j5_mk6_clean", "mark6sg")])
def test_jive5ab_scans_with_fill_frames(tmp_path, name, fmt):
    """Scans jive5ab 3.1.0 wrote, with its fill frames for lost data (crates/checker/tests/fixtures)."""
    truth = json.loads((JIVE5AB / "EXPECTED.json").read_text())
    fx = next(f for f in truth["fixtures"] if f["name"] == name)
    disks = [str(JIVE5AB / name / f"disk{d}") for d in range(fx["disks"])]
    rate = fx["frame_rate_per_thread"]
    with baseband.open(fx["scan"], "rs", format=fmt, disks=disks, frame_rate=rate) as fh:
        x = fh.read()
        spf = fh.samples_per_frame
        assert x.shape[0] == fx["frames_in_excerpt"] * spf
        want = np.zeros(x.shape[0], bool)
        for k in fx.get("fill_positions", []):
            want[k * spf : (k + 1) * spf] = True
        assert (x[want] == 0).all()
        # The same samples as vlbiflow's own reader, whose every frame the vlbiflow tests compare with
        # baseband decoding that frame's bytes.
        own = vlbiflow.open(fx["scan"], disks=disks, frame_rate=rate).read()
        np.testing.assert_array_equal(x, own.reshape(x.shape))
        assert fh.sample_rate == rate * spf * u.Hz
    # baseband's stream reader on the gathered file agrees except, in its 'fix' mode, on the frame just
    # before each fill frame, which it sets invalid too ("frame set seems to be missing altogether"):
    # there it gives 0 where the frame's own bytes decode (below) to what the plugin gives.
    gathered = gather(fx["scan"], disks, tmp_path / "g.vdif")
    with open_ref(gathered, sample_rate=rate * spf * u.Hz) as ref:
        assert ref.shape == x.shape and abs(ref.start_time - Time(fx["first_frame"]["iso"])) < 1 * u.ns
        y = read_quietly(ref)
    differ = sorted(set((np.flatnonzero(x != y) // spf).tolist()))
    assert set(differ) <= {k - 1 for k in fx.get("fill_positions", [])}, differ
    assert (y[np.isin(np.arange(len(y)) // spf, differ)] == 0).all()
    # Frames without fill are what baseband decodes from their bytes in the gathered file.
    data = gathered.read_bytes()
    flen = len(data) // (fx["frames_in_excerpt"] * len(fx["threads"])) if data else 0
    assert flen > 32
    for k in range(fx["frames_in_excerpt"]):
        if k in fx.get("fill_positions", []):
            continue
        frame = vdif.VDIFFrame.fromfile(io.BytesIO(data[k * flen : (k + 1) * flen]))
        np.testing.assert_array_equal(x[k * spf : (k + 1) * spf], frame.data.reshape(x[:spf].shape))


@pytest.mark.parametrize("layout", ["mark6", "flexbuff"])
def test_a_scan_of_several_streams_is_read_by_label(tmp_path, layout):
    """A scan recorded from two streams (both VDIF thread 0, as many backends send, sent at the same time so
    their blocks interleave): each stream, chosen by its label, is what baseband reads from that stream
    gathered alone (`vlbiflow gather --stream LABEL`); without a label the reader names the labels."""
    scan = f"t_bb_two_{layout[:2]}"
    disks = record_scan(tmp_path, scan, threads=1, frames=2400, payload="noise", layout=layout,
                        streams=("lcp", "rcp"))
    fmt = "mark6sg" if layout == "mark6" else "flexbuff"
    d = str(disks / "*")
    for label, station in (("lcp", "P0"), ("rcp", "P1")):
        gathered = tmp_path / f"{label}.vdif"
        run("gather", scan, "--disk", d, "--stream", label, "-o", str(gathered))
        with baseband.open(scan, "rs", format=fmt, disks=d, stream=label) as fh, open_ref(gathered) as ref:
            assert fh.streams == ("lcp", "rcp") and fh.stream == label
            assert fh.header0.station == station
            assert_same_stream(fh, ref)
        info = baseband.file_info(scan, format=fmt, disks=d, stream=label)
        assert info and info.used_kwargs["stream"] == label
        with vlbiflow.open(scan, disks=d, stream=label) as s:
            assert s.info["streams"] == ["lcp", "rcp"] and s.info["stream"] == label
            assert s.info["station"] == station
    with pytest.raises(ValueError, match="several recorded streams .*lcp, rcp.*stream="):
        baseband.open(scan, "rs", format=fmt, disks=d)
    with pytest.raises(ValueError, match="several recorded streams"):
        vlbiflow.open(scan, disks=d)
    with pytest.raises(ValueError, match='no stream "x"; the scan\'s streams are lcp, rcp'):
        vlbiflow.open(scan, disks=d, stream="x")
    assert not baseband.file_info(scan, format=fmt, disks=d)
