//! Pacing when the I/O thread runs late, in simulated time: a sender held back only by pacing keeps its
//! average rate by catching up (within `catch_up`, and what it lost beyond that at up to twice its rate
//! afterwards), an idle one releases one burst only.

use std::time::{Duration, Instant};

use vlbiflow_xfer_proto::wire::{Feedback, IP_UDP_OVERHEAD};
use vlbiflow_xfer_proto::{RateConfig, Sender, SenderConfig};

const RATE: f64 = 2e9;
const BURST: u32 = 32;

fn sender() -> Sender {
    let mut c = SenderConfig::new(7, RateConfig::fixed(RATE));
    c.max_burst = BURST;
    Sender::new(c)
}

/// Polls the sender until it holds back, as the I/O loop does on each wake; returns (datagrams, wire bytes).
fn wake(s: &mut Sender, now: Instant) -> (usize, u64) {
    let (mut n, mut bytes) = (0, 0);
    while let Some(t) = s.poll_transmit(now) {
        n += 1;
        bytes += (t.datagram_len() + IP_UDP_OVERHEAD) as u64;
    }
    (n, bytes)
}

/// Drives the sender for `span`, each wake `late` after the deadline it asked for; returns the wire rate
/// in bit/s and the most datagrams released at one wake.
fn run_late(late: Duration, span: Duration) -> (f64, usize) {
    let mut s = sender();
    s.add_file("scan.vdif", 4 << 30, None).unwrap();
    s.close();
    let t0 = Instant::now();
    let mut now = t0;
    let (mut bytes, mut most) = (0u64, 0usize);
    while now < t0 + span {
        let (n, b) = wake(&mut s, now);
        bytes += b;
        most = most.max(n);
        let next = s.poll_timeout().expect("a sender with data has a deadline");
        now = next.max(now + Duration::from_micros(1)) + late;
    }
    (bytes as f64 * 8.0 / (now - t0).as_secs_f64(), most)
}

fn datagrams_in(d: Duration) -> usize {
    (RATE / 8.0 * d.as_secs_f64() / (8192 + 64 + IP_UDP_OVERHEAD) as f64).ceil() as usize
}

#[test]
fn a_late_backlogged_sender_keeps_its_rate() {
    let catch_up = SenderConfig::new(0, RateConfig::fixed(RATE)).catch_up;
    // 2 ms late on every wake: more than one burst (32 datagrams = 1.06 ms at 2 Gb/s), less than catch_up
    for late in [
        Duration::ZERO,
        Duration::from_millis(2),
        Duration::from_micros(3500),
    ] {
        let (rate, most) = run_late(late, Duration::from_secs(1));
        eprintln!(
            "{late:?} late: {:.1} Mb/s, at most {most} datagrams at once",
            rate / 1e6
        );
        assert!(rate <= RATE * 1.005, "{late:?} late: {rate} above the ceiling");
        assert!(rate >= RATE * 0.99, "{late:?} late: {rate} fell behind");
        assert!(
            most <= datagrams_in(catch_up) + BURST as usize + 1,
            "{most} at once"
        );
    }
    // later than catch_up on every wake, with no RTT known (so no time is made up afterwards): what is
    // beyond catch_up is lost (no unbounded bursts)
    let (rate, most) = run_late(Duration::from_millis(20), Duration::from_secs(1));
    assert!(rate < RATE * 0.5, "{rate}");
    assert!(
        most <= datagrams_in(catch_up) + BURST as usize + 1,
        "{most} at once"
    );
}

#[test]
fn an_idle_sender_releases_one_burst() {
    let mut s = sender();
    s.add_file("first", 1 << 20, None).unwrap();
    let t0 = Instant::now();
    let mut now = t0;
    // send the first file out, then nothing to send for 50 ms
    for _ in 0..10_000 {
        wake(&mut s, now);
        now += Duration::from_micros(100);
    }
    assert_eq!(wake(&mut s, now).0, 0, "the first file is out");
    now += Duration::from_millis(50);
    s.add_file("second", 64 << 20, None).unwrap();
    let (n, _) = wake(&mut s, now);
    assert!(n <= BURST as usize + 1, "{n} datagrams after idling");
    assert!(n >= 1);
}

/// Drives a backlogged sender for 2 s that stalls for `stall` every 100 ms, with an RTT of `rtt` known
/// from one feedback; returns the wire rate (bit/s), the most datagrams released at one wake and the
/// fastest paced rate (bit/s) between single-datagram wakes.
fn run_stalls(rtt: Duration, stall: Duration) -> (f64, usize, f64) {
    let mut s = sender();
    s.add_file("scan.vdif", 4 << 30, None).unwrap();
    s.close();
    let t0 = Instant::now();
    let mut now = t0;
    // one feedback `rtt` in, echoing the first datagram: the RTT is known (the debt is bounded by half)
    let (mut bytes, mut most, mut fed) = (0u64, 0usize, false);
    let mut next_stall = t0 + Duration::from_millis(100);
    let mut fastest = f64::INFINITY;
    let mut prev: Option<(Instant, u64)> = None;
    while now < t0 + Duration::from_secs(2) {
        if !fed && now >= t0 + rtt {
            s.handle_feedback_datagram(
                now,
                Feedback {
                    n: 1,
                    highest_seq: Some(0),
                    loss_from: 1,
                    recv_bytes: 8192,
                    recv_datagrams: 1,
                    recv_time_us: (rtt / 2).as_micros() as u64,
                    echo_ts_us: 0,
                    ..Feedback::default()
                },
            );
            let got = s.rate().min_rtt().expect("an RTT from the echo");
            assert!(got.abs_diff(now - t0) < Duration::from_millis(1), "{got:?}");
            fed = true;
        }
        let (n, b) = wake(&mut s, now);
        bytes += b;
        most = most.max(n);
        // the shortest spacing between wakes that sent a single datagram: the fastest paced rate
        if n == 1 {
            if let Some((t, pb)) = prev {
                fastest = fastest.min((now - t).as_secs_f64() / pb as f64);
            }
            prev = Some((now, b));
        } else {
            prev = None;
        }
        let next = s.poll_timeout().expect("a sender with data has a deadline");
        now = next.max(now + Duration::from_micros(1));
        if now >= next_stall {
            now += stall;
            next_stall += Duration::from_millis(100);
            prev = None;
        }
    }
    let rate = bytes as f64 * 8.0 / (now - t0).as_secs_f64();
    eprintln!(
        "RTT {rtt:?}, stalls of {stall:?} every 100 ms: {:.1} Mb/s, at most {most} datagrams at once, fastest {:.0} Mb/s",
        rate / 1e6,
        8.0 / fastest / 1e6
    );
    (rate, most, 8.0 / fastest)
}

