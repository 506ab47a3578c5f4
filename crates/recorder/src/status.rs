//! Live status shared between the engine's threads and its users, and the snapshot types handed out.
//!
//! Capture threads publish stream counters with relaxed atomic stores once per batch (each stream has one
//! writer thread, so plain stores suffice) and per-thread detail under a mutex a few times a second.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use vlbiflow_formats::time::VdifTime;
use vlbiflow_scan::StreamCounters;

/// Counters of one VDIF thread of a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadStatus {
    pub thread: u16,
    pub packets: u64,
    pub bytes: u64,
    pub invalid_frames: u64,
    /// From the VDIF time sequence (streams without PSN only; zero otherwise).
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Frame rate in use for this thread's sequence, configured or learned.
    pub frame_rate: Option<u32>,
    /// Time stamp of the last frame stored.
    pub last_time: Option<VdifTime>,
}

/// Snapshot of one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamStatus {
    pub label: String,
    pub counters: StreamCounters,
    /// Sequence restarts (sender restarted, PSN or time jumped far).
    pub restarts: u64,
    pub threads: Vec<ThreadStatus>,
    /// Frame rate in use (configured, or learned from the first thread that taught it).
    pub frame_rate: Option<u32>,
    /// VDIF time stamps of the first and last frame stored.
    pub first_time: Option<VdifTime>,
    pub last_time: Option<VdifTime>,
    /// Socket receive buffer granted, bytes.
    pub recv_buffer: usize,
    /// Wall time from the first to the last batch that stored frames (for the stream's data rate).
    pub active: Duration,
    /// Packet sequence number of the first frame stored (streams with PSN).
    pub first_psn: Option<u64>,
}

impl StreamStatus {
    /// The time the data span, from the first frame's time stamp to the end of the last frame (its time
    /// stamp plus one frame period), in seconds; None without time stamps or a known frame rate. This is
    /// what `scan_check?` reports as a stream's duration, not the wall-clock time the recording ran.
    pub fn data_span(&self) -> Option<f64> {
        let rate = self.frame_rate?;
        let (a, b) = (self.first_time?, self.last_time?);
        if a.frame >= rate || b.frame >= rate {
            return None;
        }
        // Whole seconds apart, then frames: no rounding of the large Unix second.
        let seconds = (b.unix_second() - a.unix_second()) as f64;
        let frames = i64::from(b.frame) - i64::from(a.frame) + 1;
        let span = seconds + frames as f64 / f64::from(rate);
        (span > 0.0).then_some(span)
    }

    /// Stored bit rate over the time frames were arriving, bits per second.
    pub fn rate_bps(&self) -> f64 {
        let s = self.active.as_secs_f64();
        if s > 0.0 {
            self.counters.bytes as f64 * 8.0 / s
        } else {
            0.0
        }
    }
}

/// Snapshot of one disk.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskStatus {
    pub path: PathBuf,
    /// Bytes written (file and block headers included).
    pub bytes: u64,
    pub blocks: u64,
    /// Time spent in write calls.
    pub busy: Duration,
    /// Why the disk left the scan, if it did.
    pub failed: Option<String>,
    /// Writes use O_DIRECT.
    pub direct: bool,
}

impl DiskStatus {
    /// Write rate while writing, bytes per second (what the disk sustains, not the average load).
    pub fn write_rate(&self) -> f64 {
        let s = self.busy.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s
        } else {
            0.0
        }
    }
}

/// Block pool occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Blocks allocated so far.
    pub total: usize,
    /// Blocks free for capture.
    pub free: usize,
    /// Sealed blocks waiting for a writer.
    pub queued: usize,
    /// Bytes per block buffer.
    pub block_bytes: usize,
}

