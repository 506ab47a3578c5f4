//! The client's sockets: the paced UDP sender of the bw test, the TCP streams and the latency
//! round trips.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_udp::{BatchSender, Pacer};

use super::bw_send::{BwSchedule, Flushed};
use super::error::NetError;
use super::lat::LatProbe;
use super::results::{BwLocal, BwParams, TcpParams};
use crate::control::ControlConn;
use crate::host::{HostUsage, ProcessCpu};
use crate::proto::ProtoError;
use crate::tcpinfo::{set_buffer, tcp_sock_info, TcpSockInfo};
use crate::wire::{realtime_ns, PacketKind, TestPacket, HEADER_LEN};

pub(super) fn tcp_send(
    dest: SocketAddr,
    p: &TcpParams,
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> io::Result<(u64, TcpSockInfo, ProcessCpu)> {
    let cpu = ProcessCpu::read_thread();
    let mut s = TcpStream::connect_timeout(&dest, Duration::from_secs(5))?;
    if let Some(b) = p.send_buffer {
        set_buffer(&s, false, b);
    }
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let buf = vec![0x5Au8; p.write_size.max(1)];
    let end = Instant::now() + p.duration;
    let mut n = 0u64;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        if gone.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "responder closed the control connection",
            ));
        }
        match s.write(&buf) {
            Ok(k) => n += k as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let info = tcp_sock_info(&s);
    s.shutdown(std::net::Shutdown::Write)?;
    // Wait for the receiver to close (it has read everything), bounded.
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = [0u8; 64];
    let _ = s.read(&mut b);
    Ok((n, info, ProcessCpu::read_thread().since(&cpu)))
}

/// Sends the probe's next request and waits until its echo arrives or it is lost.
pub(super) fn round_trip(
    sock: &UdpSocket,
    probe: &mut LatProbe,
    buf: &mut [u8],
    rbuf: &mut [u8],
) -> io::Result<()> {
    let Some(n) = probe.poll_transmit(Instant::now(), realtime_ns(), buf) else {
        return Ok(());
    };
    sock.send(&buf[..n])?;
    while let Some(deadline) = probe.poll_timeout() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            probe.handle_timeout(Instant::now());
            continue;
        }
        sock.set_read_timeout(Some(left.max(Duration::from_micros(100))))?;
        match sock.recv(rbuf) {
            Ok(n) => probe.handle_datagram(Instant::now(), &rbuf[..n.min(rbuf.len())]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                // The wait is over: lost.
                probe.handle_timeout(deadline.max(Instant::now()));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The responder's port closed: ICMP unreachable arrives as ECONNREFUSED.
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(super) struct SendOutcome {
    pub local: BwLocal,
    pub error: Option<NetError>,
}

/// The paced sender: packet k is due at start + k x wait; whatever is due goes out in one
/// `sendmmsg`. Headers are written into preallocated buffers; nothing allocates per packet.
pub(super) fn send_paced(
    sock: &UdpSocket,
    p: &BwParams,
    test_id: u32,
    conn: &ControlConn,
    stop: &AtomicBool,
) -> SendOutcome {
    let start = Instant::now() + Duration::from_millis(1);
    let mut pacer = if p.wait_us > 0.0 {
        Pacer::new(1e6 / p.wait_us, start)
            .ok()
            .map(|pc| pc.with_catch_up_limit(None))
    } else {
        None
    };
    let mut schedule = BwSchedule::new(p, start, pacer.as_ref().map(|pc| pc.rate()));
    let batch = schedule.batch();
    // The datagrams of one batch lie back to back so that several due at once can go out as GSO
    // super-datagrams: the kernel cuts them into `size`-byte datagrams, one pass through the stack
    // instead of one per datagram (same datagrams on the wire, a fraction of the sender's CPU).
    let mut area = vec![0u8; batch * p.size];
    for (i, b) in area.chunks_exact_mut(p.size).enumerate() {
        for (j, x) in b.iter_mut().enumerate().skip(HEADER_LEN) {
            *x = (i + j) as u8;
        }
        let mut pkt = TestPacket::new_unchecked(&mut b[..]);
        pkt.fill_fixed();
        pkt.set_kind(PacketKind::Data);
        pkt.set_test_id(test_id);
    }
    let mut sender = BatchSender::new(batch);
    let mut error = None;
    let mut first_send: Option<Instant> = None;
    // One entry per send call at most, allocated before the first packet.
    let mut handed: Vec<(u64, u64)> = if p.timeline && p.count <= crate::stats::MAX_TIMELINE {
        Vec::with_capacity(p.count as usize + 1)
    } else {
        Vec::new()
    };
    let keep_handed = handed.capacity() > 0;
    while !schedule.is_done() {
        let k = schedule.sent();
        if let Some(pc) = pacer.as_mut() {
            pc.wait_until_due(k);
        }
        let n = schedule.due(Instant::now());
        for (j, b) in area.chunks_exact_mut(p.size).take(n).enumerate() {
            let mut pkt = TestPacket::new_unchecked(b);
            pkt.set_seq(k + j as u64);
            pkt.set_send_ts_ns(realtime_ns());
        }
        first_send.get_or_insert_with(Instant::now);
        let mut b = sender.batch();
        for chunk in area[..n * p.size].chunks(schedule.group() * p.size) {
            if chunk.len() > p.size {
                // check_gso cannot fail: at most per_gso segments of at most MAX_UDP_PAYLOAD bytes.
                let _ = b.push_gso(&[chunk], p.size as u16);
                schedule.count_gso_send();
            } else {
                b.push(&[chunk]);
            }
        }
        let (flushed, failure) = match b.flush(sock) {
            Ok(sent) => (Flushed::Sent(sent.datagrams), None),
            Err(e) => (
                Flushed::Failed {
                    sent: e.sent.datagrams,
                    errno: e.source.raw_os_error(),
                },
                Some(e.source),
            ),
        };
        if keep_handed && handed.len() < handed.capacity() {
            let n = match flushed {
                Flushed::Sent(n) | Flushed::Failed { sent: n, .. } => n,
            };
            if n > 0 {
                handed.push((k + n as u64, realtime_ns()));
            }
        }
        if !schedule.handle_flushed(flushed) {
            error = failure.map(|source| NetError::Io {
                what: format!(
                    "bw: send to {}",
                    sock.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                ),
                source,
            });
            break;
        }
        if schedule.poll_check() {
            if stop.load(Ordering::Relaxed) {
                error = Some(NetError::Interrupted);
                break;
            }
            if conn.peer_gone_or_talking() {
                error = Some(
                    ProtoError::Closed {
                        peer: conn.peer().to_string(),
                        what: "sending bw test packets".into(),
                    }
                    .into(),
                );
                break;
            }
        }
    }
    let k = schedule.sent();
    let gso_sends = schedule.gso_sends();
    let duration = first_send.map(|t| t.elapsed()).unwrap_or_default().as_secs_f64();
    let st = sender.stats();
    let local = BwLocal {
        count: p.count,
        sent: k,
        send_duration_s: duration,
        send_user_rate_mbps: if duration > 0.0 {
            8.0 * p.size as f64 * k as f64 / duration / 1e6
        } else {
            0.0
        },
        syscalls: st.syscalls,
        gso_sends,
        would_block: st.would_block,
        no_buffers: st.no_buffers,
        refused: st.refused,
        host: HostUsage::default(),
        remote_buffer: 0,
        handed,
    };
    SendOutcome { local, error }
}
