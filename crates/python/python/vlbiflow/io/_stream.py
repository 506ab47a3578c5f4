"""baseband stream readers over vlbiflow's Rust reader (see :mod:`vlbiflow.io`)."""

from __future__ import annotations

import builtins
import io
import os
from typing import Any, Callable

import astropy.units as u
import numpy as np
from astropy.utils import lazyproperty
from baseband.base.base import StreamReaderBase
from baseband.base.file_info import NoInfo
from baseband.vdif import VDIFHeader
from baseband.vdif.base import VDIFStreamBase

from .. import Scan, _args, _disks, _vlbiflow

#: Frames looked at, at most, for the header of the first frame set.
_HEADER0_FRAMES = 1 << 14


class _Recording:
    """What ``StreamReaderBase`` wants of its raw file (``name``, ``closed``, ``close``), over a
    :class:`vlbiflow.Scan`."""

    info = None

    def __init__(self, scan: Scan, name: Any) -> None:
        self.scan = scan
        self.name = name
        self.closed = False

    def readable(self) -> bool:
        return not self.closed

    def close(self) -> None:
        if not self.closed:
            self.scan.close()
            self.closed = True


def _header0(scan: Scan) -> VDIFHeader:
    """The VDIF header of the first frame set's first thread: the first such frame in the recording's
    stream of frames (read from its start, as `vlbiflow gather` writes it)."""
    i = scan.info
    frame_rate = i["frame_rate"] * u.Hz
    start = scan.start_time
    # Usually the first valid frame of the stream, which the reader kept (baseband's header0 of the
    # gathered file); otherwise it is looked for.
    if len(i["first_header"]) == 32:
        h = VDIFHeader.fromfile(io.BytesIO(i["first_header"]), verify=True)
        if h["thread_id"] == i["threads"][0] and abs(h.get_time(frame_rate=frame_rate) - start) < 0.5 / frame_rate:
            return h
    raw = _vlbiflow.RawStream(scan._args, scan._disks, scan._strict, scan._stream)
    # A frame may arrive up to 256 frame sets late (the reader's window): the first set is within these.
    limit = min(_HEADER0_FRAMES, 300 * len(i["threads"]))
    for _ in range(limit):
        b = raw.read(i["frame_len"])
        if len(b) < i["frame_len"]:
            break
        try:
            h = VDIFHeader.fromfile(io.BytesIO(b), verify=True)
        except Exception:  # fill frames and damage: not the first frame
            continue
        if (h["invalid_data"] or h["thread_id"] != i["threads"][0] or h["frame_nr"] != i["start_frame"]
                or h.frame_nbytes != i["frame_len"]):
            continue
        if abs(h.get_time(frame_rate=frame_rate) - start) < 0.5 / frame_rate:
            return h
    raise ValueError(f"{scan._args}: the first frame set is not among the first {limit} frames")


