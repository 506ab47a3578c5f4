//! Scans as sources, read in place: a Mark6 scatter-gather or FlexBuff scan located by name on its disks
//! (globs as in `record`/`check`) becomes virtual files for one of three destination layouts:
//!
//! - [`Layout::Gather`]: one VDIF/Mark5B file per scan (per recorded stream for scans of several streams),
//!   what DiFX reads: the block payloads in block-number order across the disks, block headers left out,
//!   the same bytes as `vlbiflow gather` writes for an intact scan. No gather step, no temporary copy.
//! - [`Layout::Same`]: the scan as it is on disk: `disk0/<scan>.vdif`, `disk1/...` (Mark6) or
//!   `disk0/<scan>/<scan>.00000000`, ... (FlexBuff), each disk with the scan's metadata file, so that
//!   `vlbiflow check <scan> --disk 'DEST/disk*'` reads it at the destination.
//! - [`Layout::Flexbuff`]: one FlexBuff chunk file per Mark6 block (`<scan>/<scan>.%08u`, numbered by block)
//!   or per FlexBuff chunk, readable with `--disk DEST`.
//!
//! A block header that does not make sense stops with an error naming the file and offset: the scan is
//! damaged and `vlbiflow check` / `vlbiflow gather` (which resynchronise and report) are the tools for it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use vlbiflow_formats::mark6::{Mark6BlockHeader, FILE_HEADER_LEN};
use vlbiflow_reader::gather::stream_labels;
use vlbiflow_reader::source::{locate, LocateError, Sources};
use vlbiflow_scan::METADATA_SUFFIX;

use crate::error::XferError;
use crate::source::{Extent, SourceSet, VFile};

/// Destination layout of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One gathered frame file per scan (or per recorded stream).
    Gather,
    /// The same files as on the source disks, one directory per disk.
    Same,
    /// FlexBuff chunk files.
    Flexbuff,
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gather" => Ok(Layout::Gather),
            "same" => Ok(Layout::Same),
            "flexbuff" => Ok(Layout::Flexbuff),
            _ => Err(format!("{s:?}: one of gather, same, flexbuff")),
        }
    }
}

/// One Mark6 block found on disk.
#[derive(Debug, Clone, Copy)]
struct Block {
    number: u32,
    path: usize,
    offset: u64,
    len: u64,
}

/// Indexes the blocks of one Mark6 file (header after header).
fn index_mark6(
    path: &std::path::Path,
    path_idx: usize,
    header: &vlbiflow_formats::mark6::Mark6FileHeaderRepr,
    out: &mut Vec<Block>,
    growing: bool,
) -> Result<(), XferError> {
    let f = File::open(path).map_err(|e| XferError::Usage(format!("{}: {e}", path.display())))?;
    let len = f
        .metadata()
        .map_err(|e| XferError::Usage(format!("{}: {e}", path.display())))?
        .len();
    let hlen = header.block_header_len() as u64;
    let packet = u64::from(header.packet_size.max(1));
    let mut off = FILE_HEADER_LEN as u64;
    let mut hb = [0u8; 8];
    while off < len {
        // a scan still being recorded ends in a block being written (or page padding of O_DIRECT):
        // what is visible stops at the first block that is not complete
        if growing && !complete_block_at(&f, off, len, hlen, packet, header) {
            break;
        }
        if len - off < hlen {
            return Err(XferError::Usage(format!(
                "{}: {} trailing bytes at offset {off}, shorter than a block header (truncated file; see `vlbiflow check`)",
                path.display(),
                len - off
            )));
        }
        f.read_exact_at(&mut hb[..hlen as usize], off)
            .map_err(|e| XferError::Usage(format!("{}: {e}", path.display())))?;
        let h = Mark6BlockHeader::new_unchecked(&hb[..hlen as usize], header.version);
        let number = h.block_number();
        let avail = len - off - hlen;
        let payload = match h.wb_size() {
            Some(wb) if wb >= hlen as i32 && wb as u32 <= header.block_size => wb as u64 - hlen,
            Some(wb) => {
                return Err(XferError::Usage(format!(
                    "{} offset {off}: block header with wb_size {wb} out of range: the scan is damaged; `vlbiflow check` reports it and `vlbiflow gather` skips it",
                    path.display()
                )))
            }
            None => (u64::from(header.block_size) - hlen).min(avail / packet * packet),
        };
        if number < 0 || payload % packet != 0 || payload > avail {
            return Err(XferError::Usage(format!(
                "{} offset {off}: implausible block header (number {number}, {payload} payload bytes, {avail} left): the scan is damaged or still being written; see `vlbiflow check`",
                path.display()
            )));
        }
        out.push(Block {
            number: number as u32,
            path: path_idx,
            offset: off + hlen,
            len: payload,
        });
        off += hlen + payload;
    }
    Ok(())
}

