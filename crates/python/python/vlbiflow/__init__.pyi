"""Typed interface of vlbiflow (see the docstrings in __init__.py)."""

import io
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from ._vlbiflow import BASEBAND_SCALE as BASEBAND_SCALE
from ._vlbiflow import VlbiflowError as VlbiflowError
from ._vlbiflow import __version__ as __version__

PathLike = Union[str, os.PathLike[str]]

class RawFile(io.RawIOBase):
    def __init__(self, args: List[str], disks: List[str], strict: bool = ...) -> None: ...
    def readinto(self, b: Any) -> int: ...
    def read(self, size: int = ...) -> bytes: ...
    def readall(self) -> bytes: ...
    def tell(self) -> int: ...
    def seek(self, offset: int, whence: int = ...) -> int: ...

class Scan:
    info: Dict[str, Any]
    dtype: np.dtype[Any]
    shape: tuple[None, int, int]
    fill: str
    @property
    def sample_rate(self) -> Any: ...  # astropy Quantity (Hz), or float without astropy
    @property
    def start_time(self) -> Any: ...  # astropy Time, or POSIX seconds without astropy
    @property
    def time(self) -> Any: ...
    @property
    def findings(self) -> List[str]: ...
    @property
    def counts(self) -> Dict[str, int]: ...
    def tell(self, unit: Any = ...) -> Any: ...
    def seek(self, offset: Any, whence: Union[int, str] = ...) -> int: ...
    def read(
        self, count: Any = ..., fill: Optional[str] = ..., out: Optional[np.ndarray] = ...
    ) -> np.ndarray: ...
    def iter_read(self, count: int, fill: Optional[str] = ...) -> Iterator[np.ndarray]: ...
    def __getitem__(self, item: slice) -> np.ndarray: ...
    def headers(self, limit: Optional[int] = ...) -> Dict[str, Any]: ...
    def raw(self) -> RawFile: ...
    def close(self) -> None: ...
    def __enter__(self) -> Scan: ...
    def __exit__(self, *exc: Any) -> None: ...

def open(
    scan_or_files: Union[PathLike, Sequence[PathLike]],
    disks: Union[None, PathLike, Sequence[PathLike]] = ...,
    *,
    fill: str = ...,
    frame_rate: Optional[int] = ...,
    strict: bool = ...,
    units: str = ...,
    nchan: Optional[int] = ...,
    bits: Optional[int] = ...,
    kday: Optional[int] = ...,
    ref_time: Any = ...,
) -> Scan: ...
def check(
    scan_or_files: Union[PathLike, Sequence[PathLike]],
    disks: Union[None, PathLike, Sequence[PathLike]] = ...,
    *,
    frame_rate: Optional[int] = ...,
    stats: bool = ...,
    plot: Optional[PathLike] = ...,
) -> Dict[str, Any]: ...
def ls(disks: Union[PathLike, Sequence[PathLike]]) -> List[Dict[str, Any]]: ...
def write_vdif(
    path: PathLike,
    samples: np.ndarray,
    *,
    bits: int = ...,
    sample_rate: float,
    samples_per_frame: Optional[int] = ...,
    start_time: float = ...,
    station: str = ...,
    thread_ids: Optional[Sequence[int]] = ...,
    units: str = ...,
    append: bool = ...,
) -> int: ...
