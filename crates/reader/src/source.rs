//! Finding the files of a recording: a scan name looked up on disks (directories, globs allowed), or files
//! given explicitly, classified by their content as Mark6 scatter-gather, FlexBuff chunks, plain VDIF or
//! plain Mark5B. Problems that do not stop the check (a disk's file missing, files of two scans mixed) are
//! returned as findings; problems that leave nothing to read are errors.

use crate::finding::{Finding, FindingKind, Severity};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use vlbiflow_formats::flexbuff::parse_chunk_file_name;
use vlbiflow_formats::mark6::{Mark6FileHeaderRepr, SYNC_WORD as MARK6_SYNC};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_scan::{ScanMetadata, METADATA_SUFFIX};

use vlbiflow_formats::mark5b::SYNC_WORD as MARK5B_SYNC;
pub use vlbiflow_formats::FrameKind;

/// One Mark6 scatter-gather file with its parsed header (None if the header is bad: the file is then
/// reported and skipped).
#[derive(Debug, Clone)]
pub struct Mark6Source {
    pub path: PathBuf,
    pub header: Option<Mark6FileHeaderRepr>,
}

/// One FlexBuff chunk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChunkSource {
    pub number: u32,
    pub path: PathBuf,
}

/// The files of a recording, by layout.
#[derive(Debug, Clone)]
pub enum Sources {
    /// Mark6 scatter-gather: one file per disk, blocks ordered by block number across them.
    Mark6(Vec<Mark6Source>),
    /// FlexBuff: chunks per disk directory (each list sorted by chunk number), ordered by chunk number.
    Flexbuff(Vec<Vec<ChunkSource>>),
    /// Plain frame files, read one after the other in the order given.
    Plain(Vec<PathBuf>, FrameKind),
}

/// A recording ready to read: its files, what is known about it, and what was already found.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Scan name (or the first file's name).
    pub name: String,
    pub sources: Sources,
    /// vlbiflow metadata of the scan, if any disk has it.
    pub metadata: Option<ScanMetadata>,
    /// Findings made while locating the files.
    pub findings: Vec<Finding>,
    /// The one recorded stream to read (an index into the metadata's streams), for scans of several
    /// streams; `None` reads every block. Set with [`select_stream`](Self::select_stream).
    pub stream: Option<usize>,
}

impl Recording {
    /// Frame format of the data (Mark6: from the file header; FlexBuff: sniffed from the first chunk).
    pub fn frame_format(&self) -> FrameKind {
        match &self.sources {
            Sources::Plain(_, f) => *f,
            Sources::Mark6(files) => match files.iter().find_map(|f| f.header).map(|h| h.packet_format) {
                Some(vlbiflow_formats::mark6::PacketFormat::Mark5b) => FrameKind::M5b,
                _ => FrameKind::Vdif,
            },
            Sources::Flexbuff(disks) => disks
                .iter()
                .flatten()
                .next()
                .and_then(|c| sniff_plain(&c.path).ok())
                .unwrap_or(FrameKind::Vdif),
        }
    }

    /// Frame length the file headers announce (Mark6 only).
    pub fn frame_len_hint(&self) -> Option<usize> {
        match &self.sources {
            Sources::Mark6(files) => files
                .iter()
                .find_map(|f| f.header)
                .map(|h| h.packet_size as usize),
            Sources::Plain(_, FrameKind::M5b) => FrameKind::M5b.fixed_frame_len(),
            _ => None,
        }
    }

