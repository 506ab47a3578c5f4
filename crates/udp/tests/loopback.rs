//! Real loopback sockets: batched sends and receives, GSO with and without GRO, buffer forcing, kernel
//! drop counting and error paths.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use vlbiflow_udp::recv::BatchReceiver;
use vlbiflow_udp::send::{BatchSender, GsoError};
use vlbiflow_udp::socket::{open_udp, BufferKind, Feature, UdpConfig};
use vlbiflow_udp::{realtime_ns, UdpCounters};

const FRAME: usize = 8224;
const WAIT: Duration = Duration::from_secs(5);

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A receiver with a forced 32 MiB buffer.
fn receiver(gro: bool) -> (UdpSocket, SocketAddr) {
    let mut cfg = UdpConfig::receiver(localhost());
    cfg.recv_buffer = Some(32 << 20);
    cfg.gro = gro;
    cfg.rxq_ovfl = true;
    let (sock, report) = open_udp(&cfg).unwrap();
    if gro {
        assert_eq!(report.gro, Feature::Enabled);
    }
    (sock, report.local)
}

fn sender(dest: SocketAddr) -> UdpSocket {
    open_udp(&UdpConfig::sender(dest)).unwrap().0
}

/// Frame `i`: bytes that depend on the frame number and position.
fn frame(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 7 + k * 13) as u8).collect()
}

/// Receives exactly `n` messages into `slot`-sized slots of `region`, batch after batch.
fn recv_n(
    rx: &mut BatchReceiver,
    sock: &UdpSocket,
    region: &mut [u8],
    slot: usize,
    n: usize,
) -> Vec<(usize, vlbiflow_udp::RecvMeta)> {
    let mut out = Vec::new();
    let mut next = 0;
    while out.len() < n {
        let batch = rx
            .recv(sock, region[next * slot..].chunks_exact_mut(slot), WAIT)
            .unwrap();
        assert!(!batch.is_empty(), "timed out after {} of {n} messages", out.len());
        for m in batch.messages() {
            out.push((next, *m));
            next += 1;
        }
    }
    out
}

#[test]
fn two_part_messages_round_trip() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let tx_local = tx_sock.local_addr().unwrap();
    let frames: Vec<Vec<u8>> = (0..256)
        .map(|i| frame(i, FRAME - (i as usize % 3) * 100))
        .collect();
    let psns: Vec<[u8; 8]> = (0..256u64).map(|i| (1_000_000 + i).to_le_bytes()).collect();

    let mut tx = BatchSender::new(64);
    let mut rx = BatchReceiver::new(32).with_source(true);
    let slot = 9000;
    let mut region = vec![0u8; 64 * slot];
    for chunk in 0..4 {
        let range = chunk * 64..(chunk + 1) * 64;
        let mut batch = tx.batch();
        for i in range.clone() {
            assert!(batch.push(&[&psns[i], &frames[i]]));
        }
        assert!(!batch.push(&[&psns[0]]), "batch must report full");
        let sent = batch.flush(&tx_sock).unwrap();
        assert_eq!(sent.messages, 64);
        assert_eq!(
            sent.bytes,
            range.clone().map(|i| 8 + frames[i].len()).sum::<usize>()
        );
        drop(batch);

        for (slot_no, meta) in recv_n(&mut rx, &rx_sock, &mut region, slot, 64) {
            let i = range.start + slot_no;
            let got = &region[slot_no * slot..][..meta.len];
            assert_eq!(meta.len, 8 + frames[i].len());
            assert!(!meta.truncated);
            assert_eq!(meta.gro_segment, None);
            assert_eq!(meta.source, Some(tx_local));
            assert_eq!(&got[..8], &psns[i]);
            assert_eq!(&got[8..], &frames[i][..]);
        }
    }
    let stats = tx.stats();
    assert_eq!(stats.messages, 256);
    assert_eq!(stats.datagrams, 256);
    assert_eq!(rx.stats().messages, 256);
    assert_eq!(rx.kernel_drops(), 0);
}

