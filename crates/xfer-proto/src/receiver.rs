//! The receiving side: checks and authenticates datagrams, keeps a bitmap of blocks per file, hands new
//! data to the I/O layer, reports loss ranges and rate/delay feedback, and verifies every chunk against
//! the sender's hash once the I/O layer has hashed what it wrote.
//!
//! The I/O layer passes each datagram to [`Receiver::handle_datagram`] and writes the returned
//! [`Delivery`] before it sends the next control message (chunks are verified as their last block
//! arrives); it feeds control messages to [`Receiver::handle_control`], sends
//! [`Receiver::poll_control`] messages and wakes at [`Receiver::poll_timeout`].
//!
//! When blocks are BLAKE3 subtrees ([`crate::hash::blocks_are_subtrees`]: the block size is a power of
//! two of at least 1 KiB) the digest each datagram's tag covers is the chaining value of its block, and
//! the receiver merges the digests of a chunk's blocks into the chunk hash itself: every byte is hashed
//! once, as it arrives, and nothing is read back. With other block sizes it raises
//! [`Event::ChunkComplete`] and the I/O layer hashes what it wrote and calls [`Receiver::chunk_hashed`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::event::Event;
use crate::hash::{block_digest, blocks_are_subtrees, ChunkDigests};
use crate::window::WindowedMin;
use crate::wire::{self, AbortKind, ChunkHash, ControlMsg, DataPacket, DataRepr, Feedback, HEADER_LEN};

/// Each loss range goes out in this many consecutive feedbacks, so that a report is lost only with that
/// many feedback datagrams in a row.
pub const FEEDBACK_REPEAT: usize = 4;
/// Most ranges of earlier feedbacks a feedback repeats (the newest ones go whole, however many).
const MAX_REPEATED_RANGES: usize = 24;

/// Receiver settings.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Feedback at least this often while data arrives (keep it well below the RTT).
    pub feedback_interval: Duration,
    /// Feedback at least this often when no data arrives (keep-alive).
    pub keepalive: Duration,
    /// Go on reporting every `feedback_interval` for this long after the last datagram: the sender's tail
    /// timer presumes a loss only while the receiver reports (a silent receiver is taken as stalled).
    pub feedback_linger: Duration,
    /// Nothing from the sender for this long ends with [`Event::PeerDead`].
    pub dead_timeout: Duration,
    /// Key for datagram tags; with a key, datagrams with a wrong tag are dropped and counted.
    pub data_key: Option<[u8; 32]>,
    /// Most files a transfer may announce.
    pub max_files: u32,
    /// Most blocks a file may have (the bitmap costs one bit per block; default 2^28, 2 TiB at 8 KiB).
    pub max_blocks_per_file: u64,
    /// Most memory for the block digests of chunks in progress (32 bytes per block received of a chunk
    /// not complete yet); a sender that spreads its blocks wider is aborted. Default 256 MiB (64 GiB of
    /// data in unfinished chunks at 8 KiB blocks).
    pub max_digest_bytes: usize,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            feedback_interval: Duration::from_millis(5),
            keepalive: Duration::from_secs(1),
            feedback_linger: Duration::from_secs(1),
            dead_timeout: Duration::from_secs(10),
            data_key: None,
            max_files: 10_000_000,
            max_blocks_per_file: 1 << 28,
            max_digest_bytes: 256 << 20,
        }
    }
}

/// New data for the I/O layer: write `data` to file `file` at `offset`.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// File index.
    pub file: u32,
    /// Byte offset.
    pub offset: u64,
    /// The bytes (borrowed from the datagram).
    pub data: &'a [u8],
}

/// Counters; everything dropped is counted here and never delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Datagrams whose data was delivered.
    pub delivered: u64,
    /// Datagrams for blocks already held (late, duplicated or redundant retransmissions).
    pub duplicates: u64,
    /// Datagrams that failed header checks or did not fit the announced file.
    pub malformed: u64,
    /// Datagrams with a wrong authentication tag.
    pub bad_tag: u64,
    /// Datagrams of another transfer, or before `hello`.
    pub wrong_transfer: u64,
    /// Datagrams for files not (yet) announced; reported as lost.
    pub unknown_file: u64,
    /// Sequence numbers reported lost.
    pub reported_lost: u64,
    /// Feedback messages sent.
    pub feedbacks: u64,
    /// Chunks that failed verification.
    pub mismatches: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Receiving,
    /// All bytes delivered; waiting for the I/O layer's hash.
    Complete,
    /// Hashed; waiting for the sender's hash.
    Hashed(ChunkHash),
    Verified,
}

