//! Where the correlator side delivers its continuous stream: a file (or standard output), a local UDP
//! port, a FIFO or a Unix stream socket (a software correlator's input).
//!
//! `PATH` (a file, created; an existing FIFO is opened as one), `-` (standard output), `udp:HOST:PORT`
//! (one frame per datagram), `udps:HOST:PORT` (with an 8-byte PSN counting the output frames),
//! `unix:PATH` (connect to a listening Unix stream socket), `fifo:PATH` (a named pipe; waits for its
//! reader), `null` (count and discard).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vlbiflow_formats::psn::{self, PSN_LEN};
use vlbiflow_udp::send::BatchSender;
use vlbiflow_udp::socket::{open_udp, UdpConfig};

/// An output named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputSpec {
    File(PathBuf),
    Stdout,
    Udp { address: SocketAddr, psn: bool },
    Unix(PathBuf),
    Fifo(PathBuf),
    Null,
}

impl OutputSpec {
    /// Parses the syntax in the module docs.
    pub fn parse(s: &str) -> Result<OutputSpec, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty output".into());
        }
        if s == "-" {
            return Ok(OutputSpec::Stdout);
        }
        if s == "null" {
            return Ok(OutputSpec::Null);
        }
        for (prefix, psn) in [("udp:", false), ("udps:", true)] {
            if let Some(a) = s.strip_prefix(prefix) {
                let a = a.trim_start_matches("//");
                let address = vlbiflow_udp::net::resolve(a).map_err(|e| e.to_string())?;
                if address.port() == 0 {
                    return Err(format!("{s}: port 0 is not a destination"));
                }
                return Ok(OutputSpec::Udp { address, psn });
            }
        }
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(OutputSpec::Unix(p.into()));
        }
        if let Some(p) = s.strip_prefix("fifo:") {
            return Ok(OutputSpec::Fifo(p.into()));
        }
        let path = PathBuf::from(s);
        if std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_fifo()) {
            return Ok(OutputSpec::Fifo(path));
        }
        Ok(OutputSpec::File(path))
    }

    pub fn describe(&self) -> String {
        match self {
            OutputSpec::File(p) => format!("file {}", p.display()),
            OutputSpec::Stdout => "standard output".into(),
            OutputSpec::Udp { address, psn } => {
                format!("{} to {address}", if *psn { "udps" } else { "udp" })
            }
            OutputSpec::Unix(p) => format!("Unix socket {}", p.display()),
            OutputSpec::Fifo(p) => format!("FIFO {}", p.display()),
            OutputSpec::Null => "nowhere (counted only)".into(),
        }
    }
}

/// An open output. Frames are buffered (files, pipes, sockets) or batched (UDP); [`flush`](Self::flush)
/// at the end and whenever the stream pauses.
pub enum Output {
    Writer(BufWriter<Box<dyn Write + Send>>),
    Udp {
        socket: UdpSocket,
        sender: Box<BatchSender>,
        psn: bool,
        next_psn: u64,
        frame_len: usize,
        buf: Vec<u8>,
        queued: usize,
    },
    Null,
}

/// Frames buffered per UDP `sendmmsg`.
const UDP_BATCH: usize = 64;
/// Buffer of a file, pipe or socket output.
const WRITE_BUFFER: usize = 8 << 20;

