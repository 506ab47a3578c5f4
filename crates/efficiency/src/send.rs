//! The sending end of an efficiency test: one thread sends every flow flat out or paced for the test's
//! duration.

use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vlbiflow_formats::psn;
use vlbiflow_net::eff::{EffSetup, EndUsage, MAX_SIZE};
use vlbiflow_net::host::ProcessCpu;
use vlbiflow_udp::{open_udp, BatchSender, Pacer, UdpConfig};

use crate::meter::EndMeter;

/// Datagrams per flow per sender turn (one `sendmmsg`; with GSO, in messages of `gso` segments).
pub const TURN: usize = 32;

/// One test as the client runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffParams {
    /// What the receiver needs.
    pub setup: EffSetup,
    /// Aggregate sending rate over all flows, bit/s of datagrams (TCP: of payload); None: flat out.
    pub rate_bps: Option<f64>,
    /// UDP: datagrams per GSO send (0 or 1: none). The wire carries single datagrams either way.
    pub gso: u16,
    /// Send buffer per socket, bytes.
    pub send_buffer: usize,
    /// TCP: congestion control of the sending connections (e.g. "cubic"); None: the host's default.
    #[serde(default)]
    pub tcp_congestion: Option<String>,
}

impl EffParams {
    /// Checks the sender's numbers as well as the setup's.
    pub fn validate(&self) -> Result<(), String> {
        self.setup.validate()?;
        if let Some(r) = self.rate_bps {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!("rate {r} must be positive"));
            }
        }
        if self.gso > 1 && self.setup.transport.is_udp() {
            if self.gso as usize > TURN || TURN % self.gso as usize != 0 {
                return Err(format!("gso {} must divide {TURN}", self.gso));
            }
            if self.gso as usize * self.setup.size > MAX_SIZE {
                return Err(format!(
                    "gso {} x size {} exceeds the 65507-byte limit of one send",
                    self.gso, self.setup.size
                ));
            }
        }
        Ok(())
    }
}

/// What the sender measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SendOutcome {
    /// UDP: datagrams sent per flow; TCP: bytes per connection.
    pub sent: Vec<u64>,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Seconds spent sending.
    pub active_s: f64,
    /// The sending thread's CPU.
    pub thread: ProcessCpu,
    /// TCP: the congestion control the connections used (read back from the first one).
    #[serde(default)]
    pub tcp_congestion: Option<String>,
}

/// Sends `p` to `dests` (one per UDP flow; TCP: one address, `streams` connections) from this thread
/// until the duration passes, `stop` is set or `gone` says the responder vanished.
pub fn send(
    p: &EffParams,
    dests: &[SocketAddr],
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> io::Result<SendOutcome> {
    let t0 = ProcessCpu::read_thread();
    let started = Instant::now();
    let mut out = if p.setup.transport.is_udp() {
        send_udp(p, dests, stop, gone)?
    } else {
        send_tcp(p, dests[0], stop, gone)?
    };
    out.active_s = started.elapsed().as_secs_f64();
    out.thread = ProcessCpu::read_thread().since(&t0);
    Ok(out)
}

fn pacer(p: &EffParams, unit_bytes: usize) -> io::Result<Option<Pacer>> {
    match p.rate_bps {
        None => Ok(None),
        Some(r) => Pacer::new(r / (8.0 * unit_bytes as f64), Instant::now())
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string())),
    }
}

