//! What to record: streams, disks, scan name and the knobs of the engine.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use vlbiflow_scan::spec::{Spec, SpecOption, SpecSyntax};
pub use vlbiflow_scan::{FrameKind, ScanFormat};

/// Default VDIF frame size (R2DBE/EHT: 8192-byte payload + 32-byte header).
pub const DEFAULT_VDIF_FRAME_SIZE: u32 = 8224;
/// Mark5B frame size: 16-byte header + 10000-byte payload.
pub const MARK5B_FRAME_SIZE: u32 = vlbiflow_formats::mark5b::FRAME_LEN as u32;
/// Default nominal block size (d-plane's 10 MB), block header included.
pub const DEFAULT_BLOCK_SIZE: u64 = 10_000_000;
/// Share of the memory available at the start (MemAvailable) the block pool may grow to by default.
pub const DEFAULT_POOL_MEMORY_FRACTION: f64 = 0.5;
/// Upper bound of the default pool memory.
pub const DEFAULT_POOL_MEMORY_CAP: u64 = 64 << 30;
/// Default socket receive buffer request per stream.
pub const DEFAULT_RECV_BUFFER: usize = 256 << 20;

/// An error in a stream specification or recorder configuration, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("stream spec {spec:?}: {field}: {reason}")]
    Stream {
        spec: String,
        field: &'static str,
        reason: String,
    },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// One input stream: `LABEL=vdif@ADDR:PORT[,threads=0,1][,psn][,frame-size=8224][,frame-rate=N][,from=ADDR/PREFIX][,split=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Name of the stream in status, summary and metadata.
    pub label: String,
    pub kind: FrameKind,
    /// Local address to bind and receive on.
    pub address: SocketAddr,
    /// VDIF threads to record; empty records every thread.
    pub threads: Vec<u16>,
    /// Datagrams start with an 8-byte packet sequence number (host order), stripped before storing.
    pub psn: bool,
    /// Bytes per frame, header included (the datagram is this plus 8 with `psn`).
    pub frame_size: u32,
    /// Frames per second per thread; learned from the data when `None`.
    pub frame_rate: Option<u32>,
    /// Source addresses to accept (`from=ADDR[/PREFIX]`, repeatable); datagrams from others are
    /// dropped and counted as `wrong_source`. Empty: any source.
    pub from: vlbiflow_guard::net::AllowList,
    /// Sockets and capture threads the stream is received on (`split=N`, a power of two up to 64; PSN
    /// streams only): a kernel program steers runs of PSNs round them (see `vlbiflow_udp::steer`), and
    /// the blocks are numbered in PSN order. 1: one socket.
    pub split: u32,
}

/// Fewest PSNs per run of a split stream (the block size sets the run length).
pub const MIN_SPLIT_RUN: usize = 16;

