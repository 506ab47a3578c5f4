//! Verification of the emulator on real namespaces, TUN devices and UDP sockets: its round trip, loss
//! fraction (with the drop log naming exactly the missing datagrams) and rate match the configuration.
//! Needs root (CAP_NET_ADMIN, /dev/net/tun, `ip`); built by a non-root user the tests are ignored, with
//! that reason. Traffic stays inside namespaces made here (`vf-pe-<pid>-...`), bounded in count and time.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vlbiflow_pathemu::{Emulator, Error, LinkConfig, LogFormat, LossModel, PathConfig, Report};

const MS: u64 = 1_000_000;
/// Datagrams per loss test.
const N: u64 = 20_000;
/// One test at a time: the timing checks should not compete with the flood.
static SERIAL: Mutex<()> = Mutex::new(());

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (it was built as root but runs as uid {euid}): rebuild"
    );
}

/// A running emulator. Dropped without [`Running::finish`] (a test that failed first), it still stops the
/// emulator and waits for it, so that the namespaces it made are removed.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Report, Error>>>,
    ns: (String, String),
}

fn start(tag: &str, link: LinkConfig, drop_log: Option<&Path>) -> Running {
    require_root();
    let pid = std::process::id();
    let (ns_a, ns_b) = (format!("vf-pe-{pid}-{tag}a"), format!("vf-pe-{pid}-{tag}b"));
    let link = LinkConfig {
        buffer_bytes: link.default_buffer(10_000_000_000),
        ..link
    };
    let cfg = PathConfig {
        ns_a: ns_a.clone(),
        ns_b: ns_b.clone(),
        addr_a: "10.77.0.1".parse().unwrap(),
        addr_b: "10.77.0.2".parse().unwrap(),
        mtu: 9000,
        keep: false,
        a_to_b: link.clone(),
        b_to_a: LinkConfig {
            seed: link.seed + 1,
            ..link
        },
        drop_log: drop_log.map(|p| (p.to_path_buf(), LogFormat::Csv)),
        realtime: false,
        spin: Duration::ZERO,
        // what `vlbiflow pathemu` does by default
        wake_every: vlbiflow_pathemu::DEFAULT_WAKE_EVERY,
    };
    let emu = Emulator::setup(cfg).expect("setting up the path");
    assert_eq!(emu.created_namespaces().len(), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // Bounded: it stops by itself after a minute whatever the test does.
    let thread = std::thread::spawn(move || emu.run(&s, Some(Duration::from_secs(60))));
    Running {
        stop,
        thread: Some(thread),
        ns: (ns_a, ns_b),
    }
}

impl Running {
    fn finish(mut self) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        let report = self
            .thread
            .take()
            .expect("running")
            .join()
            .expect("emulator thread")
            .expect("emulator run");
        for ns in [&self.ns.0, &self.ns.1] {
            assert!(
                !Path::new("/run/netns").join(ns).exists(),
                "namespace {ns} left behind"
            );
        }
        report
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
    }
}

/// A UDP socket bound to `addr` inside namespace `ns` (made on a thread that enters the namespace; the
/// socket stays in it).
fn udp_in(ns: &str, addr: &str) -> UdpSocket {
    let path = Path::new("/run/netns").join(ns);
    let addr: SocketAddr = addr.parse().unwrap();
    std::thread::spawn(move || {
        let f = File::open(&path).expect("opening the namespace");
        // SAFETY: a valid namespace descriptor; only this short-lived thread changes namespace.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        let s = UdpSocket::bind(addr).expect("bind in namespace");
        // Room for a burst (the scripts raise rmem_max; the kernel caps what it cannot give).
        let fd = s.as_raw_fd();
        let size: libc::c_int = 16 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            // SAFETY: setting an int socket option on a valid socket.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        s
    })
    .join()
    .expect("namespace thread")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[cfg_attr(
    not(pathemu_root),
    ignore = "needs root (CAP_NET_ADMIN, /dev/net/tun); built as a non-root user"
)]
fn rtt_matches_the_configured_delay() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let emu = start(
        "rtt",
        LinkConfig {
            delay_ns: 10 * MS,
            ..LinkConfig::transparent()
        },
        None,
    );
    let echo = udp_in(&emu.ns.1, "10.77.0.2:7007");
    let client = udp_in(&emu.ns.0, "10.77.0.1:0");
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    echo.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let server = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !d.load(Ordering::SeqCst) {
            if let Ok((n, from)) = echo.recv_from(&mut buf) {
                echo.send_to(&buf[..n], from).unwrap();
            }
        }
    });
    client.connect("10.77.0.2:7007").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 2048];
    for seq in 0u64..100 {
        let mut msg = [0u8; 1000];
        msg[..8].copy_from_slice(&seq.to_be_bytes());
        let t0 = Instant::now();
        client.send(&msg).unwrap();
        loop {
            let n = client.recv(&mut buf).expect("echo within 2 s");
            if n == 1000 && buf[..8] == seq.to_be_bytes() {
                break;
            }
        }
        rtts.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    done.store(true, Ordering::SeqCst);
    server.join().unwrap();
    let report = emu.finish();
    let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(&mut rtts);
    eprintln!("RTT at 20 ms configured: min {min:.3} ms, median {med:.3} ms");
    // Never faster than the configured delay; the median within 3% plus 1 ms of processing.
    assert!(min >= 20.0, "min RTT {min} ms below the configured 20 ms");
    assert!(med <= 20.0 * 1.03 + 1.0, "median RTT {med} ms");
    assert_eq!(report.a_to_b.counters.out_packets, 100);
    assert_eq!(report.b_to_a.counters.out_packets, 100);
    assert_eq!(report.a_to_b.counters.dropped(), 0);
}

