//! `push --follow`: send a scan while it is still being recorded.
//!
//! The recorder marks a scan complete in its metadata (`<scan>.vlbiflow.json`, `complete: true`, written
//! only after every block is flushed; see `vlbiflow-scan`). Until then the client sends, in rounds, what
//! is on disk: the gathered prefix of complete blocks with consecutive numbers
//! ([`scan_source_growing`]), each round a push with [`Options::partial`] set, so the daemon verifies and
//! syncs every chunk but keeps the file as `.part`. The next round is an ordinary resume: the daemon
//! re-hashes the complete chunks it holds (at disk speed), the client skips those that match and sends the
//! rest, the chunk that was incomplete included. When the metadata says complete, a last ordinary push of
//! the whole scan (read strictly, as without `--follow`) sends what is left and commits the file under its
//! final name: the result is the same file, verified the same way, as a push after the recording.
//!
//! Cost: each round re-hashes what the daemon already holds at both ends (disk speed), so a round starts
//! only when at least `min_new` bytes and a quarter of what was sent before are new: the re-hashing stays
//! below four times the scan, and at the end at most a fifth of it (plus what the recorder adds during a
//! round) is left to send. (Growing files in the protocol itself would remove both costs; not done.)

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use vlbiflow_xfer_proto::RateConfig;

use crate::client::{self, ClientConfig};
use crate::error::XferError;
use crate::progress::Progress;
use crate::scan::{scan_source, scan_source_growing, Layout};
use crate::send::SendOutcome;
use crate::session::Options;

/// How to follow a growing scan.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// How often to look at the scan on disk.
    pub poll: Duration,
    /// Bytes that must be new on disk before a round is sent (and at least a quarter of what was sent
    /// before, so that the re-hashing of what the daemon holds stays within four times the scan).
    pub min_new: u64,
    /// Give up when the scan neither grows nor is marked complete for this long (a recorder that died).
    pub stall_timeout: Duration,
}

impl Default for FollowConfig {
    /// Look every 0.5 s, send when 256 MiB (and a quarter more) are new, give up after 60 s without growth.
    fn default() -> Self {
        FollowConfig {
            poll: Duration::from_millis(500),
            min_new: 256 << 20,
            stall_timeout: Duration::from_secs(60),
        }
    }
}

/// What happened, for the summary.
#[derive(Debug)]
pub struct FollowOutcome {
    /// The last round's outcome (the commit report of the whole scan).
    pub last: SendOutcome,
    /// Rounds sent while the scan was being recorded (the last, complete one not counted).
    pub partial_rounds: u32,
    /// Payload bytes sent over all rounds, retransmissions included.
    pub bytes_sent: u64,
    /// Datagrams over all rounds.
    pub datagrams: u64,
    /// Retransmitted datagrams over all rounds.
    pub retransmits: u64,
    /// Wall time from the first round's start to the commit.
    pub seconds: f64,
}

/// What `push --follow` sends: scan `scan` on `disks`, into `dest`, with `options` at `rate`.
pub struct FollowRequest<'a> {
    pub scan: &'a str,
    pub disks: &'a [String],
    pub dest: &'a str,
    pub options: Options,
    pub rate: RateConfig,
}

/// A completed `push --follow` as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FollowSummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    pub files: &'a [crate::session::Committed],
    pub bytes_total: u64,
    pub bytes_sent: u64,
    pub datagrams: u64,
    pub retransmits: u64,
    pub rounds_while_recording: u32,
    pub seconds: f64,
}

impl FollowOutcome {
    /// What `--json` prints of it.
    pub fn summary(&self) -> FollowSummary<'_> {
        FollowSummary {
            verified: true,
            files: &self.last.committed,
            bytes_total: self.last.committed.iter().map(|c| c.size).sum(),
            bytes_sent: self.bytes_sent,
            datagrams: self.datagrams,
            retransmits: self.retransmits,
            rounds_while_recording: self.partial_rounds,
            seconds: self.seconds,
        }
    }
}

/// Pushes scan `scan` on `disks` into `dest` as one gathered file while it is recorded; returns when the
/// recorder has marked it complete and the whole file is verified and committed. `on_round` is told about
/// each round (bytes on disk now, whether it is the last).
pub fn push_follow(
    cfg: &ClientConfig,
    req: FollowRequest<'_>,
    follow: &FollowConfig,
    progress: &Progress,
    stop: &AtomicBool,
    on_round: &dyn Fn(u64, bool),
) -> Result<FollowOutcome, XferError> {
    let FollowRequest {
        scan,
        disks,
        dest,
        options,
        rate,
    } = req;
    let t0 = Instant::now();
    let (mut rounds, mut bytes_sent, mut datagrams, mut retransmits) = (0u32, 0u64, 0u64, 0u64);
    let mut sent_upto = 0u64;
    let mut last_growth = (Instant::now(), 0u64);
    loop {
        if stop.load(Relaxed) {
            return Err(XferError::Failed("stopped".into()));
        }
        // complete? (metadata first: a scan marked complete is read strictly, as without --follow)
        let (set, info) = scan_source_growing(scan, disks)?;
        if info.complete == Some(true) {
            let (set, _) = scan_source(scan, disks, Layout::Gather)?;
            on_round(set.total_bytes(), true);
            let out = client::push(cfg, set, dest, options, rate, progress, stop)?;
            return Ok(FollowOutcome {
                partial_rounds: rounds,
                bytes_sent: bytes_sent + out.stats.bytes,
                datagrams: datagrams + out.stats.datagrams,
                retransmits: retransmits + out.stats.retransmits,
                seconds: t0.elapsed().as_secs_f64(),
                last: out,
            });
        }
        let now_bytes = set.total_bytes();
        if now_bytes != last_growth.1 {
            last_growth = (Instant::now(), now_bytes);
        } else if last_growth.0.elapsed() > follow.stall_timeout {
            return Err(XferError::Failed(format!(
                "scan {scan} has not grown for {:.0} s and its recorder has not marked it complete (did the recorder die?); what was sent is kept as .part at the destination, rerun without --follow to send it as it is",
                follow.stall_timeout.as_secs_f64()
            )));
        }
        if now_bytes >= sent_upto + follow.min_new.max(sent_upto / 4) {
            on_round(now_bytes, false);
            let mut o = options.clone();
            o.partial = true;
            let out = client::push(cfg, set, dest, o, rate, progress, stop)?;
            rounds += 1;
            bytes_sent += out.stats.bytes;
            datagrams += out.stats.datagrams;
            retransmits += out.stats.retransmits;
            sent_upto = now_bytes;
            continue;
        }
        std::thread::sleep(follow.poll);
    }
}
