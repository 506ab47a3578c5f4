//! Python bindings of vlbiflow (the `vlbiflow._vlbiflow` extension module; the Python package `vlbiflow`
//! wraps it). Every format fact comes from the workspace crates: locating and reading recordings from
//! `vlbiflow-reader` (checking from `vlbiflow-checker`), frame layouts, fill recognition and sample coding from `vlbiflow-formats`. Reading
//! and decoding run with the GIL released.

mod reader;

use numpy::{PyArray2, PyArray3, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use reader::{is_damage, probe, Mark5bOptions, ReadError, SampleReader};
use std::io::Write;
use vlbiflow_checker::{CheckConfig, StatsConfig};
use vlbiflow_formats::samples::{self, SampleFormat, BASEBAND_SCALE};
use vlbiflow_formats::time::epoch_start_unix;
use vlbiflow_formats::vdif::{EdvSampleRate, VdifHeader, VdifHeaderRepr};
use vlbiflow_reader::frames::FrameReader;
use vlbiflow_reader::{locate, LocateError, Recording};

create_exception!(
    _vlbiflow,
    VlbiflowError,
    pyo3::exceptions::PyException,
    "Damaged or unreadable recording; the message names the file and byte offset."
);

fn read_err(e: ReadError) -> PyErr {
    if e.usage {
        PyValueError::new_err(e.message)
    } else {
        VlbiflowError::new_err(e.message)
    }
}

/// Locates a recording; `stream` selects one recorded stream of a scan of several by its label.
fn locate_py(
    py: Python<'_>,
    args: Vec<String>,
    disks: Vec<String>,
    stream: Option<&str>,
) -> PyResult<Recording> {
    if disks.is_empty() {
        if let Some(a) = args.iter().find(|a| !std::path::Path::new(a).exists()) {
            return Err(PyFileNotFoundError::new_err(format!(
                "{a}: no such file (to read a scan by name, give its disks)"
            )));
        }
    }
    py.detach(|| {
        let mut rec = locate(&args, &disks)?;
        if let Some(label) = stream {
            rec.select_stream(label)?;
        }
        Ok(rec)
    })
    .map_err(|e| match e {
        LocateError::NotFound(m) => PyFileNotFoundError::new_err(m),
        LocateError::Io { .. } => PyOSError::new_err(e.to_string()),
        LocateError::Usage(m) => PyValueError::new_err(m),
    })
}

/// Which recording to read, from Python as a tuple `(args, disks, stream)`: the scan name or files, the
/// disks, and the label of one recorded stream (or None).
#[derive(FromPyObject)]
struct Target(Vec<String>, Vec<String>, Option<String>);

impl Target {
    fn locate(self, py: Python<'_>) -> PyResult<Recording> {
        locate_py(py, self.0, self.1, self.2.as_deref())
    }
}

/// Mark5B's facts its headers do not carry, from Python as a tuple `(bits, nchan, ref_mjd)`.
#[derive(FromPyObject)]
struct M5b(Option<u8>, Option<u32>, Option<i64>);

impl M5b {
    fn options(self) -> Mark5bOptions {
        Mark5bOptions {
            bits: self.0,
            channels: self.1,
            ref_mjd: self.2,
        }
    }
}

/// Low-level sample reader; use `vlbiflow.open`.
#[pyclass(module = "vlbiflow._vlbiflow")]
struct Reader {
    inner: SampleReader,
    /// How the recording is stored: "mark6", "flexbuff" or "plain".
    layout: &'static str,
}

fn layout(rec: &Recording) -> &'static str {
    match rec.sources {
        vlbiflow_reader::source::Sources::Mark6(_) => "mark6",
        vlbiflow_reader::source::Sources::Flexbuff(_) => "flexbuff",
        vlbiflow_reader::source::Sources::Plain(..) => "plain",
    }
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (target, frame_rate=None, strict=true, baseband_units=true, m5b=M5b(None, None, None)))]
    fn new(
        py: Python<'_>,
        target: Target,
        frame_rate: Option<u32>,
        strict: bool,
        baseband_units: bool,
        m5b: M5b,
    ) -> PyResult<Self> {
        let rec = target.locate(py)?;
        let layout = layout(&rec);
        let m5b = m5b.options();
        let inner = py
            .detach(|| {
                let probe = probe(&rec, frame_rate, strict, m5b)?;
                Ok(SampleReader::new(rec, probe, strict, baseband_units))
            })
            .map_err(read_err)?;
        Ok(Reader { inner, layout })
    }

    /// Stream facts as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = &self.inner.info;
        let d = PyDict::new(py);
        d.set_item("kind", i.kind.to_string())?;
        d.set_item("layout", self.layout)?;
        let rec = self.inner.recording();
        let labels = rec.stream_labels();
        d.set_item("stream", rec.stream.and_then(|i| labels.get(i).cloned()))?;
        d.set_item("streams", labels)?;
        d.set_item("frame_len", i.frame_len)?;
        d.set_item("header_len", i.header_len)?;
        d.set_item("bits", i.bits)?;
        d.set_item("channels", i.channels)?;
        d.set_item("complex", i.complex)?;
        if i.kind == vlbiflow_formats::FrameKind::Vdif {
            d.set_item(
                "station",
                vlbiflow_formats::vdif::VdifHeaderRepr::station_to_string(i.station),
            )?;
        } else {
            d.set_item("station", py.None())?;
        }
        d.set_item("edv", i.edv)?;
        d.set_item("threads", i.threads.clone())?;
        d.set_item("frame_rate", i.frame_rate)?;
        d.set_item("frame_rate_source", i.frame_rate_source)?;
        d.set_item("samples_per_frame", i.samples_per_frame)?;
        d.set_item("sample_rate", i.sample_rate())?;
        d.set_item(
            "start_time",
            i.start_second as f64 + f64::from(i.start_frame) / f64::from(i.frame_rate),
        )?;
        d.set_item("start_second", i.start_second)?;
        d.set_item("start_frame", i.start_frame)?;
        if i.kind == vlbiflow_formats::FrameKind::M5b {
            d.set_item("ref_mjd", i.ref_mjd)?;
        }
        d.set_item("first_header", PyBytes::new(py, &i.first_header))?;
        Ok(d)
    }

    /// Counters of frames read and not placed, as a dict.
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.inner.counts;
        let d = PyDict::new(py);
        d.set_item("frames", c.frames)?;
        d.set_item("fill", c.fill)?;
        d.set_item("invalid", c.invalid)?;
        d.set_item("stray", c.stray)?;
        d.set_item("late", c.late)?;
        d.set_item("duplicate", c.duplicate)?;
        Ok(d)
    }

    /// Findings made while reading (block gaps, damage when not strict), as strings.
    fn findings(&self) -> Vec<String> {
        self.inner.findings.iter().map(|f| f.to_string()).collect()
    }

    /// Upper bound of the rows left to read, from the size of the files (gaps may add more).
    fn max_rows(&self) -> u64 {
        let i = &self.inner.info;
        let frames = self.inner.total_bytes() / i.frame_len as u64;
        (frames / i.threads.len() as u64 + 1) * i.samples_per_frame
    }

    /// Time of the last frame set of the recording, as (POSIX second, frame number): the latest header
    /// time of a valid frame of the stream's length. One pass over the recording's frames, not decoded.
    fn last_frame_time(&self, py: Python<'_>) -> PyResult<(i64, u32)> {
        let info = &self.inner.info;
        let rec = self.inner.recording();
        let strict = self.inner.strict();
        py.detach(|| -> Result<(i64, u32), ReadError> {
            let mut fr = FrameReader::open(rec);
            let mut last = (info.start_second, info.start_frame);
            while let Some(batch) = fr.next_batch() {
                for (e, b) in batch.iter() {
                    if e.fill || b.len() != info.frame_len {
                        continue;
                    }
                    if let Some((thread, sec, frame)) = reader::stamp(info.kind, b, info.ref_mjd) {
                        if info.threads.binary_search(&thread).is_ok() && (sec, frame) > last {
                            last = (sec, frame);
                        }
                    }
                }
                for f in fr.take_findings() {
                    if strict && is_damage(&f) {
                        return Err(ReadError::damage(f.to_string()));
                    }
                }
            }
            Ok(last)
        })
        .map_err(read_err)
    }

    /// Read position in samples.
    fn tell(&self) -> u64 {
        self.inner.position
    }

    fn seek(&mut self, py: Python<'_>, sample: u64) -> PyResult<()> {
        let inner = &mut self.inner;
        py.detach(|| inner.seek(sample)).map_err(read_err)
    }

    /// Decodes time steps into `out`, a writeable C-contiguous float32 array of shape (rows, threads,
    /// values per time step) (a complex64 array is passed as its float32 view), as many rows as it has,
    /// and, if `mask` is given, marks missing data in it: a writeable C-contiguous bool array of shape
    /// (at least rows, threads). Returns the rows written (fewer only at the end of the recording).
    /// Arrays arrive through rust-numpy, which checks dtype and number of dimensions (`TypeError`) and
    /// borrows them writeable (an array that is not writeable, or `out` and `mask` sharing memory, is
    /// refused); shape, contiguity and alignment are checked here (`ValueError`).
    #[pyo3(signature = (out, fill_value, mask=None))]
    fn read_into(
        &mut self,
        py: Python<'_>,
        out: &Bound<'_, PyArray3<f32>>,
        fill_value: f32,
        mask: Option<&Bound<'_, PyArray2<bool>>>,
    ) -> PyResult<usize> {
        // rust-numpy does not check alignment; a float32 slice must be aligned.
        if !out.data().cast::<f32>().is_aligned() {
            return Err(PyValueError::new_err("out must be aligned for float32"));
        }
        let borrow_err = |what: &str, e: numpy::BorrowError| {
            PyValueError::new_err(format!("{what} must be a writeable array of its own: {e}"))
        };
        let mut out = out.try_readwrite().map_err(|e| borrow_err("out", e))?;
        let mut mask = mask
            .map(|m| m.try_readwrite().map_err(|e| borrow_err("mask", e)))
            .transpose()?;
        let threads = self.inner.info.threads.len();
        let vals = self.inner.info.values_per_time();
        let shape = out.shape();
        let rows = shape[0];
        if shape[1..] != [threads, vals] {
            return Err(PyValueError::new_err(format!(
                "out has shape {shape:?}, not (rows, {threads}, {vals}) float32 values"
            )));
        }
        if let Some(m) = &mask {
            let ms = m.shape();
            if ms[1] != threads || ms[0] < rows {
                return Err(PyValueError::new_err(format!(
                    "mask has shape {ms:?}, not (at least {rows}, {threads})"
                )));
            }
        }
        if !out.is_c_contiguous() || mask.as_ref().is_some_and(|m| !m.is_c_contiguous()) {
            return Err(PyValueError::new_err("out and mask must be C-contiguous"));
        }
        let out = out
            .as_slice_mut()
            .map_err(|_| PyValueError::new_err("out must be C-contiguous"))?;
        let mask = match mask.as_mut() {
            Some(m) => Some(
                m.as_slice_mut()
                    .map_err(|_| PyValueError::new_err("mask must be C-contiguous"))?,
            ),
            None => None,
        };
        let mask = mask.map(|m| &mut m[..rows * threads]);
        let inner = &mut self.inner;
        py.detach(move || inner.read(out, mask, fill_value))
            .map_err(read_err)
    }
}

