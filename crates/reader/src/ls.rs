//! Listing the scans on disks: vlbiflow scans from their metadata, and Mark6 scatter-gather files or
//! FlexBuff chunk directories written by other recorders (d-plane, jive5ab) from their file and frame headers.

use crate::source::is_mark6_file;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use vlbiflow_formats::flexbuff::parse_chunk_file_name;
use vlbiflow_formats::mark5b::SYNC_WORD as MARK5B_SYNC;
use vlbiflow_formats::mark6::{Mark6BlockHeader, Mark6FileHeaderRepr, PacketFormat, FILE_HEADER_LEN};
use vlbiflow_formats::time::{epoch_start_unix, UtcTime};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_scan::{find_scans, FrameKind, ScanFormat, ScanMetadata, METADATA_SUFFIX};

/// One scan found on the disks.
#[derive(Debug, Clone, Serialize)]
pub struct ScanListing {
    pub name: String,
    /// "mark6" or "flexbuff".
    pub layout: &'static str,
    /// "vlbiflow metadata" or "file headers".
    pub described_by: &'static str,
    /// Disks holding a file (or chunks) of the scan.
    pub disks: usize,
    pub bytes: u64,
    pub start_utc: Option<String>,
    pub duration_s: Option<f64>,
    pub streams: Vec<String>,
    /// Whether the recorder finished it cleanly (vlbiflow metadata only).
    pub complete: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The name jive5ab opens the scan by (`scan_set = NAME`): a Mark6 scan by its file name, extension
    /// included (`exp_st_scan1.vdif`), a FlexBuff scan by its scan name.
    pub jive5ab_name: String,
}

