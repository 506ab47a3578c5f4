//! A receiver that stops reading for a while (its disk or its CPU busy) and then drains its socket buffer:
//! handled with the kernel's arrival times, the feedback shows the path (no queue, no delivery faster
//! than the sender sent), not the receiver's own backlog, which would read as congestion to the rate
//! control and then as a burst of bandwidth.

use std::time::{Duration, Instant};

use vlbiflow_xfer_proto::wire::{self, ControlMsg, Feedback};
use vlbiflow_xfer_proto::{RateConfig, Receiver, ReceiverConfig, Sender, SenderConfig};

const RATE: f64 = 1e9;
const ONE_WAY: Duration = Duration::from_millis(10);
const STALL_FROM: Duration = Duration::from_millis(100);
const STALL_TO: Duration = Duration::from_millis(300);

/// The datagrams a sender paced at `RATE` sends in `span`, each with its send time (from `t0`).
fn sent(t0: Instant, span: Duration) -> (Sender, Vec<(Duration, Vec<u8>)>) {
    let mut s = Sender::new(SenderConfig::new(3, RateConfig::fixed(RATE)));
    s.add_file("scan.vdif", 1 << 30, None).unwrap();
    s.close();
    let mut out = Vec::new();
    let mut now = t0;
    while now < t0 + span {
        while let Some(t) = s.poll_transmit(now) {
            let mut d = vec![0u8; t.datagram_len()];
            t.emit_header(&mut d);
            d[wire::HEADER_LEN..].fill(0x5a);
            s.seal(&mut d);
            out.push((now - t0, d));
        }
        now = s
            .poll_timeout()
            .expect("a deadline")
            .max(now + Duration::from_micros(1));
    }
    (s, out)
}

/// Runs the receiver over the datagrams: handled as they arrive, except that those arriving between
/// `STALL_FROM` and `STALL_TO` are read from `STALL_TO` on, ten times as fast as they came, with
/// (`with_arrival`) or without their arrival times. Returns the feedbacks.
fn feedbacks(with_arrival: bool) -> Vec<Feedback> {
    let t0 = Instant::now();
    let (mut s, dgrams) = sent(t0, Duration::from_millis(400));
    let mut r = Receiver::new(ReceiverConfig::default());
    while let Some(m) = s.poll_control() {
        r.handle_control(t0, m);
    }
    let mut fbs = Vec::new();
    let mut collect = |r: &mut Receiver| {
        while let Some(m) = r.poll_control() {
            if let ControlMsg::Feedback(f) = m {
                fbs.push(f);
            }
        }
    };
    let stalled = |t: Instant| (STALL_FROM..STALL_TO).contains(&(t - t0));
    let mut last = t0;
    for (at, d) in &dgrams {
        let arrived = t0 + *at + ONE_WAY;
        // the backlog is read at ten times the rate it came in at
        let now = if stalled(arrived) {
            t0 + STALL_TO + (arrived - t0 - STALL_FROM) / 10
        } else {
            arrived
        }
        .max(last);
        // timers that fell due before this datagram was handled; those due while stalled run late
        while let Some(t) = r.poll_timeout().filter(|&t| t <= now) {
            r.handle_timeout(if stalled(t) { now } else { t.max(last) });
            collect(&mut r);
        }
        last = now;
        let got = if with_arrival {
            r.handle_datagram_at(now, arrived, d)
        } else {
            r.handle_datagram(now, d)
        };
        assert!(got.is_some(), "datagram refused: {:?}", r.stats());
    }
    let end = t0 + Duration::from_millis(420);
    while let Some(t) = r.poll_timeout().filter(|&t| t <= end) {
        r.handle_timeout(t);
        collect(&mut r);
    }
    fbs
}

/// (largest queueing delay reported, fastest delivery over any two feedbacks at least 20 ms apart, b/s).
fn worst(fbs: &[Feedback]) -> (Duration, f64) {
    let q = fbs.iter().map(|f| f.queue_delay_us).max().unwrap_or(0);
    let mut fastest = 0f64;
    for (i, a) in fbs.iter().enumerate() {
        if let Some(b) = fbs[i..]
            .iter()
            .find(|b| b.recv_time_us >= a.recv_time_us + 20_000)
        {
            let r = (b.recv_bytes - a.recv_bytes) as f64 * 8e6 / (b.recv_time_us - a.recv_time_us) as f64;
            fastest = fastest.max(r);
        }
    }
    (Duration::from_micros(q), fastest)
}

#[test]
fn a_stalled_receiver_reports_the_path_not_its_backlog() {
    let (q, fastest) = worst(&feedbacks(true));
    eprintln!(
        "with arrival times: queue at most {q:?}, delivery at most {:.0} Mb/s",
        fastest / 1e6
    );
    assert!(q < Duration::from_millis(1), "queue {q:?}");
    assert!(fastest < RATE * 1.02, "delivery {fastest} above the send rate");

    // the same, handled at the time it is read: the stall reads as a queue and its drain as a burst
    let (q, fastest) = worst(&feedbacks(false));
    eprintln!(
        "without: queue at most {q:?}, delivery at most {:.0} Mb/s",
        fastest / 1e6
    );
    assert!(q > Duration::from_millis(100), "queue {q:?}");
    assert!(fastest > RATE * 2.0, "delivery {fastest}");
}
