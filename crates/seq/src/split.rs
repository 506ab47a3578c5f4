//! One numbered sequence received in parts: a stream steered over several receiving sockets (and
//! threads) by runs of its packet sequence numbers, so that each part sees whole runs in order.
//!
//! [`Runs`] is the steering rule: the sequence is cut into runs of `run_len` numbers and run `r` goes to
//! part `r % parts` (both powers of two, so a kernel program reading the number's low 32 bits steers the
//! same way: see `vlbiflow_udp::steer`). Each part keeps a [`PartTracker`]: the workspace's
//! [`SequenceTracker`] over the part's own runs, renumbered so they follow each other (its gaps are then
//! frames of its runs that did not arrive, never the other parts' runs).
//!
//! A sender that coalesces datagrams (UDP GSO, or GRO on the receiving host) delivers a train of them as
//! one, steered by its first number; the train's tail may belong to the next run, so it arrives at the
//! wrong part. [`PartTracker::arrived`] says so, and the receiver hands that number to its owner, which
//! accounts it with [`PartTracker::handed`]; its tracker then sees every number of its runs that arrived
//! anywhere. A handed number the owner has already passed fills a gap like a late datagram, but was not
//! reordered on the wire, so it is not counted out of order.
//!
//! [`merge`] gives the stream's counters from the parts' [`PartSummary`]s once every part has stopped,
//! every handed number is accounted and every part is [finished](PartTracker::finish): the parts'
//! figures summed, plus the numbers of each part's runs before its first and after its last number
//! that no part received (a single tracker counts those as gaps of the one sequence).
//! After a sender restarts its numbers each part's tracker restarts on its own runs; the merge takes the
//! edges of the last sequence only (a part that has not seen the restart is left out of the edges) and
//! counts the stream's restarts as the most any part saw.
//! With no restarts and reordering within the window this is exactly the single tracker's `lost`:
//! numbers from the first to the last received, less the distinct numbers received. While the parts run,
//! [`live`] sums their figures less the numbers still being handed on, so it does not count as lost a
//! frame that arrived at the other part.

use crate::{Arrival, SequenceCounters, SequenceTracker, DEFAULT_MAX_GAP};

/// Most parts a sequence can be split into.
pub const MAX_PARTS: u32 = 64;

/// Longest run: with at most 64 parts the run index the steering needs lies in the number's low 30 bits.
pub const MAX_RUN_LEN: u64 = 1 << 24;

/// Numbers one part's receiver hands to another's at most while they wait to be taken (a bounded queue;
/// a number a full one refuses is lost to its owner's figures).
pub const HANDOFF_QUEUE: usize = 1 << 16;

/// Numbers a part's tracker remembers for reordering and for numbers handed on late (its own runs only).
pub const PART_WINDOW: u64 = 1 << 20;

/// Why a split cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunsError {
    /// Parts must be a power of two from 1 to 64.
    Parts(u32),
    /// The run length must be a power of two from 1 to 2^24 (with at most 64 parts the run index the
    /// steering needs lies in the number's low 30 bits).
    RunLen(u64),
}

impl std::fmt::Display for RunsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunsError::Parts(p) => write!(f, "{p} parts: must be a power of two from 1 to {MAX_PARTS}"),
            RunsError::RunLen(r) => write!(f, "runs of {r}: must be a power of two from 1 to {MAX_RUN_LEN}"),
        }
    }
}

impl std::error::Error for RunsError {}

/// The steering rule: run `n >> shift` goes to part `(n >> shift) % parts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    parts: u32,
    shift: u32,
    part_bits: u32,
}

impl Runs {
    /// Runs of `run_len` numbers over `parts` parts.
    pub fn new(parts: u32, run_len: u64) -> Result<Runs, RunsError> {
        if !(1..=MAX_PARTS).contains(&parts) || !parts.is_power_of_two() {
            return Err(RunsError::Parts(parts));
        }
        if !(1..=MAX_RUN_LEN).contains(&run_len) || !run_len.is_power_of_two() {
            return Err(RunsError::RunLen(run_len));
        }
        Ok(Runs {
            parts,
            shift: run_len.trailing_zeros(),
            part_bits: parts.trailing_zeros(),
        })
    }

    /// Parts the sequence is split over.
    pub fn parts(&self) -> u32 {
        self.parts
    }

    /// Numbers per run.
    pub fn run_len(&self) -> u64 {
        1 << self.shift
    }

