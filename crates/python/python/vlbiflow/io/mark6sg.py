"""The baseband format ``mark6sg``: Mark6 scatter-gather recordings read by vlbiflow (see :mod:`vlbiflow.io`).

``name`` is a scan name with ``disks=`` (directories or glob patterns), or the recording's files or
directory; ``baseband.open(name, "rs", format="mark6sg", disks=...)`` calls :func:`open` here.
"""

from ._stream import Mark6SGStreamReader, make_info, make_open

__all__ = ["open", "info", "Mark6SGStreamReader"]

open = make_open(Mark6SGStreamReader, "mark6", __name__)
info = make_info(Mark6SGStreamReader, "mark6", __name__)