/// The block pool in the one wording every view uses: blocks free of blocks allocated, the same in bytes,
/// and the size the pool may grow to (`limit` blocks) while the disks are behind:
/// `106 of 108 blocks free (1.06 of 1.08 GB), may grow to 1198 (12.56 GB)`.
pub fn pool_text(free: usize, total: usize, limit: usize, block_bytes: usize) -> String {
    // One unit for all three figures, chosen by the largest.
    let largest = total.max(limit) as f64 * block_bytes as f64;
    let (div, unit) = match largest {
        x if x >= 1e9 => (1e9, "GB"),
        x if x >= 1e6 => (1e6, "MB"),
        _ => (1e3, "kB"),
    };
    let size = |blocks: usize| blocks as f64 * block_bytes as f64 / div;
    let mut s = format!(
        "{free} of {total} blocks free ({:.2} of {:.2} {unit})",
        size(free),
        size(total)
    );
    if limit > total {
        s.push_str(&format!(", may grow to {limit} ({:.2} {unit})", size(limit)));
    }
    s
}

/// Whether the disks keep up: rates over the last few seconds ([`crate::flow::RATE_WINDOW`]), pool use
/// and the disks-behind alarm of [`crate::flow::FlowAlarm`] (with, while it is raised, how long until the
/// pool runs dry). Updated by the supervisor a few times a second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowStatus {
    /// Frame bytes arriving from all streams (stored or dropped for want of a buffer), bytes per second.
    pub input_rate: f64,
    /// Bytes confirmed written by all disks, bytes per second.
    pub write_rate: f64,
    /// Blocks the pool may grow to (memory limit; the pool starts smaller and grows while disks are behind).
    pub pool_limit: usize,
    /// Blocks in use (filling or waiting for a disk) as a fraction of `pool_limit`, 0..=1.
    pub pool_fill: f64,
    /// While the disks are behind: seconds until no block is free at the rate the pool fills.
    pub time_to_full: Option<f64>,
    /// The disks-behind alarm: raised when the streams' backlog grew by more than the recorder holds in
    /// flight and 5 % of the input over 20 s, cleared when the disks caught up (see [`crate::flow`]).
    pub behind: bool,
}

impl FlowStatus {
    /// True while the disks-behind alarm is raised.
    pub fn disks_behind(&self) -> bool {
        self.behind
    }
}

/// Seconds until `room` bytes of free pool are used up when `input` bytes/s arrive and `write` bytes/s leave
/// for the disks; `None` unless the input exceeds the writes by more than 2 % (noise in the rates).
pub fn time_to_full(input: f64, write: f64, room: f64) -> Option<f64> {
    let excess = input - write;
    (excess > 0.0 && excess > 0.02 * input).then(|| room.max(0.0) / excess)
}

/// Phase of the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Recording,
    /// Capture stopped; writers flushing the queue.
    Flushing,
    Finished,
}

/// A live snapshot of the whole recorder.
#[derive(Debug, Clone, PartialEq)]
pub struct RecorderStatus {
    pub phase: Phase,
    /// Since the start.
    pub elapsed: Duration,
    pub streams: Vec<StreamStatus>,
    pub disks: Vec<DiskStatus>,
    pub pool: PoolStatus,
    /// Blocks sealed so far (the next block number).
    pub blocks: u64,
    /// Input against write rate and pool headroom.
    pub flow: FlowStatus,
    /// Events not queued because nobody read the event channel fast enough (it holds
    /// [`EVENT_QUEUE`](crate::EVENT_QUEUE) events); the counters above are complete regardless.
    pub events_dropped: u64,
}

impl RecorderStatus {
    /// Counters summed over all streams.
    pub fn totals(&self) -> StreamCounters {
        let mut t = StreamCounters::default();
        for s in &self.streams {
            add_counters(&mut t, &s.counters);
        }
        t
    }
}