/// Header fields of every frame (or the first `limit`), as a dict of column name -> (bytes, numpy dtype).
#[pyfunction]
#[pyo3(signature = (target, frame_rate=None, limit=None, strict=true, m5b=M5b(None, None, None)))]
fn headers<'py>(
    py: Python<'py>,
    target: Target,
    frame_rate: Option<u32>,
    limit: Option<usize>,
    strict: bool,
    m5b: M5b,
) -> PyResult<Bound<'py, PyDict>> {
    let rec = target.locate(py)?;
    let m5b = m5b.options();
    #[derive(Default)]
    struct Cols {
        seconds: Vec<u32>,
        frame: Vec<u32>,
        epoch: Vec<u8>,
        thread: Vec<u16>,
        station: Vec<u16>,
        invalid: Vec<u8>,
        fill: Vec<u8>,
        file: Vec<u32>,
        offset: Vec<u64>,
        time: Vec<f64>,
        /// Mark5B only: the MJD, resolved near the reference day.
        mjd: Vec<i32>,
    }
    let (cols, files) = py
        .detach(|| -> Result<_, ReadError> {
            let info = probe(&rec, frame_rate, strict, m5b)?.info;
            let mut fr = FrameReader::open(&rec);
            let mut c = Cols::default();
            let limit = limit.unwrap_or(usize::MAX);
            let rate = f64::from(info.frame_rate);
            let m5b = info.kind == vlbiflow_formats::FrameKind::M5b;
            'outer: while let Some(batch) = fr.next_batch() {
                for (e, b) in batch.iter() {
                    if c.seconds.len() >= limit {
                        break 'outer;
                    }
                    // A fill frame without a header (a run of fill words) has no fields.
                    let has_header =
                        b.len() >= 16 && !(e.fill && b[..4] == vlbiflow_formats::fill::FILL_BYTES);
                    let (s, f, ep, thread, station, invalid, unix, mjd) = if !has_header {
                        (0, 0, 0, 0, 0, true, None, 0)
                    } else if m5b {
                        let h = vlbiflow_formats::mark5b::Mark5bHeader::new_unchecked(b);
                        match h.day_second() {
                            Some(ds) => {
                                let mjd =
                                    vlbiflow_formats::mark5b::resolve_mjd((ds / 86_400) as u16, info.ref_mjd);
                                let sod = ds % 86_400;
                                let unix = (mjd - vlbiflow_formats::time::MJD_UNIX_EPOCH) * 86_400 + sod;
                                let frame = u32::from(h.frame_number());
                                (sod as u32, frame, 0, 0, 0, false, Some(unix), mjd as i32)
                            }
                            None => (0, u32::from(h.frame_number()), 0, 0, 0, true, None, 0),
                        }
                    } else {
                        let h = VdifHeader::new_unchecked(b);
                        let unix = epoch_start_unix(h.epoch()) + i64::from(h.seconds());
                        (
                            h.seconds(),
                            h.frame_number(),
                            h.epoch(),
                            h.thread_id(),
                            h.station_id(),
                            h.invalid(),
                            Some(unix),
                            0,
                        )
                    };
                    if m5b {
                        c.mjd.push(mjd);
                    }
                    c.seconds.push(s);
                    c.frame.push(f);
                    c.epoch.push(ep);
                    c.thread.push(thread);
                    c.station.push(station);
                    c.invalid.push(u8::from(invalid));
                    c.fill.push(u8::from(e.fill));
                    c.file.push(e.pos.file);
                    c.offset.push(e.pos.offset);
                    c.time.push(match unix {
                        Some(u) if !e.fill => u as f64 + f64::from(f) / rate,
                        _ => f64::NAN,
                    });
                }
                for f in fr.take_findings() {
                    if strict && is_damage(&f) {
                        return Err(ReadError::damage(f.to_string()));
                    }
                }
            }
            for f in fr.take_findings() {
                if strict && is_damage(&f) {
                    return Err(ReadError::damage(f.to_string()));
                }
            }
            let files: Vec<String> = fr
                .files()
                .paths()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            Ok((c, files))
        })
        .map_err(read_err)?;
    let d = PyDict::new(py);
    fn col<'py, T: Copy>(py: Python<'py>, v: &[T], f: impl Fn(T) -> Vec<u8>) -> Bound<'py, PyBytes> {
        let bytes: Vec<u8> = v.iter().flat_map(|&x| f(x)).collect();
        PyBytes::new(py, &bytes)
    }
    d.set_item(
        "seconds",
        (col(py, &cols.seconds, |x| x.to_le_bytes().to_vec()), "<u4"),
    )?;
    d.set_item(
        "frame_number",
        (col(py, &cols.frame, |x| x.to_le_bytes().to_vec()), "<u4"),
    )?;
    d.set_item("epoch", (PyBytes::new(py, &cols.epoch), "u1"))?;
    d.set_item(
        "thread_id",
        (col(py, &cols.thread, |x| x.to_le_bytes().to_vec()), "<u2"),
    )?;
    d.set_item(
        "station_id",
        (col(py, &cols.station, |x| x.to_le_bytes().to_vec()), "<u2"),
    )?;
    d.set_item("invalid", (PyBytes::new(py, &cols.invalid), "?"))?;
    d.set_item("fill", (PyBytes::new(py, &cols.fill), "?"))?;
    d.set_item("file", (col(py, &cols.file, |x| x.to_le_bytes().to_vec()), "<u4"))?;
    d.set_item(
        "offset",
        (col(py, &cols.offset, |x| x.to_le_bytes().to_vec()), "<u8"),
    )?;
    d.set_item("time", (col(py, &cols.time, |x| x.to_le_bytes().to_vec()), "<f8"))?;
    if !cols.mjd.is_empty() {
        d.set_item("mjd", (col(py, &cols.mjd, |x| x.to_le_bytes().to_vec()), "<i4"))?;
    }
    d.set_item("_files", files)?;
    Ok(d)
}

