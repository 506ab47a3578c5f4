//! The correlator side over real loopback sockets: the output is continuous, the fill frames stand exactly
//! where frames were never sent, reordered frames are put back, and bad datagrams change only counters;
//! every kind of output (file, UDP, Unix socket, FIFO) gets the same stream.

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{frame, udps, LEN, RATE};
use vlbiflow_evlbi::receive::{run_receive, InputProtocol, KeyChoice, ReceiveConfig, ReceiveStatus};
use vlbiflow_evlbi::OutputSpec;
use vlbiflow_formats::fill::is_vdif_fill;
use vlbiflow_formats::time::{epoch_start_unix, FrameClock};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_realtime::FillMode;

/// Starts a receiver on an ephemeral port; returns its address and the thread that returns its status.
fn start(mut config: ReceiveConfig) -> (SocketAddr, JoinHandle<ReceiveStatus>) {
    config.listen = "127.0.0.1:0".parse().unwrap();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let stop = AtomicBool::new(false);
        run_receive(&config, &stop, &mut |s| {
            if s.elapsed_s == 0.0 {
                let _ = tx.send(s.listen.parse::<SocketAddr>().unwrap());
            }
        })
        .expect("receiver runs")
    });
    let addr = rx.recv_timeout(Duration::from_secs(20)).expect("receiver ready");
    (addr, t)
}

/// Sends datagrams, pausing briefly every 50 so a small socket buffer (non-root) does not overflow.
fn send_all(to: SocketAddr, datagrams: &[Vec<u8>]) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (i, d) in datagrams.iter().enumerate() {
        s.send_to(d, to).unwrap();
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
}

const N: u64 = 2000;

/// The PSNs never sent: the first two, every 97th, none among the last 100.
fn missing() -> BTreeSet<u64> {
    (0..N)
        .filter(|&k| k < 2 || (k % 97 == 0 && k < N - 100))
        .collect()
}

/// The stream with losses, reordering, duplicates and bad datagrams; returns it and how many pairs were
/// swapped.
fn lossy_stream() -> (Vec<Vec<u8>>, u64) {
    let miss = missing();
    let mut order: Vec<u64> = (0..N).filter(|k| !miss.contains(k)).collect();
    let mut swaps = 0;
    let mut i = 10;
    while i + 1 < order.len() - 100 {
        order.swap(i, i + 1);
        swaps += 1;
        i += 50;
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (n, &k) in order.iter().enumerate() {
        out.push(udps(k, &frame(0, k)));
        match n {
            300 => out.push(udps(order[n - 5], &frame(0, order[n - 5]))), // a duplicate
            400 => out.push(vec![0xab; 100]),                             // short garbage: malformed
            500 => out.push(udps(7, &[0xffu8; LEN])),                     // right size, not VDIF: rejected
            600 => out.push(udps(u64::MAX / 2, &frame(0, 600))),          // far outside the stream: stray
            700 => out.push(vec![0u8; 9000]),                             // too long: malformed
            _ => {}
        }
    }
    (out, swaps)
}

fn base_config(output: OutputSpec) -> ReceiveConfig {
    let mut c = ReceiveConfig::new("127.0.0.1:0".parse().unwrap(), output);
    c.frame_len = LEN;
    // Holes are forced out by the window (64 frames later); the deadline never has to pass.
    c.window = 64;
    c.deadline = Duration::from_secs(5);
    c.first_key = Some(0);
    c.count = Some(N);
    c.idle = Some(Duration::from_secs(20));
    c.recv_buffer = 16 << 20;
    c.output_buffer = 8 << 20;
    c
}

/// Checks a delivered stream against the model: real frames where sent, fill where not.
fn check_stream(bytes: &[u8]) {
    let miss = missing();
    assert_eq!(bytes.len(), N as usize * LEN);
    for (k, f) in bytes.chunks_exact(LEN).enumerate() {
        let k = k as u64;
        if miss.contains(&k) {
            assert!(is_vdif_fill(f), "output {k} should be fill");
        } else {
            assert_eq!(f, &frame(0, k)[..], "output {k} should be frame {k}");
        }
    }
}

#[test]
fn fill_stands_exactly_where_frames_are_missing_and_bad_datagrams_only_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.vdif");
    let fills = dir.path().join("fills.txt");
    let mut c = base_config(OutputSpec::File(out.clone()));
    c.fill_log = Some(fills.clone());
    c.clock_offset_ns = 0;
    let (addr, t) = start(c);
    let (stream, swaps) = lossy_stream();
    send_all(addr, &stream);
    let st = t.join().unwrap();
    let miss = missing();
    let r = st.reorder;
    assert_eq!(st.kernel_drops, 0, "the test needs every datagram delivered");
    assert_eq!(st.output_frames, N);
    assert_eq!(r.filled, miss.len() as u64);
    assert_eq!(r.delivered, N - miss.len() as u64);
    assert_eq!(r.delivered + r.filled, N);
    assert_eq!(r.out_of_order, swaps);
    assert_eq!((r.duplicate, r.stray, r.malformed, st.rejected), (1, 1, 2, 1));
    assert_eq!(r.late, 0);
    assert_eq!(st.datagrams, stream.len() as u64);
    check_stream(&std::fs::read(&out).unwrap());
    let logged: BTreeSet<u64> = std::fs::read_to_string(&fills)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(logged, miss, "the fill log names exactly the missing PSNs");
    // The latency histogram states its clock offset and saw the frames (their 1970s time stamps make
    // the latency huge, which is the truth for these frames).
    assert_eq!(st.latency.clock_offset_ns, 0);
    assert!(st.latency.count > 0);
    assert_eq!(st.frame_rate, Some(RATE));
    // An existing output file is not overwritten without being asked.
    let mut again = base_config(OutputSpec::File(out.clone()));
    again.listen = "127.0.0.1:0".parse().unwrap();
    let e = run_receive(&again, &AtomicBool::new(false), &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("out.vdif"), "{e}");
}

