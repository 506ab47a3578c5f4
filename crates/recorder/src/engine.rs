//! State shared by the capture, writer and supervisor threads, and the events they report.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::config::RecorderConfig;
use crate::pool::Block;
use crate::status::{DiskShared, StreamShared};

/// Something the operator should hear about, sent on the recorder's event channel (the CLI prints them; the
/// control plane logs them). Rare by construction: nothing here is per packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecorderEvent {
    /// The kernel granted a smaller socket buffer than asked for.
    SocketBufferCapped {
        stream: String,
        requested: usize,
        granted: usize,
    },
    /// A disk cannot do O_DIRECT; buffered writes are used there.
    BufferedFallback { disk: PathBuf, reason: String },
    /// A disk left the scan; its unfinished blocks went back to the queue for the other disks.
    DiskFailed {
        disk: PathBuf,
        error: String,
        requeued_blocks: usize,
        disks_left: usize,
    },
    /// Every disk failed: the scan cannot continue.
    AllDisksFailed,
    /// A stream's frame rate was learned (or corrected) from its time stamps.
    RateLearned { stream: String, thread: u16, rate: u32 },
    /// The block pool ran dry: whole packets are being dropped (counted as dropped_no_buffer).
    NoFreeBlocks { stream: String },
    /// Capture has free blocks again after running dry.
    BlocksAvailable { stream: String, dropped: u64 },
    /// The first datagrams of a stream that were not frames of the expected size or format.
    Rejecting {
        stream: String,
        datagram_len: usize,
        expected: usize,
        reason: String,
    },
    /// Scan metadata could not be written on a disk.
    MetadataFailed { disk: PathBuf, error: String },
    /// A receive error that stopped a stream's capture.
    CaptureFailed { stream: String, error: String },
    /// The disks-behind alarm was raised ([`crate::flow::FlowAlarm`]): the streams bring more than the
    /// disks write and the block pool is filling. Rates in bytes per second over the last few seconds,
    /// seconds until the pool is full at that excess.
    DisksBehind {
        input_rate: u64,
        write_rate: u64,
        time_to_full: Option<u64>,
    },
    /// The disks-behind alarm cleared: the disks wrote the backlog. Rates as above; the pool as
    /// [`crate::status::pool_text`] says it.
    DisksCaughtUp {
        input_rate: u64,
        write_rate: u64,
        pool: String,
    },
    /// A configuration warning (said at start): see [`RecorderConfig::warnings`](crate::RecorderConfig::warnings).
    ConfigWarning(String),
    /// A stream split over sockets: sealed blocks waited for a part that received nothing until `waiting`
    /// of them held the pool, and went to the disks without it (said once per stream): a run that part
    /// receives later reads back after runs recorded before it. Nothing is lost.
    SplitUnordered { stream: String, waiting: usize },
    /// The kernel refused UDP generic receive offload (said once per recording): those streams receive
    /// one datagram per message, which costs more CPU at high packet rates but loses nothing.
    GroUnavailable { streams: usize, error: String },
}

impl fmt::Display for RecorderEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecorderEvent::SocketBufferCapped { stream, requested, granted } => write!(
                f,
                "stream {stream}: socket receive buffer capped at {granted} B (asked {requested} B); \
                 raise it with `sysctl -w net.core.rmem_max={requested}` or run with CAP_NET_ADMIN"
            ),
            RecorderEvent::BufferedFallback { disk, reason } => {
                write!(f, "disk {}: O_DIRECT not available ({reason}); using buffered writes", disk.display())
            }
            RecorderEvent::DiskFailed { disk, error, requeued_blocks, disks_left } => write!(
                f,
                "DISK FAILED {}: {error}; it leaves the scan, {requeued_blocks} block(s) re-queued to the {disks_left} disk(s) left",
                disk.display()
            ),
            RecorderEvent::AllDisksFailed => write!(f, "ALL DISKS FAILED: stopping the scan"),
            RecorderEvent::RateLearned { stream, thread, rate } => {
                write!(f, "stream {stream} thread {thread}: frame rate {rate} frames/s (learned from the data)")
            }
            RecorderEvent::NoFreeBlocks { stream } => write!(
                f,
                "stream {stream}: no free block buffer (disks behind): dropping whole packets until one frees up"
            ),
            RecorderEvent::BlocksAvailable { stream, dropped } => {
                write!(f, "stream {stream}: block buffers available again after dropping {dropped} packet(s)")
            }
            RecorderEvent::Rejecting { stream, datagram_len, expected, reason } if datagram_len == expected => write!(
                f,
                "stream {stream}: rejecting frames: {reason}; counted as rejected (check frame-rate=)"
            ),
            RecorderEvent::Rejecting { stream, datagram_len, expected, reason } => write!(
                f,
                "stream {stream}: rejecting datagrams: got {datagram_len} B, expected {expected} B ({reason}); \
                 counted as rejected ({})",
                size_hint(*datagram_len, *expected)
            ),
            RecorderEvent::MetadataFailed { disk, error } => {
                write!(f, "disk {}: cannot write scan metadata: {error}", disk.display())
            }
            RecorderEvent::CaptureFailed { stream, error } => write!(f, "stream {stream}: receive failed: {error}"),
            RecorderEvent::ConfigWarning(w) => write!(f, "warning: {w}"),
            RecorderEvent::SplitUnordered { stream, waiting } => write!(
                f,
                "stream {stream}: {waiting} blocks waited for one of its sockets that received nothing; \
                 they are written without it, so a run it receives later reads back out of order"
            ),
            RecorderEvent::DisksBehind { input_rate, write_rate, time_to_full } => write!(
                f,
                "DISKS BEHIND: streams bring {:.0} MB/s, disks write {:.0} MB/s; the block pool is full in {}, \
                 then whole packets are dropped (add disks or allow more --pool-memory)",
                *input_rate as f64 / 1e6,
                *write_rate as f64 / 1e6,
                match time_to_full {
                    Some(t) => format!("about {t} s"),
                    None => "time unknown".into(),
                }
            ),
            RecorderEvent::DisksCaughtUp { input_rate, write_rate, pool } => write!(
                f,
                "disks caught up: streams bring {:.0} MB/s, disks write {:.0} MB/s; pool {pool}",
                *input_rate as f64 / 1e6,
                *write_rate as f64 / 1e6
            ),
            RecorderEvent::GroUnavailable { streams, error } => write!(
                f,
                "UDP GRO not available on {streams} stream socket(s) ({error}); receiving single datagrams"
            ),
        }
    }
}