fn send_udp(
    p: &EffParams,
    dests: &[SocketAddr],
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> io::Result<SendOutcome> {
    let size = p.setup.size;
    let gso = usize::from(p.gso.max(1));
    let mut socks = Vec::with_capacity(dests.len());
    for d in dests {
        let mut c = UdpConfig::sender(*d);
        c.send_buffer = Some(p.send_buffer);
        let (s, _) = open_udp(&c).map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?;
        socks.push(s);
    }
    let mut bufs: Vec<Vec<u8>> = dests.iter().map(|_| vec![0u8; TURN * size]).collect();
    let mut sent = vec![0u64; dests.len()];
    let mut sender = BatchSender::new(TURN);
    let mut pace = pacer(p, size)?;
    let end = Instant::now() + Duration::from_millis(p.setup.duration_ms);
    let mut total = 0u64;
    'outer: loop {
        for (i, sock) in socks.iter().enumerate() {
            if let Some(pc) = pace.as_mut() {
                pc.wait_until_due(total);
            }
            if Instant::now() >= end || stop.load(Ordering::Relaxed) || gone.load(Ordering::Relaxed) {
                break 'outer;
            }
            let buf = &mut bufs[i];
            for k in 0..TURN {
                let seq = sent[i] + k as u64;
                let slot: &mut [u8; 8] = (&mut buf[k * size..k * size + 8]).try_into().expect("8 bytes");
                psn::write(seq, slot);
            }
            let mut batch = sender.batch();
            for chunk in buf.chunks(gso * size) {
                if gso > 1 {
                    batch
                        .push_gso(&[chunk], size as u16)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                } else {
                    batch.push(&[chunk]);
                }
            }
            let r = batch
                .flush(sock)
                .map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?;
            sent[i] += r.datagrams as u64;
            total += r.datagrams as u64;
        }
    }
    Ok(SendOutcome {
        bytes: total * size as u64,
        sent,
        ..Default::default()
    })
}

fn send_tcp(
    p: &EffParams,
    dest: SocketAddr,
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> io::Result<SendOutcome> {
    let n = p.setup.streams as usize;
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(dest),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        if let Some(cc) = &p.tcp_congestion {
            sock.set_tcp_congestion(cc.as_bytes())
                .map_err(|e| io::Error::new(e.kind(), format!("TCP congestion control {cc:?}: {e}")))?;
        }
        sock.connect_timeout(&dest.into(), Duration::from_secs(5))?;
        let c: TcpStream = sock.into();
        c.set_nonblocking(true)?;
        conns.push(c);
    }
    let tcp_congestion = socket2::SockRef::from(&conns[0])
        .tcp_congestion()
        .ok()
        .map(|v| String::from_utf8_lossy(&v).trim_end_matches('\0').to_owned());
    let chunk = TURN * p.setup.size;
    let buf = vec![0x5Au8; chunk];
    let mut sent = vec![0u64; n];
    let mut total = 0u64;
    let mut pace = pacer(p, chunk)?;
    let mut turns = 0u64;
    let end = Instant::now() + Duration::from_millis(p.setup.duration_ms);
    'outer: loop {
        let mut wrote = false;
        for (i, c) in conns.iter().enumerate() {
            if let Some(pc) = pace.as_mut() {
                pc.wait_until_due(turns);
            }
            if Instant::now() >= end || stop.load(Ordering::Relaxed) || gone.load(Ordering::Relaxed) {
                break 'outer;
            }
            match (&*c).write(&buf) {
                Ok(k) => {
                    sent[i] += k as u64;
                    total += k as u64;
                    turns = total / chunk as u64;
                    wrote = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                }
                Err(e) => return Err(e),
            }
        }
        if !wrote {
            // Every connection is full: wait (bounded) until one has room.
            use rustix::event::{poll, PollFd, PollFlags};
            let mut fds: Vec<PollFd> = conns.iter().map(|c| PollFd::new(c, PollFlags::OUT)).collect();
            let _ = poll(
                &mut fds,
                Some(&vlbiflow_udp::poll::timespec(Duration::from_millis(10))),
            );
        }
    }
    for c in &conns {
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
    Ok(SendOutcome {
        sent,
        bytes: total,
        tcp_congestion,
        ..Default::default()
    })
}

/// The end of a test that runs on this side: starts the meters, sends, stops them.
pub fn send_measured(
    p: &EffParams,
    dests: &[SocketAddr],
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> (io::Result<SendOutcome>, EndUsage) {
    let meter = EndMeter::start();
    let r = send(p, dests, stop, gone);
    let thread = r.as_ref().map(|o| o.thread).unwrap_or_default();
    (r, meter.finish(thread))
}