impl StreamSpec {
    /// Parses the command-line form. Errors name the field at fault.
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let err = |field: &'static str, reason: String| ConfigError::Stream {
            spec: spec.to_owned(),
            field,
            reason,
        };
        let parsed = Spec::parse_labelled(spec).map_err(|e| match e {
            SpecSyntax::NoLabel => err("label", "expected LABEL=vdif@HOST:PORT[,options]".into()),
            SpecSyntax::Label(r) => err("label", r),
            SpecSyntax::NoProtocol => err(
                "format",
                "expected vdif@HOST:PORT, udps@HOST:PORT or m5b@HOST:PORT".into(),
            ),
        })?;
        let label = parsed.label.unwrap_or_default();
        // `udps@` (VDIF with a packet sequence number, as the senders and forwarders write it) is
        // `vdif@...,psn`
        let udps = parsed.proto == "udps";
        let kind: FrameKind = if udps {
            FrameKind::Vdif
        } else {
            parsed
                .proto
                .parse()
                .map_err(|e: vlbiflow_formats::UnknownFrameKind| err("format", e.to_string()))?
        };
        let addr = parsed.addr;
        let address: SocketAddr = addr
            .parse()
            .map_err(|e| err("address", format!("{addr:?} is not IP:PORT ({e})")))?;
        let mut s = StreamSpec {
            label: label.to_owned(),
            kind,
            address,
            threads: Vec::new(),
            psn: udps,
            frame_size: match kind {
                FrameKind::Vdif => DEFAULT_VDIF_FRAME_SIZE,
                FrameKind::M5b => MARK5B_FRAME_SIZE,
            },
            frame_rate: None,
            from: Default::default(),
            split: 1,
        };
        for option in parsed.options {
            let (key, value) = match option.map_err(|r| err("threads", r))? {
                SpecOption::Threads(t) => {
                    if kind != FrameKind::Vdif {
                        return Err(err("threads", "only VDIF streams have threads".into()));
                    }
                    s.threads.extend(t);
                    continue;
                }
                SpecOption::Other { key, value, .. } => (key, value),
            };
            match (key, value) {
                ("psn", None) => s.psn = true,
                ("frame-size", Some(v)) => {
                    s.frame_size = v
                        .parse()
                        .map_err(|_| err("frame-size", format!("{v:?} is not a byte count")))?;
                }
                ("from", Some(v)) => s
                    .from
                    .0
                    .push(v.parse().map_err(|e| err("from", format!("{v:?}: {e}")))?),
                ("frame-rate", Some(v)) => {
                    let r: u32 = v
                        .parse()
                        .map_err(|_| err("frame-rate", format!("{v:?} is not frames per second")))?;
                    if r == 0 || r > 1 << 24 {
                        return Err(err("frame-rate", format!("{r} is outside 1..=16777216")));
                    }
                    s.frame_rate = Some(r);
                }
                ("split", Some(v)) => {
                    s.split = v
                        .parse()
                        .map_err(|_| err("split", format!("{v:?} is not a number of sockets")))?;
                }
                (k, _) => {
                    return Err(err(
                        "option",
                        format!(
                            "unknown option {k:?} (known: threads=, psn, frame-size=, frame-rate=, from=, split=)"
                        ),
                    ))
                }
            }
        }
        s.threads.sort_unstable();
        s.threads.dedup();
        s.validate().map_err(|e| match e {
            ConfigError::Invalid { field, reason } => err(field, reason),
            other => other,
        })?;
        Ok(s)
    }

    /// Checks the frame size against the format, and that a split stream has PSNs to steer by.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use vlbiflow_seq::split::MAX_PARTS;
        if !self.split.is_power_of_two() || self.split > MAX_PARTS {
            return Err(ConfigError::Invalid {
                field: "split",
                reason: format!(
                    "{} sockets: must be a power of two from 1 to {MAX_PARTS}",
                    self.split
                ),
            });
        }
        if self.split > 1 && !self.psn {
            return Err(ConfigError::Invalid {
                field: "split",
                reason: "splitting a stream over sockets needs its PSNs (psn or udps@)".into(),
            });
        }
        let bad = |reason: String| {
            Err(ConfigError::Invalid {
                field: "frame-size",
                reason,
            })
        };
        match self.kind {
            FrameKind::Vdif => {
                if self.frame_size < 32 || self.frame_size % 8 != 0 || self.frame_size > 65_000 {
                    return bad(format!(
                        "VDIF frame size {} must be a multiple of 8 between 32 and 65000 (one frame per datagram)",
                        self.frame_size
                    ));
                }
            }
            FrameKind::M5b => {
                if self.frame_size != MARK5B_FRAME_SIZE {
                    return bad(format!(
                        "Mark5B frames are {MARK5B_FRAME_SIZE} bytes, not {}",
                        self.frame_size
                    ));
                }
            }
        }
        Ok(())
    }

    /// Bytes of one datagram on the wire (frame plus PSN prefix).
    pub fn datagram_size(&self) -> usize {
        self.frame_size as usize + if self.psn { 8 } else { 0 }
    }
}

