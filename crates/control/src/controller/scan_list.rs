//! The scan list as found on the disks (every `<scan>.vlbiflow.json`), and the figures of a recorded
//! stream that the queries report.

use std::path::PathBuf;

use vlbiflow_formats::time::UtcTime;
use vlbiflow_scan::ScanMetadata;

use crate::disks::DiskProbe;

/// One scan of the list.
#[derive(Debug, Clone)]
pub struct ScanEntry {
    pub name: String,
    /// The first readable metadata copy, if any.
    pub meta: Option<ScanMetadata>,
    /// Why no copy could be read.
    pub error: Option<String>,
}

impl ScanEntry {
    fn start_key(&self) -> String {
        self.meta
            .as_ref()
            .map(|m| m.start_utc.clone())
            .unwrap_or_default()
    }
}

/// The scan list as found on `disks` (every `<scan>.vlbiflow.json`), oldest first.
pub fn scan_list(probe: &dyn DiskProbe, disks: &[PathBuf]) -> Vec<ScanEntry> {
    let mut list: Vec<ScanEntry> = probe
        .scans(disks)
        .into_iter()
        .map(|(name, copies)| {
            let mut error = None;
            let mut meta: Option<ScanMetadata> = None;
            for m in copies {
                match m {
                    // Prefer a complete copy: a disk may hold an older refresh of the metadata.
                    Ok(m) if meta.as_ref().is_none_or(|old| !old.complete && m.complete) => meta = Some(m),
                    Ok(_) => {}
                    Err(e) => error = Some(e),
                }
            }
            ScanEntry { name, meta, error }
        })
        .collect();
    list.sort_by(|a, b| a.start_key().cmp(&b.start_key()).then(a.name.cmp(&b.name)));
    list
}

/// The scan list as found on `disks` of the real file system.
pub fn scan_list_from_disks(disks: &[PathBuf]) -> Vec<ScanEntry> {
    scan_list(&crate::disks::SystemDisks, disks)
}

/// A stream's duration as `scan_check?` reports it: from its first frame's time stamp to the end of its
/// last frame (time stamp plus one frame period); 0 without time stamps.
pub(super) fn data_span(s: &vlbiflow_scan::StreamMeta) -> f64 {
    let first = s.first_frame_utc.as_deref().and_then(parse_iso);
    let last = s.last_frame_utc.as_deref().and_then(parse_iso);
    let frame_s = s.frame_rate.map(|r| 1.0 / f64::from(r)).unwrap_or(0.0);
    match (first, last) {
        (Some(a), Some(b)) if b >= a => b - a + frame_s,
        _ => 0.0,
    }
}

/// A stream's data rate, bits/s, as `scan_check?` reports it: its bytes over [`data_span`]; 0 without one.
pub(super) fn data_rate(s: &vlbiflow_scan::StreamMeta) -> f64 {
    let span = data_span(s);
    if span > 0.0 {
        s.counters.bytes as f64 * 8.0 / span
    } else {
        0.0
    }
}

/// ISO-8601 `YYYY-MM-DDTHH:MM:SS[.f]Z` (as the metadata holds) to Unix seconds as a float.
pub fn parse_iso(s: &str) -> Option<f64> {
    UtcTime::parse_iso8601(s)
}
