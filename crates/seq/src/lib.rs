//! Loss accounting as sans-IO state machines: feed sequence numbers, read counters. No clocks, no sockets.
//!
//! [`SequenceTracker`] follows one sequence (a stream's packet sequence numbers, or one VDIF thread's global
//! frame index). A number past the next expected one opens a gap counted as lost; a number inside the recent
//! window that fills a gap turns one lost frame into an out-of-order one; a number already seen is a duplicate.
//! A number further than `max_gap` ahead or beyond the window behind is a stray (a replayed or foreign
//! datagram) and changes nothing but the `stray` count; [`RESTART_AFTER`] strays in a row that continue each
//! other are a sender restart, and the tracker resynchronises on them instead of counting millions of frames
//! lost. Arithmetic wraps, so a PSN wrapping past
//! `u64::MAX` is continuous.
//!
//! [`FrameIndexer`] turns VDIF (second, frame) or Mark5B time stamps into a global index at a configured or
//! learned frame rate.

#![forbid(unsafe_code)]

pub mod split;

/// Counters of one tracked sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequenceCounters {
    /// Numbers seen (every call to `observe`).
    pub seen: u64,
    /// Numbers missing: skipped and not (yet) arrived late.
    pub lost: u64,
    /// Numbers that arrived after a later number.
    pub out_of_order: u64,
    /// Numbers seen more than once within the window.
    pub duplicates: u64,
    /// Times the sequence jumped so far that the tracker resynchronised.
    pub restarts: u64,
    /// Numbers far outside the sequence (beyond the window behind or `max_gap` ahead) that did not start a
    /// new sequence: a stray or replayed datagram. They change no other counter.
    pub stray: u64,
}

/// What one observed number was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first number, or one after a restart.
    Start,
    /// The next expected number.
    InOrder,
    /// Ahead of the expected number: `missing` numbers skipped.
    Gap { missing: u64 },
    /// A skipped number arriving late.
    Late,
    /// A number already seen.
    Duplicate,
    /// Far outside the sequence; counted as stray until enough follow it to make a new sequence.
    Stray,
    /// The last of [`RESTART_AFTER`] strays in a row that continue each other: the tracker restarted on
    /// them (the earlier ones of the run are re-counted as part of the new sequence).
    Restart,
}

/// Window of recent numbers remembered for reordering and duplicate detection (bits).
pub const DEFAULT_WINDOW: u64 = 1 << 14;
/// Largest forward jump still counted as loss rather than a restart.
pub const DEFAULT_MAX_GAP: u64 = 1 << 24;
/// Strays in a row, each ahead of the previous by at most `max_gap`, that make a new sequence (a sender
/// restart). One stray datagram (a replay, a port scan, a packet from an old run) never resets the count.
pub const RESTART_AFTER: usize = 16;

/// Sequence-number state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    next: Option<u64>,
    /// The number the current sequence started at (the first, or the first of the row restarted on).
    start: Option<u64>,
    /// Bit `n % window` set when number `n` in `[next - window, next)` was seen.
    seen_bits: Vec<u64>,
    window: u64,
    max_gap: u64,
    counters: SequenceCounters,
    /// The current run of strays that continue each other (a candidate new sequence).
    run: [u64; RESTART_AFTER],
    run_len: usize,
}

impl Default for SequenceTracker {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW, DEFAULT_MAX_GAP)
    }
}

impl SequenceTracker {
    /// A tracker remembering `window` numbers (rounded up to a multiple of 64) and treating forward jumps
    /// above `max_gap` as strays (and, [`RESTART_AFTER`] of them in a row, a restart).
    pub fn new(window: u64, max_gap: u64) -> Self {
        let words = window.div_ceil(64).max(1);
        SequenceTracker {
            next: None,
            start: None,
            seen_bits: vec![0; words as usize],
            window: words * 64,
            max_gap,
            counters: SequenceCounters::default(),
            run: [0; RESTART_AFTER],
            run_len: 0,
        }
    }

    pub fn counters(&self) -> SequenceCounters {
        self.counters
    }

