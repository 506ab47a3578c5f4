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
}

impl StreamStatus {
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
    pub total: usize,
    /// Blocks free for capture.
    pub free: usize,
    /// Sealed blocks waiting for a writer.
    pub queued: usize,
    /// Bytes per block buffer.
    pub block_bytes: usize,
}

/// Whether the disks keep up: rates over the last second or so, pool use and, while the pool fills, how
/// long until it runs dry. Updated by the supervisor a few times a second.
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
    /// Seconds until no block is free at the current rates (None while the pool is not filling).
    pub time_to_full: Option<f64>,
}

impl FlowStatus {
    /// True when the streams bring more than the disks write (by more than 2 %) and the pool fills.
    pub fn disks_behind(&self) -> bool {
        self.time_to_full.is_some()
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
    pub restarts: AtomicU64,
    pub first_time: AtomicU64,
    pub last_time: AtomicU64,
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
        self.restarts.store(restarts, Relaxed);
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
    fn time_to_full_only_while_the_pool_fills() {
        // 1 GB/s in, 0.5 GB/s written, 5 GB free: 10 s.
        assert_eq!(time_to_full(1e9, 0.5e9, 5e9), Some(10.0));
        assert_eq!(time_to_full(1e9, 1e9, 5e9), None);
        assert_eq!(time_to_full(1e9, 0.99e9, 5e9), None);
        assert_eq!(time_to_full(0.0, 0.0, 5e9), None);
        assert_eq!(time_to_full(1e9, 0.0, 0.0), Some(0.0));
    }
}