/// Bytes of the stream kept behind the read position, so that short backward seeks (a reader going back to
/// the start of a frame set) do not read the recording again.
const RAW_HISTORY: usize = 32 << 20;

/// The gathered frames of a recording as a seekable byte stream (what `vlbiflow gather` writes).
#[pyclass(module = "vlbiflow._vlbiflow")]
struct RawStream {
    rec: Recording,
    frames: FrameReader,
    strict: bool,
    /// Stream bytes from `buf_start` on.
    buf: Vec<u8>,
    buf_start: u64,
    pos: u64,
    size: Option<u64>,
    end: bool,
}

impl RawStream {
    /// Appends the next batch; false at the end.
    fn fill_buf(&mut self) -> Result<bool, ReadError> {
        if self.end {
            return Ok(false);
        }
        if self.buf.len() > RAW_HISTORY {
            let keep_from = (self.pos - self.buf_start) as usize;
            let drop = keep_from.saturating_sub(RAW_HISTORY / 2);
            self.buf.drain(..drop);
            self.buf_start += drop as u64;
        }
        match self.frames.next_batch() {
            Some(b) => {
                for (_, bytes) in b.iter() {
                    self.buf.extend_from_slice(bytes);
                }
            }
            None => self.end = true,
        }
        for f in self.frames.take_findings() {
            if self.strict && is_damage(&f) {
                return Err(ReadError::damage(f.to_string()));
            }
        }
        Ok(!self.end)
    }

