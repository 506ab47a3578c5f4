"""Read Mark6, FlexBuff and plain VDIF/Mark5B recordings into numpy, check them, write VDIF.

The reading, framing, fill recognition and sample decoding are vlbiflow's own Rust crates (the same code as
``vlbiflow check`` and ``vlbiflow gather``); this package only hands their results to numpy.

Example::

    >>> import vlbiflow
    >>> with vlbiflow.open("t_xx_001", disks="/tmp/d/*") as scan:      # doctest: +SKIP
    ...     print(scan.info["threads"], scan.sample_rate, scan.start_time.isot)
    ...     x = scan.read(4096)          # float32 (time, thread, channel), 0 where data is missing
    ...     h = scan.headers()           # dict of numpy arrays, one entry per frame

With astropy installed, times are ``astropy.time.Time`` and rates ``astropy.units.Quantity`` (as in
baseband); without it, POSIX seconds and Hz as floats. Installed with baseband, vlbiflow is also a baseband
format: ``baseband.open(scan, "rs", format="mark6sg", disks=...)`` (see :mod:`vlbiflow.io`).
"""

from __future__ import annotations

import io as _io
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _vlbiflow
from ._vlbiflow import BASEBAND_SCALE, VlbiflowError, __version__

__all__ = [
    "open",
    "check",
    "ls",
    "write_vdif",
    "Scan",
    "RawFile",
    "VlbiflowError",
    "BASEBAND_SCALE",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


def _args(scan_or_files: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    if isinstance(scan_or_files, (str, os.PathLike)):
        return [os.fspath(scan_or_files)]
    return [os.fspath(p) for p in scan_or_files]


def _disks(disks: Union[None, PathLike, Sequence[PathLike]]) -> List[str]:
    if disks is None:
        return []
    if isinstance(disks, (str, os.PathLike)):
        return [os.fspath(disks)]
    return [os.fspath(d) for d in disks]


_FILL = {"nan": float("nan"), "mask": 0.0, "zero": 0.0}

_ASTROPY: Any = None


def _astropy() -> Any:
    """(astropy.units, astropy.time.Time), or None if astropy is not installed (imported on first use)."""
    global _ASTROPY
    if _ASTROPY is None:
        try:
            import astropy.units as u
            from astropy.time import Time
        except ImportError:
            _ASTROPY = False
        else:
            _ASTROPY = (u, Time)
    return _ASTROPY or None


def _sample_index(value: Any, start: Any, rate_hz: float, what: str = "position") -> int:
    """A sample number from an int (``np.integer`` too), an astropy ``Time`` (absolute) or a time
    ``Quantity`` (from the start). Floats are refused: a float is neither a sample number nor a time."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be a sample number (int) or a time (astropy Time or Quantity), not a bool")
    if isinstance(value, (int, np.integer)):
        return int(value)
    ap = _astropy()
    if ap is not None:
        u, Time = ap
        if isinstance(value, Time):
            dt = (value - start).to_value(u.s)
            return int(np.round(dt * rate_hz))
        if isinstance(value, u.Quantity) and value.unit.physical_type == "time":
            return int(np.round(value.to_value(u.s) * rate_hz))
    raise TypeError(
        f"{what} must be a sample number (int or numpy integer) or a time (astropy Time, absolute, or a "
        f"Quantity in time units, from the start), not {type(value).__name__} {value!r}"
    )

#: MJD of the POSIX epoch (1970-01-01).
_MJD_UNIX = 40587


def _ref_mjd(kday: Optional[int], ref_time: Any) -> Optional[int]:
    """The MJD near which a Mark5B MJD mod 1000 is resolved (None: today)."""
    if kday is not None and ref_time is not None:
        raise ValueError("give kday or ref_time, not both")
    if kday is not None:
        if int(kday) != kday or kday % 1000:
            raise ValueError(f"kday must be a multiple of 1000 (an MJD's thousands), not {kday!r}")
        # The day kday + (MJD mod 1000) is the one nearest kday + 500.
        return int(kday) + 500
    if ref_time is not None:
        unix = getattr(ref_time, "unix", ref_time)  # astropy Time or POSIX seconds
        return int(float(unix) // 86400) + _MJD_UNIX
    return None


class RawFile(_io.RawIOBase):
    """The gathered frames of a recording as a read-only, seekable binary file.

    It holds exactly what ``vlbiflow gather`` writes (frames in block order, block headers stripped), so any
    VDIF reader can read it, e.g. ``baseband.vdif.open(scan.raw(), 'rs')``. Seeking backwards reads the
    recording again from its start; the size costs one pass over the recording the first time it is asked.
    """

    def __init__(
        self, args: List[str], disks: List[str], strict: bool = True, stream: Optional[str] = None
    ) -> None:
        super().__init__()
        self._s = _vlbiflow.RawStream(args, disks, strict, stream)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        m = memoryview(b).cast("B")
        data = self._s.read(len(m))
        m[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        return self._s.read(size)

    def readall(self) -> bytes:
        return self._s.read(max(self._s.size() - self._s.tell(), 0))

    def tell(self) -> int:
        return self._s.tell()

    def seek(self, offset: int, whence: int = _io.SEEK_SET) -> int:
        if whence == _io.SEEK_CUR:
            offset += self._s.tell()
        elif whence == _io.SEEK_END:
            offset += self._s.size()
        elif whence != _io.SEEK_SET:
            raise ValueError(f"invalid whence {whence}")
        if offset < 0:
            raise ValueError("negative seek position")
        return self._s.seek(offset)


class Scan:
    """The frames of a recording in time order, decoded on demand. Made by :func:`open`.

    Attributes:
        info: stream facts as plain numbers (``bits``, ``channels``, ``complex``, ``threads``,
            ``frame_rate``, ``samples_per_frame``, ``sample_rate`` in Hz, ``start_time`` as POSIX seconds,
            ``station``, ``layout`` "mark6", "flexbuff" or "plain", ``streams`` the labels of a scan
            recorded from several streams (empty otherwise), ``stream`` the one read, ...).
        sample_rate, start_time, time: astropy ``Quantity`` (Hz) and ``Time`` when astropy is installed,
            else floats (Hz, POSIX seconds).
        shape: ``(None, threads, channels)``: the time length is known only at the end of the recording.
        dtype: ``float32``, or ``complex64`` for complex data.

    Samples are in baseband's units (2-bit levels -3.3166, -1, +1, +3.3166) unless ``units="sigma"``
    (the same divided by ``vlbiflow.BASEBAND_SCALE``). Missing or fill frames become zero (baseband's fill
    value), NaN, or masked values according to ``fill``.

    Positions are sample numbers (``int`` or numpy integers) or times: an astropy ``Time`` (absolute) or
    a ``Quantity`` in time units (from the start). Floats are refused (``TypeError``).

    Example::

        >>> import astropy.units as u                                  # doctest: +SKIP
        >>> scan = vlbiflow.open("scan.vdif")
        >>> x = scan.read(scan.info["samples_per_frame"])              # one frame per thread
        >>> x.shape
        (20000, 1, 1)
        >>> y = scan[0.5 * u.s : 0.6 * u.s]                            # by time from the start
        >>> z = scan[1000:2000]                                        # by sample number
        >>> w = scan[scan.start_time + 1 * u.s :]                      # from an absolute time
    """

    def __init__(
        self,
        args: List[str],
        disks: List[str],
        fill: str = "zero",
        frame_rate: Optional[int] = None,
        strict: bool = True,
        units: str = "baseband",
        nchan: Optional[int] = None,
        bits: Optional[int] = None,
        ref_mjd: Optional[int] = None,
        stream: Optional[str] = None,
    ) -> None:
        if fill not in _FILL:
            raise ValueError(f"fill must be 'zero', 'nan' or 'mask', not {fill!r}")
        if units not in ("baseband", "sigma"):
            raise ValueError(f"units must be 'baseband' or 'sigma', not {units!r}")
        self._args, self._disks, self._strict = args, disks, strict
        self._frame_rate = frame_rate
        self._m5b = (bits, nchan, ref_mjd)
        self._stream = stream
        self.fill = fill
        self._r = _vlbiflow.Reader(
            (args, disks, stream), frame_rate, strict, units == "baseband", self._m5b
        )
        self.info: Dict[str, Any] = self._r.info()
        if self.info["streams"] and stream is None:
            self._r = None  # type: ignore[assignment]
            raise ValueError(
                f"{args}: a scan of several recorded streams ({', '.join(self.info['streams'])}): "
                "choose one with stream=LABEL"
            )
        self.dtype = np.dtype(np.complex64 if self.info["complex"] else np.float32)
        self.shape = (None, len(self.info["threads"]), self.info["channels"])

    # -- properties -------------------------------------------------------------------------------
    @property
    def sample_rate(self) -> Any:
        """Samples per second per channel (complex samples for complex data): a ``Quantity`` in Hz with
        astropy, else a float in Hz."""
        ap = _astropy()
        rate = float(self.info["sample_rate"])
        return rate if ap is None else rate * ap[0].Hz

    @property
    def start_time(self) -> Any:
        """Time of the first sample: an astropy ``Time`` (UTC), or POSIX seconds (float) without astropy."""
        ap = _astropy()
        i = self.info
        frac = i["start_frame"] / i["frame_rate"]
        if ap is None:
            return float(i["start_second"] + frac)
        return ap[1](float(i["start_second"]), frac, format="unix", scale="utc")

    @property
    def time(self) -> Any:
        """Time of the read position (``Time``, or POSIX seconds without astropy)."""
        return self.tell(unit="time")

    @property
    def findings(self) -> List[str]:
        """What the reader found so far (block gaps; damage too when ``strict=False``)."""
        return list(self._r.findings())

    @property
    def counts(self) -> Dict[str, int]:
        """Frames read, and those not placed: fill, invalid, stray (unknown thread), late, duplicate."""
        return dict(self._r.counts())

    # -- reading ----------------------------------------------------------------------------------
    def tell(self, unit: Any = None) -> Any:
        """Read position: samples from the start (int); with ``unit="time"`` its time (``Time``, or POSIX
        seconds without astropy); with a time unit (astropy) the offset from the start as a ``Quantity``."""
        n = int(self._r.tell())
        if unit is None:
            return n
        rate = float(self.info["sample_rate"])
        ap = _astropy()
        if isinstance(unit, str) and unit == "time":
            if ap is None:
                return self.start_time + n / rate
            return self.start_time + (n / rate) * ap[0].s
        if ap is None:
            raise ValueError("tell(unit=...) with a unit needs astropy; unit='time' gives POSIX seconds")
        return ((n / rate) * ap[0].s).to(unit)

    def seek(self, offset: Any, whence: Union[int, str] = 0) -> int:
        """Moves the read position; returns it in samples.

        ``offset``: a sample number (int or numpy integer) counted from ``whence`` (0 or "start", 1 or
        "current"), a time ``Quantity`` (from ``whence`` too), or an absolute ``Time``. Floats are refused.
        The end of a recording is known only when read, so ``whence=2`` is not supported here (baseband's
        interface, :mod:`vlbiflow.io`, has it).
        """
        rate = float(self.info["sample_rate"])
        ap = _astropy()
        absolute = ap is not None and isinstance(offset, ap[1])
        n = _sample_index(offset, self.start_time if absolute else None, rate, "offset")
        if not absolute:
            if whence in (1, "current"):
                n += self.tell()
            elif whence not in (0, "start"):
                raise ValueError("whence must be 0 or 'start', or 1 or 'current'")
        if n < 0:
            raise ValueError("negative sample position")
        self._r.seek(n)
        return self.tell()

    def read(
        self, count: Optional[int] = None, fill: Optional[str] = None, out: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Decodes the next ``count`` time samples (all that is left if None).

        Returns an array of shape (time, thread, channel), float32 or complex64; fewer rows at the end of the
        recording. ``fill`` overrides the scan's choice: "zero", "nan", or "mask" for a numpy masked array.
        ``out``: an array to decode into (C-contiguous, of ``scan.dtype`` and shape (n, threads, channels));
        ``count`` defaults to its length, and the rows written are returned as a view of it. Reading a long
        recording piece by piece into the same ``out`` spares the allocation of fresh memory each time.

        Example::

            >>> buf = np.empty((1 << 20,) + scan.shape[1:], scan.dtype)     # doctest: +SKIP
            >>> while (x := scan.read(out=buf)).shape[0]:
            ...     power += (np.abs(x) ** 2).sum(axis=0)
        """
        fill = fill or self.fill
        if fill not in _FILL:
            raise ValueError(f"fill must be 'zero', 'nan' or 'mask', not {fill!r}")
        threads = len(self.info["threads"])
        vals = self.info["channels"] * (2 if self.info["complex"] else 1)
        if out is not None:
            want = (threads, self.info["channels"])
            if (
                not isinstance(out, np.ndarray)
                or out.dtype != self.dtype
                or out.ndim != 3
                or out.shape[1:] != want
                or not out.flags.c_contiguous
                or not out.flags.writeable
            ):
                raise ValueError(
                    f"out must be a writeable C-contiguous {self.dtype} array of shape (n, {want[0]}, {want[1]})"
                )
            count = out.shape[0] if count is None else _sample_index(count, None, 1.0, "count")
            if count < 0 or count > out.shape[0]:
                raise ValueError(f"count {count} does not fit out of length {out.shape[0]}")
            data = out[: int(count)].view(np.float32).reshape(int(count), threads, vals)
            return self._read_into(data, int(count), fill, threads, out)
        if count is None:
            # One allocation of an upper bound (pages untouched beyond what is written), else in parts.
            bound = self._r.max_rows()
            first = self.read(bound + 1, fill)
            if first.shape[0] <= bound:
                return first
            parts = [first]
            while True:
                part = self.read(1 << 20, fill)
                parts.append(part)
                if part.shape[0] < (1 << 20):
                    break
            if fill == "mask":
                return np.ma.concatenate(parts, axis=0)
            return np.concatenate(parts, axis=0)
        count = _sample_index(count, None, 1.0, "count")
        if count < 0:
            raise ValueError("negative count")
        data = np.empty((count, threads, vals), dtype=np.float32)
        return self._read_into(data, count, fill, threads, None)

    def _read_into(
        self, data: np.ndarray, count: int, fill: str, threads: int, out: Optional[np.ndarray]
    ) -> np.ndarray:
        mask = np.empty((count, threads), dtype=np.bool_) if fill == "mask" else None
        rows = self._r.read_into(data, _FILL[fill], mask)
        if out is not None:
            result = out[:rows]
        else:
            result = data[:rows]
            if self.info["complex"]:
                result = result.view(np.complex64)
        if mask is not None:
            m = mask[:rows].reshape(rows, threads, 1)
            return np.ma.MaskedArray(result, mask=np.broadcast_to(m, result.shape).copy())
        return result

    def iter_read(self, count: int, fill: Optional[str] = None) -> Iterator[np.ndarray]:
        """Yields the rest of the recording in pieces of ``count`` time samples (the last may be shorter):
        a scan of any length in bounded memory.

        Example::

            >>> total = sum(float(np.nansum(x ** 2)) for x in scan.iter_read(1 << 20))   # doctest: +SKIP
        """
        while True:
            x = self.read(count, fill)
            if x.shape[0] == 0:
                return
            yield x
            if x.shape[0] < count:
                return

    def __getitem__(self, item: slice) -> np.ndarray:
        """``scan[a:b]``: the samples from a to b, each a sample number (int or numpy integer), an absolute
        ``Time`` or a time ``Quantity`` from the start. Floats are refused (``TypeError``)."""
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("index with a slice a:b of sample numbers (int) or times (Time, Quantity)")
        rate = float(self.info["sample_rate"])
        t0 = self.start_time if _astropy() is not None else None

        def conv(v: Any, default: Optional[int]) -> Optional[int]:
            if v is None:
                return default
            return _sample_index(v, t0, rate, "slice bound")

        start = conv(item.start, 0)
        stop = conv(item.stop, None)
        self.seek(start)
        return self.read(None if stop is None else max(stop - start, 0))

    def headers(self, limit: Optional[int] = None) -> Dict[str, np.ndarray]:
        """Header fields of every frame in stream order (or the first ``limit``), as numpy arrays.

        Keys: ``seconds``, ``frame_number``, ``epoch``, ``thread_id``, ``station_id``, ``invalid``,
        ``fill`` (fill frames as recorders write them), ``file`` (index into ``files``), ``offset`` (byte
        offset of the frame in that file), ``time`` (POSIX seconds of the frame's first sample; NaN for
        fill), and ``files`` (the list of file paths). For Mark5B, ``seconds`` is the second of the day,
        ``mjd`` the day (resolved as for reading), and ``epoch``, ``thread_id`` and ``station_id`` are 0.

        Example::

            >>> h = scan.headers()                                          # doctest: +SKIP
            >>> lost = h["fill"] | h["invalid"]
            >>> [(h["files"][f], o) for f, o in zip(h["file"][lost], h["offset"][lost])][:3]
        """
        d = _vlbiflow.headers(
            (self._args, self._disks, self._stream), self._frame_rate, limit, self._strict, self._m5b
        )
        files = d.pop("_files")
        out: Dict[str, Any] = {k: np.frombuffer(b, dtype=t) for k, (b, t) in d.items()}
        out["files"] = files
        return out

    def raw(self) -> RawFile:
        """A seekable binary file of the gathered frames (see :class:`RawFile`).

        Example::

            >>> from baseband import vdif                                   # doctest: +SKIP
            >>> with vdif.open(scan.raw(), "rs") as fh:
            ...     x = fh.read(4096)
        """
        return RawFile(self._args, self._disks, self._strict, self._stream)

    def close(self) -> None:
        """Stops the reader threads."""
        self._r = None  # type: ignore[assignment]

    def __enter__(self) -> "Scan":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self.info
        return (
            f"<vlbiflow.Scan {self._args} {i['bits']}-bit {'complex' if i['complex'] else 'real'} "
            f"threads={i['threads']} channels={i['channels']} sample_rate={i['sample_rate']:g}>"
        )


def open(
    scan_or_files: Union[PathLike, Sequence[PathLike]],
    disks: Union[None, PathLike, Sequence[PathLike]] = None,
    *,
    fill: str = "zero",
    frame_rate: Optional[int] = None,
    strict: bool = True,
    units: str = "baseband",
    nchan: Optional[int] = None,
    bits: Optional[int] = None,
    kday: Optional[int] = None,
    ref_time: Any = None,
    stream: Optional[str] = None,
) -> Scan:
    """Opens a recording for reading samples.

    Args:
        scan_or_files: a scan name (with ``disks``), or one or more files: a Mark6 scatter-gather file,
            a FlexBuff scan directory, plain VDIF or Mark5B files read one after the other.
        disks: directories (glob patterns allowed, e.g. ``"/mnt/disks/*/*"``) holding the scan's files.
        fill: what missing/fill frames become: ``"zero"`` (default; baseband's fill value 0), ``"nan"``,
            or ``"mask"`` for a numpy masked array whose mask marks them.
        frame_rate: frames per second per thread, if neither metadata nor headers tell.
        strict: raise :class:`VlbiflowError` on damaged input (corrupted headers, garbage, truncation);
            if False, skip it and list it in ``Scan.findings``.
        units: ``"baseband"`` (baseband's levels) or ``"sigma"``.
        nchan, bits: Mark5B only (required there): channels and bits per sample (1 or 2), which Mark5B
            headers do not carry (baseband's ``mark5b.open`` needs them too, as ``nchan`` and ``bps``).
            For VDIF they are read from the headers; if given, they must agree.
        kday, ref_time: Mark5B only: Mark5B headers carry the MJD modulo 1000. ``kday`` gives its
            thousands (as baseband's ``kday``, e.g. 56000); ``ref_time`` a time (POSIX seconds or an astropy
            ``Time``) within 500 days of the recording. Default: the day nearest today, as ``vlbiflow
            check`` does.
        stream: for a scan recorded from several streams (``vlbiflow record --stream a=... --stream
            b=...``), the label of the one to read (``Scan.info["streams"]`` lists them; required there).

    Raises:
        FileNotFoundError: no such file or scan. VlbiflowError: damaged input, naming file and offset.
        ValueError: a Mark5B recording without ``nchan`` and ``bits``; a scan of several streams without
            ``stream``, or an unknown label.

    Example::

        >>> scan = vlbiflow.open("t_xx_001", disks=["/tmp/d/0", "/tmp/d/1"])   # doctest: +SKIP
        >>> x = scan.read(8192)
        >>> m5b = vlbiflow.open("scan.m5b", nchan=8, bits=2, kday=56000)     # doctest: +SKIP
    """
    return Scan(
        _args(scan_or_files),
        _disks(disks),
        fill,
        frame_rate,
        strict,
        units,
        nchan,
        bits,
        _ref_mjd(kday, ref_time),
        stream,
    )


def check(
    scan_or_files: Union[PathLike, Sequence[PathLike]],
    disks: Union[None, PathLike, Sequence[PathLike]] = None,
    *,
    frame_rate: Optional[int] = None,
    stats: bool = False,
    plot: Optional[PathLike] = None,
) -> Dict[str, Any]:
    """Checks a recording: the report of ``vlbiflow check --json`` as a dict.

    Example::

        >>> r = vlbiflow.check("t_xx_001", disks="/tmp/d/*")   # doctest: +SKIP
        >>> r["loss_fraction"], r["verdict"]
    """
    out = _vlbiflow.check_json(
        _args(scan_or_files), _disks(disks), frame_rate, stats, None if plot is None else os.fspath(plot)
    )
    return json.loads(out)


def ls(disks: Union[PathLike, Sequence[PathLike]]) -> List[Dict[str, Any]]:
    """The scans on a set of disks: the list ``vlbiflow ls --json`` prints.

    Example::

        >>> [s["name"] for s in vlbiflow.ls("/tmp/d/*")]   # doctest: +SKIP
    """
    return json.loads(_vlbiflow.ls_json(_disks(disks)))


def write_vdif(
    path: PathLike,
    samples: np.ndarray,
    *,
    bits: int = 2,
    sample_rate: float,
    samples_per_frame: Optional[int] = None,
    start_time: float = 1_700_000_000,
    station: str = "Xx",
    thread_ids: Optional[Sequence[int]] = None,
    units: str = "baseband",
    append: bool = False,
) -> int:
    """Quantises samples and writes them as VDIF frames; returns the number of frames written.

    Args:
        samples: shape (time, thread, channel) (or (time,) / (time, thread)), real or complex; channels a
            power of two. Values in baseband's units unless ``units="sigma"``.
        bits: 1, 2, 4 or 8 bits per sample (per I or Q for complex data).
        sample_rate: samples per second per channel; frames per second = sample_rate / samples_per_frame
            must be a whole number.
        samples_per_frame: time samples per frame (default: the largest giving a payload up to 8000 bytes
            that divides the second and the data).
        start_time: POSIX second of the first sample (whole seconds).
        A numpy masked array may be given: frames whose samples are all masked are written as fill frames
        (fill words with the invalid bit set, as jive5ab writes lost data).

    Example::

        >>> t = np.arange(64000) / 64e3
        >>> x = np.sin(2 * np.pi * 5e3 * t).astype(np.float32)
        >>> vlbiflow.write_vdif("tone.vdif", x, bits=2, sample_rate=64e3)   # doctest: +SKIP
        8
    """
    mask = np.ma.getmaskarray(samples) if np.ma.isMaskedArray(samples) else None
    x = np.ma.getdata(samples) if mask is not None else np.asarray(samples)
    while x.ndim < 3:
        x = x[..., np.newaxis]
        if mask is not None:
            mask = mask[..., np.newaxis]
    if x.ndim != 3:
        raise ValueError("samples must have shape (time, thread, channel)")
    complex_ = np.iscomplexobj(x)
    times, threads, channels = x.shape
    vals = channels * (2 if complex_ else 1)
    rate = int(round(sample_rate))
    if rate <= 0 or rate != sample_rate:
        raise ValueError("sample_rate must be a positive whole number of samples per second")
    if samples_per_frame is None:
        samples_per_frame = 0
        for spf in range(1, times + 1):
            payload = spf * vals * bits // 8
            if payload > 8000:
                break
            if (spf * vals * bits) % 64 == 0 and rate % spf == 0 and times % spf == 0:
                samples_per_frame = spf
        if samples_per_frame == 0:
            raise ValueError("no frame size fits; give samples_per_frame")
    if rate % samples_per_frame:
        raise ValueError(f"sample_rate {rate} is not a whole number of frames of {samples_per_frame} samples")
    data = np.ascontiguousarray(x, dtype=np.complex64 if complex_ else np.float32)
    fill = None
    if mask is not None:
        # A frame whose samples are all masked is written as a fill frame (as jive5ab writes lost data).
        frames = times // samples_per_frame
        per_frame = mask.reshape(frames, samples_per_frame, threads, channels).all(axis=(1, 3))
        fill = per_frame.astype(np.uint8).tobytes()
    if thread_ids is None:
        thread_ids = list(range(threads))
    layout = {
        "threads": threads,
        "channels": channels,
        "complex": complex_,
        "bits": bits,
        "samples_per_frame": samples_per_frame,
        "frame_rate": rate // samples_per_frame,
        "start_second": int(start_time),
        "station": station,
        "thread_ids": list(thread_ids),
        "baseband_units": units == "baseband",
        "edv": 1 if rate % 1000 == 0 else 0,  # EDV 1 headers carry the sample rate (whole kHz)
    }
    return _vlbiflow.write_vdif_raw(os.fspath(path), data.view(np.float32).tobytes(), layout, append, fill)
