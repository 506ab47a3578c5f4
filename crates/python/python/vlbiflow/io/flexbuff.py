"""The baseband format ``flexbuff``: FlexBuff recordings read by vlbiflow (see :mod:`vlbiflow.io`).

``name`` is a scan name with ``disks=`` (directories or glob patterns), or the recording's files or
directory; ``baseband.open(name, "rs", format="flexbuff", disks=...)`` calls :func:`open` here.
"""

from ._stream import FlexbuffStreamReader, make_info, make_open

__all__ = ["open", "info", "FlexbuffStreamReader"]

open = make_open(FlexbuffStreamReader, "flexbuff", __name__)
info = make_info(FlexbuffStreamReader, "flexbuff", __name__)
