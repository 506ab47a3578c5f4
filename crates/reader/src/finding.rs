//! Findings: what the readers and the checker report about a recording, each naming where it was found.

use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

/// How bad a finding is. `Error` makes `vlbiflow check` exit non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, not a problem (e.g. a short last block).
    Info,
    /// Unusual but the data is usable (e.g. invalid-bit frames, a header field changing).
    Warn,
    /// Data is missing or damaged (e.g. frame gaps, a corrupted block header, a disk's file missing).
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
        })
    }
}

/// Index of a file in a [`FileTable`]: positions carry this instead of a path so that they stay `Copy`.
pub type FileId = u32;

/// A byte position in one of the recording's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub file: FileId,
    pub offset: u64,
}

/// The files a check reads, so that a [`Position`] can be printed as `path@offset`.
#[derive(Debug, Clone, Default)]
pub struct FileTable {
    paths: Vec<PathBuf>,
}

impl FileTable {
    /// Adds a file and returns its id.
    pub fn add(&mut self, path: PathBuf) -> FileId {
        self.paths.push(path);
        (self.paths.len() - 1) as FileId
    }
    /// Path of a file id (empty path for an unknown id).
    pub fn path(&self, id: FileId) -> &std::path::Path {
        self.paths
            .get(id as usize)
            .map(|p| p.as_path())
            .unwrap_or_else(|| std::path::Path::new(""))
    }
    /// All files, in id order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
    /// `path@offset` for a position.
    pub fn describe(&self, pos: Position) -> String {
        format!("{}@{}", self.path(pos.file).display(), pos.offset)
    }
}

/// Kinds of findings, stable names for scripts (`--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A file could not be opened or read.
    Io,
    /// Mark6 file header wrong (sync word, version, sizes).
    FileHeader,
    /// Mark6 block header corrupted (size out of range, not whole frames, past the end of the file).
    BlockHeader,
    /// A block, chunk or file ends inside a frame.
    Truncated,
    /// Block or chunk numbers missing between the files of a scan.
    BlockGap,
    /// The same block or chunk number in two places.
    DuplicateBlock,
    /// Block numbers going backwards inside one file.
    BlockOrder,
    /// A disk the metadata lists has no file of the scan.
    MissingFile,
    /// Files of more than one scan were given together.
    MixedScans,
    /// Bytes that are not frames of the stream.
    Garbage,
    /// Frames missing in a thread.
    FrameGap,
    /// Frames seen twice.
    DuplicateFrame,
    /// Frames arriving after later ones.
    OutOfOrder,
    /// Frames with the invalid bit, or jive5ab fill.
    InvalidFrames,
    /// A header field that should be constant changed.
    HeaderChange,
    /// Recording metadata disagrees with the data, or is missing.
    Metadata,
    /// Sample statistics outside what a healthy channel shows.
    Samples,
    /// Anything else worth a line.
    Note,
}

/// One thing found, with where it was found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub kind: FindingKind,
    /// File the finding is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Byte offset in that file, if the finding has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub message: String,
}

impl Finding {
    /// A finding not tied to a file.
    pub fn new(severity: Severity, kind: FindingKind, message: impl Into<String>) -> Self {
        Finding {
            severity,
            kind,
            file: None,
            offset: None,
            message: message.into(),
        }
    }

    /// A finding at a byte position of a file.
    pub fn at(
        severity: Severity,
        kind: FindingKind,
        file: impl Into<PathBuf>,
        offset: u64,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            kind,
            file: Some(file.into()),
            offset: Some(offset),
            message: message.into(),
        }
    }

    /// A finding about a whole file.
    pub fn in_file(
        severity: Severity,
        kind: FindingKind,
        file: impl Into<PathBuf>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            kind,
            file: Some(file.into()),
            offset: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<5} ", self.severity)?;
        match (&self.file, self.offset) {
            (Some(p), Some(o)) => write!(f, "{}@{}: ", p.display(), o)?,
            (Some(p), None) => write!(f, "{}: ", p.display())?,
            _ => {}
        }
        f.write_str(&self.message)
    }
}

/// Findings of one kind listed in full; the rest are counted.
pub const MAX_FINDINGS_PER_KIND: usize = 50;

/// Collects findings with a cap per kind, so that a badly damaged recording still gives a readable report.
#[derive(Debug, Default)]
pub struct FindingLog {
    pub list: Vec<Finding>,
    counts: HashMap<FindingKind, (u64, Severity)>,
}

impl FindingLog {
    pub fn push(&mut self, f: Finding) {
        let e = self.counts.entry(f.kind).or_insert((0, f.severity));
        e.0 += 1;
        e.1 = e.1.max(f.severity);
        if e.0 <= MAX_FINDINGS_PER_KIND as u64 {
            self.list.push(f);
        }
    }
    /// Findings left out, by kind.
    pub fn omitted(&self) -> Vec<(FindingKind, u64, Severity)> {
        let mut v: Vec<_> = self
            .counts
            .iter()
            .filter(|(_, (n, _))| *n > MAX_FINDINGS_PER_KIND as u64)
            .map(|(k, (n, s))| (*k, n - MAX_FINDINGS_PER_KIND as u64, *s))
            .collect();
        v.sort_by_key(|x| format!("{:?}", x.0));
        v
    }
    pub fn worst(&self) -> Option<Severity> {
        self.counts.values().map(|(_, s)| *s).max()
    }
}
