"""Arrays handed to the extension: wrong ones are refused with TypeError/ValueError, and nothing outside the
array Python handed over is ever written (each array is a view into a larger canary buffer)."""

import numpy as np
import pytest

import vlbiflow

CANARY = 0x5A


@pytest.fixture(scope="module")
def two_thread_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("arrays") / "a.vdif"
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, (64 * 256, 2, 4)).astype(np.float32)
    # 256 kHz: EDV 1 headers carry the sample rate (the file is shorter than a second).
    vlbiflow.write_vdif(path, x, bits=2, sample_rate=256_000, samples_per_frame=256, start_time=1_700_000_000)
    return path


def carve(rng, shape, dtype, order="C", step=1, offset_bytes=0, readonly=False):
    """A view of `shape` and `dtype` inside a bigger uint8 canary buffer (optionally strided along the
    first axis, misaligned by `offset_bytes`, Fortran-ordered or read-only), and the buffer."""
    dtype = np.dtype(dtype)
    full = (shape[0] * step,) + tuple(shape[1:]) if shape else ()
    nbytes = int(np.prod(full, dtype=np.int64)) * dtype.itemsize
    buf = np.full(nbytes + 256 + offset_bytes, CANARY, np.uint8)
    base = buf[64 + offset_bytes : 64 + offset_bytes + nbytes]
    arr = np.ndarray(full, dtype=dtype, buffer=base, order=order)
    if step != 1:
        arr = arr[::step]
    if readonly:
        arr.flags.writeable = False
    return arr, buf


def outside_untouched(arr, buf):
    """True if every byte of buf that is not an element of arr still holds the canary."""
    mine = np.zeros(buf.shape, bool)
    if arr.size:
        start = arr.__array_interface__["data"][0] - buf.__array_interface__["data"][0]
        idx = np.indices(arr.shape).reshape(arr.ndim, -1).T if arr.ndim else np.zeros((1, 0), int)
        offs = start + idx @ np.array(arr.strides, dtype=np.int64)
        for k in range(arr.itemsize):
            mine[offs + k] = True
    return bool((buf[~mine] == CANARY).all())


def test_the_unsafe_address_path_is_gone():
    import inspect

    src = inspect.getsource(vlbiflow)
    assert "ctypes" not in src and ".data_ptr" not in src


def test_read_into_accepts_only_the_right_arrays(two_thread_file):
    scan = vlbiflow.open(two_thread_file)
    r = scan._r
    rng = np.random.default_rng(1)
    good, _ = carve(rng, (300, 2, 4), np.float32)
    assert r.read_into(good, 0.0, None) == 300
    bad = [
        ((300, 2, 4), np.float64, {}, TypeError),
        ((300, 2, 4), np.int32, {}, TypeError),
        ((300, 2, 4), np.complex64, {}, TypeError),
        ((300, 8), np.float32, {}, TypeError),  # 2-D
        ((300, 2, 4, 1), np.float32, {}, TypeError),  # 4-D
        ((300, 2, 3), np.float32, {}, ValueError),  # too few values per time
        ((300, 1, 4), np.float32, {}, ValueError),  # too few threads
        ((300, 2, 5), np.float32, {}, ValueError),  # too many values
        ((300, 2, 4), np.float32, {"step": 2}, ValueError),  # strided
        ((300, 2, 4), np.float32, {"order": "F"}, ValueError),  # Fortran order
        ((300, 2, 4), np.float32, {"readonly": True}, ValueError),
        ((300, 2, 4), np.float32, {"offset_bytes": 2}, ValueError),  # misaligned
    ]
    for shape, dtype, kw, err in bad:
        arr, buf = carve(rng, shape, dtype, **kw)
        with pytest.raises((TypeError, ValueError)) as e:
            r.read_into(arr, 0.0, None)
        assert e.type is err or issubclass(e.type, (TypeError, ValueError)), (shape, dtype, kw)
        assert (buf == CANARY).all(), (shape, dtype, kw)
    for bad_out in (None, 12345, b"x" * 4096, [0.0] * 100):
        with pytest.raises(TypeError):
            r.read_into(bad_out, 0.0, None)
    # Masks: wrong dtype, too short, wrong thread count, read-only, strided; or the same memory as out.
    out, _ = carve(rng, (100, 2, 4), np.float32)
    for shape, dtype, kw in [((100, 2), np.uint8, {}), ((99, 2), np.bool_, {}), ((100, 3), np.bool_, {}),
                             ((100, 2), np.bool_, {"readonly": True}), ((100, 2), np.bool_, {"step": 2}),
                             ((100,), np.bool_, {})]:
        mask, buf = carve(rng, shape, dtype, **kw)
        with pytest.raises((TypeError, ValueError)):
            r.read_into(out, 0.0, mask)
        assert (buf == CANARY).all(), (shape, dtype, kw)
    # An integer is no longer taken as an address.
    with pytest.raises(TypeError):
        r.read_into(out.ctypes.data, 0.0, None)