#[test]
fn send_all_to_unconnected_destination() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = UdpSocket::bind(localhost()).unwrap();
    let frames: Vec<Vec<u8>> = (0..50).map(|i| frame(i, 1000)).collect();
    let mut tx = BatchSender::new(16);
    {
        let mut batch = tx.batch();
        for f in &frames[..10] {
            assert!(batch.push_to(&[f], &dest));
        }
        assert_eq!(batch.flush(&tx_sock).unwrap().messages, 10);
    }
    let mut rx = BatchReceiver::new(64);
    let mut region = vec![0u8; 64 * 2048];
    let got = recv_n(&mut rx, &rx_sock, &mut region, 2048, 10);
    assert_eq!(got.len(), 10);

    // send_all on a connected socket splits into capacity-sized batches.
    let tx_sock = sender(dest);
    let sent = tx
        .send_all(&tx_sock, frames.iter().map(|f| [&f[..500], &f[500..]]))
        .unwrap();
    assert_eq!(sent.messages, 50);
    assert_eq!(sent.bytes, 50_000);
    let got = recv_n(&mut rx, &rx_sock, &mut region, 2048, 50);
    for (slot_no, meta) in got {
        assert_eq!(&region[slot_no * 2048..][..meta.len], &frames[slot_no][..]);
    }
}

/// `k` PSN-prefixed frames laid out back to back, as a GSO sender would.
fn gso_buffer(first: u64, k: usize, seg: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(k * seg);
    for i in 0..k as u64 {
        buf.extend_from_slice(&(first + i).to_le_bytes());
        buf.extend_from_slice(&frame(first + i, seg - 8));
    }
    buf
}

#[test]
fn gso_without_gro_arrives_as_single_datagrams() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let buf = gso_buffer(0, 7, FRAME);
    let mut tx = BatchSender::new(4);
    let sent = tx.send_gso(&tx_sock, &buf, FRAME as u16).unwrap();
    assert_eq!((sent.messages, sent.datagrams, sent.bytes), (1, 7, 7 * FRAME));

    let mut rx = BatchReceiver::new(16);
    let mut region = vec![0u8; 16 * 65536];
    let got = recv_n(&mut rx, &rx_sock, &mut region, 65536, 7);
    for (slot_no, meta) in got {
        assert_eq!(meta.len, FRAME);
        assert_eq!(meta.gro_segment, None);
        assert_eq!(
            &region[slot_no * 65536..][..FRAME],
            &buf[slot_no * FRAME..][..FRAME]
        );
    }
}

#[test]
fn gso_message_gathered_from_many_parts_is_cut_at_segment_boundaries() {
    // Seven frames, each a separate 8-byte header slot and payload slice, as a generator sends them
    // without copying them together: 14 parts in one GSO message.
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let buf = gso_buffer(0, 7, FRAME);
    let parts: Vec<&[u8]> = buf.chunks_exact(FRAME).flat_map(|d| [&d[..8], &d[8..]]).collect();
    let mut tx = BatchSender::with_parts(2, 14);
    assert_eq!(tx.parts(), 14);
    let mut batch = tx.batch();
    assert!(batch.push_gso(&parts, FRAME as u16).unwrap());
    let sent = batch.flush(&tx_sock).unwrap();
    assert_eq!((sent.messages, sent.datagrams, sent.bytes), (1, 7, 7 * FRAME));
    drop(batch);

    let mut rx = BatchReceiver::new(16);
    let mut region = vec![0u8; 16 * 65536];
    let got = recv_n(&mut rx, &rx_sock, &mut region, 65536, 7);
    for (slot_no, meta) in got {
        assert_eq!(meta.len, FRAME);
        assert_eq!(
            &region[slot_no * 65536..][..FRAME],
            &buf[slot_no * FRAME..][..FRAME]
        );
    }
}

