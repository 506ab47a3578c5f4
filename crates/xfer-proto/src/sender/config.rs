//! The sender's settings, the datagrams it asks the I/O layer to send, and its counters.

use std::time::Duration;

use crate::rate::RateConfig;
use crate::wire::{DataPacket, DataRepr, HEADER_LEN};

/// Sender settings.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Transfer id carried in every datagram.
    pub transfer_id: u32,
    /// Payload bytes per datagram (8192 fits a 9000-byte jumbo frame).
    pub block_size: u32,
    /// Chunk size, the unit of hashing and verification (16-64 MiB in production; at least the block size).
    /// Blocks are aligned to chunks: the last block of a chunk may be shorter.
    pub chunk_size: u64,
    /// Rate control.
    pub rate: RateConfig,
    /// No feedback for this long ends the transfer with [`Event::PeerDead`].
    pub dead_timeout: Duration,
    /// Key for the datagram tags (see [`wire::derive_data_key`]); `None` sends zero tags.
    pub data_key: Option<[u8; 32]>,
    /// Datagrams that may leave back to back (one GSO batch) before pacing applies.
    pub max_burst: u32,
    /// How far behind its schedule a sender held back only by pacing may catch up when it runs late (the
    /// I/O thread woke late: the host's scheduler, not a lack of data): up to this much of the pacing rate
    /// leaves back to back, so the average rate stays at the pacing rate. A sender that was idle (no data,
    /// or the in-flight cap) catches up by one burst only.
    pub catch_up: Duration,
    /// Sending time lost beyond `catch_up` (the sender woke later still) is made up afterwards, at up to
    /// twice the pacing rate rather than back to back, up to this much or half the minimum RTT, whichever
    /// is less (as Linux's TCP pacing gives credit for OS jitter): a sender on a busy host otherwise falls
    /// short of its pacing rate by the time it was not scheduled.
    pub max_pace_debt: Duration,
    /// The debt may reach this much even where half the minimum RTT is less (a LAN, or 0 ms through an
    /// emulator): a queue this long is one the rate control does not read as congestion (its queue
    /// threshold), and a bottleneck's buffer holds it.
    pub min_pace_debt: Duration,
    /// Files announced ahead of the one being sent, so that no file waits for its announce.
    pub announce_ahead: usize,
    /// A chunk that fails verification this many times aborts the transfer (the source changes under us).
    pub max_chunk_retries: u32,
}

impl SenderConfig {
    /// Defaults: 8192-byte blocks, 32 MiB chunks, 10 s dead timeout, bursts of 16, 256 files announced ahead.
    pub fn new(transfer_id: u32, rate: RateConfig) -> Self {
        SenderConfig {
            transfer_id,
            block_size: 8192,
            chunk_size: 32 << 20,
            rate,
            dead_timeout: Duration::from_secs(10),
            data_key: None,
            max_burst: 16,
            catch_up: Duration::from_millis(4),
            max_pace_debt: Duration::from_millis(50),
            min_pace_debt: Duration::from_millis(2),
            announce_ahead: 256,
            max_chunk_retries: 3,
        }
    }
}

/// One datagram to send: its header; the payload is `header.len` bytes of file `header.file` at
/// `header.offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The header to emit.
    pub header: DataRepr,
}

impl Transmit {
    /// Length of the datagram.
    pub fn datagram_len(&self) -> usize {
        self.header.buffer_len()
    }
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf` (the payload, if `buf` holds the whole
    /// datagram, follows it and is not touched).
    pub fn emit_header(&self, buf: &mut [u8]) {
        self.header
            .emit(&mut DataPacket::new_unchecked(&mut buf[..HEADER_LEN]));
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Datagrams sent.
    pub datagrams: u64,
    /// Of which retransmissions.
    pub retransmits: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Datagrams the receiver reported lost.
    pub reported_lost: u64,
    /// Datagrams presumed lost by the tail timer.
    pub tail_lost: u64,
    /// Chunks resent after a mismatch.
    pub chunk_resends: u64,
    /// Control messages from the receiver that made no sense (ignored).
    pub bad_control: u64,
    /// Automatic rate: cuts for a standing queue.
    pub rate_cuts_queue: u64,
    /// Automatic rate: cuts for loss that came with a queue or heavy loss.
    pub rate_cuts_loss: u64,
    /// Automatic rate: times a queue while cruising brought the estimate down to the delivery rate.
    pub rate_trims_queue: u64,
    /// Feedback not newer than one already taken (a copy on the control connection, reordered or
    /// replayed), ignored.
    pub stale_feedback: u64,
    /// Datagrams sent again because every feedback that reported on them was lost (below a feedback's
    /// `loss_from` without an acknowledgement).
    pub unreported: u64,
    /// Time the sender was late, µs: how far behind its pacing schedule it was, beyond what it may catch
    /// up back to back, when it came to send (it was not scheduled on a CPU, or its I/O blocked). Up to
    /// [`SenderConfig::max_pace_debt`] of it is made up afterwards; the rest is sending time lost.
    pub late_us: u64,
    /// Sending time lost to the in-flight cap, µs: how far behind its pacing schedule the sender was when
    /// the cap (twice the estimated BDP and the feedback's slack) opened again, beyond one burst. Feedback
    /// that comes late (a receiver not scheduled, a feedback datagram queued) shows here.
    pub window_us: u64,
}
