"""vlbiflow as formats of baseband (https://baseband.readthedocs.io): Mark6 scatter-gather and FlexBuff.

Installed next to baseband, vlbiflow registers the ``baseband.io`` entry points ``mark6sg`` and ``flexbuff``
(modules :mod:`vlbiflow.io.mark6sg` and :mod:`vlbiflow.io.flexbuff`, each with ``open`` and ``info``, as
baseband expects of a format), so that::

    >>> import baseband                                               # doctest: +SKIP
    >>> fh = baseband.open("t_xx_001", "rs", format="mark6sg", disks="/mnt/disks/*/*")
    >>> fh.sample_rate, fh.start_time, fh.shape
    >>> x = fh.read(4096)
    >>> baseband.file_info("/data/flexbuff/t_xx_001", format="flexbuff")

The stream readers have baseband's interface and semantics (they derive from
``baseband.base.base.StreamReaderBase``): ``sample_rate`` (Quantity), ``samples_per_frame``,
``start_time``/``stop_time``/``time`` (``Time``), ``shape``, ``sample_shape`` (``nthread``, ``nchan``),
``squeeze``, ``subset``, ``seek`` by sample, time offset or ``Time``, ``tell(unit=...)``,
``read(count, out=)``, ``header0`` (a ``baseband.vdif.VDIFHeader``), ``fill_value`` and ``verify``. The
samples are decoded by vlbiflow's Rust reader (bench/python_decode.py measures both).
"""

from ._stream import FlexbuffStreamReader, Mark6SGStreamReader

__all__ = ["Mark6SGStreamReader", "FlexbuffStreamReader"]
