//! A capture thread's share of a split stream (see [`crate::split`]): its loss tracker and handoff
//! queues, the run its current block holds, and where a batch brings a later run of its own.

use crossbeam_channel::{Receiver, Sender};
use vlbiflow_scan::StreamCounters;
use vlbiflow_seq::split::{PartTracker, Runs};
use vlbiflow_seq::Arrival;

use crate::pool::Block;
use crate::split::{Key, Pos};

pub(crate) struct Part {
    pub index: u32,
    pub runs: Runs,
    pub tracker: PartTracker,
    inbox: Receiver<u64>,
    outboxes: Vec<Sender<u64>>,
    /// Numbers a full handoff queue refused (their owner counts those frames lost).
    pub handoff_full: u64,
    /// The run of the current block's frames (the part's latest run; None before its first frame).
    pub block_run: Option<Pos>,
    /// The sender's restarts of its numbers this part has seen (the first element of its places).
    epoch: u64,
    /// The floor last told the sequencer.
    pub floor_said: Pos,
    /// Blocks sealed.
    seq: u64,
    /// Frames in the current block before this batch.
    pub before: usize,
    /// This batch: kept frames where a later run of the part's starts, that run, and the run before.
    pub cuts: Vec<(usize, Pos, Pos)>,
    /// The latest number of the part's own runs stored, in sequence (not late, stray or duplicate).
    last_own: Option<u64>,
    /// The latest own numbers were strays (a row the tracker may restart on), and the cut in this
    /// batch where their block starts.
    pub in_strays: bool,
    pub stray_cut: Option<usize>,
    /// The row of strays began a block (so a restart on it can take the block's place), and the run
    /// whose block a row last began (one per run).
    row_owns_block: bool,
    stray_cut_run: Option<Pos>,
    /// This batch: where the row of strays moves to another run (kept frame, run), so that a restart
    /// on it cuts the row's blocks by run as any other.
    pub row: Vec<(usize, u64)>,
    /// A frame was stored (the stream's first PSN is the least of the parts' first).
    pub stored_any: bool,
    /// What was last added to the stream's counters, and receive counts (coalesced, messages, datagrams).
    pub published: StreamCounters,
    pub published_rx: [u64; 3],
    /// Fresh blocks taken while regrouping a batch, with their runs (reused).
    pub fresh: Vec<(Block, Pos)>,
}