    /// log2 of the run length: the bit of the number where the run index starts.
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// The part that number `n` is steered to.
    #[inline]
    pub fn owner(&self, n: u64) -> u32 {
        ((n >> self.shift) & u64::from(self.parts - 1)) as u32
    }

    /// `n` renumbered among its part's numbers (its part's runs one after the other).
    #[inline]
    pub fn local(&self, n: u64) -> u64 {
        ((n >> (self.shift + self.part_bits)) << self.shift) | (n & (self.run_len() - 1))
    }

    /// Part `p`'s number whose renumbered value is `local` ([`local`](Self::local) undone).
    pub fn global(&self, p: u32, local: u64) -> u64 {
        let run = ((local >> self.shift) << self.part_bits) | u64::from(p);
        (run << self.shift) | (local & (self.run_len() - 1))
    }

    /// How many numbers below `y` belong to part `p`.
    pub fn owned_below(&self, p: u32, y: u64) -> u64 {
        let run = y >> self.shift;
        let (cycles, rem) = (run >> self.part_bits, (run & u64::from(self.parts - 1)) as u32);
        let whole = cycles * self.run_len() + if rem > p { self.run_len() } else { 0 };
        whole + if rem == p { y & (self.run_len() - 1) } else { 0 }
    }

    /// How many numbers in `from..to` belong to part `p` (none when `to <= from`).
    pub fn owned_between(&self, p: u32, from: u64, to: u64) -> u64 {
        if to <= from {
            return 0;
        }
        self.owned_below(p, to) - self.owned_below(p, from)
    }
}

/// Loss accounting of one part of a split sequence; see the module docs.
#[derive(Debug, Clone)]
pub struct PartTracker {
    runs: Runs,
    part: u32,
    tracker: SequenceTracker,
    /// The number the tracker started at, and the lowest and highest of the part's numbers seen.
    first: Option<u64>,
    lowest: u64,
    highest: u64,
    /// Numbers of the part's runs that came (handed on) after the tracker had started at a later one, in
    /// its current sequence, and in all.
    before_first: u64,
    before_first_all: u64,
    /// Handed numbers the tracker took as late.
    handed_late: u64,
    /// Numbers of other parts' runs that arrived here, and numbers handed here by other parts.
    foreign: u64,
    handed: u64,
    /// Handed numbers ahead of the next one expected, in order: held until the part's own numbers
    /// reach them (else its own later arrivals would look late).
    held: Vec<u64>,
}

/// Handed numbers a part holds at most before taking the lowest anyway.
const HELD_MAX: usize = 4096;

impl PartTracker {
    /// The tracker of part `part` of `runs`.
    pub fn new(runs: Runs, part: u32) -> Self {
        assert!(part < runs.parts(), "part {part} of {}", runs.parts());
        PartTracker {
            runs,
            part,
            tracker: SequenceTracker::new(PART_WINDOW, DEFAULT_MAX_GAP),
            first: None,
            lowest: u64::MAX,
            highest: 0,
            before_first: 0,
            before_first_all: 0,
            handed_late: 0,
            foreign: 0,
            handed: 0,
            held: Vec::with_capacity(HELD_MAX),
        }
    }

    /// This part's index.
    pub fn part(&self) -> u32 {
        self.part
    }

    /// The number the part's current sequence started at (after a restart: the first of the row of
    /// numbers the tracker restarted on).
    pub fn first(&self) -> Option<u64> {
        self.first
    }

    /// Number `n` arrived at this part. `None` when it is one of the part's runs (accounted here);
    /// `Some(owner)` when it belongs to another part's run: the caller hands it to that part's
    /// [`handed`](Self::handed).
    #[inline]
    pub fn arrived(&mut self, n: u64) -> Option<u32> {
        self.arrive(n).err()
    }

    /// As [`arrived`](Self::arrived), saying how the part's tracker took a number of its own runs
    /// (`Ok`; a number before the one it started at is [`Arrival::Late`]) or which part owns it (`Err`).
    #[inline]
    pub fn arrive(&mut self, n: u64) -> Result<Arrival, u32> {
        let owner = self.runs.owner(n);
        if owner != self.part {
            self.foreign += 1;
            return Err(owner);
        }
        let a = self.observe(n, false);
        if !self.held.is_empty() {
            self.release(false);
        }
        Ok(a)
    }