/// Whether a complete, plausible block starts at `off` (for scans still being recorded).
fn complete_block_at(
    f: &File,
    off: u64,
    len: u64,
    hlen: u64,
    packet: u64,
    header: &vlbiflow_formats::mark6::Mark6FileHeaderRepr,
) -> bool {
    let mut hb = [0u8; 8];
    if len - off < hlen || f.read_exact_at(&mut hb[..hlen as usize], off).is_err() {
        return false;
    }
    let h = Mark6BlockHeader::new_unchecked(&hb[..hlen as usize], header.version);
    match h.wb_size() {
        Some(wb) if wb >= hlen as i32 && wb as u32 <= header.block_size => {
            let payload = wb as u64 - hlen;
            h.block_number() >= 0 && payload % packet == 0 && payload <= len - off - hlen
        }
        // version 1 headers carry no size: only the last block can be short, so a full one is complete
        None => h.block_number() >= 0 && len - off - hlen >= u64::from(header.block_size) - hlen,
        Some(_) => false,
    }
}

/// What was found of a scan.
#[derive(Debug, Clone)]
pub struct ScanInfo {
    /// Scan name.
    pub name: String,
    /// "mark6" or "flexbuff".
    pub format: &'static str,
    /// Data files on the source disks.
    pub files: usize,
    /// Blocks or chunks.
    pub blocks: usize,
    /// Whether the recorder marked it complete (metadata), if known.
    pub complete: Option<bool>,
}

/// Locates scan `scan` on `disks` and lays it out as `layout`.
pub fn scan_source(scan: &str, disks: &[String], layout: Layout) -> Result<(SourceSet, ScanInfo), XferError> {
    scan_source_at(scan, disks, layout, false)
}

/// What is on disk now of a scan that is still being recorded (for `push --follow`), gathered: the
/// complete blocks with consecutive numbers from the first (a block still in flight to another disk ends
/// the prefix), so that the file is a prefix of what the finished scan gathers to. FlexBuff: the chunks
/// with consecutive numbers, the newest left out (it may still grow).
pub fn scan_source_growing(scan: &str, disks: &[String]) -> Result<(SourceSet, ScanInfo), XferError> {
    scan_source_at(scan, disks, Layout::Gather, true)
}

