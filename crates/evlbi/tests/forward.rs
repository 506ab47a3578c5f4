//! Forwarding over real loopback sockets: every destination gets its frames with its own PSN and thread
//! selection; a slow one loses frames (counted) without holding up the producer; TCP reconnects; and
//! forwarding while recording sends exactly what the recorder stored.

mod common;

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{frame, LEN};
use vlbiflow_evlbi::dest::{DestSpec, Protocol};
use vlbiflow_evlbi::forward::DestStatus;
use vlbiflow_evlbi::{ForwardSource, Forwarder};
use vlbiflow_formats::notice::{Cause, GapNotice};

fn psn_of(d: &[u8]) -> u64 {
    u64::from_le_bytes(d[..8].try_into().unwrap())
}

fn index_of(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[32..40].try_into().unwrap())
}

fn invariant(d: &DestStatus) {
    assert_eq!(
        d.offered,
        d.sent + d.dropped_queue_full + d.dropped_send_error + d.dropped_disconnected + d.dropped_at_stop,
        "{d:?}"
    );
    assert_eq!(d.queued, 0, "{d:?}");
}

#[test]
fn each_destination_gets_its_threads_with_its_own_psn() {
    let (a, a_addr) = common::listener();
    let (b, b_addr) = common::listener();
    let all = DestSpec::parse(&format!("all=udps@{a_addr},psn=100")).unwrap();
    let one = DestSpec::parse(&format!("one=vdif@{b_addr},threads=1")).unwrap();
    let (fwd, mut tap) = Forwarder::start(vec![all, one], LEN, &ForwardSource::vdif_psn()).unwrap();
    // Two threads at every time index; the input PSN counts every frame from 7000.
    let mut frames = Vec::new();
    for i in 0..500u64 {
        frames.extend_from_slice(&frame((i % 2) as u16, i / 2));
    }
    let psns: Vec<u64> = (7000..7500).collect();
    // In batches, as the recorder hands them over.
    for (chunk, p) in frames.chunks(LEN * 7).zip(psns.chunks(7)) {
        tap.offer_frames(chunk, LEN, Some(p));
    }
    drop(tap);
    let st = fwd.finish(Duration::from_secs(10));
    let got_a = common::recv_n(&a, 500);
    for (i, d) in got_a.iter().enumerate() {
        assert_eq!(psn_of(d), 100 + i as u64);
        assert_eq!(&d[8..], &frame((i % 2) as u16, i as u64 / 2)[..]);
    }
    let got_b = common::recv_n(&b, 250);
    for (k, f) in got_b.iter().enumerate() {
        assert_eq!(f, &frame(1, k as u64), "plain VDIF, thread 1 only");
    }
    assert_eq!((st[0].offered, st[0].sent, st[0].next_psn), (500, 500, 600));
    assert_eq!((st[1].offered, st[1].filtered, st[1].sent), (250, 250, 250));
    assert_eq!(st[0].sent_bytes, 500 * (LEN as u64 + 8));
    st.iter().for_each(invariant);
}

