//! Capture threads: each serves any number of stream sockets through epoll, receiving batches with
//! `recvmmsg` (vlbiflow-udp's [`BatchReceiver`], non-blocking) straight into the stream's current block,
//! the packet sequence number split off into a side array by a second iovec, validating every datagram and
//! compacting the block over the slots of rejected ones. Counters are kept locally and published once per
//! batch.
//!
//! With UDP GRO a message can be a super-datagram of several equal segments. Every message gets room for
//! `span` datagrams in the block (the most segments per message of the socket's previous batch, so steady
//! GSO traffic lands in consecutive slots without a copy; with PSN each segment's PSN and frame get an
//! iovec each, so the frames land in their slots too) plus a 64 KiB overflow area so nothing is
//! truncated; each segment is classified where it landed, then kept frames are moved to consecutive slots
//! (only where a rejected datagram left a hole, or a segment beyond the span went to the overflow area),
//! continuing into fresh blocks when the current one is full.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vlbiflow_formats::psn;
use vlbiflow_formats::time::{epoch_start_unix, VdifTime};
use vlbiflow_scan::StreamCounters;
use vlbiflow_seq::{Arrival, FrameIndexer, SequenceTracker};
use vlbiflow_udp::{DropCounter, Epoll};

mod classify;
mod part;
mod receive;
mod route;

pub use classify::{classify, Verdict};
pub(crate) use part::Part;
use receive::{place_frames, Layout, Piece, Received, Receiver, Src, MAX_SPLIT, OVERFLOW};
pub(crate) use route::Routing;

use crate::config::StreamSpec;
use crate::engine::{RecorderEvent, Shared};
use crate::pool::Block;
use crate::status::{pack_time, ThreadStatus};

/// Batches taken from one ready socket before looking at the others (fairness between streams).
const BATCHES_PER_TURN: usize = 16;
/// Receives of one message each taken from one ready socket in a turn while receiving one by one.
const SINGLES_PER_TURN: usize = 1024;
/// Messages received one by one after a batch of GRO messages of varying segment counts, before trying
/// whole batches again.
const SINGLES_AFTER_VARIED: u32 = 4096;
/// How often per-thread detail is published.
const DETAIL_INTERVAL: Duration = Duration::from_millis(250);

/// Loss and counters of one VDIF thread (or the single sequence of a Mark5B stream).
struct ThreadState {
    status: ThreadStatus,
    indexer: FrameIndexer,
    tracker: SequenceTracker,
    /// Frames of this sequence that arrived but could not be stored (no free block); see [`Unstored`].
    unstored: u64,
    /// With datastreams: the recordings (bit per index) its frames went to.
    recordings: u64,
}

/// Whether a frame dropped for want of a buffer adds to `lost`: a frame the tracker took as part of the
/// sequence (first, in order, after a gap, or filling a gap late) is one more frame sent and not stored; a
/// duplicate or stray one is not.
#[inline]
fn counts_as_unstored(a: Arrival) -> bool {
    !matches!(a, Arrival::Duplicate | Arrival::Stray)
}

/// Where one batch is stored and what it has stored so far.
struct Batch {
    layout: Layout,
    /// There is a block to store into (else every frame is dropped for want of one).
    store: bool,
    /// Frames the block's free area holds.
    cap: usize,
    /// Frames the spill blocks taken during the batch hold.
    spill_room: usize,
    /// No free block was left for a spill.
    spill_starved: bool,
    /// Time stamps of the first and last stored frame with one.
    first_time: Option<VdifTime>,
    last_time: Option<VdifTime>,
}

/// One datagram of a received message: message `msg`, bytes `at..at + seg_len` of it, of which the
/// message brought `received` in all (less than its length on the wire when truncated).
#[derive(Clone, Copy)]
struct Datagram {
    msg: usize,
    at: usize,
    seg_len: usize,
    received: usize,
}

/// The segment counts of a batch's messages (GRO).
struct Shape {
    /// The most segments of a message.
    most: usize,
    /// The count of the first message, and whether another message before the last (maybe a short tail)
    /// had a different one.
    first: Option<usize>,
    varied: bool,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            most: 1,
            first: None,
            varied: false,
        }
    }
}

impl Shape {
    /// A message of `segments`; `counted` when it is not the batch's last.
    #[inline]
    fn see(&mut self, segments: usize, counted: bool) {
        self.most = self.most.max(segments);
        if counted {
            self.varied |= *self.first.get_or_insert(segments) != segments;
        }
    }
}