pub(crate) fn add_counters(t: &mut StreamCounters, c: &StreamCounters) {
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

/// Packs a VDIF time stamp into 60 bits (0 = none).
pub(crate) fn pack_time(t: VdifTime) -> u64 {
    (1 << 63) | (u64::from(t.epoch) << 54) | (u64::from(t.seconds) << 24) | u64::from(t.frame & 0xff_ffff)
}

pub(crate) fn unpack_time(v: u64) -> Option<VdifTime> {
    if v == 0 {
        return None;
    }
    Some(VdifTime {
        epoch: ((v >> 54) & 0x3f) as u8,
        seconds: ((v >> 24) & 0x3fff_ffff) as u32,
        frame: (v & 0xff_ffff) as u32,
    })
}

/// Per-stream shared state.
#[derive(Default)]
pub(crate) struct StreamShared {
    /// Receive messages that carried more than one datagram (UDP GRO).
    pub coalesced: AtomicU64,
    /// Receive messages, and the datagrams they carried (GRO segments counted one by one).
    pub messages: AtomicU64,
    pub datagrams: AtomicU64,
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub lost: AtomicU64,
    pub out_of_order: AtomicU64,
    pub duplicates: AtomicU64,
    pub invalid_frames: AtomicU64,
    pub rejected: AtomicU64,
    pub filtered: AtomicU64,
    pub dropped_no_buffer: AtomicU64,
    pub kernel_drops: AtomicU64,
    pub wrong_source: AtomicU64,
    pub restarts: AtomicU64,
    pub first_time: AtomicU64,
    pub last_time: AtomicU64,
    /// PSN of the first frame stored, valid once `has_first_psn` is set.
    pub first_psn: AtomicU64,
    pub has_first_psn: AtomicBool,
    pub frame_rate: AtomicU32,
    pub recv_buffer: AtomicU64,
    /// Nanoseconds since the start of the first and last batch that stored frames (0 = none yet).
    pub first_ns: AtomicU64,
    pub last_ns: AtomicU64,
    pub threads: Mutex<Vec<ThreadStatus>>,
    /// Frames in blocks that no disk could write (every disk failed): not stored after all.
    pub unwritten: AtomicU64,
    /// Numbers of the blocks (FlexBuff: chunks) holding this stream's frames, pushed as they are sealed.
    pub blocks: Mutex<vlbiflow_scan::BlockRanges>,
    /// With datastreams: by thread seen, the recordings (bit per index) its frames went to.
    pub thread_recordings: Mutex<Vec<(u16, u64)>>,
    /// A stream split over several sockets: the parts add their counters here (`lost` only the frames
    /// they could not store), and their PSN figures are in here.
    pub split: Option<Box<crate::split::SplitShared>>,
    /// Split: frames copied where a batch brought a later run of its thread.
    pub cut_copied: AtomicU64,
}

impl StreamShared {
    pub fn publish(&self, c: &StreamCounters, restarts: u64) {
        self.packets.store(c.packets, Relaxed);
        self.bytes.store(c.bytes, Relaxed);
        self.lost.store(c.lost, Relaxed);
        self.out_of_order.store(c.out_of_order, Relaxed);
        self.duplicates.store(c.duplicates, Relaxed);
        self.invalid_frames.store(c.invalid_frames, Relaxed);
        self.rejected.store(c.rejected, Relaxed);
        self.filtered.store(c.filtered, Relaxed);
        self.dropped_no_buffer.store(c.dropped_no_buffer, Relaxed);
        self.kernel_drops.store(c.kernel_drops, Relaxed);
        self.wrong_source.store(c.wrong_source, Relaxed);
        self.restarts.store(restarts, Relaxed);
    }

    /// Adds what one part of a split stream counted since it last published (`now - before`).
    pub fn add(&self, now: &StreamCounters, before: &StreamCounters) {
        let add = |a: &AtomicU64, n: u64, b: u64| {
            a.fetch_add(n.saturating_sub(b), Relaxed);
        };
        add(&self.packets, now.packets, before.packets);
        add(&self.bytes, now.bytes, before.bytes);
        add(&self.lost, now.lost, before.lost);
        add(&self.invalid_frames, now.invalid_frames, before.invalid_frames);
        add(&self.rejected, now.rejected, before.rejected);
        add(&self.filtered, now.filtered, before.filtered);
        add(
            &self.dropped_no_buffer,
            now.dropped_no_buffer,
            before.dropped_no_buffer,
        );
        add(&self.kernel_drops, now.kernel_drops, before.kernel_drops);
        add(&self.wrong_source, now.wrong_source, before.wrong_source);
    }

    /// The stream's counters, with a split stream's PSN figures; and its restarts.
    pub fn counters_and_restarts(&self) -> (StreamCounters, u64) {
        let mut c = self.counters();
        match &self.split {
            None => (c, self.restarts.load(Relaxed)),
            Some(sp) => {
                let f = sp.figures();
                c.lost += f.lost;
                c.out_of_order = f.out_of_order;
                c.duplicates = f.duplicates;
                (c, f.restarts)
            }
        }
    }

    pub fn counters(&self) -> StreamCounters {
        StreamCounters {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            lost: self.lost.load(Relaxed),
            out_of_order: self.out_of_order.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            invalid_frames: self.invalid_frames.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            filtered: self.filtered.load(Relaxed),
            dropped_no_buffer: self.dropped_no_buffer.load(Relaxed),
            kernel_drops: self.kernel_drops.load(Relaxed),
            wrong_source: self.wrong_source.load(Relaxed),
        }
    }
}

/// Per-disk shared state.
#[derive(Default)]
pub(crate) struct DiskShared {
    pub bytes: AtomicU64,
    pub blocks: AtomicU64,
    pub busy_ns: AtomicU64,
    pub direct: AtomicBool,
    pub failed: Mutex<Option<String>>,
}

impl DiskShared {
    pub fn snapshot(&self, path: PathBuf) -> DiskStatus {
        DiskStatus {
            path,
            bytes: self.bytes.load(Relaxed),
            blocks: self.blocks.load(Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Relaxed)),
            failed: self.failed.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            direct: self.direct.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_packing_round_trips() {
        let t = VdifTime {
            epoch: 63,
            seconds: (1 << 30) - 1,
            frame: (1 << 24) - 1,
        };
        assert_eq!(unpack_time(pack_time(t)), Some(t));
        let z = VdifTime {
            epoch: 0,
            seconds: 0,
            frame: 0,
        };
        assert_eq!(unpack_time(pack_time(z)), Some(z));
        assert_eq!(unpack_time(0), None);
    }

    #[test]
    fn the_pool_is_said_one_way() {
        assert_eq!(
            pool_text(106, 108, 1198, 10_485_760),
            "106 of 108 blocks free (1.11 of 1.13 GB), may grow to 1198 (12.56 GB)"
        );
        assert_eq!(
            pool_text(3, 8, 8, 1_000_000),
            "3 of 8 blocks free (3.00 of 8.00 MB)"
        );
    }

    #[test]
    fn data_span_is_first_to_last_time_stamp_plus_a_frame() {
        let t = |seconds, frame| VdifTime {
            epoch: 50,
            seconds,
            frame,
        };
        let mut s = StreamStatus {
            label: "a".into(),
            counters: StreamCounters::default(),
            restarts: 0,
            threads: vec![],
            frame_rate: Some(1000),
            first_time: Some(t(100, 0)),
            last_time: Some(t(109, 999)),
            recv_buffer: 0,
            active: Duration::from_secs(12),
            first_psn: None,
        };
        assert!((s.data_span().unwrap() - 10.0).abs() < 1e-9);
        s.last_time = Some(t(102, 199));
        assert!((s.data_span().unwrap() - 2.2).abs() < 1e-9);
        s.frame_rate = None;
        assert_eq!(s.data_span(), None);
    }

    #[test]
    fn time_to_full_only_while_the_pool_fills() {
        // 1 GB/s in, 0.5 GB/s written, 5 GB free: 10 s.
        assert_eq!(time_to_full(1e9, 0.5e9, 5e9), Some(10.0));
        assert_eq!(time_to_full(1e9, 1e9, 5e9), None);
        assert_eq!(time_to_full(1e9, 0.99e9, 5e9), None);
        assert_eq!(time_to_full(0.0, 0.0, 5e9), None);
        assert_eq!(time_to_full(1e9, 0.0, 0.0), Some(0.0));
    }
}