/// Parses the ISO-8601 UTC form vlbiflow writes (`YYYY-MM-DDTHH:MM:SS[.f]Z`).
pub fn parse_iso8601(s: &str) -> Option<f64> {
    UtcTime::parse_iso8601(s)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn listing_from_metadata(name: &str, disks: &[PathBuf], metas: &[ScanMetadata]) -> ScanListing {
    let meta = metas
        .iter()
        .max_by_key(|m| (m.complete, m.blocks))
        .expect("at least one metadata");
    let mut bytes = 0;
    let mut disks_with_data = 0;
    for d in disks {
        let b: u64 = match meta.format {
            ScanFormat::Mark6 => [FrameKind::Vdif, FrameKind::M5b]
                .iter()
                .map(|k| file_len(&vlbiflow_formats::mark6::file_path(d, name, *k)))
                .sum(),
            ScanFormat::Flexbuff => std::fs::read_dir(vlbiflow_formats::flexbuff::chunk_dir(d, name))
                .map(|it| {
                    it.flatten()
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum()
                })
                .unwrap_or(0),
        };
        if b > 0 {
            disks_with_data += 1;
        }
        bytes += b;
    }
    let first = meta
        .streams
        .iter()
        .filter_map(|s| s.first_frame_utc.as_deref())
        .min();
    let last = meta
        .streams
        .iter()
        .filter_map(|s| s.last_frame_utc.as_deref())
        .max();
    let start_utc = first.map(str::to_owned).or_else(|| Some(meta.start_utc.clone()));
    let duration_s = match (first.and_then(parse_iso8601), last.and_then(parse_iso8601)) {
        (Some(a), Some(b)) => {
            // The last stamp is the start of the last frame: add one frame period where the rate is known.
            let rate = meta.streams.iter().find_map(|s| s.frame_rate);
            Some(b - a + rate.map_or(0.0, |r| 1.0 / f64::from(r)))
        }
        _ => match (
            parse_iso8601(&meta.start_utc),
            meta.end_utc.as_deref().and_then(parse_iso8601),
        ) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        },
    };
    let streams = meta
        .streams
        .iter()
        .map(|s| {
            let threads = if s.threads.is_empty() {
                String::new()
            } else {
                format!(
                    " threads {}",
                    s.threads
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            };
            // the format in lower case (vdif, mark5b); the label as given, the byte unit as B
            let kind = format!("{:?}", s.kind).to_lowercase();
            format!("{} ({kind} {} B{threads})", s.label, s.frame_size)
        })
        .collect();
    let missing = meta
        .disks
        .iter()
        .filter(|d| d.blocks > 0)
        .count()
        .saturating_sub(disks_with_data);
    ScanListing {
        name: name.to_string(),
        layout: match meta.format {
            ScanFormat::Mark6 => "mark6",
            ScanFormat::Flexbuff => "flexbuff",
        },
        described_by: "vlbiflow metadata",
        disks: disks_with_data,
        bytes,
        start_utc,
        duration_s,
        streams,
        complete: Some(meta.complete),
        note: (missing > 0)
            .then(|| format!("{missing} disk(s) listed in the metadata not among those given")),
        jive5ab_name: match meta.format {
            ScanFormat::Mark6 => {
                let kind = meta.streams.first().map_or(FrameKind::Vdif, |s| s.kind);
                format!("{name}.{}", kind.extension())
            }
            ScanFormat::Flexbuff => name.to_string(),
        },
    }
}

/// VDIF time (POSIX seconds, frame number) and shape of the frame at `offset`, if it is one.
fn vdif_at(file: &File, offset: u64) -> Option<((i64, u32), String)> {
    let mut b = [0u8; 32];
    file.read_exact_at(&mut b, offset).ok()?;
    let h = VdifHeader::new_checked(&b[..]).ok()?;
    let stamp = (
        epoch_start_unix(h.epoch()) + i64::from(h.seconds()),
        h.frame_number(),
    );
    let shape = format!(
        "vdif {} B {}-bit {}ch station {}",
        h.frame_len(),
        h.bits_per_sample(),
        h.channels(),
        vlbiflow_formats::vdif::VdifHeaderRepr::station_to_string(h.station_id())
    );
    Some((stamp, shape))
}

/// The first (or, `backwards`, the last) VDIF data frame among the `len` bytes of frames of `frame_len` at
/// `start`, passing over fill frames (their headers carry no time: `vlbiflow_formats::fill`).
fn vdif_data_frame(
    file: &File,
    start: u64,
    len: u64,
    frame_len: u64,
    backwards: bool,
) -> Option<((i64, u32), String)> {
    if !(32..=1 << 24).contains(&frame_len) {
        return vdif_at(file, start);
    }
    let n = len / frame_len;
    let mut buf = vec![0u8; frame_len as usize];
    for k in 0..n {
        let i = if backwards { n - 1 - k } else { k };
        let at = start + i * frame_len;
        file.read_exact_at(&mut buf, at).ok()?;
        if !vlbiflow_formats::fill::is_vdif_fill(&buf) {
            return vdif_at(file, at);
        }
    }
    None
}

/// (block number, data offset, data length) of a block.
type BlockAt = (u32, u64, u64);

/// First and last block of a Mark6 file, by walking its block headers.
fn mark6_extent(file: &File, len: u64, h: &Mark6FileHeaderRepr) -> Option<(BlockAt, BlockAt)> {
    let hl = h.block_header_len() as u64;
    let mut off = FILE_HEADER_LEN as u64;
    let mut first = None;
    let mut last = None;
    let mut b = [0u8; 8];
    while off + hl <= len {
        file.read_exact_at(&mut b[..hl as usize], off).ok()?;
        let v = Mark6BlockHeader::new_unchecked(&b[..hl as usize], h.version);
        let n = v.block_number();
        let size = match v.wb_size() {
            Some(wb) if wb as u64 > hl && wb as u32 <= h.block_size => wb as u64,
            Some(_) => break,
            None => u64::from(h.block_size).min(len - off),
        };
        if n < 0 {
            break;
        }
        let data_len = (size - hl).min(len - off - hl);
        if first.is_none() {
            first = Some((n as u32, off + hl, data_len));
        }
        last = Some((n as u32, off + hl, data_len));
        off += size;
    }
    Some((first?, last?))
}

fn foreign_mark6(name: &str, files: &[PathBuf]) -> ScanListing {
    let mut bytes = 0;
    let mut header = None;
    let mut first: Option<(u32, (i64, u32), String)> = None;
    let mut last: Option<(u32, (i64, u32))> = None;
    for p in files {
        let len = file_len(p);
        bytes += len;
        let Ok(f) = File::open(p) else { continue };
        let mut hb = [0u8; FILE_HEADER_LEN];
        if f.read_exact_at(&mut hb, 0).is_err() {
            continue;
        }
        let Ok(h) = Mark6FileHeaderRepr::parse_bytes(&hb) else {
            continue;
        };
        header.get_or_insert(h);
        if h.packet_format != PacketFormat::Vdif {
            continue;
        }
        let Some(((fb, foff, _), (lb, loff, llen))) = mark6_extent(&f, len, &h) else {
            continue;
        };
        let packet = u64::from(h.packet_size);
        let first_len = if fb == lb {
            llen
        } else {
            u64::from(h.block_size).saturating_sub(h.block_header_len() as u64)
        };
        if !matches!(&first, Some(f) if f.0 <= fb) {
            if let Some((stamp, shape)) = vdif_data_frame(&f, foff, first_len.max(packet), packet, false) {
                first = Some((fb, stamp, shape));
            }
        }
        if llen >= packet && !matches!(&last, Some(l) if l.0 >= lb) {
            if let Some((stamp, _)) = vdif_data_frame(&f, loff, llen, packet, true) {
                last = Some((lb, stamp));
            }
        }
    }
    let streams = match (&first, header) {
        (Some((_, _, shape)), _) => vec![shape.clone()],
        (None, Some(h)) => {
            let format = format!("{:?}", h.packet_format).to_lowercase();
            vec![format!("{format} {} B", h.packet_size)]
        }
        _ => vec![],
    };
    ScanListing {
        name: name.to_string(),
        layout: "mark6",
        described_by: "file headers",
        disks: files.len(),
        bytes,
        start_utc: first.as_ref().map(|f| UtcTime::from_unix(f.1 .0, 0).to_iso8601()),
        // Without the frame rate only whole seconds are known: count the seconds touched.
        duration_s: match (&first, &last) {
            (Some(a), Some(b)) => Some((b.1 .0 - a.1 .0 + 1) as f64),
            _ => None,
        },
        streams,
        complete: None,
        note: header.map(|h| format!("{:?}, block size {}", h.version, h.block_size)),
        jive5ab_name: name.to_string(),
    }
}

fn foreign_flexbuff(name: &str, dirs: &[PathBuf]) -> ScanListing {
    let mut bytes = 0;
    let mut chunks: Vec<(u32, PathBuf)> = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if let Some(fname) = e.file_name().to_str() {
                if let Some((stem, n)) = parse_chunk_file_name(fname) {
                    if stem == name {
                        bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
                        chunks.push((n, e.path()));
                    }
                }
            }
        }
    }
    chunks.sort();
    let mut start = None;
    let mut streams = vec![];
    let mut frame_len = None;
    if let Some((_, p)) = chunks.first() {
        if let Ok(f) = File::open(p) {
            let mut w = [0u8; 4];
            if f.read_exact_at(&mut w, 0).is_ok() && u32::from_le_bytes(w) == MARK5B_SYNC {
                streams.push("mark5b".to_string());
            } else if let Some((stamp, shape)) = vdif_at(&f, 0)
                .and_then(|(_, shape)| {
                    frame_len = shape.split(' ').nth(1).and_then(|l| l.parse::<u64>().ok());
                    vdif_data_frame(&f, 0, file_len(p), frame_len?, false)
                })
                .or_else(|| vdif_at(&f, 0))
            {
                start = Some(stamp);
                streams.push(shape);
            }
        }
    }
    // The last data frame, from the end of the last chunks (passing over an aborted recording's fill).
    let last = frame_len.and_then(|fl| {
        chunks.iter().rev().take(4).find_map(|(_, p)| {
            let f = File::open(p).ok()?;
            vdif_data_frame(&f, 0, file_len(p), fl, true).map(|(stamp, _)| stamp)
        })
    });
    ScanListing {
        name: name.to_string(),
        layout: "flexbuff",
        described_by: "file headers",
        disks: dirs.len(),
        bytes,
        start_utc: start.map(|s: (i64, u32)| UtcTime::from_unix(s.0, 0).to_iso8601()),
        // As for Mark6 files: without the frame rate only whole seconds are known.
        duration_s: start.zip(last).map(|(a, b)| (b.0 - a.0 + 1) as f64),
        streams,
        complete: None,
        note: Some(format!("{} chunks", chunks.len())),
        jive5ab_name: name.to_string(),
    }
}

