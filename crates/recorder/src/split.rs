//! One stream received on several sockets and capture threads (`split=N`): the kernel steers runs of
//! PSNs round the sockets (`vlbiflow_udp::steer`), each capture thread fills blocks with its own runs
//! (a block never holds two of its runs), and a per-stream [`Sequencer`] numbers the sealed blocks in
//! run order, so the recording reads back in PSN order as if one thread had received it. Loss is
//! accounted per part with [`vlbiflow_seq::split`] and merged once every part has stopped.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crossbeam_channel::Receiver;
use vlbiflow_seq::split::{self, PartSummary, PartTracker, Runs};
use vlbiflow_seq::SequenceCounters;

use crate::pool::Block;
use crate::status::ThreadStatus;

/// Frames per message a train (GSO/GRO) brings at most, as the run length leaves room for behind a run.
pub const TRAIN_ROOM: usize = 64;

/// The run length for blocks of `frames_per_block` frames: the largest power of two that leaves room
/// for a train's tail from the next run behind a whole run (at least 1, at most the steering's longest).
pub fn run_len(frames_per_block: usize) -> u64 {
    let room = frames_per_block.saturating_sub(TRAIN_ROOM).max(1);
    (1u64 << (usize::BITS - 1 - room.leading_zeros())).min(vlbiflow_seq::split::MAX_RUN_LEN)
}

/// A place in a split stream: the sequence (0, and one more after each restart of the sender's numbers,
/// as the part saw it) and the run in it.
pub type Pos = (u64, u64);

/// The floor of a part that has stopped: nothing more comes from it.
pub const STOPPED: Pos = (u64::MAX, u64::MAX);

/// Where a sealed block goes in the stream: the place of the run its own frames belong to, the part,
/// and the part's count of blocks sealed (a run that overflows a block continues in the next).
pub type Key = (Pos, u32, u64);

/// Numbers a split stream's sealed blocks in run order. Each part says the lowest run it may still
/// seal a block of (its floor; its blocks' runs never go down); a block is released once every other
/// part's floor has reached its run. A part that receives nothing holds the others' blocks back, so at
/// most `limit` blocks wait: beyond that the lowest is released anyway (a later block of a lower run
/// then reads back out of order, nothing is lost).
pub struct Sequencer {
    floors: Vec<Pos>,
    pending: BTreeMap<Key, Block>,
    limit: usize,
    /// Blocks released early by the limit.
    pub forced: u64,
}

impl Sequencer {
    pub fn new(parts: usize, limit: usize) -> Self {
        Sequencer {
            floors: vec![(0, 0); parts],
            pending: BTreeMap::new(),
            limit: limit.max(1),
            forced: 0,
        }
    }

    /// Part `part` will seal no block of a run before `run` ([`STOPPED`]: nothing more).
    pub fn floor(&mut self, part: u32, run: Pos) {
        let f = &mut self.floors[part as usize];
        *f = (*f).max(run);
    }

    /// A sealed block waits for its turn.
    pub fn push(&mut self, key: Key, block: Block) {
        self.pending.insert(key, block);
    }

    /// Blocks that wait at most for a silent part.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Blocks waiting.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Hands `out` every block whose turn has come, in order.
    pub fn release(&mut self, mut out: impl FnMut(Block)) {
        let mut waiting = self.pending.len();
        while let Some(entry) = self.pending.first_entry() {
            let (run, part, _) = *entry.key();
            let others_past = self
                .floors
                .iter()
                .enumerate()
                .all(|(p, &f)| p == part as usize || f >= run);
            if !others_past {
                if waiting <= self.limit {
                    break;
                }
                self.forced += 1;
            }
            waiting -= 1;
            out(entry.remove());
        }
    }
}

/// What a split stream's parts share: the sequencer, each part's published figures, and what the last
/// part to stop needs to merge them.
pub struct SplitShared {
    pub runs: Runs,
    pub sequencer: Mutex<Sequencer>,
    pub parts: Vec<PartShared>,
    /// Trackers of the parts that stopped, with their inboxes (numbers other parts handed on).
    pub ended: Mutex<Vec<(PartTracker, Receiver<u64>)>>,
    /// The merged figures, once every part has stopped.
    pub merged: Mutex<Option<SequenceCounters>>,
}

