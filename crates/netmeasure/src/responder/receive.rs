//! The responder's test receivers: the bw counter and the latency echo as logic without I/O
//! ([`BwReceive`], [`echo`]), and the threads that drive them and receive TCP streams.

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_udp::BatchReceiver;

use super::session::{BW_BATCH, LAT_BATCH, TCP_READ_SIZE};
use crate::host::ProcessCpu;
use crate::stats::ArrivalStats;
use crate::tcpinfo::{set_buffer, tcp_sock_info};
use crate::wire::{realtime_ns, PacketKind, TestPacket, HEADER_LEN};

/// How long the receiver keeps listening after the sender says it is done, without traffic.
pub const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// Poll slice for checking stop flags.
pub const SLICE: Duration = Duration::from_millis(50);
/// How long a bw receiver may outlive the test's announced duration.
pub const BW_GRACE: Duration = Duration::from_secs(10);

/// The counting of a bw test, without I/O: which datagrams are the test's packets, and when the
/// receiver may stop (the sender said it is done and all its packets arrived or the stream has been
/// quiet for [`DRAIN_IDLE`]; or the test overran its announced duration by [`BW_GRACE`]).
pub struct BwReceive {
    stats: ArrivalStats,
    test_id: u32,
    bytes: u64,
    last_traffic: Instant,
    hard_end: Instant,
    /// Packets the sender says it sent, once it has said so.
    expected: Option<u64>,
}

impl BwReceive {
    /// Counting for test `test_id` starting at `now`, for at most `max_duration` (plus [`BW_GRACE`]).
    pub fn new(stats: ArrivalStats, test_id: u32, now: Instant, max_duration: Duration) -> Self {
        BwReceive {
            stats,
            test_id,
            bytes: 0,
            last_traffic: now,
            hard_end: now + max_duration + BW_GRACE,
            expected: None,
        }
    }

    /// A batch of datagrams arrived at `now` (call before its datagrams).
    pub fn handle_batch(&mut self, now: Instant) {
        self.last_traffic = now;
    }

    /// One datagram: `data` as received (at most the buffer), `len` its length on the wire,
    /// `truncated` when it did not fit, `recv_ts` its receive time (CLOCK_REALTIME ns).
    pub fn handle_datagram(&mut self, data: &[u8], len: usize, truncated: bool, recv_ts: u64) {
        match TestPacket::new_checked(data) {
            Ok(p) if p.test_id() == self.test_id && p.kind() == PacketKind::Data && !truncated => {
                self.bytes += len as u64;
                self.stats.observe(p.seq(), p.send_ts_ns(), recv_ts);
            }
            _ => self.stats.observe_foreign(),
        }
    }

    /// The sender says it sent `expected` packets.
    pub fn handle_finish(&mut self, expected: u64) {
        self.expected = Some(expected);
    }

    /// True when the receiver may stop at `now`.
    pub fn is_done(&self, now: Instant) -> bool {
        if now > self.hard_end {
            return true;
        }
        self.expected.is_some_and(|expected| {
            self.stats.received() >= expected
                || now.saturating_duration_since(self.last_traffic) >= DRAIN_IDLE
        })
    }

    /// When [`is_done`](Self::is_done) turns true if nothing arrives.
    pub fn poll_timeout(&self) -> Instant {
        match self.expected {
            Some(_) => self.hard_end.min(self.last_traffic + DRAIN_IDLE),
            None => self.hard_end,
        }
    }

    /// Packets of the test counted so far.
    pub fn received(&self) -> u64 {
        self.stats.received()
    }

    /// The statistics and the bytes received in test packets.
    pub fn into_parts(self) -> (ArrivalStats, u64) {
        (self.stats, self.bytes)
    }
}

/// Turns a latency request of test `test_id` into its reply in place; false (and `buf` untouched)
/// for anything else.
pub fn echo(buf: &mut [u8], truncated: bool, test_id: u32) -> bool {
    let ok = !truncated
        && matches!(TestPacket::new_checked(&*buf),
            Ok(p) if p.test_id() == test_id && p.kind() == PacketKind::LatencyRequest);
    if ok {
        TestPacket::new_unchecked(buf).set_kind(PacketKind::LatencyReply);
    }
    ok
}

/// What the session thread tells a bw receiver thread.
#[derive(Default)]
pub struct BwControl {
    /// The sender is done.
    pub finish: AtomicBool,
    /// Give up now.
    pub abort: AtomicBool,
    /// Packets sent (valid once `finish` is set).
    pub expected: AtomicU64,
}