class _VlbiflowStreamReader(VDIFStreamBase, StreamReaderBase):
    """A recording as a baseband VDIF stream; decoding is vlbiflow's.

    Parameters follow baseband's ``vdif.open(name, "rs", ...)``: ``squeeze``, ``subset`` (first index
    selects threads, second channels), ``fill_value`` (default 0), ``verify`` (True or 'fix': damaged input
    raises, naming file and byte offset; False: skipped and read as missing data). Beyond those: ``disks``
    (where a scan's files are), ``frame_rate`` (frames per second per thread, if neither scan metadata nor
    headers tell) or ``sample_rate`` (a Quantity), and ``stream``: for a scan recorded from several streams,
    the label of the one to read (required there; ``streams`` lists the labels).
    """

    _layout = ""

    def __init__(self, name: Any, *, disks: Any = None, squeeze: bool = True, subset: Any = (),
                 fill_value: float = 0.0, verify: Any = "fix", frame_rate: Any = None,
                 sample_rate: Any = None, stream: Any = None) -> None:
        strict = verify is not False
        scan = Scan(_args(name), _disks(disks), "zero", _whole(frame_rate, "frame_rate"), strict,
                    stream=stream)
        info = scan.info
        if info["layout"] != self._layout or info["kind"] != "vdif":
            scan.close()
            raise ValueError(
                f"{name}: a {info['layout']} recording of {info['kind']} frames, not {self._layout} VDIF "
                f"(format {type(self).__name__.replace('StreamReader', '').lower()!r})"
            )
        if sample_rate is not None:
            rate = u.Quantity(sample_rate, u.Hz).to_value(u.Hz)
            if rate != info["sample_rate"]:
                scan.close()
                frame_rate = _whole(rate / info["samples_per_frame"], "sample_rate / samples_per_frame")
                scan = Scan(_args(name), _disks(disks), "zero", frame_rate, strict, stream=stream)
                info = scan.info
        self._scan = scan
        nthread = len(info["threads"])
        self._values = info["channels"] * (2 if info["complex"] else 1)
        super().__init__(
            _Recording(scan, name),
            _header0(scan),
            squeeze=squeeze,
            subset=subset,
            fill_value=fill_value,
            verify=verify,
            bps=info["bits"],
            complex_data=info["complex"],
            samples_per_frame=info["samples_per_frame"],
            sample_shape=(nthread, info["channels"]),
            sample_rate=(info["sample_rate"] * u.Hz).to(u.MHz),
        )

    @property
    def streams(self) -> tuple:
        """Labels of the recorded streams of a scan recorded from several (empty for one stream)."""
        return tuple(self._scan.info["streams"])

    @property
    def stream(self) -> Any:
        """Label of the recorded stream read (``None`` for a scan of one stream)."""
        return self._scan.info["stream"]

    def readable(self) -> bool:
        """Whether the stream can be read and decoded."""
        return not self.closed

    @lazyproperty
    def _last_header(self) -> VDIFHeader:
        """Header of the last frame set: the first header with the latest time of the recording (one pass
        over the recording's frames, not decoded, the first time it is asked)."""
        second, frame = self._scan._r.last_frame_time()
        rate = int(self._scan.info["frame_rate"])
        start = self._scan.info
        index = (second - start["start_second"]) * rate + frame - start["start_frame"]
        h = self.header0.copy()
        self._set_index(h, index)
        return h

    def _sync(self) -> None:
        """Moves vlbiflow's reader to this stream's offset (backwards: read again from the start)."""
        if self._scan.tell() != self.offset:
            self._scan._r.seek(self.offset)

    def _decode(self, count: int, dst: Any) -> int:
        """Decodes up to ``count`` samples into ``dst`` (float32, (count, nthread, values)); returns the
        number decoded (fewer only at the end)."""
        self._sync()
        if not (self.complex_data and self.fill_value != 0):
            return int(self._scan._r.read_into(dst[:count], self.fill_value, None))
        # baseband fills complex samples with fill_value + 0j; vlbiflow fills every float.
        mask = np.empty(dst.shape[:2], np.bool_)
        got = int(self._scan._r.read_into(dst[:count], self.fill_value, mask))
        dst[:got].view(np.complex64)[mask[:got]] = self.fill_value
        return got

    def read(self, count: Any = None, out: Any = None) -> np.ndarray:
        """Read a number of complete samples (baseband's ``read``).

        ``count``: samples to read (``None`` or negative: all that are left; ignored if ``out`` is given).
        ``out``: an array whose first dimension gives the count and the rest ``sample_shape``. Reading past
        the end raises ``EOFError`` and leaves the position where it was.
        """
        if self.closed:
            raise ValueError("I/O operation on closed stream.")
        dtype = self.dtype
        full_shape = (len(self._scan.info["threads"]), self._scan.info["channels"])
        if out is None:
            if count is None or count < 0:
                count = max(0, self.shape[0] - self.offset)
            count = int(count)
            if count > self.shape[0] - self.offset:
                raise EOFError("cannot read from beyond end of input.")
            buf = np.empty((count,) + full_shape, dtype)
            out = self._squeeze_and_subset(buf)
            direct = not self.subset
        else:
            assert out.shape[1:] == self.sample_shape, (
                "'out' must have trailing shape {}".format(self.sample_shape))
            count = out.shape[0]
            if count > self.shape[0] - self.offset:
                raise EOFError("cannot read from beyond end of input.")
            direct = (not self.subset and out.dtype == dtype and out.flags.c_contiguous
                      and out.flags.writeable and out.size == count * full_shape[0] * full_shape[1])
            buf = out.reshape((count,) + full_shape) if direct else np.empty((count,) + full_shape, dtype)
        values = buf.view(np.float32).reshape(count, full_shape[0], self._values)
        got = self._decode(count, values)
        if got < count:
            # Frames the recording ends without (the shape counts to the last frame set seen).
            buf[got:] = self.fill_value
        self.offset += count
        if direct:
            return out
        out[...] = self._squeeze_and_subset(buf)
        return out

    def close(self) -> None:
        self.fh_raw.close()