/// What a datagram of `got` bytes on a stream expecting `expected` (PSN included) most likely means.
pub fn size_hint(got: usize, expected: usize) -> &'static str {
    if got == expected + 8 {
        "8 bytes more than expected: the sender puts a packet sequence number in front of each frame; \
         add psn to the stream (e.g. a=vdif@HOST:PORT,psn)"
    } else if got + 8 == expected {
        "8 bytes fewer than expected: the stream is set for a packet sequence number the sender does not \
         send; remove psn from the stream"
    } else {
        "check frame-size= and psn"
    }
}

pub(crate) const PHASE_RECORDING: u8 = 0;
pub(crate) const PHASE_FLUSHING: u8 = 1;
pub(crate) const PHASE_FINISHED: u8 = 2;

/// Everything the threads share.
pub(crate) struct Shared {
    pub config: RecorderConfig,
    pub streams: Vec<StreamShared>,
    pub disks: Vec<DiskShared>,
    pub start: Instant,
    pub start_utc: String,
    pub stop: AtomicBool,
    /// Writers take no block while set (a test's way to starve the pool deterministically).
    pub hold_writers: AtomicBool,
    pub phase: AtomicU8,
    pub captures_running: AtomicUsize,
    pub writers_alive: AtomicUsize,
    /// Blocks sealed but not yet confirmed written.
    pub in_flight: AtomicU64,
    /// Blocks that could not be written anywhere (all disks failed).
    pub lost_blocks: AtomicU64,
    /// Capture only: frame bytes of the blocks returned to the pool unwritten (the flow monitor's "written").
    pub discarded_bytes: AtomicU64,
    pub next_block: AtomicU32,
    /// Empty blocks (see [`FreeList`](crate::pool::FreeList)).
    pub free: crate::pool::FreeList,
    pub queue_tx: Sender<Block>,
    pub queue_rx: Receiver<Block>,
    /// Blocks allocated so far (the pool grows up to `pool_limit` while less than a second of input is free).
    pub pool_total: AtomicUsize,
    /// Blocks the pool may grow to.
    pub pool_limit: usize,
    /// Blocks allocated at the start (writers size their share of unconfirmed blocks from it).
    pub pool_start: usize,
    pub block_bytes: usize,
    /// Block layout for blocks allocated later: (data_offset, headroom).
    pub block_layout: (usize, usize),
    /// Latest flow estimate (supervisor writes, snapshots read).
    pub flow: std::sync::Mutex<crate::status::FlowStatus>,
    /// Nominal block size as written in Mark6 file headers and metadata.
    pub nominal_block_size: u64,
    pub events: Sender<RecorderEvent>,
    /// Events the full queue did not take.
    pub events_dropped: AtomicU64,
    /// Address each stream's socket is bound to (the real port when 0 was asked for).
    pub local_addrs: Vec<std::net::SocketAddr>,
    /// With datastreams: the recordings opened so far.
    pub recordings: crate::datastreams::Recordings,
}

impl Shared {
    /// Queues an event for the reader; never blocks: a full queue counts the event as dropped.
    pub fn event(&self, e: RecorderEvent) {
        if let Err(crossbeam_channel::TrySendError::Full(_)) = self.events.try_send(e) {
            self.events_dropped.fetch_add(1, Relaxed);
        }
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Relaxed);
    }
}