#[derive(Debug)]
struct RFile {
    size: u64,
    chunk_size: u64,
    /// Block bitmap: chunk `c` owns bits `c * blocks_per_chunk ..` (blocks are aligned to chunks).
    bits: Vec<u64>,
    blocks_per_chunk: u64,
    chunk_bytes: Vec<u64>,
    state: Vec<ChunkState>,
    expected: Vec<Option<ChunkHash>>,
    /// Digests of the blocks received of each unfinished chunk (subtree blocks only).
    digests: Vec<Option<ChunkDigests>>,
    n_verified: u64,
}

impl RFile {
    fn chunk_len(&self, c: usize) -> u64 {
        let start = c as u64 * self.chunk_size;
        self.chunk_size.min(self.size - start)
    }
    /// The bitmap positions of chunk `c`'s blocks.
    fn block_bits(&self, c: usize, block: u64) -> std::ops::Range<usize> {
        let first = c * self.blocks_per_chunk as usize;
        first..first + self.chunk_len(c).div_ceil(block) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Done,
    Dead,
    Aborted,
}

/// The receiver state machine.
#[derive(Debug)]
pub struct Receiver {
    cfg: ReceiverConfig,
    epoch: Option<Instant>,
    transfer_id: Option<u32>,
    block_size: u64,
    files: Vec<Option<RFile>>,
    files_total: u64,
    files_done: u64,
    /// The sender's `closed`: how many files of how many bytes the transfer has in all.
    closed: Option<(u32, u64)>,
    highest: Option<u64>,
    loss: Vec<(u64, u32)>,
    /// Ranges of the last feedbacks (the first sequence number each speaks for, its fresh ranges).
    loss_hist: VecDeque<(u64, Vec<(u64, u32)>)>,
    covered_next: u64,
    fb_n: u64,
    datagram_feedback_ok: bool,
    recv_bytes: u64,
    echo_ts: u64,
    echo_at: Option<Instant>,
    /// Receiver-clock time (µs) at which the newest accepted datagram arrived: the time of `recv_bytes`.
    arrived_us: u64,
    interval_owd_min: Option<i64>,
    prev_owd_min: Option<i64>,
    owd_window: WindowedMin<i64>,
    fb_bytes: u64,
    fb_at: Option<Instant>,
    data_since_fb: bool,
    last_data: Option<Instant>,
    last_heard: Option<Instant>,
    chunks_verified: u64,
    host_drops: u64,
    /// The block size when blocks are BLAKE3 subtrees (chunk hashes merged from block digests).
    subtree_block: Option<u64>,
    digest_bytes: usize,
    control_out: VecDeque<ControlMsg>,
    events: VecDeque<Event>,
    state: State,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver waiting for `hello`.
    pub fn new(cfg: ReceiverConfig) -> Self {
        Receiver {
            cfg,
            epoch: None,
            transfer_id: None,
            block_size: 0,
            files: Vec::new(),
            files_total: 0,
            files_done: 0,
            closed: None,
            highest: None,
            loss: Vec::new(),
            loss_hist: VecDeque::new(),
            covered_next: 0,
            fb_n: 0,
            datagram_feedback_ok: false,
            recv_bytes: 0,
            echo_ts: 0,
            echo_at: None,
            arrived_us: 0,
            interval_owd_min: None,
            prev_owd_min: None,
            owd_window: WindowedMin::new(),
            fb_bytes: 0,
            fb_at: None,
            data_since_fb: false,
            last_data: None,
            last_heard: None,
            chunks_verified: 0,
            host_drops: 0,
            subtree_block: None,
            digest_bytes: 0,
            control_out: VecDeque::new(),
            events: VecDeque::new(),
            state: State::Running,
            stats: ReceiverStats::default(),
        }
    }

    fn us(&mut self, now: Instant) -> u64 {
        let e = *self.epoch.get_or_insert(now);
        now.saturating_duration_since(e).as_micros() as u64
    }