def test_random_arrays_never_write_outside_what_was_handed_over(two_thread_file):
    """Property test: random shapes, dtypes, strides, offsets, orders and flags. Every call either raises
    TypeError/ValueError having written nothing, or writes exactly its array's elements."""
    scan = vlbiflow.open(two_thread_file)
    rng = np.random.default_rng(41)
    dtypes = [np.float32, np.float64, np.float16, np.int8, np.uint32, np.complex64, np.bool_]
    accepted = 0
    for trial in range(300):
        ndim = int(rng.integers(1, 5))
        shape = [int(rng.integers(0, 40))] + [int(rng.choice([1, 2, 3, 4, 8])) for _ in range(ndim - 1)]
        if rng.random() < 0.5 and ndim == 3:
            shape[1:] = [2, 4]
        dtype = dtypes[int(rng.integers(len(dtypes)))] if rng.random() < 0.4 else np.float32
        kw = {
            "step": int(rng.choice([1, 1, 1, 2, 3])),
            "order": "F" if rng.random() < 0.15 else "C",
            "offset_bytes": int(rng.choice([0, 0, 0, 1, 2, 4])),
            "readonly": bool(rng.random() < 0.15),
        }
        if rng.random() < 0.3:  # one fault at most: most of these are accepted
            kw = {"step": 1, "order": "C", "offset_bytes": 0, "readonly": False}
            shape, dtype = [shape[0], 2, 4], np.float32
        arr, buf = carve(rng, tuple(shape), dtype, **kw)
        mask = None
        if rng.random() < 0.3:
            mshape = (int(rng.integers(0, 45)), int(rng.choice([1, 2, 3])))
            mask, mbuf = carve(rng, mshape, np.bool_ if rng.random() < 0.8 else np.uint8,
                               step=int(rng.choice([1, 1, 2])), readonly=bool(rng.random() < 0.1))
        if scan.tell() > 60 * 256:
            scan.seek(0)
        try:
            rows = scan._r.read_into(arr, 0.0, mask)
        except (TypeError, ValueError):
            assert (buf == CANARY).all(), (trial, shape, dtype, kw)
            if mask is not None:
                assert (mbuf == CANARY).all(), (trial, shape, dtype, kw)
            continue
        accepted += 1
        assert arr.dtype == np.float32 and arr.ndim == 3 and arr.shape[1:] == (2, 4)
        assert arr.flags.c_contiguous and arr.flags.writeable and arr.flags.aligned
        assert rows <= arr.shape[0]
        assert outside_untouched(arr, buf), (trial, shape, dtype, kw)
        if mask is not None:
            assert outside_untouched(mask[:rows], mbuf), (trial, shape, kw)
    assert accepted > 20


def test_read_out_refuses_wrong_arrays_with_a_message(two_thread_file):
    scan = vlbiflow.open(two_thread_file)
    for out in (np.empty((10, 2, 4), np.float64), np.empty((10, 2, 4), np.float32)[::2],
                np.empty((10, 2, 4), np.float32, order="F"), np.empty((10, 2, 3), np.float32)):
        with pytest.raises((TypeError, ValueError), match="out must be"):
            scan.read(out=out)
    ro = np.empty((10, 2, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be"):
        scan.read(out=ro)


def test_version_is_the_crate_version():
    import importlib.metadata
    import re
    from pathlib import Path

    cargo = (Path(__file__).resolve().parents[3] / "Cargo.toml").read_text()
    version = re.search(r'\[workspace\.package\][^\[]*?\nversion = "([^"]+)"', cargo).group(1)
    assert vlbiflow.__version__ == version == importlib.metadata.version("vlbiflow")


def test_without_astropy_times_and_rates_are_floats(two_thread_file, monkeypatch):
    """As if astropy were not installed: floats in Hz and POSIX seconds, positions by sample only."""
    monkeypatch.setattr(vlbiflow, "_ASTROPY", False)
    scan = vlbiflow.open(two_thread_file)
    assert scan.sample_rate == 256_000.0 and isinstance(scan.sample_rate, float)
    assert scan.start_time == 1_700_000_000.0 and isinstance(scan.start_time, float)
    assert scan.seek(np.int32(256)) == 256 and scan.tell(unit="time") == 1_700_000_000.001
    np.testing.assert_array_equal(scan[256:512], vlbiflow.open(two_thread_file)[256:512])
    with pytest.raises(TypeError, match="sample number"):
        scan[0.0:0.01]