class Mark6SGStreamReader(_VlbiflowStreamReader):
    """A Mark6 scatter-gather recording as a baseband VDIF stream (format ``mark6sg``)."""

    _layout = "mark6"


class FlexbuffStreamReader(_VlbiflowStreamReader):
    """A FlexBuff recording as a baseband VDIF stream (format ``flexbuff``)."""

    _layout = "flexbuff"


def _whole(value: Any, what: str) -> Any:
    if value is None:
        return None
    v = float(u.Quantity(value, u.Hz).to_value(u.Hz)) if isinstance(value, u.Quantity) else float(value)
    if v != int(v) or v <= 0:
        raise ValueError(f"{what} must be a positive whole number of frames per second, not {value!r}")
    return int(v)


def _is_candidate(name: Any, layout: str, disks: Any) -> bool:
    """Whether ``name`` may be a recording of ``layout`` at all (cheap: no reading), so that
    ``baseband.file_info`` trying every format does not open files of other formats."""
    if disks is not None:
        return True
    names = _args(name) if isinstance(name, (str, os.PathLike, list, tuple)) else []
    if not names:
        return False
    if layout == "flexbuff":
        return all(os.path.isdir(n) for n in names)
    try:
        with builtins.open(names[0], "rb") as f:
            return f.read(4) == (0xFEED6666).to_bytes(4, "little")
    except OSError:
        return False


def make_open(cls: type, layout: str, module: str) -> Callable[..., Any]:
    def open(name: Any, mode: str = "rs", **kwargs: Any) -> Any:
        """Opens a recording as a baseband stream (``mode="rs"``; the only mode: the recording is read)."""
        if mode != "rs":
            raise ValueError(f"{module}: only mode 'rs' (reading a stream) is supported, not {mode!r}")
        return cls(name, **kwargs)

    open.__module__ = module
    return open


def make_info(cls: type, layout: str, module: str) -> Callable[..., Any]:
    def info(name: Any, **kwargs: Any) -> Any:
        """baseband's ``file_info`` for this format: the stream's ``info`` (falsy ``NoInfo`` if ``name``
        is not such a recording)."""
        if not _is_candidate(name, layout, kwargs.get("disks")):
            return NoInfo(f"{name} is not a {layout} recording")
        known = {"disks", "squeeze", "subset", "fill_value", "verify", "frame_rate", "sample_rate",
                 "stream"}
        used = {k: v for k, v in kwargs.items() if k in known}
        try:
            fh = cls(name, **used)
        except FileNotFoundError:
            raise
        except Exception as exc:  # not this format, or damaged: baseband wants a falsy answer
            return NoInfo(f"{name}: {exc}")
        with fh:
            result = fh.info
            result.used_kwargs = used
            result.irrelevant_kwargs = {k: v for k, v in kwargs.items() if k not in known}
        return result

    info.__module__ = module
    return info