/// Capture state of one stream on its capture thread.
pub(crate) struct StreamCapture {
    pub index: usize,
    pub spec: StreamSpec,
    pub socket: UdpSocket,
    current: Option<Block>,
    frames_per_block: usize,
    data_offset: usize,
    wanted: Option<Box<[bool; 1024]>>,
    psn: Option<SequenceTracker>,
    /// Frames dropped for want of a buffer that count as lost at the stream level (PSN streams, and frames
    /// without a time index in streams without PSN); per-thread ones are in [`ThreadState::unstored`].
    unstored: u64,
    threads: Vec<Option<Box<ThreadState>>>,
    counters: StreamCounters,
    drops: DropCounter,
    epoch_cache: (u8, i64),
    first_time: bool,
    said_rejecting: bool,
    starving_since: Option<u64>,
    failed: bool,
    /// GRO is enabled on the socket (messages get overflow room; `span` adapts).
    gro: bool,
    /// Datagrams per message to make room for in the block (1 unless GRO delivers more).
    span: usize,
    /// Messages still to receive one per call: GRO delivered messages of varying segment counts, and in
    /// a batch every one shorter than `span` leaves a hole that all frames after it in the batch are
    /// moved down over. One message per call lands every frame in its slot.
    one_by_one: u32,
    /// Most segments per message seen while receiving one by one.
    most_seen: usize,
    /// Fresh blocks taken during a batch whose frames did not fit in the current block.
    spill: Vec<Block>,
    /// Messages that carried more than one datagram.
    coalesced: u64,
    /// Messages received, and the datagrams they carried.
    messages: u64,
    datagrams: u64,
    /// Sees every stored frame (forwarding while recording).
    pub(crate) tap: Option<Box<dyn crate::tap::FrameTap>>,
    /// With a tap: the PSNs of the frames kept in the current batch, in order.
    tap_psns: Vec<u64>,
    /// With a tap: frames of the current batch dropped for want of a buffer (PSN, header).
    tap_unstored: Vec<(Option<u64>, [u8; crate::tap::TAP_HEADER_LEN])>,
    /// With datastreams: which recording each frame goes to.
    route: Option<Routing>,
    /// A part of a split stream (then `psn` is None: the part's tracker counts).
    part: Option<Box<Part>>,
}

impl StreamCapture {
    pub fn new(
        index: usize,
        spec: StreamSpec,
        socket: UdpSocket,
        frames_per_block: usize,
        data_offset: usize,
        gro: bool,
    ) -> Self {
        let wanted = if spec.threads.is_empty() {
            None
        } else {
            let mut w = Box::new([false; 1024]);
            for &t in &spec.threads {
                w[usize::from(t)] = true;
            }
            Some(w)
        };
        StreamCapture {
            index,
            psn: spec.psn.then(SequenceTracker::default),
            unstored: 0,
            spec,
            socket,
            current: None,
            frames_per_block,
            data_offset,
            wanted,
            threads: (0..1024).map(|_| None).collect(),
            counters: StreamCounters::default(),
            drops: DropCounter::default(),
            epoch_cache: (u8::MAX, 0),
            first_time: true,
            said_rejecting: false,
            starving_since: None,
            failed: false,
            gro,
            span: 1,
            one_by_one: 0,
            most_seen: 1,
            spill: Vec::with_capacity(4),
            coalesced: 0,
            messages: 0,
            datagrams: 0,
            tap: None,
            tap_psns: Vec::new(),
            tap_unstored: Vec::new(),
            route: None,
            part: None,
        }
    }

    /// Makes this the capture of one part of a split stream.
    pub(crate) fn set_part(&mut self, part: Part) {
        self.psn = None;
        self.part = Some(Box::new(part));
    }

    /// Loss is tracked by PSN (the stream's or the part's tracker), not by VDIF time.
    #[inline]
    fn by_psn(&self) -> bool {
        self.psn.is_some() || self.part.is_some()
    }

    /// A frame numbered `psn` arrived (stored or not): how the stream's or part's tracker took it
    /// (`None`: no PSN, or another part's number, handed on).
    #[inline]
    fn see_psn(&mut self, psn: u64) -> Option<Arrival> {
        if let Some(p) = &mut self.psn {
            return Some(p.observe(psn));
        }
        self.part.as_mut().and_then(|p| p.arrive(psn))
    }

    /// Routes the stream's frames by datastream `rules` (none: one recording).
    pub(crate) fn set_datastreams(&mut self, rules: &[vlbiflow_scan::datastream::Rule]) {
        self.route = (!rules.is_empty()).then(|| Routing::new(rules.to_vec()));
    }

    /// Installs a tap, with room for the PSNs and drop notes of the largest batch (allocated here, once).
    pub(crate) fn set_tap(&mut self, tap: Option<Box<dyn crate::tap::FrameTap>>) {
        if tap.is_some() {
            // As many as the batch's kept frames have room for (they grow, once, if a batch brings more).
            const MOST_PER_BATCH: usize = 1 << 13;
            self.tap_psns = Vec::with_capacity(MOST_PER_BATCH);
            self.tap_unstored = Vec::with_capacity(MOST_PER_BATCH);
        }
        self.tap = tap;
    }

    fn epoch_start(&mut self, epoch: u8) -> i64 {
        if self.epoch_cache.0 != epoch {
            self.epoch_cache = (epoch, epoch_start_unix(epoch));
        }
        self.epoch_cache.1
    }

    /// Sum of loss counters over threads (streams without PSN); lost as in [`lost`](Self::lost).
    fn thread_loss(&self) -> (u64, u64, u64, u64) {
        let mut t = (0, 0, 0, 0);
        for s in self.threads.iter().flatten() {
            let c = s.tracker.counters();
            t.0 += c.lost + s.unstored;
            t.1 += c.out_of_order;
            t.2 += c.duplicates;
            t.3 += c.restarts;
        }
        t
    }

    /// The one place `lost` is computed: frames missing from the sequence (never arrived, counted by the
    /// trackers) plus frames that arrived and were dropped for want of a buffer. With the trackers fed every
    /// dropped frame's number, this is frames sent minus frames stored up to the last frame received, on
    /// every way a recording ends.
    /// Returns (lost, out_of_order, duplicates, restarts).
    fn loss(&self) -> (u64, u64, u64, u64) {
        if self.part.is_some() {
            // The part's PSN figures are merged over the parts (`split::SplitShared::figures`).
            return (self.unstored, 0, 0, 0);
        }
        match &self.psn {
            Some(p) => {
                let c = p.counters();
                (c.lost + self.unstored, c.out_of_order, c.duplicates, c.restarts)
            }
            None => {
                let (lost, ooo, dup, restarts) = self.thread_loss();
                (lost + self.unstored, ooo, dup, restarts)
            }
        }
    }

