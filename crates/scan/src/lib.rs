//! What a recorded scan looks like on disk, shared by everything that writes or reads one.
//!
//! Layout per disk (a "disk" is a directory, usually a mount point):
//! - Mark6 scatter-gather: `<disk>/<scan>.vdif` (or `.m5b`), one file per disk, same name on each
//!   (Haystack d-plane names its files `<exp>_<stn>_<scan>.vdif`; a vlbiflow scan name is that whole stem).
//! - FlexBuff: `<disk>/<scan>/<scan>.%08u` chunk files (jive5ab's vbs layout).
//! - Metadata: `<disk>/<scan>.vlbiflow.json` beside the data on every disk used, so a module moved to another
//!   machine describes itself. It is rewritten atomically (temporary file + rename) while recording, and its
//!   `complete` flag only becomes true after every block of the scan is flushed; a scan whose recorder died
//!   keeps `complete: false`.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::io::Write;

pub mod datastream;
pub mod spec;
use std::path::{Path, PathBuf};

/// Version of the metadata layout; bump on incompatible change.
pub const METADATA_VERSION: u32 = 1;
/// Suffix of the metadata file beside the data: `<scan>.vlbiflow.json`.
pub const METADATA_SUFFIX: &str = ".vlbiflow.json";

/// On-disk layout of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanFormat {
    /// Mark6 scatter-gather, version 2 block headers.
    Mark6,
    /// jive5ab FlexBuff (vbs) chunks.
    Flexbuff,
}

/// Frame format carried by a stream (defined in `vlbiflow-formats`).
pub use vlbiflow_formats::FrameKind;

/// Counters of one stream (or one VDIF thread of it). "lost" follows Haystack's Mark6 recording tests
/// (J. Barrett, "Simulated VDIF Recording Tests, June 2025", MIT Haystack memo, 2025): frames the sender
/// sent that are not in the recording, as inferred from sequence numbers; `loss_fraction = lost / (received + lost)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCounters {
    /// Datagrams accepted and stored.
    pub packets: u64,
    /// Frame bytes stored (PSN prefixes excluded).
    pub bytes: u64,
    /// Frames missing from the sequence (PSN or VDIF time), including those dropped below.
    pub lost: u64,
    /// Frames that arrived after a later one.
    pub out_of_order: u64,
    /// Frames seen twice (same PSN or time stamp).
    pub duplicates: u64,
    /// Stored frames whose VDIF invalid bit was set.
    pub invalid_frames: u64,
    /// Datagrams of the wrong size or not a frame of the stream's format: dropped, never fatal.
    pub rejected: u64,
    /// Frames of VDIF threads the stream was not asked to record: dropped.
    pub filtered: u64,
    /// Frames dropped by the recorder because no block buffer was free (writers behind).
    pub dropped_no_buffer: u64,
    /// Datagrams the kernel dropped on the socket (SO_RXQ_OVFL).
    pub kernel_drops: u64,
    /// Datagrams from a source outside the stream's `from=` blocks: dropped. Absent in older
    /// metadata: 0.
    #[serde(default)]
    pub wrong_source: u64,
}

impl StreamCounters {
    /// Loss fraction as in Haystack's Mark6 recording tests: lost / (stored + lost).
    pub fn loss_fraction(&self) -> f64 {
        let expected = self.packets + self.lost;
        if expected == 0 {
            0.0
        } else {
            self.lost as f64 / expected as f64
        }
    }
}

/// One input stream of a scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamMeta {
    pub label: String,
    pub kind: FrameKind,
    /// Address the stream was received on, e.g. "127.0.0.1:4001".
    pub address: String,
    /// Whether datagrams carried an 8-byte packet sequence number prefix (stripped before storing).
    pub psn: bool,
    /// Bytes per frame, header included.
    pub frame_size: u32,
    /// Frames per second per thread, configured or learned; None if unknown.
    pub frame_rate: Option<u32>,
    /// VDIF threads recorded (empty = all).
    pub threads: Vec<u16>,
    /// VDIF time of the first and last stored frame, ISO-8601 UTC, if known.
    pub first_frame_utc: Option<String>,
    pub last_frame_utc: Option<String>,
    pub counters: StreamCounters,
    /// The blocks (Mark6) or chunks (FlexBuff) that hold this stream's frames. A block holds the frames of
    /// one stream only. Empty in scans of one stream and in scans written before vlbiflow recorded it: then
    /// every block belongs to the (first) stream.
    #[serde(default, skip_serializing_if = "BlockRanges::is_empty")]
    pub blocks: BlockRanges,
}