#[test]
#[cfg_attr(
    not(pathemu_root),
    ignore = "needs root (CAP_NET_ADMIN, /dev/net/tun); built as a non-root user"
)]
fn random_loss_fraction_and_drop_log_name_the_missing_datagrams() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (missing, _) = loss_run("loss", LossModel::Random { p: 0.01 }, "random");
    let k = missing.len() as f64;
    eprintln!(
        "loss 1%: {k} of {N} missing ({:.3}%), exactly those logged",
        k * 100.0 / N as f64
    );
    // Binomial(20000, 0.01): mean 200, standard deviation 14.1; 5 of them either way.
    assert!(
        (k - 200.0).abs() < 5.0 * (N as f64 * 0.01 * 0.99).sqrt(),
        "{k} lost"
    );
}

#[test]
#[cfg_attr(
    not(pathemu_root),
    ignore = "needs root (CAP_NET_ADMIN, /dev/net/tun); built as a non-root user"
)]
fn gilbert_elliott_loss_comes_in_bursts_at_its_stationary_rate() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Mean burst 1/r = 5 packets, long-run loss p/(p+r) = 4.76%.
    let (p, r) = (0.01, 0.2);
    let model = LossModel::GilbertElliott { p, r, h: 0.0, k: 1.0 };
    let (missing, _) = loss_run("ge", model, "burst");
    let k = missing.len() as f64;
    let runs = missing
        .iter()
        .filter(|&&s| s == 0 || !missing.contains(&(s - 1)))
        .count() as f64;
    let expect = model.stationary_loss() * N as f64;
    eprintln!(
        "Gilbert-Elliott p=1% r=20%: {k} of {N} missing (expected {expect:.0}), mean burst {:.2}",
        k / runs
    );
    // The chain's loss count has variance n pi_B pi_G (1 + l) / (1 - l), l = 1 - p - r: 5 deviations.
    let pi = model.stationary_loss();
    let l = 1.0 - p - r;
    let sd = (N as f64 * pi * (1.0 - pi) * (1.0 + l) / (1.0 - l)).sqrt();
    assert!((k - expect).abs() < 5.0 * sd, "{k} lost, expected {expect}");
    // Bursts: about 190 of them, geometric with mean 5 (standard error about 0.33).
    assert!((k / runs - 1.0 / r).abs() < 1.5, "mean burst {}", k / runs);
}

/// Sends 20 000 numbered datagrams from A to B through a path with `loss` and checks that the drop log
/// names exactly the missing ones, all with `reason`. Returns the missing sequence numbers and the report.
fn loss_run(tag: &str, loss: LossModel, reason: &str) -> (BTreeSet<u64>, Report) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("drops.csv");
    let link = LinkConfig {
        delay_ns: MS,
        loss,
        seed: 77,
        ..LinkConfig::transparent()
    };
    let emu = start(tag, link, Some(&log));
    let rx = udp_in(&emu.ns.1, "10.77.0.2:9001");
    let tx = udp_in(&emu.ns.0, "10.77.0.1:0");
    tx.connect("10.77.0.2:9001").unwrap();
    const MARK: u64 = u64::MAX;
    let seen_mark = Arc::new(AtomicBool::new(false));
    let sm = seen_mark.clone();
    rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = BTreeSet::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(n) = rx.recv(&mut buf) {
                assert_eq!(n, 200);
                let seq = u64::from_be_bytes(buf[..8].try_into().unwrap());
                if seq == MARK {
                    sm.store(true, Ordering::SeqCst);
                    break;
                }
                got.insert(seq);
            }
        }
        got
    });
    // 20 datagrams every millisecond (20 000 per second), then end markers until one arrives: the path
    // is FIFO, so by then every datagram has arrived or been dropped.
    let mut msg = [0u8; 200];
    let t0 = Instant::now();
    for seq in 0..N {
        msg[..8].copy_from_slice(&seq.to_be_bytes());
        tx.send(&msg).unwrap();
        if seq % 20 == 19 {
            let next = t0 + Duration::from_micros(seq / 20 * 1000 + 1000);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }
    msg[..8].copy_from_slice(&MARK.to_be_bytes());
    let mut markers = 0;
    while !seen_mark.load(Ordering::SeqCst) && markers < 300 {
        tx.send(&msg).unwrap();
        markers += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = receiver.join().unwrap();
    assert!(seen_mark.load(Ordering::SeqCst), "no end marker arrived");
    let report = emu.finish();
    let missing: BTreeSet<u64> = (0..N).filter(|s| !got.contains(s)).collect();

    // The drop log: header, then one line per drop.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(vlbiflow_pathemu::packet::CSV_HEADER));
    let mut logged = BTreeSet::new();
    let mut a_to_b_lines = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 11, "{l}");
        assert_eq!(f[3], reason, "{l}");
        if f[2] != "a-b" {
            continue;
        }
        a_to_b_lines += 1;
        assert_eq!(
            (f[4], f[5], f[6], f[8], f[9]),
            ("17", "228", "10.77.0.1", "10.77.0.2", "9001"),
            "{l}"
        );
        let seq = u64::from_str_radix(&f[10][..16], 16).unwrap();
        if seq != MARK {
            assert!(logged.insert(seq), "{seq} logged twice");
        }
    }
    assert_eq!(
        missing, logged,
        "the drop log must list exactly the missing datagrams"
    );
    let d = &report.a_to_b;
    assert_eq!(d.counters.dropped_random + d.counters.dropped_burst, a_to_b_lines);
    assert_eq!(d.counters.in_packets, N + markers);
    assert_eq!((d.kernel_dropped_in, d.kernel_dropped_out), (Some(0), Some(0)));
    assert_eq!(report.drop_log_lost, 0);
    (missing, report)
}