    /// The next number expected, once anything was seen.
    pub fn next_expected(&self) -> Option<u64> {
        self.next
    }

    /// The number the current sequence started at: the first seen, or after a [`Arrival::Restart`]
    /// the first of the strays it restarted on.
    pub fn sequence_start(&self) -> Option<u64> {
        self.start
    }

    #[inline]
    fn bit(&self, n: u64) -> (usize, u64) {
        let i = n % self.window;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn clear_all(&mut self) {
        self.seen_bits.iter_mut().for_each(|w| *w = 0);
    }

    fn mark(&mut self, n: u64) {
        let (w, b) = self.bit(n);
        self.seen_bits[w] |= b;
    }

    /// Advances `next` to `n + 1`, clearing the bits of the numbers skipped over (they become "not seen").
    fn advance_to(&mut self, n: u64, from: u64) {
        let skipped = n.wrapping_sub(from);
        if skipped >= self.window {
            self.clear_all();
        } else {
            let mut k = from;
            for _ in 0..skipped {
                let (w, b) = self.bit(k);
                self.seen_bits[w] &= !b;
                k = k.wrapping_add(1);
            }
        }
        self.mark(n);
        self.next = Some(n.wrapping_add(1));
    }

    fn restart(&mut self, n: u64) {
        self.start = Some(n);
        self.clear_all();
        self.mark(n);
        self.next = Some(n.wrapping_add(1));
    }

    /// Accounts for number `n` arriving.
    #[inline]
    pub fn observe(&mut self, n: u64) -> Arrival {
        self.counters.seen += 1;
        self.track(n)
    }

    #[inline]
    fn track(&mut self, n: u64) -> Arrival {
        let Some(next) = self.next else {
            self.restart(n);
            return Arrival::Start;
        };
        if n == next {
            // Fast path: one bit to set.
            let (w, b) = self.bit(n);
            self.seen_bits[w] |= b;
            self.next = Some(n.wrapping_add(1));
            self.run_len = 0;
            return Arrival::InOrder;
        }
        let ahead = n.wrapping_sub(next);
        let behind = next.wrapping_sub(n);
        if ahead <= self.max_gap && ahead < behind {
            self.run_len = 0;
            self.counters.lost += ahead;
            self.advance_to(n, next);
            return Arrival::Gap { missing: ahead };
        }
        if behind <= self.window {
            self.run_len = 0;
            let (w, b) = self.bit(n);
            if self.seen_bits[w] & b != 0 {
                self.counters.duplicates += 1;
                return Arrival::Duplicate;
            }
            self.seen_bits[w] |= b;
            self.counters.lost = self.counters.lost.saturating_sub(1);
            self.counters.out_of_order += 1;
            return Arrival::Late;
        }
        self.stray(n)
    }

    /// A number outside the sequence: remember it as part of a candidate new sequence; restart on the
    /// candidate once it is [`RESTART_AFTER`] long.
    fn stray(&mut self, n: u64) -> Arrival {
        let continues = self.run_len > 0 && {
            let prev = self.run[self.run_len - 1];
            let step = n.wrapping_sub(prev);
            step != 0 && step <= self.max_gap
        };
        if !continues {
            self.run_len = 0;
        }
        self.run[self.run_len] = n;
        self.run_len += 1;
        if self.run_len < RESTART_AFTER {
            self.counters.stray += 1;
            return Arrival::Stray;
        }
        // A new sequence: the earlier members of the run were counted stray; they belong to it.
        self.counters.stray -= (RESTART_AFTER - 1) as u64;
        self.counters.restarts += 1;
        let run = self.run;
        self.run_len = 0;
        self.restart(run[0]);
        for &k in &run[1..] {
            self.track(k);
        }
        Arrival::Restart
    }
}

/// Turns time stamps (second, frame number) into a global frame index at a known or learned frame rate.
///
/// With the rate unknown it numbers frames within the first second as they come, and at the first change
/// of second learns the rate as one more than the highest frame number seen, continuing the numbering so the
/// sequence tracker sees no jump. Frames missing at the very end of that first second are therefore not
/// counted. A frame number at or above a learned rate later raises the rate (re-basing so the index stays
/// continuous). A configured rate is used from the first frame and never changed: a frame number at or
/// above it is out of range (the frame's time is invalid at that rate) and gets no index.
#[derive(Debug, Clone)]
pub struct FrameIndexer {
    state: IndexerState,
    configured: bool,
}

#[derive(Debug, Clone, Copy)]
enum IndexerState {
    Learning {
        first_second: Option<i64>,
        max_frame: u32,
    },
    /// `offset` is added to `second * rate + frame` so indexes continue the learning-time numbering.
    Known { rate: u32, offset: u64 },
}

impl FrameIndexer {
    /// An indexer with a configured rate, or one that learns it (`None`).
    pub fn new(rate: Option<u32>) -> Self {
        let state = match rate {
            Some(rate) => IndexerState::Known { rate, offset: 0 },
            None => IndexerState::Learning {
                first_second: None,
                max_frame: 0,
            },
        };
        FrameIndexer {
            state,
            configured: rate.is_some(),
        }
    }

