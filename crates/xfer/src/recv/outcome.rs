//! What a receive is given and what it did.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use vlbiflow_xfer_proto::ReceiverStats;

use crate::session::{Committed, ReceiverReport};
use crate::share::RateCap;

/// Settings of one receiving transfer.
#[derive(Debug, Clone)]
pub struct RecvParams {
    pub transfer_id: u32,
    pub secret: [u8; 32],
    /// Nothing from the sender for this long: it is dead.
    pub dead_timeout: Duration,
    /// For manifests: who sent it.
    pub source: String,
    /// Run the data thread (receiving, feedback) in the real-time class (`--realtime`, see
    /// [`vlbiflow_sched`]).
    pub realtime: bool,
    /// The ceiling the daemon sets for this transfer while it runs (its share of a limit on all its
    /// transfers): each change is sent to the sender.
    pub rate_cap: Option<Arc<RateCap>>,
}

/// What a completed receive did.
#[derive(Debug, Clone)]
pub struct RecvOutcome {
    pub committed: Vec<Committed>,
    pub stats: ReceiverStats,
    pub bytes_resumed: u64,
    /// Bytes written with `O_DIRECT` from staged chunks (the rest went through the page cache).
    pub bytes_written_direct: u64,
    /// Bytes read back from the disk after they were written and found equal (`verify_written`).
    pub bytes_read_back: u64,
    pub seconds: f64,
    /// The data thread ran in the real-time class (`--realtime` asked for it and it was permitted).
    pub realtime: bool,
}

impl RecvOutcome {
    /// The counters as the receiver reports them to the sender.
    pub fn report(&self) -> ReceiverReport {
        ReceiverReport::new(&self.stats, self.bytes_written_direct, self.bytes_read_back)
    }
}

/// A completed pull as `--json` prints it: what the command's JSON output holds, field for field.
#[derive(Debug, Clone, Serialize)]
pub struct RecvSummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    pub files: &'a [Committed],
    pub bytes_total: u64,
    pub bytes_already_there: u64,
    pub bytes_written_direct: u64,
    pub bytes_read_back: u64,
    pub datagrams: u64,
    pub seconds: f64,
    /// New data over the wall time, bits/s.
    pub goodput_bps: f64,
    pub realtime: bool,
    pub receiver: ReceiverReport,
}

impl RecvOutcome {
    /// Bytes of all files committed.
    pub fn bytes_total(&self) -> u64 {
        self.committed.iter().map(|c| c.size).sum()
    }

    /// New data (not found here) over the wall time, bits/s.
    pub fn goodput_bps(&self) -> f64 {
        (self.bytes_total() - self.bytes_resumed) as f64 * 8.0 / self.seconds.max(1e-9)
    }

    /// What `--json` prints of a pull.
    pub fn summary(&self) -> RecvSummary<'_> {
        RecvSummary {
            verified: true,
            files: &self.committed,
            bytes_total: self.bytes_total(),
            bytes_already_there: self.bytes_resumed,
            bytes_written_direct: self.bytes_written_direct,
            bytes_read_back: self.bytes_read_back,
            datagrams: self.stats.delivered,
            seconds: self.seconds,
            goodput_bps: self.goodput_bps(),
            realtime: self.realtime,
            receiver: self.report(),
        }
    }
}