/// A set of block (or chunk) numbers as ascending, non-overlapping inclusive ranges `[first, last]`.
/// Built by pushing numbers in ascending order; consecutive numbers share one range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BlockRanges(pub Vec<[u64; 2]>);

impl BlockRanges {
    /// True when no block is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds block `n`, which must be above every block already listed (numbers at or below the last one
    /// are ignored: blocks are numbered in the order they are sealed).
    pub fn push(&mut self, n: u64) {
        match self.0.last_mut() {
            Some(r) if n == r[1] + 1 => r[1] = n,
            Some(r) if n <= r[1] => {}
            _ => self.0.push([n, n]),
        }
    }

    /// Whether block `n` is listed.
    pub fn contains(&self, n: u64) -> bool {
        let i = self.0.partition_point(|r| r[1] < n);
        self.0.get(i).is_some_and(|r| r[0] <= n)
    }

    /// Number of blocks listed.
    pub fn count(&self) -> u64 {
        self.0.iter().map(|r| r[1] - r[0] + 1).sum()
    }
}

/// One disk of a scan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskMeta {
    /// Directory as given to the recorder.
    pub path: String,
    /// Data bytes written to this disk (file headers and block headers included).
    pub bytes: u64,
    /// Blocks written to this disk.
    pub blocks: u64,
    /// Why the disk left the scan, if it did.
    pub failed: Option<String>,
}

/// The metadata written beside a scan's data on every disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanMetadata {
    pub metadata_version: u32,
    /// Writer, e.g. "vlbiflow 0.1.0".
    pub writer: String,
    pub scan: String,
    pub experiment: Option<String>,
    pub station: Option<String>,
    pub format: ScanFormat,
    /// Nominal block size in bytes, block header included (Mark6) or chunk size (FlexBuff).
    pub block_size: u64,
    /// Wall-clock start and end of the recording, ISO-8601 UTC.
    pub start_utc: String,
    pub end_utc: Option<String>,
    /// Blocks (Mark6) or chunks (FlexBuff) in the scan, over all disks.
    pub blocks: u64,
    /// True only once every block is flushed to disk and the recorder finished cleanly.
    pub complete: bool,
    pub streams: Vec<StreamMeta>,
    pub disks: Vec<DiskMeta>,
}

impl ScanMetadata {
    /// Index of the stream (in `streams`) whose frames block `n` holds: from the recorded block ranges, or
    /// the first stream when no stream lists its blocks (one-stream scans, older metadata). `None` when
    /// ranges are recorded and none lists `n`.
    pub fn stream_of_block(&self, n: u64) -> Option<usize> {
        if self.streams.iter().all(|s| s.blocks.is_empty()) {
            return (!self.streams.is_empty()).then_some(0);
        }
        self.streams.iter().position(|s| s.blocks.contains(n))
    }
}

/// Errors reading or writing scan metadata.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not vlbiflow scan metadata: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: metadata version {found} is newer than this vlbiflow understands ({METADATA_VERSION})")]
    Version { path: PathBuf, found: u32 },
}

/// A `--disk` argument or configured disk that names no usable directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("disk {pattern:?}: {reason}")]
pub struct DiskPatternError {
    pub pattern: String,
    pub reason: String,
}

/// True when `pattern` holds glob characters (`*`, `?`, `[`).
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Expands one disk argument: a glob (e.g. `/mnt/disks/*/*/data`, as Mark6 mounts its modules) to the
/// directories it matches, sorted; a plain path to itself if it is a directory.
pub fn expand_disk_pattern(pattern: &str) -> Result<Vec<PathBuf>, DiskPatternError> {
    let err = |reason: String| DiskPatternError {
        pattern: pattern.to_owned(),
        reason,
    };
    if !is_glob(pattern) {
        let path = PathBuf::from(pattern);
        return if path.is_dir() {
            Ok(vec![path])
        } else {
            Err(err("no such directory".into()))
        };
    }
    let paths = glob::glob(pattern).map_err(|e| err(format!("bad pattern: {e}")))?;
    let mut found: Vec<PathBuf> = paths.filter_map(Result::ok).filter(|p| p.is_dir()).collect();
    if found.is_empty() {
        return Err(err("matches no directory".into()));
    }
    found.sort();
    Ok(found)
}