#[test]
fn gso_batch_with_gro_arrives_as_super_datagrams() {
    let (rx_sock, dest) = receiver(true);
    let tx_sock = sender(dest);
    // Three GSO messages in one sendmmsg: 7 full segments, 3 segments with a short last one, 1 segment.
    let a = gso_buffer(0, 7, FRAME);
    let mut b = gso_buffer(7, 3, FRAME);
    b.truncate(2 * FRAME + 1000);
    let c = gso_buffer(10, 1, FRAME);
    let mut tx = BatchSender::new(4);
    let mut batch = tx.batch();
    assert!(batch.push_gso(&[&a], FRAME as u16).unwrap());
    assert!(batch.push_gso(&[&b[..8], &b[8..]], FRAME as u16).unwrap());
    assert!(batch.push_gso(&[&c], FRAME as u16).unwrap());
    let sent = batch.flush(&tx_sock).unwrap();
    assert_eq!((sent.messages, sent.datagrams), (3, 11));
    drop(batch);

    let mut rx = BatchReceiver::new(8);
    let mut region = vec![0u8; 8 * 65536];
    // Coalescing is up to the kernel, so compare the datagram stream after splitting.
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    let mut saw_super = false;
    while datagrams.len() < 11 {
        let batch = rx.recv(&rx_sock, region.chunks_exact_mut(65536), WAIT).unwrap();
        assert!(!batch.is_empty(), "timed out after {} datagrams", datagrams.len());
        let metas = batch.messages().to_vec();
        for (i, meta) in metas.iter().enumerate() {
            assert!(!meta.truncated);
            if let Some(seg) = meta.gro_segment {
                assert_eq!(seg as usize, FRAME);
                saw_super |= meta.datagrams() > 1;
            }
            for d in meta.segments(&region[i * 65536..(i + 1) * 65536]) {
                datagrams.push(d.to_vec());
            }
        }
    }
    assert!(saw_super, "GRO socket received no coalesced message");
    let expected: Vec<&[u8]> = a
        .chunks(FRAME)
        .chain(b.chunks(FRAME))
        .chain(c.chunks(FRAME))
        .collect();
    assert_eq!(datagrams.len(), expected.len());
    for (got, want) in datagrams.iter().zip(&expected) {
        assert_eq!(&got[..], *want);
    }
    assert_eq!(rx.stats().datagrams, 11);
}

#[test]
fn gso_limits_are_reported_before_sending() {
    let (_rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let mut tx = BatchSender::new(2);
    let too_many = vec![0u8; 65 * 100];
    let e = tx.send_gso(&tx_sock, &too_many, 100).unwrap_err();
    assert!(e.to_string().contains("65 segments"), "{e}");
    let too_big = vec![0u8; 8 * FRAME];
    let mut batch = tx.batch();
    assert!(matches!(
        batch.push_gso(&[&too_big], FRAME as u16),
        Err(GsoError::TooLarge { .. })
    ));
    assert!(batch.is_empty());
}

#[test]
fn oversized_datagram_fails_with_count_of_those_sent() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let small = [1u8; 100];
    let huge = vec![2u8; 70_000];
    let mut tx = BatchSender::new(8);
    let mut batch = tx.batch();
    batch.push(&[&small]);
    batch.push(&[&small]);
    batch.push(&[&huge[..40_000], &huge[40_000..]]);
    batch.push(&[&small]);
    let e = batch.flush(&tx_sock).unwrap_err();
    assert_eq!(e.sent.messages, 2);
    assert_eq!(e.source.raw_os_error(), Some(libc::EMSGSIZE));
    assert!(batch.is_empty(), "a failed flush discards the rest");
    drop(batch);
    let mut rx = BatchReceiver::new(8);
    let mut region = vec![0u8; 8 * 200];
    assert_eq!(recv_n(&mut rx, &rx_sock, &mut region, 200, 2).len(), 2);
}

#[test]
fn truncation_and_timeout_are_reported() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    tx_sock.send(&[7u8; 500]).unwrap();
    let mut rx = BatchReceiver::new(4);
    let mut small = [0u8; 100];
    let meta = rx.recv_into(&rx_sock, &mut small, WAIT).unwrap().unwrap();
    assert!(meta.truncated);
    assert_eq!(meta.len, 100);
    assert_eq!(meta.wire_len, 500);
    assert_eq!(rx.stats().truncated, 1);
    // Nothing more queued: a short timeout returns no message.
    assert_eq!(
        rx.recv_into(&rx_sock, &mut small, Duration::from_millis(20))
            .unwrap(),
        None
    );
    assert_eq!(rx.recv_into(&rx_sock, &mut small, Duration::ZERO).unwrap(), None);
    assert_eq!(rx.stats().timeouts, 2);
    let mut rx = BatchReceiver::new(4).with_busy_wait(Duration::from_millis(1));
    assert_eq!(
        rx.recv_into(&rx_sock, &mut small, Duration::from_millis(5))
            .unwrap(),
        None
    );
    tx_sock.send(&[8u8; 10]).unwrap();
    let meta = rx.recv_into(&rx_sock, &mut small, WAIT).unwrap().unwrap();
    assert_eq!((meta.len, small[0]), (10, 8));
}