/// Everything the engine needs for one scan.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    pub streams: Vec<StreamSpec>,
    /// Directories (usually mount points) to spread the scan over.
    pub disks: Vec<PathBuf>,
    /// Scan name; the file stem on every disk.
    pub scan: String,
    pub experiment: Option<String>,
    pub station: Option<String>,
    pub format: ScanFormat,
    /// Nominal block size in bytes (Mark6: block header included; FlexBuff: chunk size). Blocks hold a whole
    /// number of frames, so the written size is the largest such multiple that fits.
    pub block_size: u64,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Socket receive buffer to request per stream (SO_RCVBUFFORCE, else SO_RCVBUF).
    pub recv_buffer: usize,
    /// Blocks in the preallocated pool; `None` picks enough for every stream plus writer queues.
    pub pool_blocks: Option<usize>,
    /// Memory the block pool may grow to when the disks fall behind (bytes; only without `pool_blocks`).
    /// `None`: [`DEFAULT_POOL_MEMORY_FRACTION`] of MemAvailable at the start, capped at
    /// [`DEFAULT_POOL_MEMORY_CAP`]. See [`pool_limit_blocks`](Self::pool_limit_blocks).
    pub pool_memory: Option<u64>,
    /// Capture threads; streams are spread over them round-robin.
    pub capture_threads: usize,
    /// Messages per recvmmsg call (with GRO a message can hold several datagrams).
    pub batch: usize,
    /// Enable UDP generic receive offload on the stream sockets where the kernel offers it, so that a
    /// sender using UDP GSO (or a NIC doing GRO) delivers runs of frames per message.
    pub gro: bool,
    /// Try O_DIRECT writes (Mark6 files and FlexBuff chunks) where the filesystem allows; buffered otherwise,
    /// said once per disk with [`RecorderEvent::BufferedFallback`](crate::RecorderEvent::BufferedFallback).
    pub direct_io: bool,
    /// How often the metadata on every disk is refreshed while recording.
    pub metadata_interval: Duration,
    /// Capture only: receive, validate and account exactly as a recording (same sockets, capture threads,
    /// block pool and sealed blocks), but write nothing: sealed blocks go straight back to the pool. No
    /// disk is touched (disks given are ignored, said once with a warning) and no metadata is written; the
    /// summary and status are those of a recording. The pool keeps its starting size (no disk can fall
    /// behind, so it never grows). Measures capture capacity apart from storage.
    pub discard: bool,
    /// jive5ab's datastreams: with rules, every VDIF frame goes to the FlexBuff recording
    /// `<scan>_ds<expanded name>` of the first rule (by name) that matches it, each an ordinary FlexBuff
    /// recording with its own chunk directory per disk, chunks numbered from 0 and its own metadata;
    /// frames matching no rule are dropped and counted as `filtered`. Empty: one recording, `scan`.
    pub datastreams: Vec<vlbiflow_scan::datastream::Rule>,
}

impl RecorderConfig {
    /// A configuration with defaults for everything but the streams, disks and scan name.
    pub fn new(streams: Vec<StreamSpec>, disks: Vec<PathBuf>, scan: impl Into<String>) -> Self {
        RecorderConfig {
            streams,
            disks,
            scan: scan.into(),
            experiment: None,
            station: None,
            format: ScanFormat::Mark6,
            block_size: DEFAULT_BLOCK_SIZE,
            duration: None,
            recv_buffer: DEFAULT_RECV_BUFFER,
            pool_blocks: None,
            pool_memory: None,
            capture_threads: 1,
            batch: 64,
            gro: true,
            direct_io: true,
            metadata_interval: Duration::from_secs(3),
            discard: false,
            datastreams: Vec::new(),
        }
    }