/// Receives test packets into `rx` until it is done or aborted; the statistics, the bytes and the
/// kernel's drop count.
pub fn bw_receive(
    sock: UdpSocket,
    mut rx: BwReceive,
    size: usize,
    ctl: &BwControl,
) -> (ArrivalStats, u64, u64) {
    let mut batcher = BatchReceiver::new(BW_BATCH);
    let mut bufs = vec![vec![0u8; size.max(HEADER_LEN) + 1]; BW_BATCH];
    let mut drops = 0;
    loop {
        let now = Instant::now();
        if ctl.abort.load(Ordering::Acquire) {
            break;
        }
        if ctl.finish.load(Ordering::Acquire) {
            rx.handle_finish(ctl.expected.load(Ordering::Relaxed));
        }
        if rx.is_done(now) {
            break;
        }
        let batch = match batcher.recv(&sock, bufs.iter_mut().map(|b| b.as_mut_slice()), SLICE) {
            Ok(b) => b,
            Err(_) => break,
        };
        if batch.is_empty() {
            continue;
        }
        // Only for a datagram without a kernel timestamp (SO_TIMESTAMPNS refused): the batch's time.
        let batch_time = realtime_ns();
        rx.handle_batch(Instant::now());
        drops = batch.kernel_drops();
        for (meta, buf) in batch.messages().iter().zip(bufs.iter()) {
            let len = meta.len.min(buf.len());
            rx.handle_datagram(
                &buf[..len],
                meta.len,
                meta.truncated,
                meta.timestamp_ns.unwrap_or(batch_time),
            );
        }
    }
    let (stats, bytes) = rx.into_parts();
    (stats, bytes, drops)
}

/// Echoes latency requests as replies until `done`; requests echoed and other datagrams.
pub fn lat_echo(
    sock: UdpSocket,
    test_id: u32,
    max_size: usize,
    peer: std::net::IpAddr,
    done: &AtomicBool,
) -> (u64, u64) {
    let peer = canonical_ip(peer);
    let mut rx = BatchReceiver::new(LAT_BATCH).with_source(true);
    let mut bufs = vec![vec![0u8; max_size + 1]; LAT_BATCH];
    let (mut echoed, mut foreign) = (0u64, 0u64);
    while !done.load(Ordering::Acquire) {
        let batch = match rx.recv(&sock, bufs.iter_mut().map(|b| b.as_mut_slice()), SLICE) {
            Ok(b) => b,
            Err(_) => break,
        };
        for (meta, buf) in batch.messages().iter().zip(bufs.iter_mut()) {
            let len = meta.len.min(buf.len());
            match meta.source {
                // only the control peer's address is answered: an echo to any source would reflect
                // datagrams (up to 64 KiB each) toward a spoofed victim
                Some(src)
                    if canonical_ip(src.ip()) == peer && echo(&mut buf[..len], meta.truncated, test_id) =>
                {
                    if sock.send_to(&buf[..len], src).is_ok() {
                        echoed += 1;
                    }
                }
                _ => foreign += 1,
            }
        }
    }
    (echoed, foreign)
}

/// An IPv4-mapped IPv6 address as its IPv4 address (a dual-stack socket reports IPv4 peers so).
fn canonical_ip(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(a) => a.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Bytes per stream, first and last byte (ns), socket states, and the CPU time of the receiving threads.
pub type TcpOutcome = (Vec<u64>, u64, u64, Vec<crate::tcpinfo::TcpSockInfo>, ProcessCpu);

/// Accepts `streams` connections and reads each to its end; after `done`, readers stop at EOF or
/// after 5 s.
pub fn tcp_receive(
    listener: TcpListener,
    streams: u32,
    recv_buffer: Option<usize>,
    done: &AtomicBool,
) -> TcpOutcome {
    let cpu = ProcessCpu::read_thread();
    let first = AtomicU64::new(u64::MAX);
    let last = AtomicU64::new(0);
    thread::scope(|scope| {
        let mut readers = Vec::new();
        while readers.len() < streams as usize && !done.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((s, _)) => {
                    if let Some(b) = recv_buffer {
                        set_buffer(&s, true, b);
                    }
                    let (first, last) = (&first, &last);
                    readers.push(scope.spawn(move || tcp_read(s, done, first, last)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_in(&listener, SLICE);
                }
                Err(_) => break,
            }
        }
        let mut bytes = Vec::new();
        let mut infos = Vec::new();
        let mut threads = ProcessCpu::default();
        for r in readers {
            if let Ok((n, info, t)) = r.join() {
                bytes.push(n);
                infos.push(info);
                threads = threads.plus(&t);
            }
        }
        let f = first.load(Ordering::Relaxed);
        (
            bytes,
            if f == u64::MAX { 0 } else { f },
            last.load(Ordering::Relaxed),
            infos,
            threads.plus(&ProcessCpu::read_thread().since(&cpu)),
        )
    })
}

fn tcp_read(
    mut s: TcpStream,
    done: &AtomicBool,
    first: &AtomicU64,
    last: &AtomicU64,
) -> (u64, crate::tcpinfo::TcpSockInfo, ProcessCpu) {
    let cpu = ProcessCpu::read_thread();
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; TCP_READ_SIZE];
    let mut n = 0u64;
    let mut done_at: Option<Instant> = None;
    let mut info = tcp_sock_info(&s);
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                if n == 0 {
                    first.fetch_min(realtime_ns(), Ordering::Relaxed);
                }
                n += k as u64;
                last.fetch_max(realtime_ns(), Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                info = tcp_sock_info(&s);
            }
            Err(_) => break,
        }
        if done.load(Ordering::Acquire) {
            let at = *done_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
    }
    // The state at the end (autotuned buffers, final window), not at the last read timeout.
    let end_info = tcp_sock_info(&s);
    if !end_info.congestion.is_empty() {
        info = end_info;
    }
    (n, info, ProcessCpu::read_thread().since(&cpu))
}