    /// Number `n` of this part's runs, which arrived at another part. Taken at once when the part's
    /// own numbers have reached it, else held until they do (or [`finish`](Self::finish)).
    pub fn handed(&mut self, n: u64) {
        debug_assert_eq!(self.runs.owner(n), self.part);
        self.handed += 1;
        let local = self.runs.local(n);
        if self.tracker.next_expected().is_some_and(|next| local <= next) {
            self.observe(n, true);
            return;
        }
        let at = self.held.partition_point(|&h| self.runs.local(h) <= local);
        self.held.insert(at, n);
        if self.held.len() >= HELD_MAX {
            self.release(true);
        }
    }

    /// Takes the held numbers the part's own have reached (with `all`, at least the lowest).
    fn release(&mut self, all: bool) {
        let mut first = all;
        while let Some(&h) = self.held.first() {
            let reached = self
                .tracker
                .next_expected()
                .is_some_and(|next| self.runs.local(h) <= next);
            if !reached && !std::mem::take(&mut first) {
                break;
            }
            self.held.remove(0);
            self.observe(h, true);
        }
    }

    /// Takes every held number: once the part has stopped and every number handed to it came.
    pub fn finish(&mut self) {
        while !self.held.is_empty() {
            self.release(true);
        }
    }

    #[inline]
    fn observe(&mut self, n: u64, handed: bool) -> Arrival {
        let local = self.runs.local(n);
        if let Some(f) = self.first {
            let below = self.runs.local(f).wrapping_sub(local);
            if below > 0 && below <= PART_WINDOW && self.tracker.next_expected().is_some() {
                // Just before the number the tracker started at: not a gap it counted, so not a late
                // fill. (Far below is another sequence: the tracker calls it stray, or a restart.)
                self.before_first += 1;
                self.before_first_all += 1;
                self.lowest = self.lowest.min(n);
                return Arrival::Late;
            }
        }
        let a = self.tracker.observe(local);
        match a {
            Arrival::Start => self.first = Some(n),
            Arrival::Restart => {
                // A new sequence, started at the first of the row the tracker restarted on: its
                // edges are measured from there.
                let start = self.tracker.sequence_start().unwrap_or(local);
                let first = self.runs.global(self.part, start);
                self.first = Some(first);
                self.before_first = 0;
                self.lowest = first;
                self.highest = 0;
            }
            Arrival::Late if handed => self.handed_late += 1,
            _ => {}
        }
        self.lowest = self.lowest.min(n);
        self.highest = self.highest.max(n);
        a
    }

    /// The part's own figures: its tracker's, with the numbers that came before its first one counted
    /// as seen and handed numbers not counted out of order.
    pub fn counters(&self) -> SequenceCounters {
        let mut c = self.tracker.counters();
        c.seen += self.before_first_all;
        c.out_of_order -= self.handed_late.min(c.out_of_order);
        c
    }
}

/// What a part's figures are, without its tracker: what a receiving thread publishes (once per batch)
/// for a reader to give the stream's figures with [`live`] and [`merge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSummary {
    /// The steering rule and the part's index in it.
    pub runs: Runs,
    pub part: u32,
    /// The part's own figures ([`PartTracker::counters`]).
    pub counters: SequenceCounters,
    /// Numbers of other parts' runs that arrived here, and numbers handed here.
    pub foreign: u64,
    pub handed: u64,
    /// The number the part's tracker started at, and the lowest and highest of its numbers seen.
    pub span: Option<(u64, u64, u64)>,
    /// Its numbers that came after the tracker had started at a later one.
    pub before_first: u64,
    /// Handed numbers still held (none after [`PartTracker::finish`]).
    pub held: u64,
}

impl PartTracker {
    /// The part's figures as [`live`] and [`merge`] take them.
    pub fn summary(&self) -> PartSummary {
        PartSummary {
            runs: self.runs,
            part: self.part,
            counters: self.counters(),
            foreign: self.foreign,
            handed: self.handed,
            span: self.first.map(|f| (f, self.lowest, self.highest)),
            before_first: self.before_first,
            held: self.held.len() as u64,
        }
    }
}

fn sum(parts: &[PartSummary]) -> SequenceCounters {
    let mut t = SequenceCounters::default();
    for c in parts.iter().map(|p| p.counters) {
        t.seen += c.seen;
        t.lost += c.lost;
        t.out_of_order += c.out_of_order;
        t.duplicates += c.duplicates;
        // Each part sees a sender's restart: the stream restarted as often as the part that saw most.
        t.restarts = t.restarts.max(c.restarts);
        t.stray += c.stray;
    }
    t
}