#[test]
fn a_slow_destination_drops_and_counts_what_it_cannot_take() {
    let (a, a_addr) = common::listener();
    // 1 Mb/s and 16 frames of queue; 1000 frames offered at once.
    let slow = DestSpec::parse(&format!("slow=udps@{a_addr},rate=1Mbps,queue=16")).unwrap();
    let (fwd, mut tap) = Forwarder::start(vec![slow], LEN, &ForwardSource::vdif_psn()).unwrap();
    for i in 0..1000u64 {
        tap.offer(Some(i), &frame(0, i));
        if i % 10 == 9 {
            tap.publish();
        }
    }
    tap.publish();
    drop(tap);
    let st = fwd.finish(Duration::from_secs(30));
    let d = &st[0];
    invariant(d);
    assert_eq!(d.offered, 1000);
    assert!(d.dropped_queue_full > 0, "{d:?}");
    // What went is in order, each frame at its position (its index); the drops are declared.
    let (got, mut notices) = common::recv_with_notices(&a, d.sent as usize);
    // Drops after the last frame that went are declared after it (the socket's read timeout bounds this).
    let mut buf = vec![0u8; 65536];
    while (notices.len() as u64) < d.notices_sent {
        let k = a.recv(&mut buf).expect("a notice after the last frame");
        assert!(GapNotice::<&[u8]>::looks_like(&buf[..k]), "only notices follow");
        notices.push(buf[..k].to_vec());
    }
    let mut last = None;
    for g in &got {
        let p = psn_of(g);
        assert_eq!(index_of(&g[8..]), p);
        assert!(last.is_none_or(|l| p > l));
        last = Some(p);
    }
    // Every position not sent was declared queue-full, in the notices that went before the next frame.
    let mut declared = Vec::new();
    for n in &notices {
        for r in GapNotice::new_checked(&n[..]).unwrap().ranges() {
            assert_eq!(r.cause, Cause::QueueFull);
            declared.extend(r.first..r.first + u64::from(r.count));
        }
    }
    let sent: std::collections::HashSet<u64> = got.iter().map(|g| psn_of(g)).collect();
    let last_sent = *sent.iter().max().unwrap();
    let missing: Vec<u64> = (0..last_sent).filter(|p| !sent.contains(p)).collect();
    let (before, mut after): (Vec<u64>, Vec<u64>) = declared.into_iter().partition(|&p| p < last_sent);
    assert_eq!(before, missing);
    // 1000 frames offered in microseconds against a queue of 16 that drains about 120 a second: the
    // tail was dropped, and the end-of-stream notice declares every position after the last frame that
    // went.
    assert!(last_sent + 1 < d.offered, "the tail went: {last_sent}");
    after.sort_unstable();
    assert_eq!(after, (last_sent + 1..d.offered).collect::<Vec<u64>>());
    assert_eq!(d.notices_sent, notices.len() as u64);
}

#[test]
fn a_destination_nobody_listens_on_counts_its_losses() {
    // A bound socket that is closed again: nobody listens there.
    let addr = common::free_port();
    let d = DestSpec::parse(&format!("nobody=udps@{addr}")).unwrap();
    let (fwd, mut tap) = Forwarder::start(vec![d], LEN, &ForwardSource::vdif_psn()).unwrap();
    for i in 0..300u64 {
        tap.offer(Some(i), &frame(0, i));
        tap.publish();
    }
    drop(tap);
    let st = fwd.finish(Duration::from_secs(10));
    invariant(&st[0]);
    assert_eq!(st[0].offered, 300);
}

#[test]
fn tcp_destination_reconnects_after_the_peer_goes_away() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let d = DestSpec::parse(&format!("t=tcp@{addr}")).unwrap();
    assert_eq!(d.protocol, Protocol::Tcp);
    let (accepted_tx, accepted_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        // First connection: 100 frames, then hang up.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut first = vec![0u8; 100 * LEN];
        s.read_exact(&mut first).unwrap();
        drop(s);
        // Second connection: read to the end.
        let (mut s, _) = listener.accept().unwrap();
        accepted_tx.send(()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut second = Vec::new();
        s.read_to_end(&mut second).unwrap();
        (first, second)
    });
    let (fwd, mut tap) = Forwarder::start(vec![d], LEN, &ForwardSource::vdif_psn()).unwrap();
    for i in 0..100u64 {
        tap.offer(Some(i), &frame(0, i));
    }
    tap.publish();
    // Keep a trickle going until the sender has noticed the hang-up and connected again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 100u64;
    while accepted_rx.try_recv().is_err() {
        assert!(Instant::now() < deadline, "no reconnection");
        tap.offer(Some(i), &frame(0, i));
        tap.publish();
        i += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    for k in 0..100u64 {
        tap.offer(Some(100_000 + k), &frame(0, 100_000 + k));
    }
    tap.publish();
    drop(tap);
    let st = fwd.finish(Duration::from_secs(10));
    let (first, second) = reader.join().unwrap();
    for (k, f) in first.chunks_exact(LEN).enumerate() {
        assert_eq!(f, &frame(0, k as u64)[..]);
    }
    // The new connection starts on a frame boundary and ends with the last 100 frames in order.
    assert_eq!(second.len() % LEN, 0);
    let idx: Vec<u64> = second.chunks_exact(LEN).map(index_of).collect();
    assert!(idx.len() >= 100);
    assert_eq!(idx[idx.len() - 100..], (100_000..100_100).collect::<Vec<_>>()[..]);
    assert!(idx.windows(2).all(|w| w[0] < w[1]));
    let d = &st[0];
    assert_eq!(d.connects, 2, "{d:?}");
    assert!(d.last_error.is_some());
    assert_eq!(d.offered, i + 100);
    assert_eq!(
        d.offered,
        d.sent + d.dropped_queue_full + d.dropped_send_error + d.dropped_disconnected + d.dropped_at_stop
    );
}