/// Expands every disk argument in order, dropping repeats; the first argument that names no directory is
/// the error.
pub fn expand_disks(patterns: &[String]) -> Result<Vec<PathBuf>, DiskPatternError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in patterns {
        for d in expand_disk_pattern(p)? {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    Ok(out)
}

/// Longest stream label (the Mark6 `input_stream` command and the scan metadata use the same rule).
pub const MAX_STREAM_LABEL_LEN: usize = 32;

/// Checks a stream label: 1 to [`MAX_STREAM_LABEL_LEN`] characters of `A-Z a-z 0-9 _ - .` (labels name
/// streams in the metadata, in file names of gathered streams and in commands).
pub fn validate_stream_label(label: &str) -> Result<(), String> {
    if label.is_empty()
        || label.len() > MAX_STREAM_LABEL_LEN
        || !label
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err(format!(
            "label {label:?}: 1 to {MAX_STREAM_LABEL_LEN} of A-Z a-z 0-9 _ - ."
        ));
    }
    Ok(())
}

/// Path of the metadata file of `scan` on `disk`.
pub fn metadata_path(disk: &Path, scan: &str) -> PathBuf {
    disk.join(format!("{scan}{METADATA_SUFFIX}"))
}

impl ScanMetadata {
    /// Writes the metadata to `path` atomically: a reader sees the old or the new file, never a torn one.
    pub fn write_atomic(&self, path: &Path) -> Result<(), MetaError> {
        let io = |source| MetaError::Io {
            path: path.to_owned(),
            source,
        };
        let tmp = path.with_extension("json.tmp");
        let mut text = serde_json::to_vec_pretty(self).expect("metadata serialises");
        text.push(b'\n');
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&text).map_err(io)?;
        f.sync_data().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads and validates a metadata file.
    pub fn read(path: &Path) -> Result<Self, MetaError> {
        let bytes = std::fs::read(path).map_err(|source| MetaError::Io {
            path: path.to_owned(),
            source,
        })?;
        let meta: ScanMetadata = serde_json::from_slice(&bytes).map_err(|source| MetaError::Parse {
            path: path.to_owned(),
            source,
        })?;
        if meta.metadata_version > METADATA_VERSION {
            return Err(MetaError::Version {
                path: path.to_owned(),
                found: meta.metadata_version,
            });
        }
        Ok(meta)
    }

    /// Total counters over all streams.
    pub fn totals(&self) -> StreamCounters {
        let mut t = StreamCounters::default();
        for s in &self.streams {
            let c = &s.counters;
            t.packets += c.packets;
            t.bytes += c.bytes;
            t.lost += c.lost;
            t.out_of_order += c.out_of_order;
            t.duplicates += c.duplicates;
            t.invalid_frames += c.invalid_frames;
            t.rejected += c.rejected;
            t.filtered += c.filtered;
            t.dropped_no_buffer += c.dropped_no_buffer;
            t.kernel_drops += c.kernel_drops;
            t.wrong_source += c.wrong_source;
        }
        t
    }
}

/// Metadata files of one scan, one per disk, each read or failed.
pub type ScanCopies = Vec<(PathBuf, Result<ScanMetadata, MetaError>)>;