/// Waits at most `timeout` (whole milliseconds) for `fd` to be readable.
pub fn poll_in(fd: &impl AsFd, timeout: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
    let timeout = vlbiflow_udp::poll::timespec(Duration::from_millis(ms));
    poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&timeout)).is_ok_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Link, LinkModel};
    use crate::wire::TestPacketRepr;

    fn packet(kind: PacketKind, test_id: u32, seq: u64, ts: u64, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        TestPacketRepr {
            kind,
            test_id,
            seq,
            send_ts_ns: ts,
        }
        .emit(&mut TestPacket::new_unchecked(&mut b[..]));
        b
    }

    /// `n` packets 10 µs apart through `model`; the receiver's summary, what the link did, and the
    /// last arrival.
    fn through(model: LinkModel, n: u64, seed: u64) -> (BwReceive, Link, Instant) {
        let t0 = Instant::now();
        let mut link = Link::new(model, seed);
        let mut rx = BwReceive::new(ArrivalStats::try_new(n).unwrap(), 7, t0, Duration::from_secs(5));
        let gap = Duration::from_micros(10);
        let ns = |t: Instant| 1_000_000_000 + t.duration_since(t0).as_nanos() as u64;
        let mut last = t0;
        for seq in 0..n {
            let t = t0 + gap * seq as u32;
            link.send(t, &packet(PacketKind::Data, 7, seq, ns(t), 100));
            while let Some((at, d)) = link.recv(t) {
                rx.handle_batch(at);
                rx.handle_datagram(&d, d.len(), false, ns(at));
                last = at;
            }
        }
        while let Some(at) = link.next_arrival() {
            let (at, d) = link.recv(at).unwrap();
            rx.handle_batch(at);
            rx.handle_datagram(&d, d.len(), false, ns(at));
            last = at;
        }
        (rx, link, last)
    }

    #[test]
    fn loss_reordering_and_duplicates_are_counted() {
        let model = LinkModel {
            delay: Duration::from_millis(5),
            // Packets 10 µs apart with up to 35 µs of jitter: some overtake others.
            jitter: Duration::from_micros(35),
            loss: 0.02,
            duplicate: 0.01,
        };
        let n = 20_000;
        let (rx, link, _) = through(model, n, 42);
        let (stats, bytes) = rx.into_parts();
        let s = stats.summary(n);
        assert!(link.dropped > 0 && link.duplicated > 0);
        assert_eq!(s.lost, link.dropped);
        assert_eq!(s.received, n - link.dropped);
        assert_eq!(s.duplicates, link.duplicated);
        // Bytes count every test packet that arrived, duplicates included.
        assert_eq!(bytes, 100 * (s.received + s.duplicates));
        assert!(s.out_of_order > 0, "jitter above the spacing reorders");
        let d = s.delay.expect("one-way delay");
        assert!((5_000_000..5_001_000).contains(&d.offset_ns), "{d:?}");
        // The jitter, to the histogram's three significant digits.
        assert!(d.hist.max < 35.1, "{d:?}");

        // The same path without jitter keeps the order.
        let (rx, _, _) = through(
            LinkModel {
                jitter: Duration::ZERO,
                ..model
            },
            n,
            42,
        );
        assert_eq!(rx.into_parts().0.summary(n).out_of_order, 0);
    }

    #[test]
    fn the_receiver_stops_when_all_arrived_or_the_stream_went_quiet() {
        let clean = LinkModel {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
        };
        let (mut rx, _, last) = through(clean, 100, 1);
        assert!(!rx.is_done(last), "not before the sender is done");
        rx.handle_finish(100);
        assert!(rx.is_done(last), "everything is in");

        let lossy = LinkModel { loss: 0.1, ..clean };
        let (mut rx, link, last) = through(lossy, 1000, 2);
        assert!(link.dropped > 0);
        rx.handle_finish(1000);
        assert_eq!(rx.poll_timeout(), last + DRAIN_IDLE);
        assert!(!rx.is_done(last + DRAIN_IDLE - Duration::from_millis(1)));
        assert!(rx.is_done(last + DRAIN_IDLE));

        // A sender that never says it is done: the announced duration plus the grace.
        let t0 = Instant::now();
        let rx = BwReceive::new(ArrivalStats::try_new(1).unwrap(), 7, t0, Duration::from_secs(5));
        assert_eq!(rx.poll_timeout(), t0 + Duration::from_secs(15));
        assert!(!rx.is_done(t0 + Duration::from_secs(15)));
        assert!(rx.is_done(t0 + Duration::from_secs(15) + Duration::from_nanos(1)));
    }

    #[test]
    fn foreign_datagrams_are_counted_not_measured() {
        let t0 = Instant::now();
        let mut rx = BwReceive::new(ArrivalStats::try_new(10).unwrap(), 7, t0, Duration::from_secs(1));
        rx.handle_datagram(&packet(PacketKind::Data, 8, 0, 1, 64), 64, false, 2);
        rx.handle_datagram(&packet(PacketKind::LatencyRequest, 7, 0, 1, 64), 64, false, 2);
        rx.handle_datagram(&packet(PacketKind::Data, 7, 1, 1, 64), 64, true, 2);
        rx.handle_datagram(b"hello", 5, false, 2);
        rx.handle_datagram(&packet(PacketKind::Data, 7, 2, 1, 64), 64, false, 2);
        assert_eq!(rx.received(), 1);
        let (stats, bytes) = rx.into_parts();
        assert_eq!((stats.summary(10).foreign, bytes), (4, 64));
    }

    #[test]
    fn latency_echo_answers_only_the_control_peers_address() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = sock.local_addr().unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let echo = {
            let done = done.clone();
            thread::spawn(move || lat_echo(sock, 5, 64, "::ffff:127.0.0.1".parse().unwrap(), &done))
        };
        // a spoofing third party (another address) sends requests: none is answered
        let other = UdpSocket::bind("127.0.0.2:0").unwrap();
        for seq in 0..10 {
            other
                .send_to(&packet(PacketKind::LatencyRequest, 5, seq, 1, 64), to)
                .unwrap();
        }
        // the control peer's address is answered
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        peer.send_to(&packet(PacketKind::LatencyRequest, 5, 99, 1, 64), to)
            .unwrap();
        let mut b = [0u8; 128];
        let (n, _) = peer.recv_from(&mut b).unwrap();
        let reply = TestPacket::new_checked(&b[..n]).unwrap();
        assert_eq!((reply.kind(), reply.seq()), (PacketKind::LatencyReply, 99));
        done.store(true, Ordering::Release);
        let (echoed, foreign) = echo.join().unwrap();
        assert_eq!((echoed, foreign), (1, 10));
        other.set_nonblocking(true).unwrap();
        assert!(other.recv_from(&mut b).is_err(), "a datagram was reflected");
    }

    #[test]
    fn echo_answers_only_requests_of_its_test() {
        let mut req = packet(PacketKind::LatencyRequest, 5, 9, 1, 64);
        assert!(echo(&mut req, false, 5));
        assert_eq!(
            TestPacket::new_checked(&req[..]).unwrap().kind(),
            PacketKind::LatencyReply
        );
        let mut again = req.clone();
        assert!(!echo(&mut again, false, 5), "a reply is not echoed");
        let mut other = packet(PacketKind::LatencyRequest, 6, 9, 1, 64);
        assert!(!echo(&mut other, false, 5));
        let mut cut = packet(PacketKind::LatencyRequest, 5, 9, 1, 64);
        assert!(!echo(&mut cut, true, 5));
        assert_eq!(
            TestPacket::new_checked(&cut[..]).unwrap().kind(),
            PacketKind::LatencyRequest
        );
    }
}