#[test]
fn forced_buffers_exceed_sysctl_limits() {
    // Running as root, the *FORCE options bypass net.core.rmem_max / wmem_max.
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Above the cap, yet small enough that the doubled value fits the kernel's int.
    let want = (rmem_max * 2).min(1 << 29);
    let mut cfg = UdpConfig::receiver(localhost());
    cfg.recv_buffer = Some(want);
    cfg.send_buffer = Some(want);
    let (sock, report) = open_udp(&cfg).unwrap();
    let r = report.recv_buffer.unwrap();
    assert_eq!(r.kind, BufferKind::Receive);
    assert_eq!(r.requested, want);
    if r.forced {
        assert_eq!(r.granted, 2 * want);
        assert!(!r.capped && r.hint.is_none());
    } else {
        // Without CAP_NET_ADMIN the sysctl caps the request and the report says what to raise.
        assert!(r.capped);
        assert!(r.hint.as_deref().unwrap().contains("net.core.rmem_max"));
    }
    assert_eq!(vlbiflow_udp::socket::recv_buffer_size(&sock).unwrap(), r.granted);
    let s = report.send_buffer.unwrap();
    assert_eq!(s.forced, r.forced);
    assert_eq!(vlbiflow_udp::socket::send_buffer_size(&sock).unwrap(), s.granted);
}

#[test]
fn kernel_drops_are_counted() {
    let mut cfg = UdpConfig::receiver(localhost());
    cfg.recv_buffer = Some(1); // the kernel raises this to its minimum: a few datagrams
    cfg.rxq_ovfl = true;
    let (rx_sock, report) = open_udp(&cfg).unwrap();
    assert_eq!(report.rxq_ovfl, Feature::Enabled);
    let tx_sock = sender(report.local);
    let before = UdpCounters::read().unwrap();
    let payload = [3u8; 1000];
    for _ in 0..200 {
        tx_sock.send(&payload).unwrap();
    }
    let mut rx = BatchReceiver::new(64);
    let mut region = vec![0u8; 64 * 2048];
    // Drain what was queued before the drops (those carry no drop count) ...
    while !rx
        .recv(&rx_sock, region.chunks_exact_mut(2048), Duration::ZERO)
        .unwrap()
        .is_empty()
    {}
    let queued = rx.stats().messages;
    assert!(queued < 200, "a minimum-size buffer held all {queued} datagrams");
    // ... then one datagram queued after the drops carries the socket's drop counter.
    tx_sock.send(&payload).unwrap();
    let batch = rx.recv(&rx_sock, region.chunks_exact_mut(2048), WAIT).unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.kernel_drops(), 200 - queued);
    let delta = UdpCounters::read().unwrap().delta(&before);
    assert!(delta.rcvbuf_errors >= 200 - queued, "{delta:?}");
}

#[test]
fn refused_destination_is_counted_not_fatal() {
    let port = UdpSocket::bind(localhost()).unwrap().local_addr().unwrap();
    let tx_sock = sender(port); // nobody listens there any more
    let mut tx = BatchSender::new(8);
    let data = [0u8; 64];
    for _ in 0..5 {
        let sent = tx.send_all(&tx_sock, (0..8).map(|_| [&data[..]])).unwrap();
        assert_eq!(sent.messages, 8);
    }
    assert!(tx.stats().refused > 0, "{:?}", tx.stats());
}

#[test]
fn bind_conflict_names_address_and_step() {
    let (_taken, addr) = receiver(false);
    let e = open_udp(&UdpConfig::receiver(addr)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&addr.to_string()) && text.contains("bind"),
        "{text}"
    );
    // With SO_REUSEPORT on both, two sockets can share the port.
    let mut cfg = UdpConfig::receiver(localhost());
    cfg.reuse_port = true;
    let (_a, report) = open_udp(&cfg).unwrap();
    cfg.bind = report.local;
    assert!(open_udp(&cfg).is_ok());
}

