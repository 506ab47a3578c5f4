//! The fill rule, checked against an independent model on random streams in simulated time: frames lost,
//! duplicated, delayed (reordered) at random; the caller polls at random moments. The output must be every
//! key from the first to the newest, the real frame exactly where it arrived in time and fill everywhere
//! else, and every counter must match the model.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use vlbiflow_formats::fill::is_vdif_fill;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::reorder::{KeyMode, OutputKind, ReorderConfig, ReorderCounters, Reorderer};

const LEN: usize = 48;
/// One frame sent per millisecond.
const PERIOD_US: u64 = 1000;
const DEADLINE: Duration = Duration::from_millis(20);

fn frame(key: u64) -> [u8; LEN] {
    let mut f = [0u8; LEN];
    f[32..40].copy_from_slice(&key.to_le_bytes());
    f
}

#[derive(Debug, Clone)]
struct Sent {
    dropped: bool,
    /// Delays (µs) of each copy that arrives (one, or two for a duplicate).
    delays: Vec<u64>,
}

/// Arrivals (time µs, key) in arrival order.
fn arrivals(sent: &[Sent]) -> Vec<(u64, u64)> {
    let mut a: Vec<(u64, u64)> = sent
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.dropped)
        .flat_map(|(k, s)| s.delays.iter().map(move |d| (k as u64 * PERIOD_US + d, k as u64)))
        .collect();
    a.sort(); // by time, ties by key: a deterministic order
    a
}

/// The model: which keys are in time, the counters, and whether the case has a run of strays long enough
/// to restart the stream (such cases are skipped; restarts have their own test).
fn model(arr: &[(u64, u64)], window: u64) -> (Vec<(u64, bool)>, ReorderCounters, bool) {
    let deadline = DEADLINE.as_micros() as u64;
    let max_key = arr.iter().map(|a| a.1).max().unwrap();
    let n = max_key as usize + 1;
    let mut first: Vec<Option<usize>> = vec![None; n];
    for (i, &(_, k)) in arr.iter().enumerate() {
        first[k as usize].get_or_insert(i);
    }
    let in_time: Vec<bool> = (0..n)
        .map(|k| {
            let Some(i) = first[k] else { return false };
            let (t, _) = arr[i];
            let earlier = &arr[..i];
            // Opened at the first earlier arrival of a later key; forced by an earlier arrival `window` ahead.
            let opened = earlier.iter().find(|a| a.1 > k as u64).map(|a| a.0);
            let forced = earlier.iter().any(|a| a.1 >= k as u64 + window);
            !forced && opened.is_none_or(|o| t < o + deadline)
        })
        .collect();
    let mut c = ReorderCounters {
        received: arr.len() as u64,
        ..Default::default()
    };
    let mut max_before: Option<u64> = None;
    let mut stray_run = 0;
    let mut restart = false;
    for (i, &(_, k)) in arr.iter().enumerate() {
        let stray = max_before.is_some_and(|m| m + 1 > k + 2 * window);
        if stray {
            c.stray += 1;
            stray_run += 1;
            restart |= stray_run >= vlbiflow_seq::RESTART_AFTER;
        } else {
            stray_run = 0;
            if !in_time[k as usize] {
                c.late += 1;
            } else if first[k as usize] != Some(i) {
                c.duplicate += 1;
            } else if max_before.is_some_and(|m| m > k) {
                c.out_of_order += 1;
            }
        }
        max_before = Some(max_before.map_or(k, |m| m.max(k)));
    }
    let out: Vec<(u64, bool)> = (0..n as u64).map(|k| (k, in_time[k as usize])).collect();
    c.delivered = in_time.iter().filter(|&&x| x).count() as u64;
    c.filled = n as u64 - c.delivered;
    (out, c, restart)
}

fn drain(r: &mut Reorderer, now: Instant, out: &mut Vec<(u64, bool)>) {
    while let Some(o) = r.poll_output(now) {
        match o.kind {
            OutputKind::Real => assert_eq!(o.frame, &frame(o.key)[..]),
            OutputKind::Fill => assert!(is_vdif_fill(o.frame)),
        }
        out.push((o.key, o.kind == OutputKind::Real));
    }
}