#[test]
fn forwarding_while_recording_sends_exactly_what_is_recorded() {
    use vlbiflow_recorder::{Recorder, RecorderConfig, StreamSpec};
    let dir = tempfile::tempdir().unwrap();
    let disks: Vec<_> = (0..2)
        .map(|i| {
            let p = dir.path().join(format!("d{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    let (fwd_rx, fwd_addr) = common::listener();
    let stream = StreamSpec::parse(&format!("a=vdif@127.0.0.1:0,psn,frame-size={LEN}")).unwrap();
    let mut config = RecorderConfig::new(vec![stream], disks.clone(), "fwd_test");
    config.block_size = 64 * 1024;
    config.pool_blocks = Some(64);
    config.direct_io = false;
    config.recv_buffer = 16 << 20;
    let d = DestSpec::parse(&format!("c=udps@{fwd_addr}")).unwrap();
    let (fwd, tap) = Forwarder::start(vec![d], LEN, &ForwardSource::for_stream(&config.streams[0])).unwrap();
    let h = Recorder::start_with_taps(config, vec![Some(tap.into_recorder_tap(LEN))]).unwrap();
    let to = h.local_addrs()[0];
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    const N: u64 = 1500;
    for i in 0..N {
        // The station's own PSN counts from 5000; the forwarded one from 0.
        s.send_to(&common::udps(5000 + i, &frame(0, i)), to).unwrap();
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    // A stray datagram on the recording port: rejected there, never forwarded.
    s.send_to(b"port scan", to).unwrap();
    let got = common::recv_n(&fwd_rx, N as usize);
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.status().totals().packets < N && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    h.stop();
    let summary = h.wait().unwrap();
    let st = fwd.finish(Duration::from_secs(5));
    let c = &summary.status.streams[0].counters;
    assert_eq!((c.packets, c.lost), (N, 0));
    for (i, g) in got.iter().enumerate() {
        assert_eq!(psn_of(g), i as u64);
        assert_eq!(&g[8..], &frame(0, i as u64)[..]);
    }
    assert_eq!((st[0].offered, st[0].sent), (N, N));
    invariant(&st[0]);
    // The recording holds the same frames.
    let rec = vlbiflow_reader::locate(
        &["fwd_test".into()],
        &disks.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut reader = vlbiflow_reader::frames::FrameReader::open(&rec);
    let mut n = 0u64;
    while let Some(b) = reader.next_batch() {
        for (_, f) in b.iter() {
            assert_eq!(f, &frame(0, n)[..]);
            n += 1;
        }
    }
    assert_eq!(n, N);
}

/// Station to correlator in one process over loopback: the backend's stream (two VDIF threads, with PSN)
/// loses frames before the recorder; the recorder forwards what it records as udps to a receiver whose
/// output is exactly the stream: every frame at its own position, fill where the station lost frames,
/// and that fill declared by the forwarder's gap notices. The same without a PSN on the input (positions
/// from the VDIF time and thread), and with a thread selection.
#[test]
fn frames_lost_before_the_station_are_fill_at_their_own_place_and_declared() {
    use std::sync::atomic::AtomicBool;
    use vlbiflow_evlbi::receive::{run_receive, ReceiveConfig};
    use vlbiflow_evlbi::OutputSpec;
    use vlbiflow_formats::fill::is_vdif_fill;
    use vlbiflow_recorder::{Recorder, RecorderConfig, StreamSpec};

    const N: u64 = 3000;
    // Stream frame n: thread n % 2 at time index n / 2. Lost before the station: every 37th.
    let lost = |n: u64| n % 37 == 5;
    for (psn_input, dest_opts, threads) in [(true, "", 2u64), (false, "", 2), (true, ",threads=1", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("d0");
        std::fs::create_dir(&disk).unwrap();
        let out_path = dir.path().join("corr.vdif");
        let mut rc = ReceiveConfig::new("127.0.0.1:0".parse().unwrap(), OutputSpec::File(out_path.clone()));
        rc.frame_len = LEN;
        rc.first_key = Some(0);
        rc.count = Some(N / 2 * threads);
        rc.deadline = Duration::from_millis(500);
        rc.idle = Some(Duration::from_secs(20));
        rc.recv_buffer = 16 << 20;
        let (tx, ready) = mpsc::channel();
        let receiver = std::thread::spawn(move || {
            let stop = AtomicBool::new(false);
            run_receive(&rc, &stop, &mut |s| {
                if s.elapsed_s == 0.0 {
                    let _ = tx.send(s.listen.parse::<std::net::SocketAddr>().unwrap());
                }
            })
            .unwrap()
        });
        let corr = ready.recv_timeout(Duration::from_secs(20)).unwrap();

        let spec = if psn_input {
            format!("a=vdif@127.0.0.1:0,psn,frame-size={LEN}")
        } else {
            format!("a=vdif@127.0.0.1:0,frame-size={LEN}")
        };
        let stream = StreamSpec::parse(&spec).unwrap();
        let mut config = RecorderConfig::new(vec![stream], vec![disk.clone()], "fwd_lossy");
        config.block_size = 64 * 1024;
        config.pool_blocks = Some(64);
        config.direct_io = false;
        config.recv_buffer = 16 << 20;
        let d = DestSpec::parse(&format!("c=udps@{corr}{dest_opts}")).unwrap();
        let (fwd, tap) =
            Forwarder::start(vec![d], LEN, &ForwardSource::for_stream(&config.streams[0])).unwrap();
        let h = Recorder::start_with_taps(config, vec![Some(tap.into_recorder_tap(LEN))]).unwrap();
        let to = h.local_addrs()[0];
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0;
        for n in 0..N {
            if lost(n) {
                continue;
            }
            let f = frame((n % 2) as u16, n / 2);
            if psn_input {
                s.send_to(&common::udps(9000 + n, &f), to).unwrap();
            } else {
                s.send_to(&f, to).unwrap();
            }
            sent += 1;
            if sent % 50 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.status().totals().packets < sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        h.stop();
        h.wait().unwrap();
        let st = fwd.finish(Duration::from_secs(5));
        let corr = receiver.join().unwrap();

        // Positions this destination takes: every frame (2 threads), or thread 1 only.
        let positions: Vec<u64> = (0..N).filter(|n| threads == 2 || n % 2 == 1).collect();
        let want_fill = positions.iter().filter(|&&n| lost(n)).count() as u64;
        let data = std::fs::read(&out_path).unwrap();
        assert_eq!(data.len() as u64, positions.len() as u64 * LEN as u64);
        for (i, f) in data.chunks_exact(LEN).enumerate() {
            let n = positions[i];
            if lost(n) {
                assert!(is_vdif_fill(f), "position {i} (stream frame {n}) should be fill");
            } else {
                assert_eq!(
                    f,
                    &frame((n % 2) as u16, n / 2)[..],
                    "position {i} (stream frame {n})"
                );
            }
        }
        let d = &st[0];
        assert_eq!(d.skipped_captured_lost, want_fill, "{d:?}");
        assert_eq!(d.positions_missing(), want_fill, "{d:?}");
        assert_eq!(corr.reorder.filled, want_fill, "{corr:?}");
        assert_eq!((corr.fill_declared, corr.fill_path), (want_fill, 0), "{corr:?}");
        assert_eq!(corr.forwarder.captured_lost, want_fill, "{corr:?}");
        assert_eq!(
            corr.reorder.malformed + corr.rejected,
            0,
            "notices are not data: {corr:?}"
        );
    }
}
