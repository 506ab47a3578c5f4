//! A capture thread's share of a split stream (see [`crate::split`]): its loss tracker and handoff
//! queues, the run its current block holds, and where a batch brings a later run of its own.

use crossbeam_channel::{Receiver, Sender};
use vlbiflow_scan::StreamCounters;
use vlbiflow_seq::split::{PartTracker, Runs};
use vlbiflow_seq::Arrival;

use crate::pool::Block;
use crate::split::Key;

pub(crate) struct Part {
    pub index: u32,
    pub runs: Runs,
    pub tracker: PartTracker,
    inbox: Receiver<u64>,
    outboxes: Vec<Sender<u64>>,
    /// The run of the current block's frames (the part's latest run; None before its first frame).
    pub block_run: Option<u64>,
    /// The floor last told the sequencer.
    pub floor_said: u64,
    /// Blocks sealed.
    seq: u64,
    /// Frames in the current block before this batch.
    pub before: usize,
    /// This batch: kept frames where a later run of the part's starts, that run, and the run before.
    pub cuts: Vec<(usize, u64, u64)>,
    /// The current block's run when the batch started.
    pub start_run: Option<u64>,
    /// The highest number of the part's own runs stored.
    last_own: Option<u64>,
    /// A frame was stored (the stream's first PSN is the least of the parts' first).
    pub stored_any: bool,
    /// What was last added to the stream's counters, and receive counts (coalesced, messages, datagrams).
    pub published: StreamCounters,
    pub published_rx: [u64; 3],
    /// Fresh blocks taken while regrouping a batch, with their runs (reused).
    pub fresh: Vec<(Block, u64)>,
}

impl Part {
    pub fn new(runs: Runs, index: u32, inbox: Receiver<u64>, outboxes: Vec<Sender<u64>>) -> Self {
        Part {
            index,
            runs,
            tracker: PartTracker::new(runs, index),
            inbox,
            outboxes,
            block_run: None,
            floor_said: 0,
            seq: 0,
            before: 0,
            cuts: Vec::with_capacity(8),
            start_run: None,
            last_own: None,
            stored_any: false,
            published: StreamCounters::default(),
            published_rx: [0; 3],
            fresh: Vec::with_capacity(8),
        }
    }

    /// Number `n` arrived here: how this part's tracker took it, or `None` when it belongs to another
    /// part's run (handed on to that part).
    #[inline]
    pub fn arrive(&mut self, n: u64) -> Option<Arrival> {
        match self.tracker.arrive(n) {
            Ok(a) => Some(a),
            Err(owner) => {
                // A full queue (its owner stalled for 65,536 of them) loses the number: the owner
                // then counts that frame lost.
                let _ = self.outboxes[owner as usize].try_send(n);
                None
            }
        }
    }

    /// Takes the numbers other parts handed here.
    pub fn take_handed(&mut self) {
        while let Ok(n) = self.inbox.try_recv() {
            self.tracker.handed(n);
        }
    }

    /// The tracker and inbox, once the part has stopped.
    pub fn into_end(self) -> (PartTracker, Receiver<u64>) {
        (self.tracker, self.inbox)
    }

    /// Kept frame `index` of the batch has number `n`: a later run of the part's own after frames of
    /// an earlier one is a cut (a block never holds two of the part's runs). The tail of a train from
    /// the next part's run stays behind the run it followed.
    #[inline]
    pub fn kept(&mut self, index: usize, n: u64) {
        let run = n >> self.runs.shift();
        if self.runs.owner(n) != self.index {
            // Only foreign frames so far: the block sorts just before the run they belong to.
            self.block_run.get_or_insert(run.saturating_sub(1));
            return;
        }
        self.last_own = Some(self.last_own.map_or(n, |l| l.max(n)));
        match self.block_run {
            Some(r) if run > r => {
                if index > 0 || self.before > 0 {
                    self.cuts.push((index, run, r));
                }
                self.block_run = Some(run);
            }
            None => self.block_run = Some(run),
            _ => {}
        }
    }

    /// Frames of the part's current run still to come (a whole run at its end): a batch planned for
    /// them ends at the run's end, so the next run starts a block without a copy.
    pub fn remaining(&self) -> usize {
        let len = self.runs.run_len();
        match self.last_own {
            Some(l) => (len - (l + 1) % len) as usize,
            None => len as usize,
        }
    }

    /// The latest number stored is the last of its run.
    pub fn run_done(&self) -> bool {
        self.last_own.is_some_and(|l| (l + 1) % self.runs.run_len() == 0)
    }

    /// The key of a block of run `run` sealed now.
    pub fn key(&mut self, run: Option<u64>) -> Key {
        self.seq += 1;
        (run.unwrap_or(0), self.index, self.seq)
    }
}
