//! Loss accounting as sans-IO state machines: feed sequence numbers, read counters. No clocks, no sockets.
//!
//! [`SequenceTracker`] follows one sequence (a stream's packet sequence numbers, or one VDIF thread's global
//! frame index). A number past the next expected one opens a gap counted as lost; a number inside the recent
//! window that fills a gap turns one lost frame into an out-of-order one; a number already seen is a duplicate.
//! A jump further than `max_gap` forward, or back beyond the window, is a sender restart: the tracker
//! resynchronises instead of counting millions of frames lost. Arithmetic wraps, so a PSN wrapping past
//! `u64::MAX` is continuous.
//!
//! [`FrameIndexer`] turns VDIF (second, frame) or Mark5B time stamps into a global index at a configured or
//! learned frame rate.

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
    /// A jump beyond the limits: the tracker restarted at this number.
    Restart,
}

/// Window of recent numbers remembered for reordering and duplicate detection (bits).
pub const DEFAULT_WINDOW: u64 = 1 << 14;
/// Largest forward jump still counted as loss rather than a restart.
pub const DEFAULT_MAX_GAP: u64 = 1 << 24;

/// Sequence-number state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    next: Option<u64>,
    /// Bit `n % window` set when number `n` in `[next - window, next)` was seen.
    seen_bits: Vec<u64>,
    window: u64,
    max_gap: u64,
    counters: SequenceCounters,
}

impl Default for SequenceTracker {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW, DEFAULT_MAX_GAP)
    }
}

impl SequenceTracker {
    /// A tracker remembering `window` numbers (rounded up to a multiple of 64) and treating forward jumps
    /// above `max_gap` as restarts.
    pub fn new(window: u64, max_gap: u64) -> Self {
        let words = window.div_ceil(64).max(1);
        SequenceTracker {
            next: None,
            seen_bits: vec![0; words as usize],
            window: words * 64,
            max_gap,
            counters: SequenceCounters::default(),
        }
    }

    pub fn counters(&self) -> SequenceCounters {
        self.counters
    }

    /// The next number expected, once anything was seen.
    pub fn next_expected(&self) -> Option<u64> {
        self.next
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
        self.clear_all();
        self.mark(n);
        self.next = Some(n.wrapping_add(1));
    }

    /// Accounts for number `n` arriving.
    #[inline]
    pub fn observe(&mut self, n: u64) -> Arrival {
        self.counters.seen += 1;
        let Some(next) = self.next else {
            self.restart(n);
            return Arrival::Start;
        };
        if n == next {
            // Fast path: one bit to clear and set.
            let (w, b) = self.bit(n);
            self.seen_bits[w] |= b;
            self.next = Some(n.wrapping_add(1));
            return Arrival::InOrder;
        }
        let ahead = n.wrapping_sub(next);
        let behind = next.wrapping_sub(n);
        if ahead <= self.max_gap && ahead < behind {
            self.counters.lost += ahead;
            self.advance_to(n, next);
            return Arrival::Gap { missing: ahead };
        }
        if behind <= self.window {
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
        self.counters.restarts += 1;
        self.restart(n);
        Arrival::Restart
    }
}

/// Turns time stamps (second, frame number) into a global frame index at a known or learned frame rate.
///
/// With the rate unknown it numbers frames within the first second as they come, and at the first change
/// of second learns the rate as one more than the highest frame number seen, continuing the numbering so the
/// sequence tracker sees no jump. Frames missing at the very end of that first second are therefore not
/// counted. A frame number at or above the rate later raises the rate (re-basing so the index stays
/// continuous). A configured rate is used from the first frame.
#[derive(Debug, Clone)]
pub struct FrameIndexer {
    state: IndexerState,
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
        FrameIndexer { state }
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
    /// learned or raised the rate.
    #[inline]
    pub fn index(&mut self, second: i64, frame: u32) -> (u64, Option<u32>) {
        match &mut self.state {
            IndexerState::Known { rate, offset } => {
                let index = Self::absolute(*rate, *offset, second, frame);
                if frame < *rate {
                    return (index, None);
                }
                // The data has more frames per second than assumed: raise the rate, keeping this index.
                *rate = frame + 1;
                *offset = 0;
                *offset = index.wrapping_sub(Self::absolute(*rate, 0, second, frame));
                (index, Some(*rate))
            }
            IndexerState::Learning {
                first_second,
                max_frame,
            } => {
                let first = *first_second.get_or_insert(second);
                if second <= first {
                    *max_frame = (*max_frame).max(frame);
                    return (u64::from(frame), None);
                }
                let rate = (*max_frame + 1).max(frame + 1);
                let continued = u64::from(rate) * (second - first) as u64 + u64::from(frame);
                let offset = continued.wrapping_sub(Self::absolute(rate, 0, second, frame));
                self.state = IndexerState::Known { rate, offset };
                (continued, Some(rate))
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
        // Sender restarted with a new random start far away, both forwards and backwards.
        assert_eq!(t.observe(17), Arrival::Restart);
        t.observe(18);
        assert_eq!(t.observe(u64::MAX / 3), Arrival::Restart);
        let c = t.counters();
        assert_eq!((c.lost, c.restarts, c.seen), (0, 2, 5));
    }

    #[test]
    fn late_beyond_window_is_a_restart_and_window_reuse_is_clean() {
        let mut t = SequenceTracker::new(64, 1 << 20);
        feed(&mut t, &[0, 1]);
        // Jump by more than the window: the bits of skipped numbers must read as unseen.
        t.observe(200);
        assert_eq!(t.counters().lost, 198);
        assert_eq!(t.observe(199), Arrival::Late);
        assert_eq!(t.observe(199), Arrival::Duplicate);
        // 1 is 199 behind: beyond a 64-number window.
        assert_eq!(t.observe(1), Arrival::Restart);
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
                t.observe(ix.index(s, f).0);
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
                let (i, l) = ix.index(s, f);
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
    fn rate_too_low_is_raised_keeping_continuity() {
        let mut ix = FrameIndexer::new(Some(50));
        let mut t = SequenceTracker::default();
        let mut raised = None;
        for s in 0..3i64 {
            for f in 0..100u32 {
                let (i, r) = ix.index(s, f);
                raised = raised.or(r);
                t.observe(i);
            }
        }
        assert_eq!(raised, Some(51));
        assert_eq!(ix.rate(), Some(100));
        let c = t.counters();
        assert_eq!((c.lost, c.duplicates, c.restarts), (0, 0, 0));
    }
}