    fn buf_end(&self) -> u64 {
        self.buf_start + self.buf.len() as u64
    }

    fn read_some(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), ReadError> {
        while out.len() < n {
            if self.pos == self.buf_end() && !self.fill_buf()? {
                break;
            }
            let at = (self.pos - self.buf_start) as usize;
            let take = (n - out.len()).min(self.buf.len() - at);
            out.extend_from_slice(&self.buf[at..at + take]);
            self.pos += take as u64;
        }
        Ok(())
    }

    fn seek_to(&mut self, offset: u64) -> Result<(), ReadError> {
        if offset < self.buf_start {
            self.frames = FrameReader::open(&self.rec);
            self.buf.clear();
            self.buf_start = 0;
            self.end = false;
        }
        self.pos = offset.min(self.buf_end());
        while self.pos < offset {
            if !self.fill_buf()? {
                break;
            }
            self.pos = offset.min(self.buf_end());
        }
        Ok(())
    }

    fn total(&mut self) -> Result<u64, ReadError> {
        if let Some(s) = self.size {
            return Ok(s);
        }
        let mut fr = FrameReader::open(&self.rec);
        let mut n = 0u64;
        while let Some(b) = fr.next_batch() {
            n += b.iter().map(|(_, f)| f.len() as u64).sum::<u64>();
        }
        self.size = Some(n);
        Ok(n)
    }
}