    fn publish(&mut self, shared: &Shared) {
        let (lost, ooo, dup, restarts) = self.loss();
        self.counters.lost = lost;
        self.counters.out_of_order = ooo;
        self.counters.duplicates = dup;
        self.counters.kernel_drops = self.drops.total();
        if let Some(p) = self.part.as_mut() {
            p.take_handed();
            let s = &shared.streams[self.index];
            s.add(&self.counters, &p.published);
            p.published = self.counters;
            let rx = [self.coalesced, self.messages, self.datagrams];
            for (a, (now, before)) in [&s.coalesced, &s.messages, &s.datagrams]
                .into_iter()
                .zip(rx.iter().zip(p.published_rx))
            {
                a.fetch_add(now - before, Relaxed);
            }
            p.published_rx = rx;
            if let Some(sp) = s.split.as_deref() {
                let slot = &sp.parts[p.index as usize];
                *slot.summary.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.tracker.summary());
                slot.handoff_full.store(p.handoff_full, Relaxed);
            }
            return;
        }
        shared.streams[self.index].publish(&self.counters, restarts);
        let s = &shared.streams[self.index];
        s.coalesced.store(self.coalesced, Relaxed);
        s.messages.store(self.messages, Relaxed);
        s.datagrams.store(self.datagrams, Relaxed);
    }

    fn publish_detail(&self, shared: &Shared) {
        let detail: Vec<ThreadStatus> = self
            .threads
            .iter()
            .flatten()
            .map(|t| {
                let c = t.tracker.counters();
                let mut s = t.status;
                if !self.by_psn() {
                    s.lost = c.lost + t.unstored;
                    s.out_of_order = c.out_of_order;
                    s.duplicates = c.duplicates;
                }
                s.frame_rate = t.indexer.rate();
                s
            })
            .collect();
        let s = &shared.streams[self.index];
        let target = match (&self.part, s.split.as_deref()) {
            (Some(p), Some(sp)) => &sp.parts[p.index as usize].threads,
            _ => &s.threads,
        };
        *target.lock().unwrap_or_else(|e| e.into_inner()) = detail;
        if self.route.is_some() {
            let masks = self
                .threads
                .iter()
                .flatten()
                .map(|t| (t.status.thread, t.recordings))
                .collect();
            *shared.streams[self.index]
                .thread_recordings
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = masks;
        }
    }

    /// Seals the current block (if it holds frames) and queues it for the writers.
    fn seal(&mut self, shared: &Shared) {
        if self.route.is_some() {
            return self.seal_routed(shared);
        }
        let run = self.part.as_ref().and_then(|p| p.block_run);
        self.seal_run(shared, run);
    }

    /// As [`seal`](Self::seal); a split stream's part numbers the block as one of run `run`.
    fn seal_run(&mut self, shared: &Shared, run: Option<crate::split::Pos>) {
        let Some(mut block) = self.current.take() else {
            return;
        };
        if block.frames == 0 {
            shared.free.put(block);
            return;
        }
        block.len = block.frames as usize * self.spec.frame_size as usize;
        block.stream = self.index;
        match self.part.as_mut() {
            Some(p) => {
                let key = p.key(run);
                sequence(shared, self.index, Some((key, block)), None);
            }
            None => dispatch(shared, block),
        }
    }

    /// Makes sure a block with free slots is current; false if the pool is empty.
    fn ensure_block(&mut self, shared: &Shared) -> bool {
        if let Some(b) = &self.current {
            if (b.frames as usize) < self.frames_per_block {
                return true;
            }
            self.seal(shared);
        }
        self.current = self.take_free_block(shared);
        self.current.is_some()
    }

    /// An empty block from the pool, saying once when the pool runs dry and again when it recovers.
    fn take_free_block(&mut self, shared: &Shared) -> Option<Block> {
        match shared.free.take() {
            Some(mut b) => {
                b.reset();
                b.data_offset = self.data_offset;
                if let Some(since) = self.starving_since.take() {
                    shared.event(RecorderEvent::BlocksAvailable {
                        stream: self.spec.label.clone(),
                        dropped: self.counters.dropped_no_buffer - since,
                    });
                }
                Some(b)
            }
            None => {
                if self.starving_since.is_none() {
                    self.starving_since = Some(self.counters.dropped_no_buffer);
                    shared.event(RecorderEvent::NoFreeBlocks {
                        stream: self.spec.label.clone(),
                    });
                }
                None
            }
        }
    }

    /// Receives and processes up to `BATCHES_PER_TURN` batches, returning early once the socket is drained.
    fn service(&mut self, shared: &Shared, rx: &mut Receiver, scratch: &mut [u8]) -> io::Result<()> {
        let slot = self.spec.frame_size as usize;
        let fpb = self.frames_per_block;
        let scratch_len = rx.capacity() * slot;
        let mut turn = 0;
        while turn < BATCHES_PER_TURN * SINGLES_PER_TURN {
            let one = self.one_by_one > 0;
            turn += if one { BATCHES_PER_TURN } else { SINGLES_PER_TURN };
            // A part whose run is complete starts the next one in a fresh block (no copy at the cut).
            if self.part.as_ref().is_some_and(|p| p.run_done() && !p.in_strays)
                && self.current.as_ref().is_some_and(|b| b.frames > 0)
            {
                self.seal(shared);
            }
            let have_block = self.ensure_block(shared);
            // Take the block out while processing so its frames and our counters can be borrowed apart.
            let mut block = if have_block { self.current.take() } else { None };
            let layout = Layout {
                slot,
                prefix: if self.spec.psn { 8 } else { 0 },
                span: self.span,
                gro: self.gro,
            };
            let before = block.as_ref().map_or(0, |b| b.frames as usize);
            let area: &mut [u8] = match block.as_mut() {
                Some(b) => {
                    let used = b.frames as usize;
                    &mut b.frame_area_mut()[used * slot..fpb * slot]
                }
                None => &mut scratch[..scratch_len],
            };
            let plan_len = match self.part.as_deref_mut() {
                Some(p) => {
                    p.before = before;
                    p.cuts.clear();
                    p.stray_cut = None;
                    p.row.clear();
                    // Up to the end of the part's run (and the train that ends it): the next run then
                    // starts a fresh block without a copy.
                    let run_room = p.remaining().div_ceil(self.span) * self.span * slot;
                    if one {
                        area.len()
                    } else {
                        area.len().min(run_room)
                    }
                }
                None => area.len(),
            };
            let requested = rx.plan(plan_len, layout, one);
            let mut got = match rx.recv(&self.socket, area, layout) {
                Ok(r) => r,
                Err(e) => {
                    self.current = block;
                    return Err(e);
                }
            };
            let n = got.msgs.len();
            if let Some(c) = got.drop_counter {
                self.drops.update(c);
            }
            let stored = match block.as_mut() {
                Some(b) => {
                    let used = b.frames as usize;
                    let area = &mut b.frame_area_mut()[used * slot..fpb * slot];
                    self.process_batch(shared, &mut got, area, layout, true)
                }
                None => self.process_batch(shared, &mut got, &mut scratch[..scratch_len], layout, false),
            };
            let cut = self.part.as_ref().is_some_and(|p| !p.cuts.is_empty());
            if let Some(b) = block.take_if(|_| cut) {
                if let Err(b) = self.regroup(shared, b, stored) {
                    block = Some(b);
                }
            }
            if let Some(mut b) = block {
                let here = stored.min(fpb - b.frames as usize);
                b.frames += here as u32;
                self.current = Some(b);
                // Frames past the end of this block went into fresh blocks, in order: seal as they fill.
                let mut spilled = stored - here;
                let mut spill = std::mem::take(&mut self.spill);
                for mut next in spill.drain(..) {
                    let put = spilled.min(fpb);
                    next.frames = put as u32;
                    spilled -= put;
                    self.seal(shared);
                    self.current = Some(next);
                }
                self.spill = spill;
            }
            if let Some(p) = self.part.as_mut() {
                if let Some(r) = p.block_run.filter(|&r| r > p.floor_said) {
                    p.floor_said = r;
                    sequence(shared, self.index, None, Some((p.index, r)));
                }
            }
            if n > 0 {
                self.publish(shared);
            }
            if n < requested {
                return Ok(());
            }
        }
        Ok(())
    }

    /// A split stream's part will seal nothing more: the other parts' blocks need not wait for it.
    fn part_stopped(&self, shared: &Shared) {
        if let Some(p) = &self.part {
            sequence(shared, self.index, None, Some((p.index, crate::split::STOPPED)));
        }
    }

    /// A split stream's batch that brought a later run of the part's own after frames of an earlier one
    /// (the end of a run was lost, or a train was longer than planned): the frames from each such cut
    /// on are copied to fresh blocks, so no block holds two of the part's runs and the blocks sort in
    /// run order. `b` is the block the batch went to (its `frames` not yet counting the batch's
    /// `stored`), followed by the spill blocks. Without a free block for the copy, `b` comes back
    /// untouched (the batch is stored as it came: out of order in the recording, not lost).
    #[cold]
    fn regroup(&mut self, shared: &Shared, mut b: Block, stored: usize) -> Result<(), Block> {
        let slot = self.spec.frame_size as usize;
        let fpb = self.frames_per_block;
        let Some(p) = self.part.as_mut() else {
            return Err(b);
        };
        let used = p.before;
        let cap = fpb - used;
        // Taken out while blocks are taken and sealed below, and given back (their room reused).
        let mut cuts = std::mem::take(&mut p.cuts);
        let mut fresh = std::mem::take(&mut p.fresh);
        let Some(&(c0, _, first_run)) = cuts.first().filter(|c| c.0 < stored) else {
            p.cuts = cuts;
            p.fresh = fresh;
            return Err(b);
        };
        let mut ci = 0;
        let mut ok = true;
        for k in c0..stored {
            let cut = cuts.get(ci).filter(|c| c.0 == k).map(|c| c.1);
            let full = fresh.last().is_some_and(|(f, _)| f.frames as usize == fpb);
            if cut.is_some() || full {
                ci += usize::from(cut.is_some());
                let run = cut.or(fresh.last().map(|f| f.1)).unwrap_or(first_run);
                match self.take_free_block(shared) {
                    Some(f) => fresh.push((f, run)),
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            let src = if k < cap {
                &b.frame_area()[(used + k) * slot..][..slot]
            } else {
                let n = k - cap;
                &self.spill[n / fpb].frame_area()[(n % fpb) * slot..][..slot]
            };
            let (f, _) = fresh.last_mut().expect("a fresh block from the first cut on");
            let at = f.frames as usize * slot;
            f.frame_area_mut()[at..at + slot].copy_from_slice(src);
            f.frames += 1;
        }
        cuts.clear();
        if !ok {
            for (f, _) in fresh.drain(..) {
                shared.free.put(f);
            }
            if let Some(p) = self.part.as_mut() {
                p.cuts = cuts;
                p.fresh = fresh;
            }
            return Err(b);
        }
        shared.streams[self.index]
            .cut_copied
            .fetch_add((stored - c0) as u64, Relaxed);
        // Frames before the first cut stay where they landed: the block, then spill blocks.
        let here = c0.min(cap);
        b.frames += here as u32;
        let mut rest = c0 - here;
        self.current = Some(b);
        let mut spill = std::mem::take(&mut self.spill);
        for mut next in spill.drain(..) {
            if rest == 0 {
                next.reset();
                shared.free.put(next);
                continue;
            }
            let put = rest.min(fpb);
            next.frames = put as u32;
            rest -= put;
            self.seal_run(shared, Some(first_run));
            self.current = Some(next);
        }
        self.spill = spill;
        self.seal_run(shared, Some(first_run));
        // The later runs' blocks, each sealed as one of its run; the last one stays current.
        let last = fresh.pop();
        for (f, run) in fresh.drain(..) {
            self.current = Some(f);
            self.seal_run(shared, Some(run));
        }
        self.current = last.map(|(f, _)| f);
        if let Some(p) = self.part.as_mut() {
            p.cuts = cuts;
            p.fresh = fresh;
        }
        Ok(())
    }

    /// Validates, accounts and stores one received batch. Message `i` is split into its datagrams (one,
    /// or the segments of a GRO super-datagram); each is classified where it landed, then the kept frames
    /// are moved into consecutive slots from the front of `area` (continuing into fresh spill blocks when
    /// the area is full). Returns how many frames were stored (none when `store` is false: no block).
    fn process_batch(
        &mut self,
        shared: &Shared,
        got: &mut Received,
        area: &mut [u8],
        layout: Layout,
        store: bool,
    ) -> usize {
        let slot = self.spec.frame_size as usize;
        let mut batch = Batch {
            layout,
            store,
            cap: if store { area.len() / slot } else { 0 },
            spill_room: 0,
            spill_starved: false,
            first_time: None,
            last_time: None,
        };
        let mut shape = Shape::default();
        let msgs = got.msgs;
        let last = msgs.len().saturating_sub(1);
        got.kept.clear();
        for (i, m) in msgs.iter().enumerate() {
            // A source filter: datagrams from elsewhere are counted and left where they landed (the
            // kept frames are moved over them).
            let from = &self.spec.from;
            if !from.is_empty() && !m.source.is_some_and(|a| from.allows(a.ip())) {
                let seg = m.gro_segment.map_or(m.wire_len, usize::from).max(1);
                self.counters.wrong_source += m.wire_len.div_ceil(seg).max(1) as u64;
                continue;
            }
            // The real datagram length (MSG_TRUNC), so an oversized datagram is recognised and rejected.
            let seg = match m.gro_segment {
                Some(g) => usize::from(g),
                None => m.wire_len.max(1),
            };
            let segments = m.wire_len.div_ceil(seg).max(1);
            shape.see(segments, i < last);
            self.coalesced += u64::from(segments > 1);
            self.messages += 1;
            self.datagrams += segments as u64;
            for j in 0..segments {
                let at = j * seg;
                let d = Datagram {
                    msg: i,
                    at,
                    seg_len: m.wire_len.saturating_sub(at).min(seg),
                    received: m.len,
                };
                self.datagram(shared, got, area, &mut batch, d);
            }
        }
        if layout.gro && !msgs.is_empty() {
            self.adapt_span(layout.prefix, &shape);
        }
        let kept = got.kept.len();
        self.place(got, area, batch.cap);
        if self.tap.is_some() {
            self.tap_batch(area, batch.cap, kept, layout.prefix);
        }
        self.publish_batch(shared, kept, batch.first_time.zip(batch.last_time));
        kept
    }

    /// Classifies one datagram of a batch where it landed, then keeps it (its place goes to `got.kept`),
    /// drops it for want of a buffer, filters it out or rejects it, accounting for it either way.
    #[inline]
    fn datagram(&mut self, shared: &Shared, got: &mut Received, area: &[u8], batch: &mut Batch, d: Datagram) {
        let slot = self.spec.frame_size as usize;
        let prefix = batch.layout.prefix;
        let Datagram {
            msg: i,
            at,
            seg_len,
            received,
        } = d;
        let region = got.regions[i];
        let overflow = got.overflow;
        let frame_len = seg_len.saturating_sub(prefix);
        // Only a datagram of the right size is looked into; its frame must lie in one piece.
        let frame_piece = if frame_len == slot && at + seg_len <= received {
            region
                .piece(i, prefix, slot, at + prefix, slot)
                .filter(|_| prefix == 0 || region.piece(i, prefix, slot, at, 8).is_some())
        } else {
            None
        };
        let frame: &[u8] = match frame_piece {
            Some(Piece::Area(o)) => &area[o..o + slot],
            Some(Piece::Overflow(o)) => &overflow[o..o + slot],
            _ => &[],
        };
        let verdict = if frame_len == slot && frame.is_empty() {
            Verdict::Rejected(if at + seg_len > received {
                "datagram truncated"
            } else {
                "GRO segment size differs from the frame size"
            })
        } else {
            classify(self.spec.kind, slot, frame, frame_len)
        };
        // A configured frame rate is a fact about the stream, never silently overridden: a frame
        // numbered at or beyond it has no valid time at that rate and is rejected.
        let verdict = match (verdict, self.spec.frame_rate) {
            (Verdict::Frame { time, m5b_index, .. }, Some(rate))
                if time.is_some_and(|t| t.frame >= rate) || m5b_index.is_some_and(|(_, f)| f >= rate) =>
            {
                Verdict::Rejected("frame number at or beyond the configured frame-rate")
            }
            (v, _) => v,
        };
        let (thread, time, invalid, m5b_index) = match verdict {
            Verdict::Frame {
                thread,
                time,
                invalid,
                m5b_index,
            } => (thread, time, invalid, m5b_index),
            Verdict::Rejected(reason) => {
                self.reject(shared, seg_len, slot + prefix, reason);
                return;
            }
        };
        // The PSN in front of the frame (read before anything moves).
        let psn = if prefix == 0 {
            0
        } else {
            let bytes: [u8; 8] = match region.piece(i, prefix, slot, at, 8) {
                Some(Piece::Head(h)) => got.psn[h],
                Some(Piece::Area(o)) => area[o..o + 8].try_into().unwrap_or_default(),
                Some(Piece::Overflow(o)) => overflow[o..o + 8].try_into().unwrap_or_default(),
                None => [0; 8],
            };
            psn::read(&bytes)
        };
        if let Some(w) = &self.wanted {
            if !w[usize::from(thread)] {
                self.counters.filtered += 1;
                self.see_psn(psn);
                return;
            }
        }
        // Datastreams: a frame no datastream takes is filtered out as a frame of an unwanted thread.
        let tag = match self.route.as_mut() {
            None => 0,
            Some(r) => {
                let (station, _) = route::station_thread(frame);
                match r.tag(shared, station, thread, got.msgs[i].source) {
                    Some(t) => t,
                    None => {
                        self.counters.filtered += 1;
                        if let Some(p) = &mut self.psn {
                            p.observe(psn);
                        }
                        return;
                    }
                }
            }
        };
        let index = got.kept.len();
        if batch.store && index >= batch.cap + batch.spill_room && !batch.spill_starved {
            // This block is full: continue in a fresh one (sealed after the batch, in order).
            match self.take_free_block(shared) {
                Some(b) => {
                    self.spill.push(b);
                    batch.spill_room += self.frames_per_block;
                }
                None => batch.spill_starved = true,
            }
        }
        if !batch.store || index >= batch.cap + batch.spill_room {
            // Its number is known: the trackers see it (so the sequence goes on) and it is counted
            // lost at once, not only when a later frame is stored (at the end there may be none).
            self.counters.dropped_no_buffer += 1;
            if self.tap.is_some() {
                let mut h = [0u8; crate::tap::TAP_HEADER_LEN];
                let n = frame.len().min(h.len());
                h[..n].copy_from_slice(&frame[..n]);
                self.tap_unstored.push(((prefix != 0).then_some(psn), h));
            }
            self.unstored(shared, psn, thread, time, m5b_index);
            return;
        }
        got.kept.push(match frame_piece {
            Some(Piece::Overflow(o)) => Src::Overflow(o),
            Some(Piece::Area(o)) => Src::Area(o),
            _ => unreachable!("a classified frame has a piece"),
        });
        if self.tap.is_some() {
            self.tap_psns.push(psn);
        }
        if let Some(r) = self.route.as_mut() {
            r.tags.push_back(tag);
        }
        if let Some(p) = &mut self.psn {
            if p.next_expected().is_none() {
                let s = &shared.streams[self.index];
                s.first_psn.store(psn, Relaxed);
                s.has_first_psn.store(true, Relaxed);
            }
            p.observe(psn);
        } else if let Some(p) = self.part.as_deref_mut() {
            let arrival = p.arrive(psn);
            p.kept(index, psn, arrival);
            if !std::mem::replace(&mut p.stored_any, true) {
                // The parts start where they start: the stream's first is the least.
                let s = &shared.streams[self.index];
                s.first_psn.fetch_min(psn, Relaxed);
                s.has_first_psn.store(true, Relaxed);
            }
        }
        self.account(shared, thread, time, invalid, m5b_index, tag);
        if time.is_some() {
            batch.first_time = batch.first_time.or(time);
            batch.last_time = time;
        }
    }

    /// Counts a rejected datagram; the first one of the stream is reported.
    #[inline]
    fn reject(&mut self, shared: &Shared, datagram_len: usize, expected: usize, reason: &str) {
        self.counters.rejected += 1;
        if !self.said_rejecting {
            self.said_rejecting = true;
            shared.event(RecorderEvent::Rejecting {
                stream: self.spec.label.clone(),
                datagram_len,
                expected,
                reason: reason.to_owned(),
            });
        }
    }

    /// After a batch of a GRO socket: room for as many datagrams per message as the batch brought at most
    /// (bounded by what a super-datagram can hold), so steady GSO/GRO traffic lands without a hole between
    /// messages. With a PSN, each of them gets its own pair of iovecs, so at most `MAX_SPLIT`. Messages of
    /// varying counts are received one per call for a while, with room for the most seen.
    fn adapt_span(&mut self, prefix: usize, shape: &Shape) {
        let wire = self.spec.frame_size as usize + prefix;
        let most = (OVERFLOW / wire).max(1);
        let most = if prefix == 0 { most } else { most.min(MAX_SPLIT) };
        if self.one_by_one > 0 {
            self.one_by_one -= 1;
            self.most_seen = self.most_seen.max(shape.most);
            self.span = self.most_seen.clamp(1, most);
        } else {
            self.span = shape.most.clamp(1, most);
            if shape.varied {
                self.one_by_one = SINGLES_AFTER_VARIED;
                self.most_seen = shape.most;
            }
        }
    }

    /// Shows the tap a batch's `kept` stored frames, now in consecutive slots (the area, `cap` of them at
    /// most, then the spill blocks), and the frames it dropped for want of a buffer.
    fn tap_batch(&mut self, area: &[u8], cap: usize, kept: usize, prefix: usize) {
        let slot = self.spec.frame_size as usize;
        let Some(tap) = self.tap.as_mut() else { return };
        let psns = (prefix != 0).then_some(&self.tap_psns[..]);
        let here = kept.min(cap);
        if here > 0 {
            tap.stored(&area[..here * slot], psns.map(|p| &p[..here]));
        }
        let mut done = here;
        for b in self.spill.iter_mut() {
            if done == kept {
                break;
            }
            let k = (kept - done).min(self.frames_per_block);
            tap.stored(&b.frame_area_mut()[..k * slot], psns.map(|p| &p[done..done + k]));
            done += k;
        }
        for (psn, header) in &self.tap_unstored {
            tap.unstored(*psn, header);
        }
        self.tap_psns.clear();
        self.tap_unstored.clear();
    }

    /// Publishes when a batch that stored `kept` frames arrived, and the time stamps of its first and last
    /// frame with a time.
    fn publish_batch(&mut self, shared: &Shared, kept: usize, times: Option<(VdifTime, VdifTime)>) {
        let s = &shared.streams[self.index];
        if kept > 0 {
            let now = (shared.start.elapsed().as_nanos() as u64).max(1);
            let _ = s.first_ns.compare_exchange(0, now, Relaxed, Relaxed);
            s.last_ns.fetch_max(now, Relaxed);
        }
        if let Some((first, last)) = times {
            if self.first_time {
                // The scan starts at the first frame of the first batch, not the last: a burst can fill a
                // whole batch before the recorder looks.
                self.first_time = false;
                if self.part.is_some() {
                    // Each part starts somewhere: the stream's first is the earliest.
                    let t = pack_time(first);
                    let _ = s
                        .first_time
                        .fetch_update(Relaxed, Relaxed, |v| (v == 0 || t < v).then_some(t));
                } else {
                    s.first_time.store(pack_time(first), Relaxed);
                }
            }
            if self.part.is_some() {
                s.last_time.fetch_max(pack_time(last), Relaxed);
            } else {
                s.last_time.store(pack_time(last), Relaxed);
            }
        }
    }

    /// Moves the kept frames of a batch to consecutive slots (see [`place_frames`]).
    fn place(&mut self, got: &Received, area: &mut [u8], cap: usize) {
        let slot = self.spec.frame_size as usize;
        place_frames(
            got.kept,
            area,
            got.overflow,
            slot,
            cap,
            &mut self.spill,
            self.frames_per_block,
        );
    }

    /// Counts one stored frame and feeds its thread's loss state.
    #[inline]
    fn account(
        &mut self,
        shared: &Shared,
        thread: u16,
        time: Option<VdifTime>,
        invalid: bool,
        m5b_index: Option<(i64, u32)>,
        recording: u8,
    ) {
        let slot = u64::from(self.spec.frame_size);
        self.counters.packets += 1;
        self.counters.bytes += slot;
        self.counters.invalid_frames += u64::from(invalid);
        let th = self.thread_state(thread);
        th.status.packets += 1;
        th.status.bytes += slot;
        th.status.invalid_frames += u64::from(invalid);
        th.status.last_time = time;
        th.recordings |= 1u64 << (recording & 63);
        self.track_time(shared, thread, time, m5b_index);
    }

    /// The loss state of `thread`, created on its first frame.
    #[inline]
    fn thread_state(&mut self, thread: u16) -> &mut ThreadState {
        let rate = self.spec.frame_rate;
        self.threads[usize::from(thread)].get_or_insert_with(|| {
            Box::new(ThreadState {
                status: ThreadStatus {
                    thread,
                    frame_rate: rate,
                    ..Default::default()
                },
                indexer: FrameIndexer::new(rate),
                tracker: SequenceTracker::default(),
                unstored: 0,
                recordings: 0,
            })
        })
    }

    /// Feeds a frame's time stamp to its thread's indexer and (streams without PSN) tracker; returns how the
    /// tracker took it (None: no time index, or the stream is tracked by PSN).
    #[inline]
    fn track_time(
        &mut self,
        shared: &Shared,
        thread: u16,
        time: Option<VdifTime>,
        m5b_index: Option<(i64, u32)>,
    ) -> Option<Arrival> {
        let seq = match (time, m5b_index) {
            (Some(t), _) => Some((self.epoch_start(t.epoch) + i64::from(t.seconds), t.frame)),
            (None, idx) => idx,
        };
        let (second, frame) = seq?;
        let track = !self.by_psn();
        let index = self.index;
        let th = self.thread_state(thread);
        // A frame number beyond a configured rate never gets here (rejected in `process_batch`).
        let (ix, learned) = th.indexer.index(second, frame)?;
        let arrival = track.then(|| th.tracker.observe(ix));
        if let Some(rate) = learned {
            // A rate learned from frame numbers can only be low (the last frames of a second
            // were lost), never high: the stream's rate is the highest any thread taught.
            let before = shared.streams[index].frame_rate.fetch_max(rate, Relaxed);
            // A split stream's parts each learn the rate: said when it is news for the stream.
            if self.part.is_none() || rate > before {
                shared.event(RecorderEvent::RateLearned {
                    stream: self.spec.label.clone(),
                    thread,
                    rate,
                });
            }
        }
        arrival
    }

    /// Accounts a frame that arrived but was dropped for want of a free block: its sequence number (PSN or
    /// time index) goes to the trackers so the sequence continues, and it counts as lost now.
    #[cold]
    fn unstored(
        &mut self,
        shared: &Shared,
        psn: u64,
        thread: u16,
        time: Option<VdifTime>,
        m5b_index: Option<(i64, u32)>,
    ) {
        if self.by_psn() {
            // Another part's number is handed on (its owner takes it as arrived): not stored here.
            let a = self.see_psn(psn);
            self.unstored += u64::from(a.is_none_or(counts_as_unstored));
            // The time index still learns the rate and follows the thread.
            self.track_time(shared, thread, time, m5b_index);
            return;
        }
        match self.track_time(shared, thread, time, m5b_index) {
            Some(a) => {
                let th = self.thread_state(thread);
                th.unstored += u64::from(counts_as_unstored(a));
            }
            // No time index (a Mark5B header without a valid BCD time): still a frame not stored.
            None => self.unstored += 1,
        }
    }
}

/// Numbers a sealed block and queues it for the writers.
fn dispatch(shared: &Shared, mut block: Block) {
    block.number = shared.next_block.fetch_add(1, Relaxed);
    // Once per block: which stream's frames block `number` holds (for the metadata).
    shared.streams[block.stream]
        .blocks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(u64::from(block.number));
    shared.in_flight.fetch_add(1, AcqRel);
    let _ = shared.queue_tx.send(block);
}

/// A split stream's part sealed a block (`block`) or moved its floor (`floor`: part, run): the blocks
/// whose turn has come are numbered and queued, in run order (under the stream's sequencer lock, once
/// per block or run, never per frame).
fn sequence(
    shared: &Shared,
    stream: usize,
    block: Option<(crate::split::Key, Block)>,
    floor: Option<(u32, crate::split::Pos)>,
) {
    let Some(sp) = shared.streams[stream].split.as_deref() else {
        if let Some((_, b)) = block {
            dispatch(shared, b);
        }
        return;
    };
    let mut seq = sp.sequencer.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((key, b)) = block {
        seq.push(key, b);
    }
    if let Some((part, run)) = floor {
        seq.floor(part, run);
    }
    let (forced, waiting) = (seq.forced, seq.limit());
    seq.release(|b| dispatch(shared, b));
    if forced == 0 && seq.forced > 0 {
        shared.event(RecorderEvent::SplitUnordered {
            stream: shared.config.streams[stream].label.clone(),
            waiting,
        });
    }
}

/// Runs one capture thread over `streams` until the recorder stops, then seals every partial block.
pub(crate) fn run_capture(shared: Arc<Shared>, mut streams: Vec<StreamCapture>) {
    let result = capture_loop(&shared, &mut streams);
    if let Err(e) = result {
        for s in &streams {
            shared.event(RecorderEvent::CaptureFailed {
                stream: s.spec.label.clone(),
                error: format!("epoll: {e}"),
            });
        }
    }
    for s in &mut streams {
        if s.route.is_some() {
            s.flush_routed(&shared);
        } else {
            s.seal(&shared);
        }
        s.publish(&shared);
        s.publish_detail(&shared);
        s.part_stopped(&shared);
        if let Some(p) = s.part.take() {
            if let Some(sp) = shared.streams[s.index].split.as_deref() {
                let (tracker, inbox) = p.into_end();
                sp.part_ended(tracker, inbox);
            }
        }
    }
    shared.captures_running.fetch_sub(1, AcqRel);
}

fn capture_loop(shared: &Shared, streams: &mut [StreamCapture]) -> io::Result<()> {
    let mut epoll = Epoll::new(streams.iter().map(|s| s.socket.as_fd()))?;
    let mut rx = Receiver::new(shared.config.batch, streams.iter().any(|s| s.gro)).with_source(
        streams
            .iter()
            .any(|s| !s.spec.from.is_empty() || s.route.as_ref().is_some_and(|r| r.by_sender)),
    );
    let max_slot = streams
        .iter()
        .map(|s| s.spec.frame_size as usize)
        .max()
        .unwrap_or(0);
    let mut scratch = vec![0u8; rx.capacity() * max_slot];
    let mut ready = Vec::with_capacity(streams.len());
    let mut last_detail = Instant::now();
    while !shared.stopping() {
        epoll.wait(Duration::from_millis(100), &mut ready)?;
        for &i in &ready {
            let s = &mut streams[i];
            if let Err(e) = s.service(shared, &mut rx, &mut scratch) {
                s.failed = true;
                shared.event(RecorderEvent::CaptureFailed {
                    stream: s.spec.label.clone(),
                    error: e.to_string(),
                });
                let _ = epoll.remove(&s.socket);
                if s.part.is_some() {
                    s.seal(shared);
                    s.part_stopped(shared);
                }
            }
        }
        if last_detail.elapsed() >= DETAIL_INTERVAL {
            last_detail = Instant::now();
            for s in streams.iter() {
                s.publish_detail(shared);
            }
        }
    }
    Ok(())
}