impl Output {
    /// Opens `spec` for frames of `frame_len` bytes. A FIFO or Unix socket without a reader is waited
    /// for up to `wait`. A file that exists is refused unless `overwrite`.
    pub fn open(spec: &OutputSpec, frame_len: usize, wait: Duration, overwrite: bool) -> io::Result<Output> {
        let writer = |w: Box<dyn Write + Send>| Output::Writer(BufWriter::with_capacity(WRITE_BUFFER, w));
        Ok(match spec {
            OutputSpec::Null => Output::Null,
            OutputSpec::Stdout => writer(Box::new(io::stdout())),
            OutputSpec::File(p) => {
                let mut o = OpenOptions::new();
                o.write(true);
                if overwrite {
                    o.create(true).truncate(true);
                } else {
                    o.create_new(true);
                }
                let f = o
                    .open(p)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                writer(Box::new(SteadyFile::new(f)))
            }
            OutputSpec::Fifo(p) => writer(Box::new(open_fifo(p, wait)?)),
            OutputSpec::Unix(p) => {
                let end = Instant::now() + wait;
                let s = loop {
                    match UnixStream::connect(p) {
                        Ok(s) => break s,
                        Err(e) if Instant::now() < end => {
                            let _ = e;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
                    }
                };
                writer(Box::new(s))
            }
            OutputSpec::Udp { address, psn } => {
                let mut cfg = UdpConfig::sender(*address);
                cfg.send_buffer = Some(32 << 20);
                let (socket, _) =
                    open_udp(&cfg).map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?;
                Output::Udp {
                    socket,
                    sender: Box::new(BatchSender::new(UDP_BATCH)),
                    psn: *psn,
                    next_psn: 0,
                    frame_len,
                    buf: vec![0u8; UDP_BATCH * (PSN_LEN + frame_len)],
                    queued: 0,
                }
            }
        })
    }

    /// Writes one frame.
    #[inline]
    pub fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        match self {
            Output::Writer(w) => w.write_all(frame),
            Output::Null => Ok(()),
            Output::Udp {
                psn: with_psn,
                next_psn,
                frame_len,
                buf,
                queued,
                ..
            } => {
                let slot = PSN_LEN + *frame_len;
                let at = *queued * slot;
                buf[at..at + PSN_LEN].copy_from_slice(&psn::to_bytes(*next_psn));
                let n = frame.len().min(*frame_len);
                buf[at + PSN_LEN..at + PSN_LEN + n].copy_from_slice(&frame[..n]);
                let _ = with_psn;
                *next_psn = next_psn.wrapping_add(1);
                *queued += 1;
                if *queued == UDP_BATCH {
                    self.flush()?;
                }
                Ok(())
            }
        }
    }

    /// Sends or writes out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Writer(w) => w.flush(),
            Output::Null => Ok(()),
            Output::Udp {
                socket,
                sender,
                psn,
                frame_len,
                buf,
                queued,
                ..
            } => {
                if *queued == 0 {
                    return Ok(());
                }
                let slot = PSN_LEN + *frame_len;
                let skip = if *psn { 0 } else { PSN_LEN };
                let mut batch = sender.batch();
                for d in buf.chunks_exact(slot).take(*queued) {
                    batch.push(&[&d[skip..]]);
                }
                *queued = 0;
                batch.flush(socket).map(|_| ()).map_err(io::Error::from)
            }
        }
    }
}

/// Opens a FIFO for writing, waiting up to `wait` for a reader (opening without one fails with ENXIO in
/// non-blocking mode; a blocking open would wait forever).
fn open_fifo(p: &std::path::Path, wait: Duration) -> io::Result<File> {
    let end = Instant::now() + wait;
    loop {
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
        {
            Ok(f) => {
                // Writes block from here on: the reader sets the pace (the socket buffer absorbs bursts).
                let fd = std::os::fd::AsFd::as_fd(&f);
                let flags = rustix::fs::fcntl_getfl(fd)?;
                rustix::fs::fcntl_setfl(fd, flags - rustix::fs::OFlags::NONBLOCK)?;
                return Ok(f);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                let why = if e.raw_os_error() == Some(libc::ENXIO) {
                    format!("no reader opened the FIFO within {wait:?}")
                } else {
                    e.to_string()
                };
                return Err(io::Error::new(e.kind(), format!("{}: {why}", p.display())));
            }
        }
    }
}

/// An [`Output`] on its own thread behind a ring of frames, so that a slow disk or reader does not hold
/// up the receiving thread until the ring (`buffer_bytes`) is full; only then does
/// [`write_frame`](Self::write_frame) wait (counted in [`stalls`](Self::stalls)): the output stays
/// continuous, and the socket buffer absorbs what comes meanwhile.
pub struct OutputWriter {
    producer: crate::ring::Producer,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
    stalls: u64,
}