/// Iovecs are preallocated per receiver: two per message by default, as many as asked with
/// `with_parts`; a message scattered over more than the receiver has room for panics rather than
/// writing past its iovecs, and the room of a message counts only the parts it was given.
#[test]
fn receivers_have_the_parts_they_were_made_with() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    assert_eq!(BatchReceiver::new(8).parts(), 2);
    let mut rx = BatchReceiver::with_parts(8, 3);
    assert_eq!(rx.parts(), 3);
    tx_sock.send(&[5u8; 30]).unwrap();
    let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    let batch = rx
        .recv_scatter(&rx_sock, [[&mut a[..], &mut b[..], &mut c[..]]], WAIT)
        .unwrap();
    let m = batch.messages()[0];
    assert_eq!((m.len, m.wire_len, m.truncated), (24, 30, true));
    // then one part: its room is that part's, not the three of the call before
    tx_sock.send(&[6u8; 30]).unwrap();
    let mut one = [0u8; 10];
    let m = rx.recv_into(&rx_sock, &mut one, WAIT).unwrap().unwrap();
    assert_eq!((m.len, m.wire_len, m.truncated), (10, 30, true));
    let mut rx = BatchReceiver::new(8);
    let three = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = rx.recv_scatter(&rx_sock, [[&mut a[..], &mut b[..], &mut c[..]]], Duration::ZERO);
    }));
    assert!(three.is_err(), "three parts in a two-part receiver");
}

#[test]
fn two_part_receive_splits_prefix_from_frame() {
    let (rx_sock, dest) = receiver(false);
    let tx_sock = sender(dest);
    let frames: Vec<Vec<u8>> = (0..40).map(|i| frame(i, FRAME)).collect();
    let psns: Vec<[u8; 8]> = (0..40u64).map(|i| (77 + i).to_le_bytes()).collect();
    let mut tx = BatchSender::new(40);
    tx.send_all(&tx_sock, (0..40).map(|i| [&psns[i][..], &frames[i][..]]))
        .unwrap();
    // A "block buffer" of frame slots and a side array for the sequence numbers.
    let mut block = vec![0u8; 40 * FRAME];
    let mut prefixes = vec![[0u8; 8]; 40];
    let mut rx = BatchReceiver::new(16);
    let mut done = 0;
    while done < 40 {
        let parts = prefixes[done..]
            .iter_mut()
            .zip(block[done * FRAME..].chunks_exact_mut(FRAME));
        let batch = rx
            .recv_parts(&rx_sock, parts.map(|(p, f)| [&mut p[..], f]), WAIT)
            .unwrap();
        assert!(!batch.is_empty());
        for m in batch.messages() {
            assert_eq!((m.len, m.wire_len, m.truncated), (8 + FRAME, 8 + FRAME, false));
        }
        done += batch.len();
    }
    for i in 0..40 {
        assert_eq!(prefixes[i], psns[i]);
        assert_eq!(&block[i * FRAME..][..FRAME], &frames[i][..]);
    }
    // A datagram longer than both parts is flagged, with its real length.
    tx_sock.send(&[9u8; 100]).unwrap();
    let (mut a, mut b) = ([0u8; 8], [0u8; 50]);
    let batch = rx.recv_parts(&rx_sock, [[&mut a[..], &mut b[..]]], WAIT).unwrap();
    let m = batch.messages()[0];
    assert_eq!((m.len, m.wire_len, m.truncated), (58, 100, true));
}

