//! What a send is given and what it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use vlbiflow_xfer_proto::{RateConfig, SenderStats};

use crate::session::{Committed, Options, ReceiverReport};
use crate::share::RateCap;

/// Settings of one sending transfer.
#[derive(Debug, Clone)]
pub struct SendParams {
    /// Transfer id (from the accept).
    pub transfer_id: u32,
    /// Session secret of the control connection (the datagram key is derived from it).
    pub secret: [u8; 32],
    /// Agreed options.
    pub options: Options,
    /// Rate control.
    pub rate: RateConfig,
    /// Receiver's data address.
    pub dest: SocketAddr,
    /// No feedback for this long: the receiver is dead.
    pub dead_timeout: Duration,
    /// How long to wait for the receiver's commit report after the last chunk is verified.
    pub commit_timeout: Duration,
    /// Run the data thread and the feedback reader in the real-time class (`--realtime`, see
    /// [`vlbiflow_sched`]).
    pub realtime: bool,
    /// The ceiling this side's daemon sets while the transfer runs (its share of a limit on all its
    /// transfers), applied as it changes.
    pub rate_cap: Option<Arc<RateCap>>,
    /// The receiver's ceiling from its accept (it may change it later with `rate_cap` messages).
    pub receiver_cap: Option<f64>,
}

/// What a completed send did.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    /// The receiver's report: each file synced under its final name, with its BLAKE3.
    pub committed: Vec<Committed>,
    /// The receiver's counters: what arrived, what it asked for again, what it dropped.
    pub receiver: ReceiverReport,
    /// Protocol counters.
    pub stats: SenderStats,
    /// Bytes found already at the destination (verified, not moved).
    pub bytes_resumed: u64,
    /// Wall time from the first datagram to the commit report.
    pub seconds: f64,
    /// Wall time from the first datagram to the last chunk verified (before the receiver's final sync).
    pub verified_seconds: f64,
    /// Feedback datagrams taken.
    pub feedback_datagrams: u64,
    /// Datagrams on the data socket that were not valid feedback (wrong tag, transfer or form: dropped).
    pub feedback_rejected: u64,
    /// Bytes of new data read from the disk past the page cache (`O_DIRECT`: a recording the cache did
    /// not hold).
    pub bytes_read_direct: u64,
    /// Time the data thread waited for its disk (a window not read ahead in time, or read by itself).
    pub read_wait_seconds: f64,
    /// The data thread ran in the real-time class (`--realtime` asked for it and it was permitted).
    pub realtime: bool,
}

/// A completed push as `--json` prints it: what the command's JSON output holds, field for field.
#[derive(Debug, Clone, Serialize)]
pub struct SendSummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    /// Each file synced under its final name, with its BLAKE3.
    pub files: &'a [Committed],
    pub bytes_total: u64,
    pub bytes_already_there: u64,
    pub bytes_sent: u64,
    pub datagrams: u64,
    pub retransmits: u64,
    pub chunk_resends: u64,
    pub rate_cuts_queue: u64,
    pub rate_cuts_loss: u64,
    pub rate_trims_queue: u64,
    pub feedback_datagrams: u64,
    pub feedback_rejected: u64,
    pub bytes_read_direct: u64,
    pub feedback_stale: u64,
    pub resent_unreported: u64,
    pub pacing_late_ms: f64,
    pub pacing_window_ms: f64,
    pub read_wait_ms: f64,
    pub realtime: bool,
    pub seconds: f64,
    pub verified_seconds: f64,
    /// New data over the wall time, bits/s.
    pub goodput_bps: f64,
    pub receiver: ReceiverReport,
}

impl SendOutcome {
    /// New data (not found at the destination) over the wall time, bits/s, for files of `total` bytes.
    pub fn goodput_bps(&self, total: u64) -> f64 {
        (total - self.bytes_resumed) as f64 * 8.0 / self.seconds.max(1e-9)
    }

    /// What `--json` prints of a push of files of `total` bytes.
    pub fn summary(&self, total: u64) -> SendSummary<'_> {
        let st = &self.stats;
        SendSummary {
            verified: true,
            files: &self.committed,
            bytes_total: total,
            bytes_already_there: self.bytes_resumed,
            bytes_sent: st.bytes,
            datagrams: st.datagrams,
            retransmits: st.retransmits,
            chunk_resends: st.chunk_resends,
            rate_cuts_queue: st.rate_cuts_queue,
            rate_cuts_loss: st.rate_cuts_loss,
            rate_trims_queue: st.rate_trims_queue,
            feedback_datagrams: self.feedback_datagrams,
            feedback_rejected: self.feedback_rejected,
            bytes_read_direct: self.bytes_read_direct,
            feedback_stale: st.stale_feedback,
            resent_unreported: st.unreported,
            pacing_late_ms: st.late_us as f64 / 1e3,
            pacing_window_ms: st.window_us as f64 / 1e3,
            read_wait_ms: self.read_wait_seconds * 1e3,
            realtime: self.realtime,
            seconds: self.seconds,
            verified_seconds: self.verified_seconds,
            goodput_bps: self.goodput_bps(total),
            receiver: self.receiver,
        }
    }
}