    /// True when the rate was configured (it is then never changed).
    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// The frame rate in use, once configured or learned.
    pub fn rate(&self) -> Option<u32> {
        match self.state {
            IndexerState::Known { rate, .. } => Some(rate),
            IndexerState::Learning { .. } => None,
        }
    }

    #[inline]
    fn absolute(rate: u32, offset: u64, second: i64, frame: u32) -> u64 {
        (second as u64)
            .wrapping_mul(u64::from(rate))
            .wrapping_add(u64::from(frame))
            .wrapping_add(offset)
    }

    /// Global index of frame `frame` in second `second`; the second value is `Some(rate)` when this call
    /// learned or raised the rate. `None` when the rate was configured and `frame` is at or above it.
    #[inline]
    pub fn index(&mut self, second: i64, frame: u32) -> Option<(u64, Option<u32>)> {
        match &mut self.state {
            IndexerState::Known { rate, offset } => {
                let index = Self::absolute(*rate, *offset, second, frame);
                if frame < *rate {
                    return Some((index, None));
                }
                if self.configured {
                    return None;
                }
                // The data has more frames per second than learned: raise the rate, keeping this index.
                *rate = frame + 1;
                *offset = 0;
                *offset = index.wrapping_sub(Self::absolute(*rate, 0, second, frame));
                Some((index, Some(*rate)))
            }
            IndexerState::Learning {
                first_second,
                max_frame,
            } => {
                let first = *first_second.get_or_insert(second);
                if second <= first {
                    *max_frame = (*max_frame).max(frame);
                    return Some((u64::from(frame), None));
                }
                let rate = (*max_frame + 1).max(frame + 1);
                let continued = u64::from(rate) * (second - first) as u64 + u64::from(frame);
                let offset = continued.wrapping_sub(Self::absolute(rate, 0, second, frame));
                self.state = IndexerState::Known { rate, offset };
                Some((continued, Some(rate)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut SequenceTracker, seq: &[u64]) -> Vec<Arrival> {
        seq.iter().map(|&n| t.observe(n)).collect()
    }

    #[test]
    fn in_order_counts_nothing_lost() {
        let mut t = SequenceTracker::default();
        for n in 1000..2000 {
            t.observe(n);
        }
        assert_eq!(
            t.counters(),
            SequenceCounters {
                seen: 1000,
                ..Default::default()
            }
        );
    }

    #[test]
    fn gaps_count_lost() {
        let mut t = SequenceTracker::default();
        let a = feed(&mut t, &[10, 11, 14, 15, 20]);
        assert_eq!(a[2], Arrival::Gap { missing: 2 });
        assert_eq!(t.counters().lost, 2 + 4);
    }

    #[test]
    fn reordering_turns_lost_into_out_of_order() {
        let mut t = SequenceTracker::default();
        let a = feed(&mut t, &[1, 2, 4, 3, 5, 7, 6, 8]);
        assert_eq!(a[3], Arrival::Late);
        let c = t.counters();
        assert_eq!((c.lost, c.out_of_order, c.duplicates), (0, 2, 0));
    }

    #[test]
    fn duplicates_are_counted_once_each() {
        let mut t = SequenceTracker::default();
        let a = feed(&mut t, &[1, 2, 2, 3, 1, 5, 4, 4]);
        assert_eq!(a[2], Arrival::Duplicate);
        let c = t.counters();
        assert_eq!((c.lost, c.out_of_order, c.duplicates), (0, 1, 3));
    }

    #[test]
    fn psn_wraps_through_u64_max() {
        let mut t = SequenceTracker::default();
        feed(&mut t, &[u64::MAX - 2, u64::MAX - 1, u64::MAX, 0, 1, 3]);
        let c = t.counters();
        assert_eq!((c.lost, c.restarts), (1, 0));
        // A late arrival across the wrap.
        assert_eq!(t.observe(2), Arrival::Late);
        assert_eq!(t.counters().lost, 0);
    }

    #[test]
    fn restart_resynchronises_without_counting_loss() {
        let mut t = SequenceTracker::default();
        feed(&mut t, &[5_000_000_000, 5_000_000_001]);
        // Sender restarted with a new start far behind: strays until RESTART_AFTER of them follow each other.
        let a = feed(&mut t, &(17..17 + RESTART_AFTER as u64).collect::<Vec<_>>());
        assert!(a[..RESTART_AFTER - 1].iter().all(|&x| x == Arrival::Stray));
        assert_eq!(a[RESTART_AFTER - 1], Arrival::Restart);
        // The new sequence starts at the row's first, not at the number that made it one.
        assert_eq!(t.sequence_start(), Some(17));
        assert_eq!(t.observe(17 + RESTART_AFTER as u64), Arrival::InOrder);
        // And far ahead.
        let far = u64::MAX / 3;
        let a = feed(&mut t, &(far..far + RESTART_AFTER as u64).collect::<Vec<_>>());
        assert_eq!(a[RESTART_AFTER - 1], Arrival::Restart);
        assert_eq!(t.sequence_start(), Some(far));
        let c = t.counters();
        assert_eq!((c.lost, c.restarts, c.stray), (0, 2, 0));
        assert_eq!(c.seen, 2 + 2 * RESTART_AFTER as u64 + 1);
    }

    #[test]
    fn a_stray_number_changes_nothing_but_its_count() {
        let mut t = SequenceTracker::default();
        feed(&mut t, &[1_000_000, 1_000_001, 1_000_002]);
        // One datagram from an old run, one from nowhere (a port scan), one replayed far behind.
        let a = feed(&mut t, &[3, u64::MAX / 2, 1, 1_000_003, 1_000_004]);
        assert_eq!(&a[..3], &[Arrival::Stray; 3]);
        assert_eq!(a[3], Arrival::InOrder);
        let c = t.counters();
        assert_eq!(
            (c.lost, c.out_of_order, c.duplicates, c.restarts, c.stray),
            (0, 0, 0, 0, 3)
        );
        assert_eq!(c.seen, 8);
    }

    #[test]
    fn restart_run_with_gaps_counts_them_lost() {
        let mut t = SequenceTracker::default();
        feed(&mut t, &[1_000_000_000, 1_000_000_001]);
        // New sequence from 50, every 5th number missing, interleaved with one stray that breaks nothing.
        let run: Vec<u64> = (50..50 + 2 * RESTART_AFTER as u64)
            .filter(|n| n % 5 != 0)
            .collect();
        feed(&mut t, &run);
        let c = t.counters();
        assert_eq!(c.restarts, 1);
        assert_eq!(c.stray, 0);
        // 51..=81 minus the ones present: 55, 60, 65, 70, 75, 80 are missing.
        assert_eq!(c.lost, 6);
    }

    #[test]
    fn late_beyond_window_is_stray_and_window_reuse_is_clean() {
        let mut t = SequenceTracker::new(64, 1 << 20);
        feed(&mut t, &[0, 1]);
        // Jump by more than the window: the bits of skipped numbers must read as unseen.
        t.observe(200);
        assert_eq!(t.counters().lost, 198);
        assert_eq!(t.observe(199), Arrival::Late);
        assert_eq!(t.observe(199), Arrival::Duplicate);
        // 1 is 199 behind: beyond a 64-number window.
        assert_eq!(t.observe(1), Arrival::Stray);
    }

    proptest::proptest! {
        /// Against a set model: numbers at or above the first one, reordered, lost and duplicated within the
        /// window, give lost = numbers never seen up to the highest, the repeats as duplicates, and no stray.
        #[test]
        fn matches_a_set_model(start in 0u64..u64::MAX / 2, offs in proptest::collection::vec(0u64..3000, 0..600)) {
            let mut t = SequenceTracker::default();
            let mut seen = std::collections::BTreeSet::new();
            let mut dups = 0u64;
            for n in std::iter::once(start).chain(offs.iter().map(|o| start + o)) {
                if !seen.insert(n) {
                    dups += 1;
                }
                t.observe(n);
            }
            let hi = *seen.iter().max().unwrap();
            let missing = (start..=hi).filter(|n| !seen.contains(n)).count() as u64;
            let c = t.counters();
            proptest::prop_assert_eq!(c.lost, missing);
            proptest::prop_assert_eq!(c.duplicates, dups);
            proptest::prop_assert_eq!(c.stray + c.restarts, 0);
            proptest::prop_assert_eq!(c.seen, offs.len() as u64 + 1);
        }
    }

    #[test]
    fn configured_rate_indexes_across_seconds() {
        let mut ix = FrameIndexer::new(Some(100));
        let mut t = SequenceTracker::default();
        for s in 10..13i64 {
            for f in 0..100 {
                if (s, f) == (11, 99) || (s, f) == (12, 0) {
                    continue;
                }
                t.observe(ix.index(s, f).unwrap().0);
            }
        }
        assert_eq!(t.counters().lost, 2);
    }

    #[test]
    fn learns_rate_at_first_second_change() {
        let mut ix = FrameIndexer::new(None);
        let mut t = SequenceTracker::default();
        let mut learned = None;
        // Start mid-second, lose frame 50 of second 1 and frames 0..3 of second 3.
        for s in 0..4i64 {
            for f in 0..100u32 {
                if (s == 0 && f < 40) || (s, f) == (1, 50) || (s == 3 && f < 3) {
                    continue;
                }
                let (i, l) = ix.index(s, f).unwrap();
                if l.is_some() {
                    learned = l;
                }
                t.observe(i);
            }
        }
        assert_eq!(learned, Some(100));
        assert_eq!(ix.rate(), Some(100));
        let c = t.counters();
        assert_eq!((c.lost, c.out_of_order, c.duplicates, c.restarts), (4, 0, 0, 0));
    }

    #[test]
    fn learned_rate_too_low_is_raised_keeping_continuity() {
        let mut ix = FrameIndexer::new(None);
        let mut t = SequenceTracker::default();
        let mut raised = Vec::new();
        // The first second shows frames 0..50 only (the rest lost): 50 is learned, then raised.
        for s in 0..3i64 {
            for f in 0..100u32 {
                if s == 0 && f >= 50 {
                    continue;
                }
                let (i, r) = ix.index(s, f).unwrap();
                raised.extend(r);
                t.observe(i);
            }
        }
        assert_eq!(raised.first(), Some(&50));
        assert_eq!(ix.rate(), Some(100));
        assert!(!ix.is_configured());
        let c = t.counters();
        assert_eq!((c.duplicates, c.restarts), (0, 0));
    }

    #[test]
    fn configured_rate_is_never_overridden() {
        let mut ix = FrameIndexer::new(Some(50));
        let mut out_of_range = 0;
        for s in 0..3i64 {
            for f in 0..100u32 {
                match ix.index(s, f) {
                    Some((i, r)) => {
                        assert_eq!(r, None);
                        assert_eq!(i, s as u64 * 50 + u64::from(f));
                    }
                    None => out_of_range += 1,
                }
            }
        }
        assert_eq!(out_of_range, 150);
        assert_eq!(ix.rate(), Some(50));
        assert!(ix.is_configured());
    }
}