/// Lists every scan on `disks`, sorted by name.
pub fn list_scans(disks: &[PathBuf]) -> Vec<ScanListing> {
    let mut out = Vec::new();
    let mut known = BTreeSet::new();
    for (name, entries) in find_scans(disks) {
        let metas: Vec<ScanMetadata> = entries.into_iter().filter_map(|(_, m)| m.ok()).collect();
        known.insert(name.clone());
        if metas.is_empty() {
            continue;
        }
        out.push(listing_from_metadata(&name, disks, &metas));
    }
    let mut mark6: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut flex: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for d in disks {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let path = e.path();
            let Some(fname) = e.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if fname.ends_with(METADATA_SUFFIX) {
                continue;
            }
            let stem = match fname.rsplit_once('.') {
                Some((s, "vdif" | "m5b")) => s.to_string(),
                _ => fname.clone(),
            };
            if known.contains(&stem) {
                continue;
            }
            if path.is_file() && is_mark6_file(&path) {
                mark6.entry(fname).or_default().push(path);
            } else if path.is_dir() {
                let has_chunks = std::fs::read_dir(&path).into_iter().flatten().flatten().any(|c| {
                    c.file_name()
                        .to_str()
                        .and_then(parse_chunk_file_name)
                        .is_some_and(|(s, _)| s == fname)
                });
                if has_chunks {
                    flex.entry(fname).or_default().push(path);
                }
            }
        }
    }
    for (name, files) in mark6 {
        out.push(foreign_mark6(&name, &files));
    }
    for (name, dirs) in flex {
        out.push(foreign_flexbuff(&name, &dirs));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