/// Runs the reorderer over the arrivals, polling after the arrivals `poll` selects (cycled).
fn run(arr: &[(u64, u64)], window: usize, poll: &[bool]) -> (Vec<(u64, bool)>, ReorderCounters) {
    let cfg = ReorderConfig::new(FrameKind::Vdif, LEN, KeyMode::Psn, window, DEADLINE);
    let mut r = Reorderer::new(cfg).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    for (i, &(t, k)) in arr.iter().enumerate() {
        let now = t0 + Duration::from_micros(t);
        if r.push(now, k, &frame(k)).is_err() {
            drain(&mut r, now, &mut out);
            r.push(now, k, &frame(k)).expect("not busy after a drain");
        }
        if poll[i % poll.len()] {
            drain(&mut r, now, &mut out);
        }
        // Every frame pushed is accounted for at every moment.
        let c = r.counters();
        assert_eq!(
            c.received,
            c.delivered + c.late + c.duplicate + c.stray + c.malformed + c.unknown_thread + r.held()
        );
        assert_eq!(c.delivered + c.filled, out.len() as u64);
    }
    let end = t0 + Duration::from_micros(arr.last().unwrap().0) + Duration::from_secs(10);
    drain(&mut r, end, &mut out);
    r.flush();
    drain(&mut r, end, &mut out);
    assert_eq!(r.held(), 0);
    (out, r.counters())
}

fn sent_strategy(n: usize, max_delay_us: u64) -> impl Strategy<Value = Vec<Sent>> {
    prop::collection::vec(
        (
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.1),
            0..max_delay_us,
            0..max_delay_us,
        ),
        n,
    )
    .prop_map(|v| {
        let mut sent: Vec<Sent> = v
            .into_iter()
            .map(|(dropped, dup, d1, d2)| Sent {
                dropped,
                delays: if dup { vec![d1, d2] } else { vec![d1] },
            })
            .collect();
        // Key 0 starts the stream: it arrives first, once.
        sent[0] = Sent {
            dropped: false,
            delays: vec![0],
        };
        sent
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any loss, duplication and delay (also beyond the deadline), any window, any polling: output and
    /// counters are the model's.
    #[test]
    fn output_is_exactly_the_in_time_frames_with_fill_elsewhere(
        sent in (2usize..300, prop::sample::select(vec![3_000u64, 15_000, 60_000]))
            .prop_flat_map(|(n, d)| sent_strategy(n, d)),
        window in prop::sample::select(vec![1usize, 2, 4, 8, 32, 1024]),
        poll in prop::collection::vec(prop::bool::weighted(0.3), 1..20),
    ) {
        let arr = arrivals(&sent);
        let (want, counters, restart) = model(&arr, window as u64);
        prop_assume!(!restart);
        let (out, got) = run(&arr, window, &poll);
        prop_assert_eq!(out, want);
        prop_assert_eq!(got, counters);
        prop_assert_eq!(got.received, got.delivered + got.late + got.duplicate + got.stray);
    }

    /// Delays below the deadline and a window wider than the reordering: a key is filled if and only if it
    /// was dropped, nothing is late, and delivered + filled is the number of keys sent.
    #[test]
    fn with_delays_below_the_deadline_fill_is_exactly_the_dropped_keys(
        sent in (2usize..300).prop_flat_map(|n| sent_strategy(n, DEADLINE.as_micros() as u64 - 1)),
        poll in prop::collection::vec(prop::bool::weighted(0.3), 1..20),
    ) {
        let mut sent = sent;
        let n = sent.len();
        sent[n - 1].dropped = false;
        let arr = arrivals(&sent);
        let (out, c) = run(&arr, 1024, &poll);
        let filled: Vec<u64> = out.iter().filter(|o| !o.1).map(|o| o.0).collect();
        let dropped: Vec<u64> = (0..n as u64).filter(|&k| sent[k as usize].dropped).collect();
        prop_assert_eq!(filled, dropped);
        prop_assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), (0..n as u64).collect::<Vec<_>>());
        prop_assert_eq!(c.delivered + c.filled, n as u64);
        prop_assert_eq!(c.late, 0);
        prop_assert_eq!(c.stray, 0);
        let dups = sent.iter().filter(|s| !s.dropped && s.delays.len() == 2).count() as u64;
        prop_assert_eq!(c.duplicate, dups);
    }
}
