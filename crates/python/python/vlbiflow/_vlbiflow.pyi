"""Typed stubs of the Rust extension module (use the wrappers in ``vlbiflow``)."""
import numpy as np

from typing import Any, Dict, List, Optional, Tuple

BASEBAND_SCALE: float
__version__: str

class VlbiflowError(Exception):
    """Damaged or unreadable recording; the message names the file and byte offset."""

class Reader:
    def __init__(
        self,
        args: List[str],
        disks: List[str],
        frame_rate: Optional[int] = None,
        strict: bool = True,
        baseband_units: bool = True,
        bits: Optional[int] = None,
        nchan: Optional[int] = None,
        ref_mjd: Optional[int] = None,
    ) -> None: ...
    def info(self) -> Dict[str, Any]: ...
    def counts(self) -> Dict[str, int]: ...
    def findings(self) -> List[str]: ...
    def max_rows(self) -> int: ...
    def tell(self) -> int: ...
    def seek(self, sample: int) -> None: ...
    def last_frame_time(self) -> Tuple[int, int]: ...
    def read_into(
        self, out: np.ndarray, fill_value: float, mask: Optional[np.ndarray] = None
    ) -> int: ...

class RawStream:
    def __init__(self, args: List[str], disks: List[str], strict: bool = True) -> None: ...
    def read(self, n: int) -> bytes: ...
    def tell(self) -> int: ...
    def size(self) -> int: ...
    def seek(self, offset: int) -> int: ...

def headers(
    args: List[str],
    disks: List[str],
    frame_rate: Optional[int] = None,
    limit: Optional[int] = None,
    strict: bool = True,
    bits: Optional[int] = None,
    nchan: Optional[int] = None,
    ref_mjd: Optional[int] = None,
) -> Dict[str, Any]: ...
def check_json(
    args: List[str],
    disks: List[str],
    frame_rate: Optional[int] = None,
    stats: bool = False,
    plot: Optional[str] = None,
) -> str: ...
def ls_json(disks: List[str]) -> str: ...
def write_vdif_raw(
    path: str,
    data: bytes,
    threads: int,
    channels: int,
    complex: bool,
    bits: int,
    samples_per_frame: int,
    frame_rate: int,
    start_second: int,
    station: str,
    thread_ids: List[int],
    baseband_units: bool = True,
    edv: int = 0,
    append: bool = False,
    fill: Optional[bytes] = None,
) -> int: ...
