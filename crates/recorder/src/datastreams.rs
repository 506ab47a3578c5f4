//! jive5ab's datastreams on the shared side: the recordings a scan's rules opened (`<scan>_ds<name>`,
//! each an ordinary FlexBuff recording: its own chunk directory per disk, chunks numbered from 0, its own
//! metadata file listing only its frames), their chunk counters and what the writers confirmed of them.
//! The per-frame side (which recording a frame goes to) is [`crate::capture`]'s, with
//! [`vlbiflow_scan::datastream::Router`].

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use vlbiflow_scan::datastream::{MAX_RECORDINGS, SUFFIX_SEP};
use vlbiflow_scan::{BlockRanges, DiskMeta, ScanMetadata, StreamCounters, StreamMeta};

use crate::engine::Shared;
use crate::status::RecorderStatus;

/// One stream's part of one recording.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecStream {
    /// Frames sealed into the recording's chunks.
    pub frames: u64,
    /// The recording's chunks that hold them.
    pub blocks: BlockRanges,
}

/// One recording a datastream opened.
#[derive(Debug, Clone)]
pub(crate) struct Recording {
    /// `<scan>_ds<expanded name>`.
    pub name: String,
    /// By stream (configuration order).
    pub streams: Vec<RecStream>,
}

/// The recordings of one scan, in the order they were opened (a block's `recording` indexes them).
pub(crate) struct Recordings {
    list: Mutex<Vec<Recording>>,
    /// Next chunk number, by recording.
    next_chunk: Vec<AtomicU32>,
    /// Bytes and chunks confirmed on disk, by recording and disk (`recording * disks + disk`).
    disk_bytes: Vec<AtomicU64>,
    disk_blocks: Vec<AtomicU64>,
    streams: usize,
    disks: usize,
}

impl Recordings {
    pub fn new(streams: usize, disks: usize) -> Self {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Recordings {
            list: Mutex::new(Vec::with_capacity(MAX_RECORDINGS)),
            next_chunk: (0..MAX_RECORDINGS).map(|_| AtomicU32::new(0)).collect(),
            disk_bytes: zeros(MAX_RECORDINGS * disks),
            disk_blocks: zeros(MAX_RECORDINGS * disks),
            streams,
            disks,
        }
    }

    /// The index of recording `name`, opened now if new; `None` when [`MAX_RECORDINGS`] are open. Once
    /// per new recording per stream (capture's cold path).
    pub fn index(&self, name: &str) -> Option<u8> {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = list.iter().position(|r| r.name == name) {
            return Some(i as u8);
        }
        if list.len() >= MAX_RECORDINGS {
            return None;
        }
        list.push(Recording {
            name: name.to_owned(),
            streams: vec![RecStream::default(); self.streams],
        });
        Some((list.len() - 1) as u8)
    }

    /// The name of recording `i` (writers ask once per recording).
    pub fn name(&self, i: u8) -> Option<String> {
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.get(usize::from(i)).map(|r| r.name.clone())
    }

    /// A block of `frames` frames of `stream` is sealed into recording `i`: its chunk number. Once per block.
    pub fn sealed(&self, i: u8, stream: usize, frames: u32) -> u32 {
        let number = self.next_chunk[usize::from(i)].fetch_add(1, Relaxed);
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = list
            .get_mut(usize::from(i))
            .and_then(|r| r.streams.get_mut(stream))
        {
            s.frames += u64::from(frames);
            s.blocks.push(u64::from(number));
        }
        number
    }

    /// Disk `disk` confirmed a chunk of `bytes` of recording `i`.
    pub fn confirmed(&self, i: u8, disk: usize, bytes: u64) {
        let k = usize::from(i) * self.disks + disk;
        if let (Some(b), Some(n)) = (self.disk_bytes.get(k), self.disk_blocks.get(k)) {
            b.fetch_add(bytes, Relaxed);
            n.fetch_add(1, Relaxed);
        }
    }

    pub fn snapshot(&self) -> Vec<Recording> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The name of an entry on `disk` that a recording of `scan`'s datastreams could take (`<scan>_ds...`), if
/// one exists.
pub(crate) fn existing(disk: &Path, scan: &str) -> Option<String> {
    let prefix = format!("{scan}{SUFFIX_SEP}");
    std::fs::read_dir(disk)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(&prefix))
}

/// The metadata of every recording opened so far: `base` (the scan's own, every stream) narrowed to each
/// recording's frames. Per stream: the frames and chunks of the recording; `threads` those of its frames;
/// loss, out-of-order, duplicate and invalid counts summed over those threads (streams without PSN:
/// a PSN stream's loss is the stream's, in the scan's status, not split by recording). Streams with no
/// frame in a recording are left out of it.
pub(crate) fn recordings_metadata(
    shared: &Shared,
    status: &RecorderStatus,
    base: &ScanMetadata,
) -> Vec<ScanMetadata> {
    let recs = shared.recordings.snapshot();
    recs.iter()
        .enumerate()
        .map(|(i, rec)| {
            let bit = 1u64 << i;
            let streams: Vec<StreamMeta> = base
                .streams
                .iter()
                .zip(&rec.streams)
                .zip(&shared.streams)
                .zip(&status.streams)
                .filter(|(((_, rs), _), _)| rs.frames > 0)
                .map(|(((sm, rs), sh), st)| {
                    let masks = sh
                        .thread_recordings
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    let threads: Vec<u16> = masks
                        .iter()
                        .filter(|(_, m)| m & bit != 0)
                        .map(|(t, _)| *t)
                        .collect();
                    let mut c = StreamCounters {
                        packets: rs.frames,
                        bytes: rs.frames * u64::from(sm.frame_size),
                        ..Default::default()
                    };
                    for t in st.threads.iter().filter(|t| threads.contains(&t.thread)) {
                        c.lost += t.lost;
                        c.out_of_order += t.out_of_order;
                        c.duplicates += t.duplicates;
                        c.invalid_frames += t.invalid_frames;
                    }
                    StreamMeta {
                        threads,
                        counters: c,
                        blocks: rs.blocks.clone(),
                        ..sm.clone()
                    }
                })
                .collect();
            let disks: Vec<DiskMeta> = base
                .disks
                .iter()
                .enumerate()
                .map(|(d, dm)| {
                    let k = i * shared.recordings.disks + d;
                    DiskMeta {
                        bytes: shared.recordings.disk_bytes[k].load(Relaxed),
                        blocks: shared.recordings.disk_blocks[k].load(Relaxed),
                        ..dm.clone()
                    }
                })
                .collect();
            ScanMetadata {
                scan: rec.name.clone(),
                blocks: disks.iter().map(|d| d.blocks).sum(),
                streams,
                disks,
                ..base.clone()
            }
        })
        .collect()
}