    /// One datagram from the network, handled as it arrives. Returns the data to write, if any is new;
    /// everything else is counted in [`ReceiverStats`].
    pub fn handle_datagram<'a>(&mut self, now: Instant, datagram: &'a [u8]) -> Option<Delivery<'a>> {
        self.handle_datagram_at(now, now, datagram)
    }

    /// Whether `datagram` overtook a control message it depends on: it is well-formed and comes before
    /// `hello`, or it is of this transfer and of a file not yet announced (files are announced in order,
    /// each before its first datagram is sent, over the control connection, which UDP can overtake).
    /// Such a datagram handled now is dropped (counted in `wrong_transfer` or `unknown_file`) and has to
    /// be sent again; the I/O layer may hold it until the control messages waiting for it are handled.
    /// Only the header is read (a forged one can say the same: hold datagrams within a time budget).
    pub fn awaits_control(&self, datagram: &[u8]) -> bool {
        if self.state != State::Running {
            return false;
        }
        let Ok(p) = DataPacket::new_checked(datagram) else {
            return false;
        };
        match self.transfer_id {
            None => true,
            Some(id) => {
                id == p.transfer_id()
                    && p.file() as usize >= self.files.len()
                    && p.file() < self.cfg.max_files
            }
        }
    }

    /// Files announced so far; `None` before `hello`. While it is below the files the I/O layer expects,
    /// datagrams may arrive ahead of their control messages ([`Receiver::awaits_control`]).
    pub fn files_announced(&self) -> Option<usize> {
        self.transfer_id.map(|_| self.files.len())
    }

    /// One datagram that arrived at `arrived` (the kernel's receive time, at or before `now`) and is
    /// handled at `now`. The path's timing (one-way delay and queue, the receive time of the bytes in
    /// feedback, the delay echoed for the RTT) uses the arrival, so that time the datagram waited in the
    /// receiver's socket buffer (a receiver busy with its disk or descheduled for a moment) is not read
    /// as a queue on the path nor as a burst of delivery when the backlog is drained.
    pub fn handle_datagram_at<'a>(
        &mut self,
        now: Instant,
        arrived: Instant,
        datagram: &'a [u8],
    ) -> Option<Delivery<'a>> {
        let arrived = arrived.min(now);
        if self.state != State::Running {
            return None;
        }
        // `parse` runs the checks of `new_checked`
        let Ok(repr) = DataRepr::parse(&DataPacket::new_unchecked(datagram)) else {
            self.stats.malformed += 1;
            return None;
        };
        if self.transfer_id.is_none() {
            // before `hello` (its UDP overtook the control connection): the hashing mode and with it the
            // tag are not known yet; it counts as not (yet) of this transfer, not as forged, and comes again
            self.stats.wrong_transfer += 1;
            return None;
        }
        let payload = &datagram[HEADER_LEN..];
        let sub = self.subtree_block;
        let digest =
            (self.cfg.data_key.is_some() || sub.is_some()).then(|| block_digest(sub, repr.offset, payload));
        if let (Some(k), Some(d)) = (&self.cfg.data_key, &digest) {
            if wire::verify_digest(k, datagram, d).is_err() {
                self.stats.bad_tag += 1;
                return None;
            }
        }
        if self.transfer_id != Some(repr.transfer_id) {
            self.stats.wrong_transfer += 1;
            return None;
        }
        let block = self.block_size;
        let Some(Some(f)) = self.files.get(repr.file as usize) else {
            self.stats.unknown_file += 1;
            return None;
        };
        // blocks are aligned to chunks: the last block of a chunk (or of the file) may be shorter
        let len = repr.len as u64;
        let c = (repr.offset / f.chunk_size) as usize;
        let within = repr.offset % f.chunk_size;
        if repr.offset >= f.size || within % block != 0 || len != block.min(f.chunk_len(c) - within) {
            self.stats.malformed += 1;
            return None;
        }
        // accepted: sequence bookkeeping
        let arrived_us = self.us(arrived);
        self.arrived_us = self.arrived_us.max(arrived_us);
        self.last_heard = Some(now);
        self.data_since_fb = true;
        self.last_data = Some(now);
        let next = self.highest.map_or(0, |h| h + 1);
        if repr.seq >= next {
            let mut gap = repr.seq - next;
            let mut start = next;
            while gap > 0 {
                let l = gap.min(u32::MAX as u64);
                self.loss.push((start, l as u32));
                self.stats.reported_lost += l;
                start += l;
                gap -= l;
            }
            self.highest = Some(repr.seq);
            self.echo_ts = repr.timestamp_us;
            self.echo_at = Some(arrived);
        }
        let owd = arrived_us as i64 - repr.timestamp_us as i64;
        self.interval_owd_min = Some(self.interval_owd_min.map_or(owd, |m| m.min(owd)));
        // the block
        let Some(Some(f)) = self.files.get_mut(repr.file as usize) else {
            return None;
        };
        let i = (within / block) as usize;
        let b = c * f.blocks_per_chunk as usize + i;
        let word = &mut f.bits[b / 64];
        if *word & (1 << (b % 64)) != 0 || f.state[c] != ChunkState::Receiving {
            self.stats.duplicates += 1;
            return None;
        }
        *word |= 1 << (b % 64);
        f.chunk_bytes[c] += len;
        self.recv_bytes += len;
        self.stats.delivered += 1;
        let complete = f.chunk_bytes[c] == f.chunk_len(c);
        match (sub, digest) {
            (Some(_), Some(d)) => {
                let hash = if f.size <= block {
                    // a file of one block: its root hash, from the bytes
                    Some(ChunkHash(*blake3::hash(payload).as_bytes()))
                } else {
                    let clen = f.chunk_len(c);
                    if f.digests[c].is_none() {
                        let acc = ChunkDigests::new(clen.div_ceil(block) as usize);
                        self.digest_bytes += acc.footprint();
                        f.digests[c] = Some(acc);
                    }
                    let acc = f.digests[c].as_mut().expect("just made");
                    let full = acc.put(i, d);
                    debug_assert_eq!(full, complete);
                    full.then(|| {
                        let acc = f.digests[c].take().expect("digests");
                        self.digest_bytes -= acc.footprint();
                        acc.finish(block, clen, f.size <= f.chunk_size)
                    })
                };
                if let Some(h) = hash {
                    f.state[c] = ChunkState::Hashed(h);
                    self.compare(repr.file, c as u32, h);
                } else if self.digest_bytes > self.cfg.max_digest_bytes {
                    self.abort(format!(
                        "more than {} bytes of block digests for unfinished chunks: the sender spreads its blocks over too many chunks",
                        self.cfg.max_digest_bytes
                    ));
                    return None;
                }
            }
            _ if complete => {
                f.state[c] = ChunkState::Complete;
                self.events.push_back(Event::ChunkComplete {
                    file: repr.file,
                    chunk: c as u32,
                    offset: c as u64 * f.chunk_size,
                    len: f.chunk_len(c),
                });
            }
            _ => {}
        }
        Some(Delivery {
            file: repr.file,
            offset: repr.offset,
            data: payload,
        })
    }

    /// A control message from the sender.
    pub fn handle_control(&mut self, now: Instant, msg: ControlMsg) {
        if self.state != State::Running {
            return;
        }
        self.us(now);
        self.last_heard = Some(now);
        if let Err(e) = msg.validate() {
            return self.abort(format!("bad control message from the sender: {e}"));
        }
        match msg {
            ControlMsg::Hello {
                transfer_id,
                block_size,
                ..
            } => {
                if self.transfer_id.is_some() {
                    return self.abort("second hello".into());
                }
                self.transfer_id = Some(transfer_id);
                self.block_size = block_size as u64;
                self.subtree_block = blocks_are_subtrees(block_size as u64).then_some(block_size as u64);
            }
            ControlMsg::Announce {
                file,
                name,
                size,
                chunk_size,
                hashes,
            } => {
                if self.transfer_id.is_none() {
                    return self.abort("announce before hello".into());
                }
                if file >= self.cfg.max_files {
                    return self.abort(format!(
                        "announce: file index {file} above the limit {}",
                        self.cfg.max_files
                    ));
                }
                if let Some((n, _)) = self.closed.filter(|c| file >= c.0) {
                    return self.abort(format!(
                        "announce: file index {file}, but the sender closed the list at {n} files"
                    ));
                }
                // files are announced in order, so the table grows by one and a peer cannot make it huge
                if file as usize != self.files.len() {
                    return self.abort(format!(
                        "announce: file index {file}, expected {}",
                        self.files.len()
                    ));
                }
                if chunk_size < self.block_size {
                    return self.abort(format!(
                        "announce: file {file} has chunks of {chunk_size} bytes, below the block size {}",
                        self.block_size
                    ));
                }
                let chunks = ControlMsg::chunk_count(size, chunk_size);
                let blocks_per_chunk = chunk_size.div_ceil(self.block_size);
                let blocks = chunks.saturating_mul(blocks_per_chunk);
                if blocks > self.cfg.max_blocks_per_file {
                    return self.abort(format!(
                        "announce: file {file} has {blocks} blocks, above the limit {}",
                        self.cfg.max_blocks_per_file
                    ));
                }
                let blocks = blocks as usize;
                let i = file as usize;
                self.files.push(None);
                let chunks = chunks as usize;
                let expected = if hashes.is_empty() {
                    vec![None; chunks]
                } else {
                    hashes.into_iter().map(Some).collect()
                };
                self.files[i] = Some(RFile {
                    size,
                    chunk_size,
                    bits: vec![0; blocks.div_ceil(64)],
                    blocks_per_chunk,
                    chunk_bytes: vec![0; chunks],
                    state: vec![ChunkState::Receiving; chunks],
                    digests: (0..chunks).map(|_| None).collect(),
                    expected,
                    n_verified: 0,
                });
                self.files_total += 1;
                self.events.push_back(Event::FileAnnounced {
                    file,
                    name,
                    size,
                    chunk_size,
                });
                if chunks == 0 {
                    self.file_done(file);
                }
            }
            ControlMsg::ChunkHash { file, chunk, hash } => {
                let Some(Some(f)) = self.files.get_mut(file as usize) else {
                    return self.abort(format!("chunk_hash: file {file} not announced"));
                };
                let Some(slot) = f.expected.get_mut(chunk as usize) else {
                    return self.abort(format!("chunk_hash: file {file} has no chunk {chunk}"));
                };
                *slot = Some(hash);
                if let ChunkState::Hashed(h) = f.state[chunk as usize] {
                    self.compare(file, chunk, h);
                }
            }
            ControlMsg::Ping | ControlMsg::Auth { .. } => {}
            ControlMsg::FeedbackDatagrams => self.datagram_feedback_ok = true,
            ControlMsg::Closed { files, bytes } => {
                if self.transfer_id.is_none() {
                    return self.abort("closed before hello".into());
                }
                if self.closed.is_some() {
                    return self.abort("second closed".into());
                }
                if (files as u64) < self.files_total {
                    return self.abort(format!(
                        "the sender closed the list at {files} files, but announced {}",
                        self.files_total
                    ));
                }
                self.closed = Some((files, bytes));
                self.finish_if_closed();
            }
            ControlMsg::Done { files, bytes } => {
                let all = self.files_done == self.files_total && self.files_total == files as u64;
                if all {
                    self.state = State::Done;
                    self.send_feedback(now);
                    self.events.push_back(Event::TransferDone);
                } else {
                    self.abort(format!(
                        "sender says done ({files} files, {bytes} bytes) but {} of {} files are verified here",
                        self.files_done, files
                    ));
                }
            }
            ControlMsg::Abort { reason, .. } => {
                self.state = State::Aborted;
                self.events.push_back(Event::Aborted { reason });
            }
            other => self.abort(format!(
                "unexpected control message from the sender: {}",
                other.to_line()
            )),
        }
    }

    /// The hash of a verified chunk (for the I/O layer's manifest), `None` if it is not verified.
    pub fn verified_hash(&self, file: u32, chunk: u32) -> Option<ChunkHash> {
        let f = self.files.get(file as usize)?.as_ref()?;
        (f.state.get(chunk as usize)? == &ChunkState::Verified)
            .then(|| f.expected[chunk as usize])
            .flatten()
    }

    /// Whether chunk hashes are merged from block digests here (no [`Event::ChunkComplete`], no
    /// [`Self::chunk_hashed`]); known once `hello` has arrived.
    pub fn merges_block_digests(&self) -> bool {
        self.subtree_block.is_some()
    }

    /// The I/O layer hashed chunk `chunk` of `file` as written (after [`Event::ChunkComplete`]).
    pub fn chunk_hashed(&mut self, file: u32, chunk: u32, hash: ChunkHash) {
        let Some(Some(f)) = self.files.get_mut(file as usize) else {
            return;
        };
        if f.state.get(chunk as usize) != Some(&ChunkState::Complete) {
            return;
        }
        f.state[chunk as usize] = ChunkState::Hashed(hash);
        self.compare(file, chunk, hash);
    }

    /// Resume: the I/O layer found chunk `chunk` of `file` already on disk with this hash. If it equals the
    /// sender's hash the chunk counts as verified (`chunk_verified` goes out and the sender skips it);
    /// if it differs, `chunk_mismatch` asks for it. When the sender's hash is not known yet the comparison
    /// waits for its `chunk_hash`. Call it right after [`Event::FileAnnounced`], before data of the file
    /// is handled. Returns false (and changes nothing) when the chunk has already received data or is
    /// unknown.
    pub fn declare_verified(&mut self, file: u32, chunk: u32, hash: ChunkHash) -> bool {
        let Some(Some(f)) = self.files.get_mut(file as usize) else {
            return false;
        };
        let c = chunk as usize;
        if f.state.get(c) != Some(&ChunkState::Receiving) || f.chunk_bytes[c] != 0 {
            return false;
        }
        for b in f.block_bits(c, self.block_size) {
            f.bits[b / 64] |= 1 << (b % 64);
        }
        if let Some(acc) = f.digests[c].take() {
            self.digest_bytes -= acc.footprint();
        }
        f.chunk_bytes[c] = f.chunk_len(c);
        f.state[c] = ChunkState::Hashed(hash);
        self.compare(file, chunk, hash);
        true
    }

    fn compare(&mut self, file: u32, chunk: u32, got: ChunkHash) {
        let Some(Some(f)) = self.files.get_mut(file as usize) else {
            return;
        };
        let c = chunk as usize;
        match f.expected[c] {
            None => {}
            Some(e) if e == got => self.verified(file, chunk),
            Some(_) => {
                // forget the chunk's blocks: the sender sends it again
                for b in f.block_bits(c, self.block_size) {
                    f.bits[b / 64] &= !(1 << (b % 64));
                }
                f.chunk_bytes[c] = 0;
                f.state[c] = ChunkState::Receiving;
                self.stats.mismatches += 1;
                self.control_out
                    .push_back(ControlMsg::ChunkMismatch { file, chunk });
                self.events.push_back(Event::ChunkMismatch { file, chunk });
            }
        }
    }

    fn verified(&mut self, file: u32, chunk: u32) {
        let Some(Some(f)) = self.files.get_mut(file as usize) else {
            return;
        };
        f.state[chunk as usize] = ChunkState::Verified;
        f.n_verified += 1;
        let done = f.n_verified == f.state.len() as u64;
        self.chunks_verified += 1;
        self.control_out
            .push_back(ControlMsg::ChunkVerified { file, chunk });
        self.events.push_back(Event::ChunkVerified { file, chunk });
        if done {
            self.file_done(file);
        }
    }

    fn file_done(&mut self, file: u32) {
        self.files_done += 1;
        self.events.push_back(Event::FileDone { file });
        self.finish_if_closed();
    }

    /// Once the sender has closed the list, the transfer is done here when every file of it is verified:
    /// the I/O layer commits and reports then, half a round trip before the sender, which learns of the
    /// last verification from this side, could say `done`.
    fn finish_if_closed(&mut self) {
        let Some((files, bytes)) = self.closed else {
            return;
        };
        if self.state != State::Running || self.files_total != files as u64 || self.files_done != files as u64
        {
            return;
        }
        let announced: u64 = self.files.iter().flatten().map(|f| f.size).sum();
        if announced != bytes {
            return self.abort(format!(
                "the sender closed the list at {bytes} bytes, but its {files} files hold {announced}"
            ));
        }
        self.state = State::Done;
        self.events.push_back(Event::TransferDone);
    }

    fn abort(&mut self, reason: String) {
        self.control_out.push_back(ControlMsg::Abort {
            reason: reason.clone(),
            kind: AbortKind::Failed,
        });
        self.state = State::Aborted;
        self.events.push_back(Event::Aborted { reason });
    }

    fn send_feedback(&mut self, now: Instant) {
        let dt = self
            .fb_at
            .map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64);
        let rate_bps = ((self.recv_bytes - self.fb_bytes) as u128 * 8_000_000)
            .checked_div(dt as u128)
            .map_or(0, |r| r.min(u64::MAX as u128) as u64);
        let (queue, trend) = match self.interval_owd_min.take() {
            Some(m) => {
                self.owd_window.push(now, m, Duration::from_secs(10));
                let floor = self.owd_window.min().unwrap_or(m);
                let trend = self.prev_owd_min.map_or(0, |p| m - p);
                self.prev_owd_min = Some(m);
                ((m - floor).max(0) as u64, trend)
            }
            None => (0, 0),
        };
        // this feedback's gaps, and those of the previous ones again (bounded)
        // (gaps are found as the highest sequence number advances: all of these lie above the highest
        // one of the previous feedback)
        let fresh = std::mem::take(&mut self.loss);
        self.loss_hist.push_back((self.covered_next, fresh));
        self.covered_next = self.highest.map_or(0, |h| h + 1);
        while self.loss_hist.len() > FEEDBACK_REPEAT
            || (self.loss_hist.len() > 1
                && self
                    .loss_hist
                    .iter()
                    .rev()
                    .skip(1)
                    .map(|e| e.1.len())
                    .sum::<usize>()
                    > MAX_REPEATED_RANGES)
        {
            self.loss_hist.pop_front();
        }
        let loss_from = self.loss_hist.front().map_or(0, |e| e.0);
        let loss: Vec<(u64, u32)> = self.loss_hist.iter().flat_map(|e| e.1.iter().copied()).collect();
        self.fb_n += 1;
        let fb = Feedback {
            n: self.fb_n,
            highest_seq: self.highest,
            loss_from,
            loss,
            recv_bytes: self.recv_bytes,
            recv_datagrams: self.stats.delivered,
            recv_time_us: self.arrived_us,
            rate_bps,
            echo_ts_us: self.echo_ts,
            echo_delay_us: self
                .echo_at
                .map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64),
            queue_delay_us: queue,
            owd_trend_us: trend,
            chunks_verified: self.chunks_verified,
            host_drops: self.host_drops,
        };
        self.fb_bytes = self.recv_bytes;
        self.fb_at = Some(now);
        self.data_since_fb = false;
        self.stats.feedbacks += 1;
        self.control_out.push_back(ControlMsg::Feedback(fb));
    }

    /// Whether `t` is within `feedback_linger` of the last datagram.
    fn lingering(&self, t: Instant) -> bool {
        self.last_data.is_some_and(|d| t <= d + self.cfg.feedback_linger)
    }

    /// When [`Self::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state != State::Running {
            return None;
        }
        let base = self.fb_at.or(self.epoch)?;
        let fb = if self.data_since_fb || self.lingering(base + self.cfg.feedback_interval) {
            base + self.cfg.feedback_interval
        } else {
            base + self.cfg.keepalive
        };
        let dead = self
            .last_heard
            .or(self.epoch)
            .map_or(fb, |l| l + self.cfg.dead_timeout);
        Some(fb.min(dead))
    }

    /// Runs timers: feedback, keep-alive, dead peer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state != State::Running {
            return;
        }
        let e = *self.epoch.get_or_insert(now);
        if now.saturating_duration_since(self.last_heard.unwrap_or(e)) >= self.cfg.dead_timeout {
            self.state = State::Dead;
            self.events.push_back(Event::PeerDead);
            return;
        }
        let since = now.saturating_duration_since(self.fb_at.unwrap_or(e));
        let frequent = self.data_since_fb || self.lingering(now);
        if (frequent && since >= self.cfg.feedback_interval) || since >= self.cfg.keepalive {
            self.send_feedback(now);
        }
    }

    /// The number of datagrams this host's kernel has dropped on the data socket so far (its buffer
    /// overflowed; `SO_RXQ_OVFL`), which the feedback passes on: the sender does not read them as the
    /// path's random loss.
    pub fn set_host_drops(&mut self, total: u64) {
        self.host_drops = self.host_drops.max(total);
    }

    /// Tells the sender to pace at most at `bps` bits/s from now on (`None`: lifts it), e.g. when this
    /// receiver's share of a daemon's limit on all its transfers changes.
    pub fn set_rate_cap(&mut self, bps: Option<f64>) {
        let bps = bps.map(|b| (b.max(1.0) as u64).max(1));
        self.control_out.push_back(ControlMsg::RateCap { bps });
    }

    /// Whether the sender has said that feedback datagrams reach it ([`ControlMsg::FeedbackDatagrams`]):
    /// until then the I/O layer sends every feedback on the control connection as well.
    pub fn feedback_datagrams_confirmed(&self) -> bool {
        self.datagram_feedback_ok
    }

    /// The next control message to send. A [`ControlMsg::Feedback`] may go as a feedback datagram
    /// ([`wire::emit_feedback_datagram`]) to the address the data comes from; everything else goes on the
    /// control connection.
    pub fn poll_control(&mut self) -> Option<ControlMsg> {
        self.control_out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// Whether the transfer has ended (done, dead or aborted).
    pub fn is_finished(&self) -> bool {
        self.state != State::Running
    }
}