/// One part's figures, published once per batch (summary) and a few times a second (threads).
#[derive(Default)]
pub struct PartShared {
    pub summary: Mutex<Option<PartSummary>>,
    pub threads: Mutex<Vec<ThreadStatus>>,
    /// Numbers the part could not hand on (a full queue): counted lost by their owner.
    pub handoff_full: std::sync::atomic::AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SplitShared {
    pub fn new(runs: Runs, limit: usize) -> Self {
        let n = runs.parts() as usize;
        SplitShared {
            runs,
            sequencer: Mutex::new(Sequencer::new(n, limit)),
            parts: (0..n).map(|_| PartShared::default()).collect(),
            ended: Mutex::new(Vec::with_capacity(n)),
            merged: Mutex::new(None),
        }
    }

    /// The stream's PSN figures: merged once every part stopped, else live over the parts' latest.
    pub fn figures(&self) -> SequenceCounters {
        if let Some(m) = *lock(&self.merged) {
            return m;
        }
        let parts: Vec<PartSummary> = self.parts.iter().filter_map(|p| *lock(&p.summary)).collect();
        split::live(&parts)
    }

    /// Numbers that arrived at another run's part, so far.
    pub fn handed_on(&self) -> u64 {
        self.parts
            .iter()
            .filter_map(|p| *lock(&p.summary))
            .map(|s| s.foreign)
            .sum()
    }

    /// Numbers no part could hand on, so far.
    pub fn handoff_full(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| p.handoff_full.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// A part stopped: its tracker and inbox are kept; the last part to stop takes every number still
    /// handed on, finishes every tracker and merges.
    pub fn part_ended(&self, tracker: PartTracker, inbox: Receiver<u64>) {
        let mut ended = lock(&self.ended);
        ended.push((tracker, inbox));
        if ended.len() < self.parts.len() {
            return;
        }
        let mut summaries = Vec::with_capacity(ended.len());
        for (t, inbox) in ended.iter_mut() {
            while let Ok(n) = inbox.try_recv() {
                t.handed(n);
            }
            t.finish();
            let s = t.summary();
            *lock(&self.parts[t.part() as usize].summary) = Some(s);
            summaries.push(s);
        }
        *lock(&self.merged) = Some(split::merge(&summaries));
    }

    /// The parts' per-thread detail as one: counts added, the latest time and rate kept.
    pub fn threads(&self) -> Vec<ThreadStatus> {
        let mut all: BTreeMap<u16, ThreadStatus> = BTreeMap::new();
        for p in &self.parts {
            for t in lock(&p.threads).iter() {
                let e = all.entry(t.thread).or_insert(ThreadStatus {
                    thread: t.thread,
                    ..Default::default()
                });
                e.packets += t.packets;
                e.bytes += t.bytes;
                e.invalid_frames += t.invalid_frames;
                e.frame_rate = e.frame_rate.max(t.frame_rate);
                e.last_time = e.last_time.max(t.last_time);
            }
        }
        all.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(tag: u32) -> Block {
        let mut b = Block::new(64, 0, 0);
        b.number = tag;
        b
    }

    #[test]
    fn run_length_leaves_room_for_a_train() {
        assert_eq!(run_len(1000), 512);
        assert_eq!(run_len(1088), 1024);
        assert_eq!(run_len(1087), 512);
        assert_eq!(run_len(10), 1);
        assert_eq!(run_len(1 << 30), 1 << 24);
    }

    #[test]
    fn blocks_come_out_in_run_order_once_every_part_has_passed() {
        let mut s = Sequencer::new(2, 100);
        let mut out = Vec::new();
        // Part 1 is ahead: its run 1 waits for part 0 to leave run 0.
        s.floor(1, (0, 1));
        s.push(((0, 1), 1, 0), block(1));
        s.release(|b| out.push(b.number));
        assert!(out.is_empty());
        s.floor(0, (0, 0));
        s.push(((0, 0), 0, 0), block(0));
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0]);
        s.floor(0, (0, 2));
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0, 1]);
        // Two blocks of one run (it overflowed one) keep their order.
        s.push(((0, 2), 0, 2), block(3));
        s.push(((0, 2), 0, 1), block(2));
        s.floor(1, (0, 3));
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(s.forced, 0);
    }

    #[test]
    fn after_a_restart_blocks_wait_for_every_part_to_see_it() {
        let mut s = Sequencer::new(2, 100);
        let mut out = Vec::new();
        s.floor(0, (0, 1000));
        s.floor(1, (0, 1001));
        // Part 0 saw the sender restart: its run 0 of the new sequence comes after every old run.
        s.push(((0, 1000), 0, 1), block(0));
        s.floor(0, (1, 0));
        s.push(((1, 0), 0, 2), block(2));
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0]);
        s.push(((0, 1001), 1, 1), block(1));
        s.floor(1, (1, 1));
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0, 1, 2]);
    }

    #[test]
    fn a_silent_part_holds_at_most_the_limit() {
        let mut s = Sequencer::new(2, 2);
        let mut out = Vec::new();
        for r in 0..4u64 {
            s.floor(0, (0, 2 * r));
            s.push(((0, 2 * r), 0, r), block(r as u32));
            s.release(|b| out.push(b.number));
        }
        // Run 0 goes at once (nothing comes before it); run 2 only when a third block waits.
        assert_eq!(out, [0, 1]);
        assert_eq!((s.waiting(), s.forced), (2, 1));
        s.floor(1, STOPPED);
        s.release(|b| out.push(b.number));
        assert_eq!(out, [0, 1, 2, 3]);
    }
}