/// The stream's figures while the parts run: their sums, less the numbers handed on but not yet
/// accounted by their owners (an owner past them has counted them lost; they were not). Once every
/// part has taken what its socket holds this is never more than [`merge`] gives: no frame that arrived
/// is reported lost. Before that, a run's first frames still queued at the part of the run before
/// (the tail of one coalesced train per run boundary) count as lost until that part takes them.
pub fn live(parts: &[PartSummary]) -> SequenceCounters {
    let mut t = sum(parts);
    let out: u64 = parts.iter().map(|p| p.foreign).sum();
    let taken: u64 = parts.iter().map(|p| p.handed).sum();
    t.lost = t.lost.saturating_sub(out.saturating_sub(taken));
    t
}

/// The stream's figures once every part has stopped, every handed number came and every part was
/// [`finish`](PartTracker::finish)ed: the sums, plus the numbers of each part's runs between the
/// stream's first and last received number that lie outside the part's own first and last (no part
/// received them). Numbers still held (a part not finished) are in neither.
pub fn merge(parts: &[PartSummary]) -> SequenceCounters {
    let mut t = sum(parts);
    // After a sender restart the edges are those of the last sequence: a part that has not seen it
    // restart (none of its runs came since) has only an old sequence's span, left out.
    let latest = parts.iter().map(|p| p.counters.restarts).max().unwrap_or(0);
    let current = || parts.iter().filter(|p| p.counters.restarts == latest);
    let Some(lo) = current().filter_map(|p| p.span).map(|s| s.1).min() else {
        return t;
    };
    let hi = current().filter_map(|p| p.span).map(|s| s.2).max().unwrap_or(lo);
    for p in current() {
        let runs = p.runs;
        t.lost += match p.span {
            Some((first, _, highest)) => {
                runs.owned_between(p.part, lo, first)
                    .saturating_sub(p.before_first)
                    + runs.owned_between(p.part, highest.saturating_add(1), hi.saturating_add(1))
            }
            None => runs.owned_between(p.part, lo, hi.saturating_add(1)),
        };
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, VecDeque};

    #[test]
    fn a_sender_restart_is_one_restart_and_no_loss() {
        let runs = Runs::new(2, 4).unwrap();
        let mut parts: Vec<PartTracker> = (0..2).map(|p| PartTracker::new(runs, p)).collect();
        // 200 numbers from 10^9, then the sender restarts at 0 and sends 200 more, 7 of them lost.
        let old = (1_000_000_000..1_000_000_200u64).map(|n| (n, true));
        let new = (0..200u64).map(|n| (n, n % 29 != 5));
        for (n, arrives) in old.chain(new) {
            if arrives {
                assert_eq!(parts[runs.owner(n) as usize].arrived(n), None);
            }
        }
        let summaries: Vec<PartSummary> = parts
            .iter_mut()
            .map(|p| {
                p.finish();
                p.summary()
            })
            .collect();
        let m = merge(&summaries);
        assert_eq!((m.lost, m.restarts, m.stray), (7, 1, 0), "{m:?}");
        assert_eq!(m.seen, 393);
    }

    #[test]
    fn runs_steer_and_renumber() {
        let r = Runs::new(4, 8).unwrap();
        assert_eq!(
            (r.owner(0), r.owner(7), r.owner(8), r.owner(31), r.owner(32)),
            (0, 0, 1, 3, 0)
        );
        // Part 1's runs are 8..16, 40..48, ...: renumbered 0..8, 8..16.
        assert_eq!((r.local(8), r.local(15), r.local(40)), (0, 7, 8));
        for n in [0u64, 7, 8, 15, 40, 1 << 40, (1 << 40) + 9] {
            assert_eq!(r.global(r.owner(n), r.local(n)), n);
        }
        assert_eq!(r.owned_below(1, 41), 9);
        assert_eq!(r.owned_between(1, 9, 41), 8);
        assert_eq!(r.owned_between(2, 0, 16), 0);
        assert_eq!(Runs::new(3, 8), Err(RunsError::Parts(3)));
        assert_eq!(Runs::new(2, 1000), Err(RunsError::RunLen(1000)));
        assert!(Runs::new(64, 1 << 24).is_ok());
    }

    #[test]
    fn owned_counts_match_owner_by_owner() {
        let r = Runs::new(4, 4).unwrap();
        for p in 0..4 {
            for y in 0..100u64 {
                let want = (0..y).filter(|&n| r.owner(n) == p).count() as u64;
                assert_eq!(r.owned_below(p, y), want, "part {p} below {y}");
            }
        }
    }

    /// A train of numbers from one message (a GSO/GRO super-datagram): steered by its first number.
    fn steer(runs: &Runs, arrivals: &[u64], trains: &[usize]) -> Vec<VecDeque<u64>> {
        let mut queues = vec![VecDeque::new(); runs.parts() as usize];
        let mut at = 0;
        let mut t = trains.iter().cycle();
        while at < arrivals.len() {
            let len = (*t.next().unwrap()).min(arrivals.len() - at);
            let q = &mut queues[runs.owner(arrivals[at]) as usize];
            q.extend(&arrivals[at..at + len]);
            at += len;
        }
        queues
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// However the parts' work interleaves, the merged loss is the single tracker's: numbers from
        /// the first to the last received, less those received; and the live figure never exceeds it.
        #[test]
        fn merged_loss_is_exact(
            part_bits in 0u32..3,
            shift in 0u32..5,
            start in 0u64..200,
            kept in proptest::collection::vec(proptest::bool::weighted(0.85), 1..600),
            swaps in proptest::collection::vec(0usize..600, 0..20),
            trains in proptest::collection::vec(1usize..9, 1..8),
            schedule in proptest::collection::vec((0u32..4, proptest::bool::weighted(0.3)), 1..3000),
        ) {
            let runs = Runs::new(1 << part_bits, 1 << shift).unwrap();
            let mut arrivals: Vec<u64> = kept
                .iter()
                .enumerate()
                .filter(|(_, k)| **k)
                .map(|(i, _)| start + i as u64)
                .collect();
            for s in swaps {
                if s + 1 < arrivals.len() {
                    arrivals.swap(s, s + 1);
                }
            }
            let mut single = SequenceTracker::default();
            for &n in &arrivals {
                single.observe(n);
            }
            let distinct: BTreeSet<u64> = arrivals.iter().copied().collect();
            let truth = match (distinct.first(), distinct.last()) {
                (Some(lo), Some(hi)) => hi - lo + 1 - distinct.len() as u64,
                _ => 0,
            };
            // (One tracker cannot count a gap before its first number: a number that comes first
            // though a lower one follows starts it. The parts count those too.)
            if distinct.first() == arrivals.first() {
                prop_assert_eq!(single.counters().lost, truth);
            }

            let in_order = arrivals.windows(2).all(|w| w[0] < w[1]);
            let n = runs.parts() as usize;
            let mut queues = steer(&runs, &arrivals, &trains);
            let mut handoff = vec![VecDeque::new(); n];
            let mut parts: Vec<PartTracker> = (0..n as u32).map(|p| PartTracker::new(runs, p)).collect();
            let step = |parts: &mut Vec<PartTracker>, queues: &mut Vec<VecDeque<u64>>,
                            handoff: &mut Vec<VecDeque<u64>>, p: usize, drain: bool| {
                if drain {
                    while let Some(x) = handoff[p].pop_front() {
                        parts[p].handed(x);
                    }
                } else if let Some(x) = queues[p].pop_front() {
                    if let Some(o) = parts[p].arrived(x) {
                        handoff[o as usize].push_back(x);
                    }
                }
            };
            for (p, drain) in schedule {
                step(&mut parts, &mut queues, &mut handoff, p as usize % n, drain);
            }
            // The rest, part by part, then every handoff.
            for p in 0..n {
                while !queues[p].is_empty() {
                    step(&mut parts, &mut queues, &mut handoff, p, false);
                }
            }
            // Every socket drained, handoffs pending: the live figure counts none of them lost.
            let summaries = |parts: &[PartTracker]| parts.iter().map(PartTracker::summary).collect::<Vec<_>>();
            let l = live(&summaries(&parts)).lost;
            prop_assert!(l <= truth, "live {} > {}", l, truth);
            for p in 0..n {
                step(&mut parts, &mut queues, &mut handoff, p, true);
            }
            parts.iter_mut().for_each(PartTracker::finish);
            prop_assert!(parts.iter().all(|p| p.summary().held == 0));
            let m = merge(&summaries(&parts));
            prop_assert_eq!(m.lost, truth);
            prop_assert_eq!(m.seen, arrivals.len() as u64);
            prop_assert_eq!((m.duplicates, m.stray, m.restarts), (0, 0, 0));
            prop_assert!(live(&summaries(&parts)).lost <= m.lost);
            // Handed numbers are never counted out of order: with no swaps, nothing is.
            if in_order {
                prop_assert_eq!(m.out_of_order, 0);
            }
        }
    }
}