/// A sender that stalls now and then for longer than `catch_up` (a busy host: measured at 100 ms RTT
/// through the emulator, 0.4-1.1 s of 14 s lost this way and the sender 3-11% below its pacing rate)
/// makes the lost time up afterwards at no more than twice its rate, so its average stays at the rate.
#[test]
fn time_lost_to_a_long_stall_is_made_up_at_twice_the_rate_at_most() {
    let cfg = SenderConfig::new(0, RateConfig::fixed(RATE));
    let (catch_up, max_debt) = (cfg.catch_up, cfg.max_pace_debt);
    let stall = Duration::from_millis(10);
    assert!(stall > catch_up && stall < max_debt);
    let (rate, most, fastest) = run_stalls(Duration::from_millis(50), stall);
    assert!(rate <= RATE * 1.005, "{rate} above the ceiling");
    assert!(rate >= RATE * 0.99, "{rate} fell behind");
    assert!(
        most <= datagrams_in(catch_up) + BURST as usize + 1,
        "{most} at once"
    );
    assert!(fastest <= RATE * 2.01, "paced at {fastest} b/s");
}

/// On a path of a fraction of a millisecond (a LAN; 0 ms through the emulator) half the RTT would leave
/// no debt at all: it may still reach `min_pace_debt` (2 ms). Stalls of 6 ms every 100 ms (2 ms beyond
/// `catch_up`) cost 2% of the rate without it (1959.5 Mb/s of 2000); with it 1994.0, never above twice
/// the rate.
/// Through the emulator at 0 ms and 5% loss the sender had been 0.2-0.8 s late in 13 s pushes.
#[test]
fn on_a_short_path_a_stall_is_made_up_by_the_least_debt() {
    let cfg = SenderConfig::new(0, RateConfig::fixed(RATE));
    let stall = Duration::from_millis(6);
    let (rate, most, fastest) = run_stalls(Duration::from_micros(300), stall);
    assert!(rate <= RATE * 1.005, "{rate} above the ceiling");
    assert!(rate >= RATE * 0.995, "{rate} fell behind");
    assert!(
        most <= datagrams_in(cfg.catch_up) + BURST as usize + 1,
        "{most} at once"
    );
    assert!(fastest <= RATE * 2.01, "paced at {fastest} b/s");
}

/// A sender held by the in-flight cap (feedback that comes late: a receiver not scheduled, feedback
/// queued) loses that time without being "late": it shows as `window_us`, apart from `late_us`, and is
/// not made up afterwards (one burst, as after idling).
#[test]
fn time_held_by_the_in_flight_cap_is_counted_apart_and_not_made_up() {
    let mut c = SenderConfig::new(7, RateConfig::auto(1e9));
    c.max_burst = BURST;
    let mut s = Sender::new(c);
    s.add_file("scan.vdif", 4 << 30, None).unwrap();
    s.close();
    let t0 = Instant::now();
    let mut now = t0;
    let cap = s.rate().cwnd().expect("automatic mode caps what is in flight");
    // send without feedback until the cap holds the sender
    let mut sent = 0u64;
    loop {
        sent += wake(&mut s, now).0 as u64;
        if s.inflight_bytes() >= cap {
            break;
        }
        now = s
            .poll_timeout()
            .expect("a deadline")
            .max(now + Duration::from_micros(1));
        assert!(now < t0 + Duration::from_secs(1), "the cap never closed");
    }
    assert_eq!(wake(&mut s, now).0, 0, "held by the cap");
    // the feedback comes 20 ms late and acknowledges everything
    let hold = Duration::from_millis(20);
    now += hold;
    assert_eq!(wake(&mut s, now).0, 0, "still held");
    s.handle_feedback_datagram(
        now,
        Feedback {
            n: 1,
            highest_seq: Some(sent - 1),
            loss_from: sent,
            recv_bytes: sent * 8192,
            recv_datagrams: sent,
            recv_time_us: (now - t0).as_micros() as u64,
            echo_ts_us: 0,
            ..Feedback::default()
        },
    );
    let (n, _) = wake(&mut s, now);
    assert!(
        (1..=BURST as usize + 1).contains(&n),
        "{n} datagrams after the hold"
    );
    let st = s.stats();
    eprintln!(
        "held {hold:?}: window {} µs, late {} µs",
        st.window_us, st.late_us
    );
    assert_eq!(st.late_us, 0, "a sender held by the cap is not late");
    assert!(
        st.window_us >= (hold / 2).as_micros() as u64 && st.window_us <= (hold * 2).as_micros() as u64,
        "{} µs counted for a hold of {hold:?}",
        st.window_us
    );
}