fn scan_source_at(
    scan: &str,
    disks: &[String],
    layout: Layout,
    growing: bool,
) -> Result<(SourceSet, ScanInfo), XferError> {
    let rec = locate(&[scan.to_string()], disks).map_err(|e| match e {
        LocateError::Usage(m) | LocateError::NotFound(m) => XferError::Usage(m),
        other => XferError::Io(other.to_string()),
    })?;
    let ext = rec.frame_format().extension();
    let mut set = SourceSet::default();
    let complete = rec.metadata.as_ref().map(|m| m.complete);
    // metadata files beside the data, per disk directory
    let meta_of = |data: &std::path::Path, depth: usize| -> Option<PathBuf> {
        let mut d = data.parent()?.to_path_buf();
        for _ in 1..depth {
            d = d.parent()?.to_path_buf();
        }
        let p = d.join(format!("{scan}{METADATA_SUFFIX}"));
        p.is_file().then_some(p)
    };
    let add_plain = |set: &mut SourceSet, name: String, path: PathBuf| -> Result<(), XferError> {
        let len = std::fs::metadata(&path)
            .map_err(|e| XferError::Usage(format!("{}: {e}", path.display())))?
            .len();
        set.add_plain(name, path, len);
        Ok(())
    };
    let info;
    match &rec.sources {
        Sources::Mark6(files) => {
            let mut blocks = Vec::new();
            for (i, f) in files.iter().enumerate() {
                let Some(h) = f.header else {
                    return Err(XferError::Usage(format!(
                        "{}: bad Mark6 file header: the scan is damaged; see `vlbiflow check`",
                        f.path.display()
                    )));
                };
                set.paths.push(f.path.clone());
                index_mark6(&f.path, i, &h, &mut blocks, growing)?;
            }
            blocks.sort_by_key(|b| b.number);
            if growing {
                let first = blocks.first().map_or(0, |b| b.number);
                let run = blocks
                    .iter()
                    .enumerate()
                    .take_while(|(i, b)| u64::from(b.number) == u64::from(first) + *i as u64)
                    .count();
                blocks.truncate(run);
            }
            if let Some(w) = blocks.windows(2).find(|w| w[0].number == w[1].number) {
                return Err(XferError::Usage(format!(
                    "block {} appears twice in scan {scan}: the scan is damaged; see `vlbiflow check`",
                    w[0].number
                )));
            }
            info = ScanInfo {
                name: scan.to_string(),
                format: "mark6",
                files: files.len(),
                blocks: blocks.len(),
                complete,
            };
            match layout {
                Layout::Gather => {
                    let labels = stream_labels(&rec);
                    let meta = rec.metadata.as_ref();
                    let streams: Vec<(String, Option<usize>)> = if labels.is_empty() {
                        vec![(format!("{scan}.{ext}"), None)]
                    } else {
                        labels
                            .iter()
                            .enumerate()
                            .map(|(i, l)| (format!("{scan}.{l}.{ext}"), Some(i)))
                            .collect()
                    };
                    for (name, stream) in streams {
                        let extents = blocks
                            .iter()
                            .filter(|b| {
                                stream.is_none()
                                    || meta.and_then(|m| m.stream_of_block(b.number as u64)) == stream
                            })
                            .filter(|b| b.len > 0)
                            .map(|b| Extent {
                                path: b.path,
                                offset: b.offset,
                                len: b.len,
                            })
                            .collect();
                        set.files.push(VFile::new(name, extents));
                    }
                }
                Layout::Flexbuff => {
                    for b in &blocks {
                        let name = format!(
                            "{scan}/{}",
                            vlbiflow_formats::flexbuff::chunk_file_name(scan, b.number)
                        );
                        let extents = vec![Extent {
                            path: b.path,
                            offset: b.offset,
                            len: b.len,
                        }];
                        set.files.push(VFile::new(name, extents));
                    }
                }
                Layout::Same => {
                    let paths = set.paths.clone();
                    set = SourceSet::default();
                    for (i, p) in paths.iter().enumerate() {
                        let file = p
                            .file_name()
                            .and_then(|n| n.to_str())
                            .unwrap_or("data")
                            .to_string();
                        add_plain(&mut set, format!("disk{i}/{file}"), p.clone())?;
                        if let Some(m) = meta_of(p, 1) {
                            add_plain(&mut set, format!("disk{i}/{scan}{METADATA_SUFFIX}"), m)?;
                        }
                    }
                }
            }
        }
        Sources::Flexbuff(disks_chunks) => {
            let mut all: Vec<_> = disks_chunks
                .iter()
                .enumerate()
                .flat_map(|(d, v)| v.iter().map(move |c| (d, c)))
                .collect();
            all.sort_by_key(|(_, c)| c.number);
            if growing {
                let first = all.first().map_or(0, |(_, c)| c.number);
                let run = all
                    .iter()
                    .enumerate()
                    .take_while(|(i, (_, c))| u64::from(c.number) == u64::from(first) + *i as u64)
                    .count();
                all.truncate(run.saturating_sub(1));
            }
            info = ScanInfo {
                name: scan.to_string(),
                format: "flexbuff",
                files: all.len(),
                blocks: all.len(),
                complete,
            };
            match layout {
                Layout::Gather => {
                    let mut extents = Vec::new();
                    for (_, c) in &all {
                        let len = std::fs::metadata(&c.path)
                            .map_err(|e| XferError::Usage(format!("{}: {e}", c.path.display())))?
                            .len();
                        set.paths.push(c.path.clone());
                        if len > 0 {
                            extents.push(Extent {
                                path: set.paths.len() - 1,
                                offset: 0,
                                len,
                            });
                        }
                    }
                    set.files.push(VFile::new(format!("{scan}.{ext}"), extents));
                }
                Layout::Flexbuff => {
                    for (_, c) in &all {
                        let name = format!(
                            "{scan}/{}",
                            vlbiflow_formats::flexbuff::chunk_file_name(scan, c.number)
                        );
                        add_plain(&mut set, name, c.path.clone())?;
                    }
                }
                Layout::Same => {
                    let mut metas_done = std::collections::HashSet::new();
                    for (d, c) in &all {
                        let name = format!(
                            "disk{d}/{scan}/{}",
                            vlbiflow_formats::flexbuff::chunk_file_name(scan, c.number)
                        );
                        add_plain(&mut set, name, c.path.clone())?;
                        if metas_done.insert(*d) {
                            if let Some(m) = meta_of(&c.path, 2) {
                                add_plain(&mut set, format!("disk{d}/{scan}{METADATA_SUFFIX}"), m)?;
                            }
                        }
                    }
                }
            }
        }
        Sources::Plain(..) => {
            return Err(XferError::Usage(format!(
            "{scan:?} is not a Mark6 or FlexBuff scan on the given disks; send plain files by path instead"
        )))
        }
    }
    set.check_names()?;
    Ok((set, info))
}