#[pymethods]
impl RawStream {
    #[new]
    #[pyo3(signature = (args, disks, strict=true, stream=None))]
    fn new(
        py: Python<'_>,
        args: Vec<String>,
        disks: Vec<String>,
        strict: bool,
        stream: Option<String>,
    ) -> PyResult<Self> {
        let rec = locate_py(py, args, disks, stream.as_deref())?;
        let frames = FrameReader::open(&rec);
        Ok(RawStream {
            rec,
            frames,
            strict,
            buf: Vec::new(),
            buf_start: 0,
            pos: 0,
            size: None,
            end: false,
        })
    }

    /// Reads up to `n` bytes (fewer only at the end).
    fn read<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(n.min(64 << 20));
        py.detach(|| self.read_some(n, &mut out)).map_err(read_err)?;
        Ok(PyBytes::new(py, &out))
    }

    fn tell(&self) -> u64 {
        self.pos
    }

    /// Total bytes of the stream (one pass over the recording the first time).
    fn size(&mut self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.total()).map_err(read_err)
    }

    /// Moves to byte `offset` (clamped to the end); backwards means reading again from the start.
    fn seek(&mut self, py: Python<'_>, offset: u64) -> PyResult<u64> {
        py.detach(|| self.seek_to(offset)).map_err(read_err)?;
        Ok(self.pos)
    }
}

