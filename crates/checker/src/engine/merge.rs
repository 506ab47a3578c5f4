//! Joining engines run on consecutive ranges of one frame stream, exactly.
//!
//! A range engine ([`Checker::for_range`]) starts knowing nothing of the frames before its range. The
//! whole recording's engine after the range follows from its state before the range and the range
//! engine's, when the range engine decided every frame as the one-pass engine would have:
//!
//! - each thread's first frame in the range goes forward of the thread's last frame before it (the range
//!   engine takes it as in order; the join adds the gap, crossing and jump it makes), and its header is
//!   compared with the thread's header before;
//! - no frame of a thread goes backwards before the thread has remembered [`RECENT`] stamps in the range
//!   (until then the one-pass engine's window still holds stamps from before the range);
//! - fill frames marked frame numbers (which happens while an engine knows one thread only) only when the
//!   recording before the range had no other thread;
//! - second crossings to frame 0, whose wrap-or-jump decision depends on the highest frame number seen so
//!   far, are kept as candidates with the range's own highest frame number and decided at the join, with
//!   the recording's (the higher of the two).
//!
//! Everything else adds up (counts, the sums of second crossings, lists up to their caps, ring of recent
//! stamps in order). [`Checker::can_absorb`] tells whether the conditions hold; where they do not, the
//! caller feeds the range's frames to the whole recording's engine itself.

use super::{wraps, Checker, ThreadState, MAX_CHANGES_LISTED, MAX_JUMPS_LISTED, RECENT};

impl Checker {
    /// An engine for a range of the frame stream that `self` (not yet fed) would check, to be joined with
    /// [`absorb`](Self::absorb). Sample statistics are not kept.
    pub fn for_range(&self) -> Checker {
        let mut config = self.config.clone();
        config.stats = None;
        let mut c = Checker::new(self.format, config, self.files.clone());
        c.mark5b_ref_mjd = self.mark5b_ref_mjd;
        c.range = true;
        c
    }

    /// Whether `range` (an engine made by [`for_range`](Self::for_range), fed the frames that follow those
    /// `self` was fed) can be joined exactly.
    pub fn can_absorb(&self, range: &Checker) -> bool {
        if self.stats.is_some() || range.stats.is_some() {
            return false;
        }
        if range.fill_marked {
            let first = range.threads[0].id;
            if self.threads.iter().any(|t| t.id != first) {
                return false;
            }
        }
        range.threads.iter().all(|r| {
            !r.early_backward
                && self.thread(r.id).is_none_or(|t| {
                    let ((s1, f1), (s2, f2)) = (t.last, r.first);
                    (s2 == s1 && f2 > f1) || s2 > s1
                })
        })
    }

    fn thread(&self, id: u16) -> Option<&ThreadState> {
        match self.slot[usize::from(id)] {
            u16::MAX => None,
            s => Some(&self.threads[usize::from(s)]),
        }
    }

    /// Joins a range engine for which [`can_absorb`](Self::can_absorb) holds: `self` becomes the engine
    /// that was fed its frames and then the range's.
    pub fn absorb(&mut self, range: Checker) {
        debug_assert!(self.can_absorb(&range));
        self.headerless_fill += range.headerless_fill;
        self.findings.extend(range.findings);
        if range.threads.is_empty() {
            // No data frame: all its fill stands where it stood, before the next data frame.
            if self.last_thread.is_some() {
                self.pending_fill += range.leading_fill;
            } else {
                self.leading_fill += range.leading_fill;
            }
            return;
        }
        // Fill before the range's first data frame goes to that frame's gap, if a data frame came before.
        let mut pending = if self.last_thread.is_some() {
            self.pending_fill + range.leading_fill
        } else {
            self.leading_fill += range.leading_fill;
            0
        };
        self.pending_fill = 0;
        let last_id = range.last_thread.map(|i| range.threads[i].id);
        // From here `global_max` is the highest frame number the one-pass engine knew that the range engine
        // did not (before the range, or from the first frame's fill) or that the range engine knew as well.
        for r in range.threads {
            self.join_thread(r, &mut pending);
        }
        self.global_max = self.global_max.max(range.global_max);
        self.last_thread = last_id.map(|id| usize::from(self.slot[usize::from(id)]));
        self.pending_fill = range.pending_fill;
    }

    /// Joins one thread of a range (threads in the order of their first frame in it); `pending` is the fill
    /// before the range's first data frame, given to that frame.
    fn join_thread(&mut self, mut r: ThreadState, pending: &mut u64) {
        let s = r.first;
        let fill = std::mem::take(pending);
        let existing = self.slot[usize::from(r.id)];
        let one_thread_after = self.threads.iter().all(|t| t.id == r.id);
        // The one-pass engine's highest frame number at the thread's first frame of the range.
        let g_first = self.global_max.max(r.entry_max);
        let hint = self.rate_hint_at(g_first);
        let jumps = std::mem::take(&mut r.jumps);
        let definite = r.jumps_total;
        let idx = if existing == u16::MAX {
            // New: the range engine's view of its first frame is the one-pass engine's.
            r.range = false;
            r.listed = 0;
            r.jumps_total = 0;
            r.fill += fill;
            let id = usize::from(r.id);
            self.threads.push(r);
            self.slot[id] = (self.threads.len() - 1) as u16;
            self.threads.len() - 1
        } else {
            let idx = usize::from(existing);
            let t = &mut self.threads[idx];
            if t.sig != r.first_sig {
                Self::header_change(t, r.first_sig, r.first_pos);
            }
            let before = t.last;
            let forward = t.advance(s, r.first_pos, hint, g_first);
            debug_assert!(forward, "can_absorb checks this");
            // The range's stamps after the first, oldest first, into the window.
            let after_first = (r.remembered - 1).min(RECENT as u64) as usize;
            for k in (0..after_first).rev() {
                let at = (r.recent_at + RECENT - 1 - k) % RECENT;
                t.remember(r.recent[at]);
            }
            t.last = r.last;
            t.frames += r.frames;
            t.bytes += r.bytes;
            t.invalid += r.invalid;
            t.fill += r.fill + fill;
            t.duplicates += r.duplicates;
            t.late += r.late;
            t.missing_within += r.missing_within;
            t.cross_seconds += r.cross_seconds;
            t.cross_f1p1 += r.cross_f1p1;
            t.cross_f2 += r.cross_f2;
            t.max_frame = t.max_frame.max(r.max_frame);
            t.changes_total += r.changes_total;
            for c in r.changes {
                if t.changes.len() < MAX_CHANGES_LISTED {
                    t.changes.push(c);
                }
            }
            t.sig = r.sig;
            if fill > 0 && one_thread_after {
                self.fill_marks_frame_numbers(before, s, fill);
            }
            idx
        };
        self.global_max = self.global_max.max(g_first).max(s.1);
        // The range's jumps in order: its own, and its candidates decided with the highest frame number the
        // one-pass engine knew then.
        let g = self.global_max;
        let t = &mut self.threads[idx];
        t.jumps_total += definite;
        for mut j in jumps {
            if let Some(c) = j.candidate.take() {
                let gmax = g.max(c);
                let hint = self
                    .config
                    .frame_rate
                    .or(self.config.metadata_frame_rate.map(|r| r.max(gmax + 1)));
                if wraps(j.from.1, hint, gmax) {
                    continue;
                }
                t.jumps_total += 1;
            }
            if t.listed < MAX_JUMPS_LISTED {
                t.listed += 1;
                t.jumps.push(j);
            }
        }
    }
}
