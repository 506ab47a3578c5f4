//! Time stamps and thread order of a simulated backend's frames, as a sans-IO iterator.
//!
//! A multi-thread backend (an R2DBE with two IFs, say) emits frame n of thread 0, frame n of thread 1, then
//! frame n+1 of each, and so on: one "round" per frame time. The sequencer reproduces that order, steps
//! (second, frame number) at the VDIF frame rate, and numbers datagrams with a packet sequence number.

use crate::plan::GenPlan;
use vlbiflow_formats::time::VdifTime;
use vlbiflow_formats::vdif::{VdifHeader, HEADER_LEN};

/// What the sequencer says about the frame whose header it just wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSlot {
    /// Index of the thread in the plan's thread list (not the thread ID).
    pub thread_index: usize,
    /// Round number from the start: the frame's index within its thread.
    pub round: u64,
    /// Packet sequence number of the datagram.
    pub psn: u64,
    /// The plan's `drop_every` leaves this frame out: the caller must not send or write it.
    pub dropped: bool,
}

/// Yields the headers of one stream's frames in send order.
#[derive(Debug, Clone)]
pub struct FrameSequencer {
    /// One ready-made header per thread; only the time words change per frame.
    templates: Vec<[u8; HEADER_LEN]>,
    frame_rate: u32,
    second: u32,
    frame: u32,
    round: u64,
    thread_pos: usize,
    psn: u64,
    emitted: u64,
    total: Option<u64>,
    drop_every: u64,
}

impl FrameSequencer {
    /// A sequencer starting at `start` (frame number 0 of a whole second) with PSNs from `first_psn`.
    pub fn new(plan: &GenPlan, start: VdifTime, first_psn: u64) -> Self {
        let templates = plan
            .request
            .thread_ids
            .iter()
            .map(|&thread_id| {
                let mut repr = plan.header;
                repr.epoch = start.epoch;
                repr.thread_id = thread_id;
                repr.to_bytes().expect("plan validated the header")
            })
            .collect();
        FrameSequencer {
            templates,
            frame_rate: plan.frame_rate,
            second: start.seconds,
            frame: start.frame,
            round: 0,
            thread_pos: 0,
            psn: first_psn,
            emitted: 0,
            total: plan.total_frames,
            drop_every: plan.request.drop_every,
        }
    }

    /// Frames emitted so far (sent, written or deliberately dropped).
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Frames left, None if continuous.
    pub fn remaining(&self) -> Option<u64> {
        self.total.map(|t| t - self.emitted)
    }

    /// Rounds started so far (a round is one frame time, one frame per thread).
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Writes the next frame's header into `out` and describes it; None once the total is reached.
    #[inline]
    pub fn next_header(&mut self, out: &mut [u8]) -> Option<FrameSlot> {
        if self.total.is_some_and(|t| self.emitted >= t) {
            return None;
        }
        let thread_index = self.thread_pos;
        out[..HEADER_LEN].copy_from_slice(&self.templates[thread_index]);
        VdifHeader::new_unchecked(&mut out[..HEADER_LEN]).set_time(self.second, self.frame);
        let dropped = self.drop_every > 0 && (self.emitted + 1) % self.drop_every == 0;
        let slot = FrameSlot {
            thread_index,
            round: self.round,
            psn: self.psn,
            dropped,
        };
        self.psn = self.psn.wrapping_add(1);
        self.emitted += 1;
        self.thread_pos += 1;
        if self.thread_pos == self.templates.len() {
            self.thread_pos = 0;
            self.round += 1;
            self.frame += 1;
            if self.frame == self.frame_rate {
                self.frame = 0;
                self.second += 1;
            }
        }
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{GenRequest, RateRequest, StopAfter};
    use vlbiflow_formats::time::FrameClock;
    use vlbiflow_formats::vdif::VdifHeaderRepr;

    #[test]
    fn threads_interleave_and_time_follows_frame_rate() {
        let plan = GenPlan::new(GenRequest {
            thread_ids: vec![3, 7],
            rate: RateRequest::FramesPerSecond(2000),
            stop: StopAfter::Count(4001),
            ..Default::default()
        })
        .unwrap();
        let start = VdifTime::from_unix_second(1_700_000_000).unwrap();
        let clock = FrameClock::new(plan.frame_rate).unwrap();
        let mut seq = FrameSequencer::new(&plan, start, 10);
        let mut buf = [0u8; 32];
        let mut n = 0u64;
        while let Some(slot) = seq.next_header(&mut buf) {
            let h = VdifHeader::new_checked(&buf[..]).unwrap();
            let repr = VdifHeaderRepr::parse(&h).unwrap();
            assert_eq!(repr.thread_id, [3, 7][(n % 2) as usize]);
            assert_eq!(slot.psn, 10 + n);
            let expect = clock.index(start) + (n / 2) as i64;
            let got = clock.index(VdifTime {
                epoch: repr.epoch,
                seconds: repr.seconds,
                frame: repr.frame_number,
            });
            assert_eq!(got, expect, "frame {n}");
            assert_eq!(repr.station_id, u16::from_be_bytes(*b"Xx"));
            n += 1;
        }
        assert_eq!(n, 4001);
        assert_eq!(seq.remaining(), Some(0));
    }

    #[test]
    fn drop_every_marks_every_nth_frame_and_keeps_time_and_psn_moving() {
        let plan = GenPlan::new(GenRequest {
            rate: RateRequest::FramesPerSecond(1000),
            stop: StopAfter::Count(100),
            drop_every: 10,
            ..Default::default()
        })
        .unwrap();
        let start = VdifTime::from_unix_second(1_700_000_000).unwrap();
        let mut seq = FrameSequencer::new(&plan, start, 0);
        let mut buf = [0u8; 32];
        let mut dropped = vec![];
        while let Some(slot) = seq.next_header(&mut buf) {
            if slot.dropped {
                dropped.push(slot.psn);
            }
        }
        assert_eq!(dropped, (1..=10).map(|k| k * 10 - 1).collect::<Vec<u64>>());
    }
}