    /// The recorded streams of a scan whose metadata maps blocks to streams (scans of several streams),
    /// by label; empty otherwise (then the whole scan is one stream).
    pub fn stream_labels(&self) -> Vec<String> {
        match &self.metadata {
            Some(m) if m.streams.len() > 1 && m.streams.iter().any(|s| !s.blocks.is_empty()) => {
                m.streams.iter().map(|s| s.label.clone()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Reads only the recorded stream labelled `label` from now on (scans of several streams, see
    /// [`stream_labels`](Self::stream_labels)). An unknown label, or a scan without several streams, is a
    /// usage error naming the labels there are.
    pub fn select_stream(&mut self, label: &str) -> Result<(), LocateError> {
        let labels = self.stream_labels();
        match labels.iter().position(|l| l == label) {
            Some(i) => {
                self.stream = Some(i);
                Ok(())
            }
            None if labels.is_empty() => Err(LocateError::Usage(format!(
                "{}: stream {label:?} asked for, but the scan is one stream (its metadata maps no blocks to streams)",
                self.name
            ))),
            None => Err(LocateError::Usage(format!(
                "{}: no stream {label:?}; the scan's streams are {}",
                self.name,
                labels.join(", ")
            ))),
        }
    }

    /// Frame rate per thread the metadata records (of the selected stream, if one is), if all its streams
    /// agree on one.
    pub fn frame_rate_hint(&self) -> Option<u32> {
        let meta = self.metadata.as_ref()?;
        let selected = self.stream.and_then(|i| meta.streams.get(i));
        let mut rates = meta
            .streams
            .iter()
            .filter(|s| selected.is_none_or(|sel| std::ptr::eq(*s, sel)))
            .filter_map(|s| s.frame_rate);
        let first = rates.next()?;
        rates.all(|r| r == first).then_some(first)
    }

    /// Every data file of the recording.
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.sources {
            Sources::Mark6(f) => f.iter().map(|f| f.path.clone()).collect(),
            Sources::Flexbuff(d) => d.iter().flatten().map(|c| c.path.clone()).collect(),
            Sources::Plain(f, _) => f.clone(),
        }
    }

    /// Total bytes in the data files.
    pub fn total_bytes(&self) -> u64 {
        self.files()
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// Why no recording could be located.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    NotFound(String),
}

/// Expands disk arguments (directories or glob patterns) into existing directories, in order, without
/// duplicates. A pattern matching nothing is an error: a mistyped disk should not silently shrink a scan.
pub fn expand_disks(patterns: &[String]) -> Result<Vec<PathBuf>, LocateError> {
    vlbiflow_scan::expand_disks(patterns).map_err(|e| LocateError::NotFound(e.to_string()))
}

fn read_u32_at_start(path: &Path) -> Result<Option<[u8; 32]>, LocateError> {
    let mut f = File::open(path).map_err(|source| LocateError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut b = [0u8; 32];
    let mut got = 0;
    while got < 32 {
        match f.read(&mut b[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(LocateError::Io {
                    path: path.to_owned(),
                    source,
                })
            }
        }
    }
    Ok((got == 32).then_some(b))
}

/// Whether a file starts with the Mark6 scatter-gather sync word.
pub fn is_mark6_file(path: &Path) -> bool {
    let mut b = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .map(|_| u32::from_le_bytes(b) == MARK6_SYNC)
        .unwrap_or(false)
}

/// Classifies a headerless frame file from its first bytes: Mark5B sync word, else VDIF.
fn sniff_plain(path: &Path) -> Result<FrameKind, LocateError> {
    let Some(b) = read_u32_at_start(path)? else {
        return Ok(FrameKind::Vdif);
    };
    if u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == MARK5B_SYNC {
        return Ok(FrameKind::M5b);
    }
    if path.extension().is_some_and(|e| e == "m5b") && VdifHeader::new_checked(&b[..]).is_err() {
        return Ok(FrameKind::M5b);
    }
    Ok(FrameKind::Vdif)
}

fn mark6_source(path: PathBuf, findings: &mut Vec<Finding>) -> Result<Mark6Source, LocateError> {
    let mut b = [0u8; vlbiflow_formats::mark6::FILE_HEADER_LEN];
    let header = match File::open(&path).and_then(|mut f| f.read_exact(&mut b)) {
        Err(e) => {
            findings.push(Finding::at(
                Severity::Error,
                FindingKind::FileHeader,
                &path,
                0,
                format!("cannot read the Mark6 file header: {e}"),
            ));
            None
        }
        Ok(()) => match Mark6FileHeaderRepr::parse_bytes(&b) {
            Ok(h) => Some(h),
            Err(e) => {
                findings.push(Finding::at(
                    Severity::Error,
                    FindingKind::FileHeader,
                    &path,
                    0,
                    format!("bad Mark6 file header, file skipped: {e}"),
                ));
                None
            }
        },
    };
    Ok(Mark6Source { path, header })
}

/// Chunk files of FlexBuff scan `scan` in directory `dir`, sorted by number.
fn chunks_in(dir: &Path, scan: Option<&str>) -> Vec<ChunkSource> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((stem, number)) = parse_chunk_file_name(name) {
            if (scan.is_none() || scan == Some(stem)) && e.path().is_file() {
                out.push(ChunkSource {
                    number,
                    path: e.path(),
                });
            }
        }
    }
    out.sort();
    out
}

/// Locates a recording from command-line style arguments: either one scan name (looked up on `disks`,
/// directories or glob patterns), or explicit paths (files, or FlexBuff scan directories).
pub fn locate(args: &[String], disks: &[String]) -> Result<Recording, LocateError> {
    if args.is_empty() {
        return Err(LocateError::Usage(
            "give a scan name with --disk DIR, or the files to read".into(),
        ));
    }
    let disk_dirs = expand_disks(disks)?;
    // With --disk, a bare name is the scan's name even where the current directory holds a file or
    // directory of that name: standing on one disk (a FlexBuff mount point, a Mark6 data directory), that
    // is the scan's part on this disk only. Read as a path it would give one disk's blocks or chunks.
    if let [name] = args {
        let bare = Path::new(name).file_name() == Some(std::ffi::OsStr::new(name));
        if bare && !disk_dirs.is_empty() {
            match locate_scan(name, &disk_dirs) {
                Err(LocateError::NotFound(_)) if Path::new(name).exists() => {}
                found => return found,
            }
        }
    }
    let paths_exist: Vec<bool> = args.iter().map(|a| Path::new(a).exists()).collect();
    if paths_exist.iter().all(|e| !e) {
        if args.len() > 1 {
            return Err(LocateError::Usage(format!(
                "one scan at a time: got names {}",
                args.join(", ")
            )));
        }
        if disk_dirs.is_empty() {
            return Err(LocateError::Usage(format!(
                "{:?} is not a file; to read a scan by name give its disks with --disk DIR",
                args[0]
            )));
        }
        return locate_scan(&args[0], &disk_dirs);
    }
    if let Some(i) = paths_exist.iter().position(|e| !e) {
        return Err(LocateError::NotFound(format!("{}: no such file", args[i])));
    }
    locate_files(args.iter().map(PathBuf::from).collect())
}

/// Looks up scan `scan` on each disk: `<disk>/<scan>.vdif|.m5b|<scan>` Mark6 files, or FlexBuff chunks in
/// `<disk>/<scan>/`, and `<disk>/<scan>.vlbiflow.json` metadata.
pub fn locate_scan(scan: &str, disks: &[PathBuf]) -> Result<Recording, LocateError> {
    let mut findings = Vec::new();
    let mut mark6 = Vec::new();
    let mut mark6_dirs = Vec::new();
    let mut flex = Vec::new();
    let mut metadata: Option<ScanMetadata> = None;
    for disk in disks {
        let meta_path = vlbiflow_scan::metadata_path(disk, scan);
        if meta_path.exists() {
            match ScanMetadata::read(&meta_path) {
                Ok(m) => {
                    // Every disk holds a copy; the most advanced one (complete, or most blocks) describes best.
                    let better = match &metadata {
                        None => true,
                        Some(old) => (m.complete, m.blocks) > (old.complete, old.blocks),
                    };
                    if better {
                        metadata = Some(m);
                    }
                }
                Err(e) => findings.push(Finding::in_file(
                    Severity::Warn,
                    FindingKind::Metadata,
                    &meta_path,
                    format!("unreadable scan metadata: {e}"),
                )),
            }
        }
        for name in vlbiflow_formats::mark6::file_names(scan) {
            let p = disk.join(&name);
            if p.is_file() && is_mark6_file(&p) {
                mark6.push(mark6_source(p, &mut findings)?);
                mark6_dirs.push(disk.clone());
                break;
            }
        }
        let dir = vlbiflow_formats::flexbuff::chunk_dir(disk, scan);
        if dir.is_dir() {
            let chunks = chunks_in(&dir, Some(scan));
            if !chunks.is_empty() {
                flex.push(chunks);
            }
        }
    }
    if !mark6.is_empty() && !flex.is_empty() {
        findings.push(Finding::new(
            Severity::Warn,
            FindingKind::MixedScans,
            format!(
                "scan {scan} has both Mark6 files and FlexBuff chunks on the disks; reading the Mark6 files"
            ),
        ));
    }
    let sources = if !mark6.is_empty() {
        check_mark6_headers_agree(&mark6, &mut findings);
        Sources::Mark6(mark6)
    } else if !flex.is_empty() {
        Sources::Flexbuff(flex)
    } else {
        return Err(LocateError::NotFound(format!(
            "scan {scan}: no Mark6 file ({scan}.vdif, {scan}.m5b or {scan}) and no FlexBuff chunks ({scan}/{scan}.NNNNNNNN) on {} disk(s): {}",
            disks.len(),
            disks.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )));
    };
    if let Some(meta) = &metadata {
        check_disks_against_metadata(scan, meta, &sources, &mark6_dirs, &mut findings);
    } else if !matches!(sources, Sources::Plain(..)) {
        findings.push(Finding::new(
            Severity::Info,
            FindingKind::Metadata,
            format!("no vlbiflow metadata ({scan}{METADATA_SUFFIX}) on the disks: cannot tell whether a disk's file is missing"),
        ));
    }
    Ok(Recording {
        name: scan.to_string(),
        sources,
        metadata,
        findings,
        stream: None,
    })
}

fn check_mark6_headers_agree(files: &[Mark6Source], findings: &mut Vec<Finding>) {
    let mut headers = files.iter().filter_map(|f| f.header.map(|h| (f, h)));
    let Some((first, h0)) = headers.next() else {
        return;
    };
    for (f, h) in headers {
        if h != h0 {
            findings.push(Finding::at(
                Severity::Error,
                FindingKind::MixedScans,
                &f.path,
                0,
                format!(
                    "file header ({:?}, block size {}, {:?}, packet size {}) differs from {} ({:?}, block size {}, {:?}, packet size {}): files of different recordings?",
                    h.version, h.block_size, h.packet_format, h.packet_size,
                    first.path.display(), h0.version, h0.block_size, h0.packet_format, h0.packet_size
                ),
            ));
        }
    }
}

fn check_disks_against_metadata(
    scan: &str,
    meta: &ScanMetadata,
    sources: &Sources,
    mark6_dirs: &[PathBuf],
    findings: &mut Vec<Finding>,
) {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let found: Vec<PathBuf> = match sources {
        Sources::Mark6(_) => mark6_dirs.iter().map(|d| canon(d)).collect(),
        Sources::Flexbuff(d) => d
            .iter()
            .filter_map(|c| c.first())
            .filter_map(|c| c.path.parent().and_then(|p| p.parent()).map(canon))
            .collect(),
        Sources::Plain(..) => return,
    };
    let used: Vec<_> = meta.disks.iter().filter(|d| d.blocks > 0).collect();
    let missing: Vec<_> = used
        .iter()
        .filter(|d| !found.contains(&canon(Path::new(&d.path))))
        .collect();
    // Modules move between machines: only a shortfall in the number of files means a file is missing.
    if found.len() < used.len() {
        for d in missing.iter().take(used.len() - found.len()) {
            findings.push(Finding::in_file(
                Severity::Error,
                FindingKind::MissingFile,
                &d.path,
                format!(
                    "disk listed in the metadata of scan {scan} ({} blocks, {} bytes) has no file of the scan among the disks given",
                    d.blocks, d.bytes
                ),
            ));
        }
    }
    if !meta.complete {
        findings.push(Finding::new(
            Severity::Warn,
            FindingKind::Metadata,
            format!("scan {scan} is marked incomplete in its metadata (recorder did not finish cleanly)"),
        ));
    }
}

/// Classifies explicitly given paths. Mark6 files and plain files cannot be mixed; directories are taken
/// as FlexBuff scan directories.
pub fn locate_files(paths: Vec<PathBuf>) -> Result<Recording, LocateError> {
    let mut findings = Vec::new();
    let mut mark6 = Vec::new();
    let mut flex: BTreeMap<PathBuf, Vec<ChunkSource>> = BTreeMap::new();
    let mut plain = Vec::new();
    for p in paths {
        if p.is_dir() {
            let chunks = chunks_in(&p, None);
            if chunks.is_empty() {
                return Err(LocateError::NotFound(format!(
                    "{}: a directory without FlexBuff chunks (NAME.NNNNNNNN)",
                    p.display()
                )));
            }
            flex.entry(p).or_default().extend(chunks);
        } else if is_mark6_file(&p) {
            mark6.push(mark6_source(p, &mut findings)?);
        } else if let Some((_, n)) = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_chunk_file_name)
        {
            let dir = p.parent().map(Path::to_owned).unwrap_or_default();
            flex.entry(dir)
                .or_default()
                .push(ChunkSource { number: n, path: p });
        } else {
            plain.push(p);
        }
    }
    let kinds = [!mark6.is_empty(), !flex.is_empty(), !plain.is_empty()];
    if kinds.iter().filter(|k| **k).count() > 1 {
        return Err(LocateError::Usage(
            "cannot read Mark6 files, FlexBuff chunks and plain frame files together: give one kind".into(),
        ));
    }
    let name_of = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    if !mark6.is_empty() {
        let names: std::collections::BTreeSet<String> = mark6.iter().map(|m| name_of(&m.path)).collect();
        if names.len() > 1 {
            findings.push(Finding::new(
                Severity::Warn,
                FindingKind::MixedScans,
                format!(
                    "Mark6 files with different names given together ({}): files of one scan share a name",
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        check_mark6_headers_agree(&mark6, &mut findings);
        let name = name_of(&mark6[0].path);
        return Ok(Recording {
            name: strip_ext(&name),
            sources: Sources::Mark6(mark6),
            metadata: None,
            findings,
            stream: None,
        });
    }
    if !flex.is_empty() {
        let mut stems = std::collections::BTreeSet::new();
        let mut disks = Vec::new();
        for (_, mut chunks) in flex {
            chunks.sort();
            chunks.dedup();
            for c in &chunks {
                if let Some((s, _)) = parse_chunk_file_name(&name_of(&c.path)) {
                    stems.insert(s.to_string());
                }
            }
            disks.push(chunks);
        }
        if stems.len() > 1 {
            findings.push(Finding::new(
                Severity::Warn,
                FindingKind::MixedScans,
                format!(
                    "FlexBuff chunks of different scans given together: {}",
                    stems.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        return Ok(Recording {
            name: stems.into_iter().next().unwrap_or_default(),
            sources: Sources::Flexbuff(disks),
            metadata: None,
            findings,
            stream: None,
        });
    }
    let format = sniff_plain(&plain[0])?;
    for p in &plain[1..] {
        if sniff_plain(p)? != format {
            return Err(LocateError::Usage(format!(
                "{} and {} hold different frame formats",
                plain[0].display(),
                p.display()
            )));
        }
    }
    Ok(Recording {
        name: name_of(&plain[0]),
        sources: Sources::Plain(plain, format),
        metadata: None,
        findings,
        stream: None,
    })
}

fn strip_ext(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((stem, "vdif" | "m5b")) => stem.to_string(),
        _ => name.to_string(),
    }
}