#[test]
#[cfg_attr(
    not(pathemu_root),
    ignore = "needs root (CAP_NET_ADMIN, /dev/net/tun); built as a non-root user"
)]
fn rate_limit_holds_under_a_flood_and_queue_drops_are_logged() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("drops.csv");
    const RATE: f64 = 200e6;
    let link = LinkConfig {
        rate_bps: Some(RATE as u64),
        queue_limit: 1 << 20,
        delay_ns: 5 * MS,
        ..LinkConfig::transparent()
    };
    let emu = start("rate", link, Some(&log));
    let rx = udp_in(&emu.ns.1, "10.77.0.2:9002");
    let tx = udp_in(&emu.ns.0, "10.77.0.1:0");
    tx.connect("10.77.0.2:9002").unwrap();
    const PAYLOAD: usize = 8000;
    const IP_LEN: usize = PAYLOAD + 28;
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 9000];
        let (mut first, mut last, mut n) = (None, Instant::now(), 0u64);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Until the sender is done and the path has been quiet for 300 ms (the queue drains in 40 ms).
        while Instant::now() < deadline {
            match rx.recv(&mut buf) {
                Ok(len) => {
                    assert_eq!(len, PAYLOAD);
                    let t = Instant::now();
                    first.get_or_insert(t);
                    last = t;
                    n += 1;
                }
                Err(_) if d.load(Ordering::SeqCst) && last.elapsed() > Duration::from_millis(300) => break,
                Err(_) => {}
            }
        }
        (first.expect("nothing arrived"), last, n)
    });
    // Twice the rate for 2 s, in 1 ms slices.
    let msg = vec![0x5au8; PAYLOAD];
    let per_s = 2.0 * RATE / 8.0 / IP_LEN as f64;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(2) {
        let due = (t0.elapsed().as_secs_f64() * per_s) as u64;
        while sent < due {
            tx.send(&msg).unwrap();
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::SeqCst);
    let (first, last, n) = receiver.join().unwrap();
    let report = emu.finish();
    // The first datagram's bytes were serialised before it arrived: count the rest over the span.
    let rate = (n - 1) as f64 * IP_LEN as f64 * 8.0 / (last - first).as_secs_f64();
    let c = &report.a_to_b.counters;
    let queue_lines = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(",a-b,queue,"))
        .count();
    eprintln!(
        "rate 200 Mb/s, flood {:.1} Mb/s: received {n} of {sent} at {:.2} Mb/s; queue drops {} ({} logged)",
        sent as f64 * IP_LEN as f64 * 8.0 / 2e6,
        rate / 1e6,
        c.dropped_queue,
        queue_lines
    );
    assert!(
        (rate - RATE).abs() < 0.03 * RATE,
        "received rate {:.2} Mb/s",
        rate / 1e6
    );
    assert!(
        c.dropped_queue > sent / 4,
        "{} queue drops of {sent}",
        c.dropped_queue
    );
    assert_eq!(c.dropped_queue, queue_lines as u64);
    assert_eq!(c.in_packets, sent);
    assert_eq!(
        n + c.dropped_queue,
        sent,
        "every datagram arrived or was dropped at the queue"
    );
    assert!(c.queue_max_bytes <= 1 << 20);
}