    /// Checks the whole configuration before anything is opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let inv = |field: &'static str, reason: String| Err(ConfigError::Invalid { field, reason });
        if self.streams.is_empty() {
            return inv("streams", "at least one stream is needed".into());
        }
        if self.disks.is_empty() && !self.discard {
            return inv(
                "disks",
                "at least one disk is needed (or capture only, writing nothing)".into(),
            );
        }
        match self.format {
            ScanFormat::Mark6 => vlbiflow_formats::names::validate_scan_name(&self.scan),
            ScanFormat::Flexbuff => vlbiflow_formats::flexbuff::validate_flexbuff_scan_name(&self.scan),
        }
        .map_err(|e| ConfigError::Invalid {
            field: "scan",
            reason: format!("{:?}: {e}", self.scan),
        })?;
        let mut labels = std::collections::HashSet::new();
        let mut addrs = std::collections::HashSet::new();
        for s in &self.streams {
            s.validate()?;
            if !labels.insert(&s.label) {
                return inv("streams", format!("label {:?} is used twice", s.label));
            }
            // Port 0 means "any free port": never a clash.
            if s.address.port() != 0 && !addrs.insert(s.address) {
                return inv("streams", format!("address {} is used by two streams", s.address));
            }
            let overhead = if self.format == ScanFormat::Mark6 { 8 } else { 0 };
            if self.block_size < u64::from(s.frame_size) + overhead {
                return inv(
                    "block-size",
                    format!(
                        "{} bytes cannot hold one {}-byte frame of stream {}",
                        self.block_size, s.frame_size, s.label
                    ),
                );
            }
            // A split stream's blocks hold a run of PSNs and a train's tail behind it.
            let frames = (self.block_size - overhead) / u64::from(s.frame_size);
            let least = (crate::split::TRAIN_ROOM + MIN_SPLIT_RUN) as u64;
            if s.split > 1 && frames < least {
                return inv(
                    "split",
                    format!(
                        "stream {} is split over sockets by runs of PSNs, and a block must hold a run of at least \
                         {MIN_SPLIT_RUN} frames and a train of {} behind it: {} bytes hold {frames} frames of {} \
                         bytes (use a --block-size of at least {} bytes)",
                        s.label,
                        crate::split::TRAIN_ROOM,
                        self.block_size,
                        s.frame_size,
                        least * u64::from(s.frame_size) + overhead
                    ),
                );
            }
        }
        if self.block_size > i32::MAX as u64 {
            return inv(
                "block-size",
                format!("{} exceeds the Mark6 limit of 2^31-1 bytes", self.block_size),
            );
        }
        if self.format == ScanFormat::Mark6 {
            let first = &self.streams[0];
            if let Some(s) = self
                .streams
                .iter()
                .find(|s| s.kind != first.kind || s.frame_size != first.frame_size)
            {
                return inv(
                    "streams",
                    format!(
                        "a Mark6 scan has one packet format and size per file: stream {} ({:?}, {} bytes) differs from {} ({:?}, {} bytes); use --format flexbuff or separate scans",
                        s.label, s.kind, s.frame_size, first.label, first.kind, first.frame_size
                    ),
                );
            }
        }
        let mut seen = std::collections::HashSet::new();
        for d in &self.disks {
            if !seen.insert(d) {
                return inv("disks", format!("{} is given twice", d.display()));
            }
        }
        if self.capture_threads == 0 {
            return inv("capture-threads", "must be at least 1".into());
        }
        if self.batch == 0 || self.batch > 1024 {
            return inv("batch", format!("{} is outside 1..=1024", self.batch));
        }
        self.validate_datastreams()?;
        if let Some(n) = self.pool_blocks {
            if n < self.receiving_sockets() + 2 {
                return inv(
                    "pool-blocks",
                    format!(
                        "{n} blocks is too few for {} streams on {} sockets (need at least sockets + 2)",
                        self.streams.len(),
                        self.receiving_sockets()
                    ),
                );
            }
        }
        Ok(())
    }

    /// Datastreams need FlexBuff (one chunk directory per recording) and VDIF streams (the rules match VDIF
    /// station and thread ids), at most [`MAX_RECORDINGS`](vlbiflow_scan::datastream::MAX_RECORDINGS)
    /// rules with specifications, and names that make valid recording names however they expand.
    fn validate_datastreams(&self) -> Result<(), ConfigError> {
        use vlbiflow_scan::datastream::{expand, MAX_RECORDINGS, MAX_THREAD, SUFFIX_SEP};
        let inv = |reason: String| {
            Err(ConfigError::Invalid {
                field: "datastreams",
                reason,
            })
        };
        if self.datastreams.is_empty() {
            return Ok(());
        }
        if self.format != ScanFormat::Flexbuff {
            return inv("datastreams are recorded as FlexBuff recordings only".into());
        }
        if let Some(s) = self.streams.iter().find(|s| s.split > 1) {
            return inv(format!(
                "stream {} is split: datastreams route frames in arrival order, so they need one socket",
                s.label
            ));
        }
        if let Some(s) = self.streams.iter().find(|s| s.kind != FrameKind::Vdif) {
            return inv(format!(
                "stream {} is not VDIF: datastreams route VDIF frames",
                s.label
            ));
        }
        if self.datastreams.len() > MAX_RECORDINGS {
            return inv(format!("at most {MAX_RECORDINGS} datastreams"));
        }
        for r in &self.datastreams {
            if r.specs.is_empty() {
                return inv(format!("datastream {:?} has no match specification", r.name));
            }
            // The widest a name can expand to: thread 1023, the station as four hex digits.
            let widest = format!("{}{SUFFIX_SEP}{}", self.scan, expand(&r.name, 0xffff, MAX_THREAD));
            if let Err(e) = vlbiflow_formats::flexbuff::validate_flexbuff_scan_name(&widest) {
                return inv(format!(
                    "datastream {:?} makes recording names like {widest:?}: {e}",
                    r.name
                ));
            }
        }
        Ok(())
    }

    /// Warnings (not errors): disks given to a capture-only recording (ignored); pairs of streams of this scan whose frames alone cannot be told apart. Every
    /// block holds one stream's frames and the scan metadata lists each stream's blocks, but readers that
    /// ignore vlbiflow's metadata (jive5ab, d-plane's gather) see only frames and would merge such streams:
    /// two Mark5B streams (a Mark5B header names no stream), or two VDIF streams that may carry the same
    /// thread IDs (no `threads=`, or overlapping lists), which then differ only if their station IDs do.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.discard {
            // Nothing is written, so no reader can confuse streams.
            if !self.disks.is_empty() {
                out.push(format!(
                    "capture only: nothing is written, the {} disk(s) given are not touched",
                    self.disks.len()
                ));
            }
            return out;
        }
        for (i, a) in self.streams.iter().enumerate() {
            for b in &self.streams[i + 1..] {
                match (a.kind, b.kind) {
                    (FrameKind::M5b, FrameKind::M5b) => out.push(format!(
                        "streams {} and {} are both Mark5B: nothing in their frames tells them apart, so readers \
                         that ignore vlbiflow's scan metadata (jive5ab, d-plane gather) would merge them; \
                         record them into separate scans if such readers are used",
                        a.label, b.label
                    )),
                    (FrameKind::Vdif, FrameKind::Vdif) => {
                        let shared: Vec<u16> = if a.threads.is_empty() {
                            b.threads.clone()
                        } else if b.threads.is_empty() {
                            a.threads.clone()
                        } else {
                            a.threads.iter().copied().filter(|t| b.threads.contains(t)).collect()
                        };
                        let both_all = a.threads.is_empty() && b.threads.is_empty();
                        if both_all || !shared.is_empty() {
                            let which = if both_all {
                                "any thread".to_owned()
                            } else {
                                format!("threads {shared:?}")
                            };
                            out.push(format!(
                                "streams {} and {} are both VDIF and may carry {which}: their frames differ only \
                                 if their station IDs differ; otherwise readers that ignore vlbiflow's scan \
                                 metadata (jive5ab, d-plane gather) would merge them (give disjoint threads= \
                                 or record them into separate scans)",
                                a.label, b.label
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// Blocks the pool may grow to. With `pool_blocks` set, exactly that many (allocated at the start, never
    /// more). Otherwise the pool starts at [`effective_pool_blocks`](Self::effective_pool_blocks) and grows
    /// while the disks fall behind, up to `pool_memory` bytes or, by default,
    /// [`DEFAULT_POOL_MEMORY_FRACTION`] of `mem_available` (MemAvailable from /proc/meminfo at the start)
    /// capped at [`DEFAULT_POOL_MEMORY_CAP`]; never below the starting size. `block_bytes` is one block
    /// buffer's size. Capture only ([`discard`](Self::discard)): the starting size, since no disk can fall
    /// behind.
    pub fn pool_limit_blocks(&self, block_bytes: usize, mem_available: Option<u64>) -> usize {
        let start = self.effective_pool_blocks();
        if self.pool_blocks.is_some() || self.discard {
            return start;
        }
        let memory = self.pool_memory.unwrap_or_else(|| {
            let avail = mem_available.unwrap_or(0) as f64 * DEFAULT_POOL_MEMORY_FRACTION;
            (avail as u64).min(DEFAULT_POOL_MEMORY_CAP)
        });
        start.max((memory / block_bytes.max(1) as u64) as usize)
    }

    /// Blocks in the pool: the configured count, or one filling block per stream plus about 2 s of writer queue
    /// bounded to ~1 GiB in total (at least four per disk).
    pub fn effective_pool_blocks(&self) -> usize {
        if let Some(n) = self.pool_blocks {
            return n;
        }
        let per_disk = 4 * self.disks.len();
        let budget = ((1u64 << 30) / self.block_size.max(1)) as usize;
        self.receiving_sockets() + per_disk.max(budget.min(128)).max(8)
    }

    /// Sockets the streams are received on (each fills a block of its own): one per stream, `split` for
    /// a split one.
    pub fn receiving_sockets(&self) -> usize {
        self.streams.iter().map(|s| s.split.max(1) as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_spec() {
        let s = StreamSpec::parse("a=vdif@127.0.0.1:4001,threads=0,1,psn,frame-size=8032,frame-rate=1000")
            .unwrap();
        assert_eq!(s.label, "a");
        assert_eq!(s.kind, FrameKind::Vdif);
        assert_eq!(s.address, "127.0.0.1:4001".parse().unwrap());
        assert_eq!(s.threads, vec![0, 1]);
        assert!(s.psn);
        assert_eq!(s.frame_size, 8032);
        assert_eq!(s.frame_rate, Some(1000));
        assert_eq!(s.datagram_size(), 8040);
    }

    #[test]
    fn defaults_and_m5b() {
        let s = StreamSpec::parse("x=vdif@0.0.0.0:5000").unwrap();
        assert_eq!((s.frame_size, s.psn, s.threads.len()), (8224, false, 0));
        let m = StreamSpec::parse("m=m5b@127.0.0.1:5001,psn").unwrap();
        assert_eq!((m.kind, m.frame_size), (FrameKind::M5b, 10016));
    }

    #[test]
    fn udps_is_vdif_with_psn() {
        let u = StreamSpec::parse("a=udps@127.0.0.1:4001,threads=0,1").unwrap();
        let v = StreamSpec::parse("a=vdif@127.0.0.1:4001,threads=0,1,psn").unwrap();
        assert_eq!(
            (u.kind, u.psn, u.threads, u.frame_size),
            (v.kind, v.psn, v.threads, v.frame_size)
        );
        assert_eq!(u.kind, FrameKind::Vdif);
        assert!(u.psn);
    }

    #[test]
    fn errors_name_the_field() {
        for (spec, field) in [
            ("novalue", "label"),
            ("a=udp@127.0.0.1:1", "format"),
            ("a=vdif127.0.0.1:1", "format"),
            ("a=vdif@localhost", "address"),
            ("a=vdif@127.0.0.1:1,threads=2000", "threads"),
            ("a=vdif@127.0.0.1:1,frame-size=100", "frame-size"),
            ("a=vdif@127.0.0.1:1,frame-size=x", "frame-size"),
            ("a=vdif@127.0.0.1:1,frame-rate=0", "frame-rate"),
            ("a=vdif@127.0.0.1:1,bogus", "option"),
            ("a=m5b@127.0.0.1:1,threads=1", "threads"),
        ] {
            let e = StreamSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains(field), "{spec}: {e}");
        }
    }

    #[test]
    fn warns_about_streams_whose_frames_cannot_be_told_apart() {
        let p = |s: &str| StreamSpec::parse(s).unwrap();
        let mut c = RecorderConfig::new(
            vec![
                p("a=vdif@127.0.0.1:1,threads=0,1"),
                p("b=vdif@127.0.0.1:2,threads=2"),
            ],
            vec!["/tmp/x".into()],
            "t_xx_001",
        );
        assert!(c.warnings().is_empty());
        c.streams[1] = p("b=vdif@127.0.0.1:2,threads=1,2");
        let w = c.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("threads [1]") && w[0].contains("station"), "{w:?}");
        c.streams[1] = p("b=vdif@127.0.0.1:2");
        assert!(c.warnings()[0].contains("threads [0, 1]"));
        c.streams[0] = p("a=vdif@127.0.0.1:1");
        assert!(c.warnings()[0].contains("any thread"));
        c.format = ScanFormat::Flexbuff;
        c.streams = vec![
            p("a=m5b@127.0.0.1:1"),
            p("b=m5b@127.0.0.1:2"),
            p("c=vdif@127.0.0.1:3"),
        ];
        let w = c.warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("Mark5B"));
    }

    #[test]
    fn pool_limit_follows_memory_never_below_the_start() {
        let s = StreamSpec::parse("a=vdif@127.0.0.1:4001").unwrap();
        let mut c = RecorderConfig::new(vec![s], vec!["/tmp/a".into(), "/tmp/b".into()], "t_xx_001");
        let start = c.effective_pool_blocks();
        let bb = 10_000_000;
        // Half of 24 GB available: 1200 blocks of 10 MB.
        assert_eq!(c.pool_limit_blocks(bb, Some(24_000_000_000)), 1200);
        // Capped.
        assert_eq!(
            c.pool_limit_blocks(bb, Some(1 << 50)),
            (DEFAULT_POOL_MEMORY_CAP / bb as u64) as usize
        );
        // Little memory or none known: the starting pool.
        assert_eq!(c.pool_limit_blocks(bb, Some(100_000_000)), start);
        assert_eq!(c.pool_limit_blocks(bb, None), start);
        c.pool_memory = Some(2_000_000_000);
        assert_eq!(c.pool_limit_blocks(bb, Some(1 << 40)), 200);
        c.pool_blocks = Some(9);
        assert_eq!(c.pool_limit_blocks(bb, Some(1 << 40)), 9);
        // Capture only: never grows.
        c.pool_blocks = None;
        c.discard = true;
        assert_eq!(c.pool_limit_blocks(bb, Some(1 << 40)), start);
    }

    #[test]
    fn thread_ids_over_1023_are_refused_clearly() {
        for spec in [
            "a=vdif@127.0.0.1:1,threads=1024",
            "a=vdif@127.0.0.1:1,threads=0,1,1024",
            "a=vdif@127.0.0.1:1,threads=3+65535",
            "a=vdif@127.0.0.1:1,threads=0,70000",
        ] {
            let e = StreamSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains("threads") && e.contains("0..=1023"), "{spec}: {e}");
        }
        let s = StreamSpec::parse("a=vdif@127.0.0.1:1,threads=0,1023").unwrap();
        assert_eq!(s.threads, vec![0, 1023]);
    }

    #[test]
    fn config_checks() {
        let s = StreamSpec::parse("a=vdif@127.0.0.1:4001").unwrap();
        let mut c = RecorderConfig::new(vec![s.clone()], vec!["/tmp/x".into()], "t_xx_001");
        c.validate().unwrap();
        c.scan = "../x".into();
        assert!(c.validate().unwrap_err().to_string().contains("scan"));
        c.scan = "t_xx_001".into();
        let mut s2 = StreamSpec::parse("b=vdif@127.0.0.1:4002,frame-size=8032").unwrap();
        c.streams.push(s2.clone());
        assert!(c.validate().unwrap_err().to_string().contains("flexbuff"));
        c.format = ScanFormat::Flexbuff;
        c.validate().unwrap();
        s2.address = s.address;
        c.streams[1] = s2;
        assert!(c.validate().unwrap_err().to_string().contains("address"));
    }

    #[test]
    fn a_split_needs_psn_a_power_of_two_and_blocks_that_hold_a_run() {
        let s = StreamSpec::parse("a=vdif@127.0.0.1:4001,psn,split=4").unwrap();
        assert_eq!(s.split, 4);
        assert_eq!(
            StreamSpec::parse("a=udps@127.0.0.1:4001,split=64").unwrap().split,
            64
        );
        for (spec, what) in [
            ("a=vdif@127.0.0.1:4001,split=2", "needs its PSNs"),
            ("a=vdif@127.0.0.1:4001,psn,split=3", "power of two"),
            ("a=vdif@127.0.0.1:4001,psn,split=128", "power of two"),
            ("a=vdif@127.0.0.1:4001,psn,split=x", "not a number"),
        ] {
            let e = StreamSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains("split") && e.contains(what), "{spec}: {e}");
        }
        let mut c = RecorderConfig::new(vec![s], vec!["/tmp/x".into()], "t_xx_001");
        c.validate().unwrap();
        // 80 frames of 8224 bytes (a run of 16 and a train of 64) and the block header: the least.
        c.block_size = 80 * 8224 + 8;
        c.validate().unwrap();
        c.block_size -= 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("split") && e.contains("657928"), "{e}");
        c.block_size = 10_000_000;
        c.format = ScanFormat::Flexbuff;
        c.datastreams = vec![vlbiflow_scan::datastream::Rule {
            name: "x".into(),
            specs: vec![vlbiflow_scan::datastream::MatchSpec::parse("0").unwrap()],
        }];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("datastreams") && e.contains("split"), "{e}");
    }
}