/// Scans found on a set of disks: every `*.vlbiflow.json` directly in each directory, grouped by scan name.
/// Unreadable metadata is returned as an error entry rather than hiding the scan.
pub fn find_scans(disks: &[PathBuf]) -> Vec<(String, ScanCopies)> {
    let mut scans: std::collections::BTreeMap<String, ScanCopies> = Default::default();
    for disk in disks {
        let Ok(entries) = std::fs::read_dir(disk) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(scan) = name.strip_suffix(METADATA_SUFFIX) {
                let path = entry.path();
                let meta = ScanMetadata::read(&path);
                scans.entry(scan.to_owned()).or_default().push((path, meta));
            }
        }
    }
    scans.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ScanMetadata {
        ScanMetadata {
            metadata_version: METADATA_VERSION,
            writer: "vlbiflow test".into(),
            scan: "exp_st_001".into(),
            experiment: Some("exp".into()),
            station: Some("st".into()),
            format: ScanFormat::Mark6,
            block_size: 10_000_000,
            start_utc: "2026-01-01T00:00:00Z".into(),
            end_utc: None,
            blocks: 3,
            complete: false,
            streams: vec![StreamMeta {
                label: "a".into(),
                kind: FrameKind::Vdif,
                address: "127.0.0.1:4001".into(),
                psn: true,
                frame_size: 8224,
                frame_rate: Some(125000),
                threads: vec![0, 1],
                first_frame_utc: None,
                last_frame_utc: None,
                counters: StreamCounters {
                    packets: 99,
                    lost: 1,
                    ..Default::default()
                },
                blocks: BlockRanges::default(),
            }],
            disks: vec![DiskMeta {
                path: "/tmp/d0".into(),
                bytes: 1,
                blocks: 1,
                failed: None,
            }],
        }
    }

    #[test]
    fn round_trips_through_disk_and_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let meta = sample();
        let path = metadata_path(dir.path(), &meta.scan);
        meta.write_atomic(&path).unwrap();
        assert_eq!(ScanMetadata::read(&path).unwrap(), meta);
        let found = find_scans(&[dir.path().to_owned()]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "exp_st_001");
        assert!((meta.totals().loss_fraction() - 0.01).abs() < 1e-12);
    }

    #[test]
    fn block_ranges_map_blocks_to_streams() {
        let mut meta = sample();
        assert_eq!(
            meta.stream_of_block(7),
            Some(0),
            "one stream without ranges owns every block"
        );
        let mut b = meta.streams[0].clone();
        b.label = "b".into();
        let (mut ra, mut rb) = (BlockRanges::default(), BlockRanges::default());
        for n in 0..10u64 {
            if n % 3 == 2 {
                rb.push(n)
            } else {
                ra.push(n)
            }
        }
        ra.push(1); // out of order: ignored
        assert_eq!(ra.0, vec![[0, 1], [3, 4], [6, 7], [9, 9]]);
        assert_eq!((ra.count(), rb.count()), (7, 3));
        meta.streams[0].blocks = ra;
        b.blocks = rb;
        meta.streams.push(b);
        assert_eq!(
            (0..10).map(|n| meta.stream_of_block(n)).collect::<Vec<_>>(),
            [0, 0, 1, 0, 0, 1, 0, 0, 1, 0].map(Some)
        );
        assert_eq!(meta.stream_of_block(10), None);
        // Through JSON and back; older metadata without the field still reads.
        let json = serde_json::to_string(&meta).unwrap();
        assert_eq!(serde_json::from_str::<ScanMetadata>(&json).unwrap(), meta);
        let old = serde_json::to_string(&sample()).unwrap();
        assert!(!old.contains("\"blocks\":[["));
        assert_eq!(
            serde_json::from_str::<ScanMetadata>(&old).unwrap().streams[0].blocks,
            BlockRanges::default()
        );
    }

    #[test]
    fn disk_patterns_expand_sorted_and_name_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        for m in ["2", "1"] {
            for d in ["1", "0"] {
                std::fs::create_dir_all(dir.path().join(m).join(d).join("data")).unwrap();
            }
        }
        let pattern = format!("{}/*/*/data", dir.path().display());
        let disks = expand_disks(&[pattern.clone(), pattern.clone()]).unwrap();
        let names: Vec<String> = disks
            .iter()
            .map(|d| d.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["1/0/data", "1/1/data", "2/0/data", "2/1/data"]);
        let missing = format!("{}/9/*/data", dir.path().display());
        assert!(expand_disks(&[missing])
            .unwrap_err()
            .to_string()
            .contains("matches no directory"));
        let plain = dir.path().join("nope").display().to_string();
        assert!(expand_disks(&[plain])
            .unwrap_err()
            .to_string()
            .contains("no such directory"));
    }

    #[test]
    fn garbage_metadata_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = metadata_path(dir.path(), "x");
        std::fs::write(&path, b"{not json").unwrap();
        let e = ScanMetadata::read(&path).unwrap_err().to_string();
        assert!(e.contains("x.vlbiflow.json"), "{e}");
    }
}