impl OutputWriter {
    /// Starts the writer thread for `output` with a ring of about `buffer_bytes` of `frame_len`-byte frames.
    pub fn start(mut output: Output, frame_len: usize, buffer_bytes: usize) -> io::Result<Self> {
        let slots = (buffer_bytes / frame_len.max(1)).clamp(64, 1 << 22);
        let (producer, mut consumer) = crate::ring::ring(slots, frame_len);
        let thread =
            std::thread::Builder::new()
                .name("vf-output".into())
                .spawn(move || -> io::Result<()> {
                    // The receiving thread comes first when the CPU is short (the ring absorbs the wait).
                    crate::forward::be_nicer(crate::forward::SENDER_NICENESS);
                    loop {
                        let n = consumer.wait(Duration::from_millis(50));
                        if n == 0 {
                            output.flush()?;
                            if consumer.producer_gone() && consumer.available() == 0 {
                                return Ok(());
                            }
                            continue;
                        }
                        for i in 0..n {
                            output.write_frame(consumer.get(i))?;
                        }
                        consumer.release(n);
                        if consumer.available() == 0 {
                            output.flush()?;
                        }
                    }
                })?;
        Ok(OutputWriter {
            producer,
            thread: Some(thread),
            stalls: 0,
        })
    }

    /// Queues one frame for the writer; waits while the ring is full. An error if the writer failed.
    #[inline]
    pub fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.producer.try_push(&[frame]) {
            return Ok(());
        }
        self.stalls += 1;
        self.producer.notify();
        loop {
            if self.producer.consumer_gone() {
                return Err(self.failure());
            }
            std::thread::sleep(Duration::from_micros(100));
            if self.producer.try_push(&[frame]) {
                return Ok(());
            }
        }
    }

    /// Wakes the writer; call once per batch.
    #[inline]
    pub fn publish(&self) {
        self.producer.notify();
    }

    /// Frames that had to wait for room in the ring (the output was slower than the stream).
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    fn failure(&mut self) -> io::Error {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => io::Error::other("the output thread panicked"),
            _ => io::Error::other("the output stopped"),
        }
    }

    /// Writes out everything queued and stops the thread.
    pub fn finish(mut self) -> io::Result<()> {
        let t = self.thread.take();
        drop(self.producer);
        match t.map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the output thread panicked")),
            None => Ok(()),
        }
    }
}

/// Writeback is started every `WRITEBACK_CHUNK` bytes and waited for one chunk behind.
const WRITEBACK_CHUNK: u64 = 32 << 20;

/// A file written at a steady pace: its dirty pages are written back as it goes (`sync_file_range` on each
/// 32 MiB written, waiting for the chunk before) and dropped from the page cache, so a long output neither
/// fills memory with dirty pages nor meets the kernel's dirty-page throttling in bursts (the recorder's
/// disks are written the same way).
struct SteadyFile {
    file: File,
    written: u64,
    started: u64,
    waited: u64,
    /// tmpfs and the like have no writeback: nothing to do.
    memory: bool,
}

impl SteadyFile {
    fn new(file: File) -> Self {
        let memory = rustix::fs::fstatfs(&file).is_ok_and(|s| {
            // TMPFS_MAGIC, RAMFS_MAGIC
            matches!(s.f_type as u64, 0x0102_1994 | 0x8584_58f6)
        });
        SteadyFile {
            file,
            written: 0,
            started: 0,
            waited: 0,
            memory,
        }
    }

    fn sync_range(&self, start: u64, len: u64, wait: bool) {
        use std::os::fd::AsRawFd;
        let flags = if wait {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER
        } else {
            libc::SYNC_FILE_RANGE_WRITE
        };
        // SAFETY: a plain system call on a descriptor this value owns; no memory is passed.
        let _ = unsafe { libc::sync_file_range(self.file.as_raw_fd(), start as i64, len as i64, flags) };
        if wait {
            // Advisory only: its failure changes nothing.
            let _ = rustix::fs::fadvise(
                &self.file,
                start,
                std::num::NonZeroU64::new(len),
                rustix::fs::Advice::DontNeed,
            );
        }
    }
}

impl Write for SteadyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if !self.memory {
            while self.written - self.started >= WRITEBACK_CHUNK {
                self.sync_range(self.started, WRITEBACK_CHUNK, false);
                self.started += WRITEBACK_CHUNK;
                if self.started - self.waited > WRITEBACK_CHUNK {
                    self.sync_range(self.waited, WRITEBACK_CHUNK, true);
                    self.waited += WRITEBACK_CHUNK;
                }
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}