impl Part {
    pub fn new(runs: Runs, index: u32, inbox: Receiver<u64>, outboxes: Vec<Sender<u64>>) -> Self {
        Part {
            index,
            runs,
            tracker: PartTracker::new(runs, index),
            inbox,
            outboxes,
            handoff_full: 0,
            block_run: None,
            epoch: 0,
            floor_said: (0, 0),
            seq: 0,
            before: 0,
            cuts: Vec::with_capacity(8),
            last_own: None,
            in_strays: false,
            stray_cut: None,
            row_owns_block: false,
            stray_cut_run: None,
            row: Vec::with_capacity(vlbiflow_seq::RESTART_AFTER),
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
                // then counts that frame lost, and the summary says how many.
                if self.outboxes[owner as usize].try_send(n).is_err() {
                    self.handoff_full += 1;
                }
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

    /// Kept frame `index` of the batch has number `n`, which this part's tracker took as `arrival`
    /// (`None`: another part's number). A later run of the part's own after frames of an earlier one is
    /// a cut (a block never holds two of the part's runs). Late and duplicate numbers stay where they
    /// came and move nothing; so does the tail of a train from the next part's run, behind the run it
    /// followed. A row of strays starts a block of its own: if the tracker restarts on it (the sender
    /// restarted its numbers) that block is the first of a new sequence of places, sorted after every
    /// block of the old one; if not, the old sequence goes on in the next block.
    #[inline]
    pub fn kept(&mut self, index: usize, n: u64, arrival: Option<Arrival>) {
        let run = n >> self.runs.shift();
        let Some(arrival) = arrival else {
            // Only foreign frames so far: the block sorts just before the run they belong to.
            self.block_run.get_or_insert((self.epoch, run.saturating_sub(1)));
            return;
        };
        match arrival {
            Arrival::Stray => {
                if !std::mem::replace(&mut self.in_strays, true) {
                    // At most one row per run gets a block of its own: strays that keep coming
                    // (junk on the port) then cost at most two blocks per run, not two per stray.
                    if self.block_run.is_some() && self.stray_cut_run == self.block_run {
                        self.stray_cut = None;
                        self.row_owns_block = index == 0 && self.before == 0;
                    } else {
                        self.stray_cut = self.cut(index, self.block_run);
                        self.row_owns_block = true;
                        self.stray_cut_run = self.block_run;
                    }
                    self.row.clear();
                    self.row.push((index, run));
                } else if self.row.last().is_some_and(|&(_, r)| r != run)
                    && self.row.len() < self.row.capacity()
                {
                    self.row.push((index, run));
                }
                return;
            }
            Arrival::Restart => {
                self.epoch += 1;
                self.in_strays = false;
                self.last_own = Some(n);
                // The new sequence starts at the row's first number.
                let first = self.tracker.first().unwrap_or(n);
                let at = (self.epoch, first >> self.runs.shift());
                if !std::mem::take(&mut self.row_owns_block) {
                    // The row shares its block with the old sequence (strays stay where they came,
                    // as in one socket's recording): the new sequence starts a block here.
                    let at = (self.epoch, run);
                    self.cut(index, Some(at));
                    self.block_run = Some(at);
                    self.stray_cut = None;
                    return;
                }
                // The row's block (cut in this batch, or begun by it earlier) takes the new place.
                if let Some(c) = self.stray_cut.take() {
                    self.cuts[c].1 = at;
                }
                self.block_run = Some(at);
                // The row's later runs (in this batch), and this number's run, start blocks of theirs.
                let row = std::mem::take(&mut self.row);
                for &(i, r) in row.iter().skip(1).chain(std::iter::once(&(index, run))) {
                    let at = (self.epoch, r);
                    if self.block_run.is_some_and(|b| at > b) {
                        self.cut(i, Some(at));
                        self.block_run = Some(at);
                    }
                }
                self.row = row;
                return;
            }
            _ => {
                if std::mem::take(&mut self.in_strays) && std::mem::take(&mut self.row_owns_block) {
                    // The strays were not a new sequence: the old one goes on in a block of its own.
                    self.stray_cut = None;
                    self.cut(index, self.block_run);
                }
            }
        }
        if matches!(arrival, Arrival::Late | Arrival::Duplicate) {
            return;
        }
        self.last_own = Some(n);
        let at = (self.epoch, run);
        match self.block_run {
            Some(r) if at > r => {
                self.cut(index, Some(at));
                self.block_run = Some(at);
            }
            None => self.block_run = Some(at),
            _ => {}
        }
    }

    /// A block starts at kept frame `index` (unless nothing precedes it), at place `at` (None: the
    /// current block's). One cut per frame: a second at the same frame moves the first's place.
    /// Returns the cut's index in `cuts`.
    fn cut(&mut self, index: usize, at: Option<Pos>) -> Option<usize> {
        if index == 0 && self.before == 0 {
            return None;
        }
        let old = self.block_run.unwrap_or((self.epoch, 0));
        let at = at.unwrap_or(old);
        match self.cuts.last_mut() {
            Some(last) if last.0 == index => last.1 = last.1.max(at),
            _ => self.cuts.push((index, at, old)),
        }
        Some(self.cuts.len() - 1)
    }

    /// Frames of the part's current run still to come (a whole run at its end): a batch planned for
    /// them ends at the run's end, so the next run starts a block without a copy.
    pub fn remaining(&self) -> usize {
        let len = self.runs.run_len();
        match self.last_own {
            Some(l) => (len - l.wrapping_add(1) % len) as usize,
            None => len as usize,
        }
    }

    /// The latest number stored is the last of its run.
    pub fn run_done(&self) -> bool {
        self.last_own
            .is_some_and(|l| l.wrapping_add(1) % self.runs.run_len() == 0)
    }

    /// The key of a block of run `run` sealed now.
    pub fn key(&mut self, run: Option<Pos>) -> Key {
        self.seq += 1;
        (run.unwrap_or((self.epoch, 0)), self.index, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Part 0 of 2 with runs of 4 (it owns 0..4, 8..12, ...), fed `numbers` as one batch.
    fn feed(numbers: &[u64]) -> Part {
        let runs = Runs::new(2, 4).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(64);
        let mut p = Part::new(runs, 0, rx, vec![tx.clone(), tx]);
        for (i, &n) in numbers.iter().enumerate() {
            let a = p.arrive(n);
            p.kept(i, n, a);
        }
        p
    }

    #[test]
    fn a_later_run_is_a_cut_and_a_train_tail_is_not() {
        // Run 0, the tail of its train in part 1's run 1, then run 2 (after a lost end would be: 8).
        let p = feed(&[0, 1, 2, 3, 4, 5, 8, 9]);
        assert_eq!(p.cuts, [(6, (0, 2), (0, 0))]);
        assert_eq!(p.block_run, Some((0, 2)));
    }

    #[test]
    fn a_lone_stray_gets_a_block_and_the_sequence_goes_on() {
        let p = feed(&[0, 1, 2, 3, 1 << 40, 8, 9]);
        assert_eq!(p.cuts, [(4, (0, 0), (0, 0)), (5, (0, 2), (0, 0))]);
        assert_eq!(p.block_run, Some((0, 2)));
    }

    #[test]
    fn only_one_row_of_strays_per_run_gets_a_block() {
        // Junk between the frames of run 0: the first stray is cut out, later ones stay in place.
        let j = 1u64 << 40;
        let p = feed(&[0, j, 1, j + 1000, 2, j + 2000, 3, 8]);
        assert_eq!(
            p.cuts,
            [(1, (0, 0), (0, 0)), (2, (0, 0), (0, 0)), (7, (0, 2), (0, 0))]
        );
    }

    #[test]
    fn a_restart_places_its_row_after_the_old_sequence() {
        // Sixteen of part 0's numbers from 2^40 on (runs 2^38, 2^38 + 2, ...): the tracker restarts on
        // the sixteenth, and the row's block takes the new sequence's first run.
        let row: Vec<u64> = (0..32u64).filter(|k| k % 8 < 4).map(|k| (1 << 40) + k).collect();
        let mut numbers = vec![0, 1, 2, 3];
        numbers.extend(&row);
        numbers.push((1 << 40) + 32);
        let p = feed(&numbers);
        // The row and what follows, cut by run as any sequence: 2^38, +2, +4, +6, +8.
        let r = 1u64 << 38;
        assert_eq!(
            p.cuts,
            [
                (4, (1, r), (0, 0)),
                (8, (1, r + 2), (1, r)),
                (12, (1, r + 4), (1, r + 2)),
                (16, (1, r + 6), (1, r + 4)),
                (20, (1, r + 8), (1, r + 6)),
            ]
        );
        assert_eq!(p.block_run, Some((1, r + 8)));
    }
}