/// `vlbiflow check --json` as a JSON string.
#[pyfunction]
#[pyo3(signature = (args, disks, frame_rate=None, stats=false, plot=None))]
fn check_json(
    py: Python<'_>,
    args: Vec<String>,
    disks: Vec<String>,
    frame_rate: Option<u32>,
    stats: bool,
    plot: Option<String>,
) -> PyResult<String> {
    let rec = locate_py(py, args, disks, None)?;
    let stats = (stats || plot.is_some()).then(|| StatsConfig {
        plot: plot.map(Into::into),
        ..Default::default()
    });
    let config = CheckConfig {
        frame_rate,
        stats,
        ..Default::default()
    };
    let report = py.detach(|| vlbiflow_checker::check(&rec, config, |_| {}));
    serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `vlbiflow ls --json` as a JSON string.
#[pyfunction]
fn ls_json(py: Python<'_>, disks: Vec<String>) -> PyResult<String> {
    let dirs = vlbiflow_reader::source::expand_disks(&disks)
        .map_err(|e| PyFileNotFoundError::new_err(e.to_string()))?;
    let scans = py.detach(|| vlbiflow_reader::ls::list_scans(&dirs));
    serde_json::to_string(&scans).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// What the frames [`write_vdif_raw`] writes are like: a dict with these keys from Python.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct VdifLayout {
    threads: usize,
    channels: u32,
    complex: bool,
    bits: u8,
    samples_per_frame: usize,
    frame_rate: u32,
    start_second: i64,
    station: String,
    thread_ids: Vec<u16>,
    /// Samples in baseband's levels (else in sigma).
    baseband_units: bool,
    /// VDIF extended data version: 0, or 1/3 (headers carry the sample rate).
    edv: u8,
}

/// Writes VDIF frames from float32 samples laid out (time, thread, values per time) in `data`.
#[pyfunction]
#[pyo3(signature = (path, data, layout, append=false, fill=None))]
fn write_vdif_raw(
    py: Python<'_>,
    path: String,
    data: Vec<u8>,
    layout: VdifLayout,
    append: bool,
    fill: Option<Vec<u8>>,
) -> PyResult<u64> {
    let VdifLayout {
        threads,
        channels,
        complex,
        bits,
        samples_per_frame,
        frame_rate,
        start_second,
        station,
        thread_ids,
        baseband_units,
        edv,
    } = layout;
    let format =
        SampleFormat::new(bits, channels, complex).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let vals = format.values_per_time();
    if frame_rate == 0 || samples_per_frame == 0 {
        return Err(PyValueError::new_err(
            "frame_rate and samples_per_frame must be positive",
        ));
    }
    if data.len() % 4 != 0 || threads == 0 || thread_ids.len() != threads {
        return Err(PyValueError::new_err("data/threads/thread_ids disagree"));
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let row = threads * vals;
    let times = values.len() / row;
    if times % samples_per_frame != 0 {
        return Err(PyValueError::new_err(format!(
            "{times} time samples are not a whole number of frames of {samples_per_frame} samples"
        )));
    }
    let payload_len = samples_per_frame * vals * usize::from(bits) / 8;
    if payload_len * 8 != samples_per_frame * vals * usize::from(bits) || payload_len % 8 != 0 {
        return Err(PyValueError::new_err(format!(
            "a frame of {samples_per_frame} samples is {} bits, not a multiple of 64 bits as VDIF requires",
            samples_per_frame * vals * usize::from(bits)
        )));
    }
    let station_id =
        VdifHeaderRepr::station_from_str(&station).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let epoch = vlbiflow_formats::time::epoch_for_unix(start_second)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    // EDV 1 and 3 carry the sample rate, so that readers need not guess it from the frame numbers.
    let sample_rate = match edv {
        0 => None,
        1 | 3 => Some(
            EdvSampleRate::from_hz(u64::from(frame_rate) * samples_per_frame as u64)
                .map_err(|e| PyValueError::new_err(e.to_string()))?,
        ),
        _ => return Err(PyValueError::new_err("edv must be 0, 1 or 3")),
    };
    let scale = if baseband_units { 1.0 / BASEBAND_SCALE } else { 1.0 };
    py.detach(|| -> PyResult<u64> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        let mut out = std::io::BufWriter::new(file);
        let mut frame = vec![0u8; 32 + payload_len];
        let mut scratch = vec![0f32; samples_per_frame * vals];
        let mut written = 0u64;
        for f in 0..times / samples_per_frame {
            let idx = f as u64;
            let sec = start_second + (idx / u64::from(frame_rate)) as i64;
            for (col, &tid) in thread_ids.iter().enumerate() {
                let repr = VdifHeaderRepr {
                    seconds: (sec - epoch_start_unix(epoch)) as u32,
                    epoch,
                    frame_number: (idx % u64::from(frame_rate)) as u32,
                    log2_channels: channels.trailing_zeros() as u8,
                    frame_len: 32 + payload_len,
                    complex,
                    bits_per_sample: bits,
                    thread_id: tid,
                    station_id,
                    ..Default::default()
                };
                let repr = match sample_rate {
                    Some(r) => repr.with_sample_rate(edv, r),
                    None => repr,
                };
                if fill
                    .as_ref()
                    .is_some_and(|m| m.get(f * threads + col).is_some_and(|&b| b != 0))
                {
                    vlbiflow_formats::fill::write_fill(vlbiflow_formats::FrameKind::Vdif, &mut frame);
                    out.write_all(&frame)
                        .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
                    written += 1;
                    continue;
                }
                repr.emit(&mut frame)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                for (t, s) in scratch.chunks_exact_mut(vals).enumerate() {
                    let src = &values[(f * samples_per_frame + t) * row + col * vals..][..vals];
                    for (d, v) in s.iter_mut().zip(src) {
                        *d = v * scale;
                    }
                }
                samples::encode(format, &scratch, &mut frame[32..])
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                out.write_all(&frame)
                    .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
                written += 1;
            }
        }
        out.flush()
            .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        Ok(written)
    })
}

#[pymodule]
fn _vlbiflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Reader>()?;
    m.add_class::<RawStream>()?;
    m.add_function(wrap_pyfunction!(headers, m)?)?;
    m.add_function(wrap_pyfunction!(check_json, m)?)?;
    m.add_function(wrap_pyfunction!(ls_json, m)?)?;
    m.add_function(wrap_pyfunction!(write_vdif_raw, m)?)?;
    m.add("VlbiflowError", m.py().get_type::<VlbiflowError>())?;
    m.add("BASEBAND_SCALE", BASEBAND_SCALE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
