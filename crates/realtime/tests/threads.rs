//! Multi-thread VDIF: frames keyed by (time, thread) come out as one stream in time order, threads in the
//! configured order within each time stamp, with stamped fill exactly where frames were lost.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use vlbiflow_formats::fill::is_vdif_fill;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::reorder::{FillMode, KeyMode, OutputKind, ReorderConfig, Reorderer};
use vlbiflow_testkit::vdif::Frame;

const LEN: usize = 64;
const RATE: u32 = 25;
const SECOND: u32 = 7_000_000;

fn vdif_frame(thread: u16, index: u32) -> [u8; LEN] {
    let mut f = [0u8; LEN];
    Frame::new(LEN)
        .seconds(SECOND)
        .epoch(50)
        .at(u64::from(index), RATE)
        .thread(thread)
        .bits(1)
        .write(&mut f);
    f[40] = thread as u8;
    f[41] = index as u8;
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn threads_interleave_in_time_order_and_fill_exactly_the_lost(
        threads in Just((0u16..12).collect::<Vec<_>>()).prop_shuffle()
            .prop_flat_map(|t| (1..=t.len()).prop_map(move |n| t[..n].to_vec())),
        frames in 2u32..120,
        seed in prop::collection::vec((prop::bool::weighted(0.1), 0u64..15_000), 120 * 12),
    ) {
        let n = threads.len();
        let cfg = ReorderConfig {
            fill: FillMode::Stamped,
            ..ReorderConfig::new(
                FrameKind::Vdif,
                LEN,
                KeyMode::VdifTime { frame_rate: RATE, threads: threads.clone() },
                256,
                Duration::from_millis(20),
            )
        };
        let mut r = Reorderer::new(cfg).unwrap();
        // Frame (index, position) sent at 1 ms per time stamp, delayed below the deadline; the first and the
        // last always arrive (the stream's extent).
        let mut arrivals = Vec::new();
        let mut lost = Vec::new();
        for index in 0..frames {
            for (pos, &thread) in threads.iter().enumerate() {
                let (drop, delay) = seed[index as usize * n + pos];
                let edge = (index == 0 && pos == 0) || (index == frames - 1 && pos == n - 1);
                if drop && !edge {
                    lost.push((thread, index));
                } else {
                    let t = if index == 0 && pos == 0 { 0 } else { 1000 + u64::from(index) * 1000 + delay };
                    arrivals.push((t, thread, index));
                }
            }
        }
        arrivals.sort();
        let t0 = Instant::now();
        let mut out = Vec::new();
        let drain = |r: &mut Reorderer, now: Instant, out: &mut Vec<(u16, u32, bool)>| {
            while let Some(o) = r.poll_output(now) {
                let h = VdifHeader::new_unchecked(o.frame);
                let real = o.kind == OutputKind::Real;
                assert_eq!(real, !is_vdif_fill(o.frame));
                if real {
                    assert_eq!((o.frame[40], o.frame[41]), (h.thread_id() as u8, ((h.seconds() - SECOND) * RATE + h.frame_number()) as u8));
                }
                assert_eq!(h.epoch(), 50);
                out.push((h.thread_id(), (h.seconds() - SECOND) * RATE + h.frame_number(), real));
            }
        };
        for &(t, thread, index) in &arrivals {
            let now = t0 + Duration::from_micros(t);
            if r.push_vdif(now, &vdif_frame(thread, index)).is_err() {
                drain(&mut r, now, &mut out);
                r.push_vdif(now, &vdif_frame(thread, index)).unwrap();
            }
            drain(&mut r, now, &mut out);
        }
        drain(&mut r, t0 + Duration::from_secs(10), &mut out);
        let want: Vec<(u16, u32, bool)> = (0..frames)
            .flat_map(|i| threads.iter().map(move |&t| (t, i)))
            .map(|(t, i)| (t, i, !lost.contains(&(t, i))))
            .collect();
        prop_assert_eq!(out, want);
        let c = r.counters();
        prop_assert_eq!(c.filled, lost.len() as u64);
        prop_assert_eq!(c.late + c.stray + c.duplicate, 0);
    }
}