#[test]
fn udp_unix_socket_and_fifo_outputs_carry_the_same_stream() {
    let dir = tempfile::tempdir().unwrap();
    // UDP: frames in order, one per datagram.
    let (rx, rx_addr) = common::listener();
    let (addr, t) = start(base_config(OutputSpec::Udp {
        address: rx_addr,
        psn: false,
    }));
    let (stream, _) = lossy_stream();
    let reader = std::thread::spawn(move || common::recv_n(&rx, N as usize).concat());
    send_all(addr, &stream);
    let st = t.join().unwrap();
    assert_eq!(st.output_frames, N);
    check_stream(&reader.join().unwrap());

    // A Unix stream socket (a software correlator listening).
    let path = dir.path().join("corr.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all
    });
    let (addr, t) = start(base_config(OutputSpec::Unix(path)));
    send_all(addr, &stream);
    t.join().unwrap();
    check_stream(&reader.join().unwrap());

    // A FIFO: the receiver waits for its reader.
    let fifo = dir.path().join("corr.fifo");
    let ok = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(ok.success());
    let f2 = fifo.clone();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        std::fs::File::open(&f2).unwrap().read_to_end(&mut all).unwrap();
        all
    });
    let spec = OutputSpec::parse(fifo.to_str().unwrap()).unwrap();
    assert_eq!(spec, OutputSpec::Fifo(fifo.clone()));
    let (addr, t) = start(base_config(spec));
    send_all(addr, &stream);
    t.join().unwrap();
    check_stream(&reader.join().unwrap());
}

#[test]
fn plain_vdif_of_two_threads_is_ordered_by_time_with_stamped_fill() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.vdif");
    let mut c = base_config(OutputSpec::File(out.clone()));
    c.protocol = InputProtocol::Vdif;
    c.key = KeyChoice::VdifTime;
    c.threads = vec![3, 1];
    c.frame_rate = Some(RATE);
    c.fill = FillMode::Stamped;
    // The stream starts at (index 0, thread 3), which arrives after (index 0, thread 1).
    let clock = FrameClock::new(RATE).unwrap();
    let index0 = clock.index_of(epoch_start_unix(50), 1000, 0) as u64;
    c.first_key = Some(index0 * 2);
    c.count = Some(2 * 1500);
    let (addr, t) = start(c);
    // Threads 1 and 3, indexes 0..1500; (3, 700) and (1, 701) never sent; thread 1 sent before 3
    // (the output order is 3, 1: every pair arrives out of order), a frame of thread 2 (not listed).
    let mut dgrams = Vec::new();
    for i in 0..1500u64 {
        for th in [1u16, 3] {
            if (th, i) != (3, 700) && (th, i) != (1, 701) {
                dgrams.push(frame(th, i));
            }
        }
        if i == 5 {
            dgrams.push(frame(2, 5));
        }
    }
    send_all(addr, &dgrams);
    let st = t.join().unwrap();
    assert_eq!(st.output_frames, 3000);
    assert_eq!(st.reorder.filled, 2);
    assert_eq!(st.reorder.unknown_thread, 1);
    let data = std::fs::read(&out).unwrap();
    for (n, f) in data.chunks_exact(LEN).enumerate() {
        let (i, th) = ((n / 2) as u64, [3u16, 1][n % 2]);
        if (th, i) == (3, 700) || (th, i) == (1, 701) {
            assert!(is_vdif_fill(f), "{n}");
            let h = VdifHeader::new_unchecked(f);
            assert!(h.invalid());
            assert_eq!(
                (h.thread_id(), h.seconds(), h.frame_number()),
                (th, 1000 + (i / 1000) as u32, (i % 1000) as u32)
            );
        } else {
            assert_eq!(f, &frame(th, i)[..], "{n}");
        }
    }
}

#[test]
fn datagrams_from_outside_from_never_reach_the_reorder_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.vdif");
    let mut c = base_config(OutputSpec::File(out.clone()));
    c.from = vlbiflow_guard::net::AllowList(vec!["127.0.0.1/32".parse().unwrap()]);
    let (addr, t) = start(c);
    // A spoofer on 127.0.0.2 sends the first 500 positions with other content first: unfiltered, they
    // would be delivered in place of the real frames (which would then count as duplicates).
    let spoof = UdpSocket::bind("127.0.0.2:0").unwrap();
    for k in 0..500u64 {
        spoof.send_to(&udps(k, &frame(1, k)), addr).unwrap();
        if k % 50 == 49 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    let real: Vec<Vec<u8>> = (0..N).map(|k| udps(k, &frame(0, k))).collect();
    send_all(addr, &real);
    let st = t.join().unwrap();
    assert_eq!(st.kernel_drops, 0, "the test needs every datagram delivered");
    assert_eq!(st.wrong_source, 500);
    assert_eq!(st.datagrams, N + 500);
    let r = st.reorder;
    assert_eq!((r.delivered, r.filled, r.duplicate), (N, 0, 0));
    let bytes = std::fs::read(&out).unwrap();
    for (k, f) in bytes.chunks_exact(LEN).enumerate() {
        assert_eq!(f, &frame(0, k as u64)[..], "output {k}");
    }
}