/// The recorder's use: one receiver serving several non-blocking sockets (readiness from the caller's
/// own epoll), zero-timeout receives, two-part messages, and each socket's drop count kept apart.
#[test]
fn one_receiver_many_sockets_keeps_drop_counts_apart() {
    let mut cfg = UdpConfig::receiver(localhost());
    cfg.recv_buffer = Some(1); // the kernel's minimum: overflows after a few datagrams
    cfg.rxq_ovfl = true;
    cfg.nonblocking = true;
    let (small, small_report) = open_udp(&cfg).unwrap();
    cfg.recv_buffer = Some(4 << 20);
    let (big, big_report) = open_udp(&cfg).unwrap();
    let to_small = sender(small_report.local);
    let to_big = sender(big_report.local);
    let payload = [5u8; 1000];
    for _ in 0..200 {
        to_small.send(&payload).unwrap();
        to_big.send(&payload).unwrap();
    }
    let mut rx = BatchReceiver::new(32);
    let mut prefix = vec![[0u8; 8]; 32];
    let mut frames = vec![0u8; 32 * 1024];
    let mut drain = |rx: &mut BatchReceiver, sock: &UdpSocket| -> (usize, Option<u32>) {
        let (mut got, mut counter) = (0, None);
        loop {
            let parts = prefix
                .iter_mut()
                .zip(frames.chunks_exact_mut(1024))
                .map(|(p, f)| [&mut p[..], f]);
            let batch = rx.recv_parts(sock, parts, Duration::ZERO).unwrap();
            if batch.is_empty() {
                return (got, counter);
            }
            assert!(batch.messages().iter().all(|m| m.wire_len == 1000));
            got += batch.len();
            counter = batch.drop_counter().or(counter);
        }
    };
    let (small_got, _) = drain(&mut rx, &small);
    let (big_got, big_counter) = drain(&mut rx, &big);
    assert!(
        small_got < 200,
        "a minimum-size buffer held all {small_got} datagrams"
    );
    // The kernel attaches the counter only once the socket has dropped something.
    assert_eq!((big_got, big_counter), (200, None));
    // A datagram queued after the overflow carries the small socket's whole drop count.
    to_small.send(&payload).unwrap();
    let mut small_drops = vlbiflow_udp::DropCounter::default();
    let batch = rx.recv(&small, frames.chunks_exact_mut(1024), WAIT).unwrap();
    assert_eq!(batch.len(), 1);
    let counter = batch.drop_counter();
    assert_eq!(small_drops.update(counter.unwrap()), 200 - small_got as u64);
    // Nothing queued: a zero timeout returns at once with an empty batch.
    let empty = rx
        .recv(&big, frames.chunks_exact_mut(1024), Duration::ZERO)
        .unwrap();
    assert!(empty.is_empty() && empty.drop_counter().is_none());
}

#[test]
fn kernel_timestamps_are_per_datagram_even_when_a_paced_stream_is_read_late_in_one_batch() {
    use std::time::Instant;
    use vlbiflow_udp::Pacer;
    const N: u64 = 20;
    const SPACING_NS: u64 = 200_000;
    let _keeper = vlbiflow_udp::TimestampKeeper::start(WAIT).unwrap();
    let (rx_sock, report) = open_udp(&UdpConfig {
        timestamps: true,
        ..UdpConfig::receiver(localhost())
    })
    .unwrap();
    assert_eq!(report.timestamps, Feature::Enabled);
    let tx = sender(report.local);
    // Datagram k leaves no earlier than t0 + k x 200 µs; nothing is read until all are queued.
    let t0 = realtime_ns();
    let mut pacer = Pacer::new(1e9 / SPACING_NS as f64, Instant::now()).unwrap();
    for k in 0..N {
        pacer.wait_until_due(k);
        tx.send(&k.to_be_bytes()).unwrap();
    }
    let before_recv = realtime_ns();
    let mut rx = BatchReceiver::new(N as usize);
    let mut bufs = vec![[0u8; 16]; N as usize];
    let mut stamps = Vec::new();
    while (stamps.len() as u64) < N {
        let batch = rx
            .recv(&rx_sock, bufs.iter_mut().map(|b| &mut b[..]), WAIT)
            .unwrap();
        assert!(
            !batch.is_empty(),
            "only {} of {N} datagrams arrived",
            stamps.len()
        );
        for (m, b) in batch.messages().iter().zip(&bufs) {
            let k = u64::from_be_bytes(b[..8].try_into().unwrap());
            stamps.push((
                k,
                m.timestamp_ns.expect("every datagram carries a kernel timestamp"),
            ));
        }
    }
    for (i, &(k, ts)) in stamps.iter().enumerate() {
        assert_eq!(k, i as u64);
        // Taken by the kernel when the datagram came in (on loopback: during its send), so before
        // this reader even asked; a time taken per batch would be after `before_recv`.
        assert!(
            ts <= before_recv,
            "datagram {k}: stamped {} ns after the read began",
            ts - before_recv
        );
        // And no earlier than the datagram was sent (realtime and the pacer's monotonic clock may
        // differ by a slew of at most 0.05 %, i.e. 2 µs over this stream).
        assert!(
            ts + 2_000 >= t0 + k * SPACING_NS,
            "datagram {k}: stamped {} ns before it was due",
            t0 + k * SPACING_NS - ts
        );
    }
}
