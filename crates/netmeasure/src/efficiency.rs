//! What receiving a stream costs, per transport (seeds/002, DOME): the same stream, `streams` flows of
//! `size`-byte datagrams (or TCP connections) sent flat out or at a set aggregate rate for a fixed time by
//! one sender thread, received by one thread of the responder over each transport of
//! [`vlbiflow_rx::Transport`]. Per test: Gb/s delivered, loss (from each flow's packet sequence numbers),
//! CPU seconds per GB of the sending and the receiving thread (user and system, from
//! `getrusage(RUSAGE_THREAD)`), of both processes and of the whole host (user, system, softirq from
//! `/proc/stat`), and energy per GB and Gb/s per Watt from RAPL where the host exposes it.
//!
//! Protocol (on the control connection of [`crate::proto`]): `EffProbe` -> `EffTransports` (what the
//! responder's kernel offers); `EffStart(EffSetup)` -> `EffReady { ports }` -> traffic -> `EffFinish { sent }`
//! -> `EffResult`. [`run_series`] runs every transport `repeats` times, alternating the order (A B C, C B A,
//! ...) so that a machine whose load drifts favours none, and [`summarise`] reduces the repeats to medians
//! with their spread.
//!
//! Accounting notes, also shown with the results: the kernel's receive work for a datagram (IP, UDP,
//! socket queueing) runs in softirq, on loopback and veth mostly on the *sending* CPU, inside the sender's
//! system call; with tick-based accounting (no IRQ_TIME_ACCOUNTING) such ticks count as softirq in
//! `/proc/stat` and as system time of the thread that was running. Thread figures are therefore the
//! cost each end's thread carried, and the host figures (machine-wide, all processes) the whole cost,
//! noisy on a shared machine.

use std::io::{self, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vlbiflow_formats::psn;
use vlbiflow_rx::{open_udp_sockets, Rx, RxStats, TcpRx, Transport};
use vlbiflow_seq::SequenceTracker;
use vlbiflow_udp::{open_udp, BatchSender, Pacer, UdpConfig};

use crate::host::{boot_id, CpuSeconds, CpuTicks, ProcessCpu};
use crate::power::{Energy, EnergyMeter, EnergySample};

/// Most flows one test may use.
pub const MAX_STREAMS: u32 = 512;
/// Smallest UDP datagram (the 8-byte sequence number and a little payload).
pub const MIN_SIZE: usize = 16;
/// Largest UDP datagram.
pub const MAX_SIZE: usize = 65_507;
/// Longest test.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Datagrams per flow per sender turn (one `sendmmsg`; with GSO, in messages of `gso` segments).
pub const TURN: usize = 32;
/// How long the receiver keeps listening after the sender is done, without traffic.
const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// Poll slice of the receive loop.
const SLICE: Duration = Duration::from_millis(50);

/// What the receiving end needs to set a test up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffSetup {
    /// Receive path.
    pub transport: Transport,
    /// Flows (UDP sockets or TCP connections).
    pub streams: u32,
    /// UDP datagram size in bytes (sequence number included); TCP: bytes per message.
    pub size: usize,
    /// How long the sender sends, ms.
    pub duration_ms: u64,
    /// Receive buffer per UDP socket, bytes (TCP: left to autotuning).
    pub recv_buffer: Option<usize>,
}

impl EffSetup {
    /// Checks the numbers; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_STREAMS).contains(&self.streams) {
            return Err(format!("streams {} outside 1..={MAX_STREAMS}", self.streams));
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            return Err(format!("size {} outside {MIN_SIZE}..={MAX_SIZE}", self.size));
        }
        if self.duration_ms == 0 || self.duration_ms > MAX_DURATION.as_millis() as u64 {
            return Err(format!(
                "duration {} ms outside 1..={} ms",
                self.duration_ms,
                MAX_DURATION.as_millis()
            ));
        }
        Ok(())
    }
}

/// Whether the responder offers a transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// The transport.
    pub transport: Transport,
    /// None when available, else why not.
    pub unavailable: Option<String>,
}

/// What this host offers, probed now.
pub fn probe_all() -> Vec<Availability> {
    Transport::ALL
        .iter()
        .map(|&t| Availability {
            transport: t,
            unavailable: t.probe().err(),
        })
        .collect()
}

/// Machine-wide and process counters of one end over one test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndUsage {
    /// The thread that sent or received.
    pub thread: ProcessCpu,
    /// The whole process over the test.
    pub process: ProcessCpu,
    /// The whole host over the test (all processes, all CPUs).
    pub host: CpuSeconds,
    /// Seconds the host counters cover.
    pub interval_s: f64,
    /// RAPL energy over the same interval, where readable.
    pub energy: Option<Energy>,
    /// Why there is no energy figure (e.g. "not readable here: ...").
    pub energy_note: Option<String>,
    /// The kernel's boot id (equal at both ends: one host).
    pub boot_id: String,
}

/// Counters taken at the start of a test, turned into [`EndUsage`] at its end.
struct EndMeter {
    at: Instant,
    cpu: CpuTicks,
    process: ProcessCpu,
    meter: Result<EnergyMeter, String>,
    energy: Option<EnergySample>,
}

impl EndMeter {
    fn start() -> EndMeter {
        let meter = EnergyMeter::open();
        let energy = meter.as_ref().ok().map(EnergyMeter::sample);
        EndMeter {
            at: Instant::now(),
            cpu: CpuTicks::read(),
            process: ProcessCpu::read(),
            meter,
            energy,
        }
    }

    fn finish(self, thread: ProcessCpu) -> EndUsage {
        let (energy, energy_note) = match (&self.meter, &self.energy) {
            (Ok(m), Some(a)) => (Some(m.between(a, &m.sample())), None),
            (Err(why), _) => (None, Some(why.clone())),
            _ => (None, Some("not readable here".into())),
        };
        EndUsage {
            thread,
            process: ProcessCpu::read().since(&self.process),
            host: CpuTicks::read().seconds_since(&self.cpu),
            interval_s: self.at.elapsed().as_secs_f64(),
            energy,
            energy_note,
            boot_id: boot_id(),
        }
    }
}

/// What the receiving end reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffRemote {
    /// How the receive path was set up (e.g. io_uring flags, buffers).
    pub detail: String,
    /// The receive path's counters.
    pub rx: RxStats,
    /// Datagrams (TCP: reads) received.
    pub received: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// UDP: datagrams missing from the flows' sequences (summed over flows).
    pub lost: u64,
    /// UDP: datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// UDP: datagrams seen twice.
    pub duplicates: u64,
    /// Seconds from the first to the last data received.
    pub active_s: f64,
    /// The receiving end's CPU and energy.
    pub usage: EndUsage,
}

/// A receive running on the responder: its ports and thread.
pub struct Receiving {
    /// Ports to send to (one per flow for UDP; one listening port for TCP).
    pub ports: Vec<u16>,
    /// Kernel-granted receive buffer of the first UDP socket, bytes (0 for TCP).
    pub granted_buffer: usize,
    stop: Arc<RecvControl>,
    handle: thread::JoinHandle<Result<EffRemote, String>>,
}

#[derive(Default)]
struct RecvControl {
    /// The sender is done: drain and stop.
    finish: AtomicBool,
    /// Give up now.
    abort: AtomicBool,
}

impl Receiving {
    /// Opens the sockets of `setup` on `ip` and starts the receive thread (which builds the receive path
    /// itself: an io_uring belongs to the thread that uses it).
    pub fn start(setup: &EffSetup, ip: IpAddr, default_recv_buffer: usize) -> Result<Receiving, String> {
        setup.validate()?;
        if let Err(why) = setup.transport.probe() {
            return Err(format!(
                "{} not available on the responder: {why}",
                setup.transport
            ));
        }
        let stop = Arc::new(RecvControl::default());
        let max_wait = Duration::from_millis(setup.duration_ms) + Duration::from_secs(15);
        let s = setup.clone();
        if setup.transport == Transport::Xdp {
            let IpAddr::V4(ip4) = ip else {
                return Err("xdp: IPv4 only".into());
            };
            if setup.size > vlbiflow_rx::xdp::MAX_PAYLOAD {
                return Err(format!(
                    "xdp: {}-byte datagrams do not fit one 4 KiB UMEM chunk (at most {} here; would need \
                     multi-buffer AF_XDP or a UMEM in huge pages)",
                    setup.size,
                    vlbiflow_rx::xdp::MAX_PAYLOAD
                ));
            }
            let (socks, base) = vlbiflow_rx::xdp::open_consecutive(ip, setup.streams as usize)
                .map_err(|e| format!("xdp: {e}"))?;
            let ports: Vec<u16> = (0..setup.streams as u16).map(|k| base + k).collect();
            let ctl = stop.clone();
            let p = ports.clone();
            let handle = thread::Builder::new()
                .name("vf-eff-recv".into())
                .spawn(move || {
                    let meter = EndMeter::start();
                    let t0 = ProcessCpu::read_thread();
                    let rx = vlbiflow_rx::XdpRx::new(ip4, &p, s.size).map_err(|e| format!("xdp: {e}"))?;
                    let r = receive_loop(Rx::Xdp(Box::new(rx)), &s, &ctl, meter, t0, max_wait);
                    drop(socks);
                    r
                })
                .map_err(|e| format!("receive thread: {e}"))?;
            return Ok(Receiving {
                ports,
                granted_buffer: 0,
                stop,
                handle,
            });
        }
        if setup.transport.is_udp() {
            let recv_buffer = setup.recv_buffer.unwrap_or(default_recv_buffer);
            let socks = open_udp_sockets(ip, setup.streams as usize, recv_buffer, setup.transport.gro())
                .map_err(|e| format!("{}: {e}", setup.transport))?;
            let ports = socks.iter().map(|(_, r)| r.local.port()).collect();
            let granted_buffer = socks[0].1.recv_buffer.as_ref().map_or(0, |b| b.granted / 2);
            let socks: Vec<UdpSocket> = socks.into_iter().map(|(s, _)| s).collect();
            let ctl = stop.clone();
            let handle = thread::Builder::new()
                .name("vf-eff-recv".into())
                .spawn(move || {
                    let meter = EndMeter::start();
                    let t0 = ProcessCpu::read_thread();
                    let rx = Rx::open_udp(s.transport, socks, s.size)
                        .map_err(|e| format!("{}: {e}", s.transport))?;
                    receive_loop(rx, &s, &ctl, meter, t0, max_wait)
                })
                .map_err(|e| format!("receive thread: {e}"))?;
            Ok(Receiving {
                ports,
                granted_buffer,
                stop,
                handle,
            })
        } else {
            let listener = TcpListener::bind((ip, 0)).map_err(|e| format!("tcp: bind {ip}: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| format!("tcp: {e}"))?;
            let port = listener.local_addr().map_err(|e| format!("tcp: {e}"))?.port();
            let ctl = stop.clone();
            let handle = thread::Builder::new()
                .name("vf-eff-recv".into())
                .spawn(move || {
                    let conns = accept_all(&listener, s.streams as usize, &ctl)?;
                    let meter = EndMeter::start();
                    let t0 = ProcessCpu::read_thread();
                    let rx = Rx::Tcp(TcpRx::new(conns).map_err(|e| format!("tcp: {e}"))?);
                    receive_loop(rx, &s, &ctl, meter, t0, max_wait)
                })
                .map_err(|e| format!("receive thread: {e}"))?;
            Ok(Receiving {
                ports: vec![port],
                granted_buffer: 0,
                stop,
                handle,
            })
        }
    }

    /// The sender is done: drain what is still arriving, then return the result.
    pub fn finish(self) -> Result<EffRemote, String> {
        self.stop.finish.store(true, Ordering::Release);
        self.handle
            .join()
            .unwrap_or_else(|_| Err("receive thread panicked".into()))
    }

    /// Abandons the test.
    pub fn abort(self) {
        self.stop.abort.store(true, Ordering::Release);
        let _ = self.handle.join();
    }
}

/// Accepts `n` connections (5 s for the first after the sender was told to connect, bounded overall).
fn accept_all(l: &TcpListener, n: usize, ctl: &RecvControl) -> Result<Vec<TcpStream>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        if ctl.abort.load(Ordering::Acquire) || Instant::now() > deadline {
            return Err(format!("tcp: {} of {n} connections arrived", conns.len()));
        }
        match l.accept() {
            Ok((c, _)) => conns.push(c),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                use rustix::event::{poll, PollFd, PollFlags, Timespec};
                let ts = Timespec {
                    tv_sec: 0,
                    tv_nsec: 50_000_000,
                };
                let _ = poll(&mut [PollFd::new(l, PollFlags::IN)], Some(&ts));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("tcp: accept: {e}")),
        }
    }
    Ok(conns)
}

/// Receives until the sender is done and the flows are drained (or TCP connections closed), the test's
/// time limit passes, or it is aborted. Every UDP datagram's sequence number goes to its flow's tracker.
fn receive_loop(
    mut rx: Rx,
    s: &EffSetup,
    ctl: &RecvControl,
    meter: EndMeter,
    t0: ProcessCpu,
    max_wait: Duration,
) -> Result<EffRemote, String> {
    let udp = s.transport.is_udp();
    let mut trackers: Vec<SequenceTracker> = (0..s.streams).map(|_| SequenceTracker::default()).collect();
    let started = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = started;
    let mut bytes = 0u64;
    let mut received = 0u64;
    loop {
        let n = rx
            .poll(SLICE, |i, d| {
                bytes += d.len() as u64;
                received += 1;
                if udp {
                    if let Some(t) = trackers.get_mut(i) {
                        if let Some(p) = d.first_chunk::<8>() {
                            t.observe(psn::read(p));
                        }
                    }
                }
            })
            .map_err(|e| format!("{}: receive: {e}", s.transport))?;
        let now = Instant::now();
        if n > 0 {
            first.get_or_insert(now);
            last = now;
        }
        if ctl.abort.load(Ordering::Acquire) {
            return Err("aborted".into());
        }
        if rx.finished() || now.duration_since(started) > max_wait {
            break;
        }
        if ctl.finish.load(Ordering::Acquire) && now.duration_since(last) > DRAIN_IDLE {
            break;
        }
    }
    let thread = ProcessCpu::read_thread().since(&t0);
    let mut r = EffRemote {
        detail: rx.detail(),
        rx: rx.stats(),
        received,
        bytes,
        active_s: first.map_or(0.0, |f| last.duration_since(f).as_secs_f64()),
        ..Default::default()
    };
    for t in &trackers {
        let c = t.counters();
        r.lost += c.lost;
        r.out_of_order += c.out_of_order;
        r.duplicates += c.duplicates;
    }
    drop(rx);
    r.usage = meter.finish(thread);
    Ok(r)
}

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
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let mut fds: Vec<PollFd> = conns.iter().map(|c| PollFd::new(c, PollFlags::OUT)).collect();
            let ts = Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            let _ = poll(&mut fds, Some(&ts));
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

/// One finished test: both ends' measurements and the figures derived from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffResult {
    /// What was run.
    pub params: EffParams,
    /// Repeat number (0-based) within a series.
    pub repeat: u32,
    /// The sender's side.
    pub send: SendOutcome,
    /// The sending end's CPU and energy.
    pub sender: EndUsage,
    /// The receiving end's report.
    pub remote: EffRemote,
    /// Derived figures.
    pub metrics: EffMetrics,
}

/// Reads a figure written as `null` (how JSON carries NaN: no value, e.g. CPU below the tick resolution)
/// back as NaN.
fn nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// As [`nan`] for a pair.
fn nan2<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(f64, f64), D::Error> {
    let (a, b) = <(Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok((a.unwrap_or(f64::NAN), b.unwrap_or(f64::NAN)))
}

/// As [`nan`] for a triple.
fn nan3<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(f64, f64, f64), D::Error> {
    let (a, b, c) = <(Option<f64>, Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok((
        a.unwrap_or(f64::NAN),
        b.unwrap_or(f64::NAN),
        c.unwrap_or(f64::NAN),
    ))
}

/// Figures derived from one test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffMetrics {
    /// Payload Gb/s received (bytes over first-to-last arrival).
    #[serde(deserialize_with = "nan")]
    pub gbps: f64,
    /// Fraction of datagrams sent that were not received (UDP; 0 for TCP).
    #[serde(deserialize_with = "nan")]
    pub loss: f64,
    /// GB received.
    #[serde(deserialize_with = "nan")]
    pub gb: f64,
    /// Sending thread CPU seconds per GB sent: user, system.
    #[serde(deserialize_with = "nan2")]
    pub send_cpu_s_per_gb: (f64, f64),
    /// Receiving thread CPU seconds per GB received: user, system.
    #[serde(deserialize_with = "nan2")]
    pub recv_cpu_s_per_gb: (f64, f64),
    /// Whole host (both ends when they share it) per GB received: user, system, softirq.
    #[serde(deserialize_with = "nan3")]
    pub host_cpu_s_per_gb: (f64, f64, f64),
    /// Both ends share one kernel (same boot id): host counters and energy counted once.
    pub same_host: bool,
    /// RAPL joules per GB received (both ends, once if one host).
    pub joules_per_gb: Option<f64>,
    /// Gb/s per Watt (RAPL).
    pub gbps_per_watt: Option<f64>,
}

impl EffMetrics {
    /// Derives the figures.
    pub fn derive(p: &EffParams, send: &SendOutcome, sender: &EndUsage, remote: &EffRemote) -> EffMetrics {
        let gb = remote.bytes as f64 / 1e9;
        let sent_gb = send.bytes as f64 / 1e9;
        let per = |x: f64, g: f64| if g > 0.0 { x / g } else { f64::NAN };
        let same_host = !sender.boot_id.is_empty() && sender.boot_id == remote.usage.boot_id;
        let udp = p.setup.transport.is_udp();
        let sent: u64 = send.sent.iter().sum();
        let loss = if udp && sent > 0 {
            (sent.saturating_sub(remote.received)) as f64 / sent as f64
        } else {
            0.0
        };
        let host = if same_host {
            remote.usage.host
        } else {
            let (a, b) = (sender.host, remote.usage.host);
            CpuSeconds {
                user: a.user + b.user,
                system: a.system + b.system,
                irq: a.irq + b.irq,
                softirq: a.softirq + b.softirq,
                idle: a.idle + b.idle,
                steal: a.steal + b.steal,
            }
        };
        let joules = match (&sender.energy, &remote.usage.energy) {
            (_, Some(r)) if same_host => Some(r.joules),
            (Some(s), Some(r)) => Some(s.joules + r.joules),
            _ => None,
        };
        let gbps = if remote.active_s > 0.0 {
            remote.bytes as f64 * 8.0 / remote.active_s / 1e9
        } else {
            0.0
        };
        let interval = remote.usage.interval_s.max(1e-9);
        EffMetrics {
            gbps,
            loss,
            gb,
            send_cpu_s_per_gb: (
                per(send.thread.user_s, sent_gb),
                per(send.thread.system_s, sent_gb),
            ),
            recv_cpu_s_per_gb: (
                per(remote.usage.thread.user_s, gb),
                per(remote.usage.thread.system_s, gb),
            ),
            host_cpu_s_per_gb: (per(host.user, gb), per(host.system, gb), per(host.softirq, gb)),
            same_host,
            joules_per_gb: joules.map(|j| per(j, gb)),
            gbps_per_watt: joules.map(|j| per(gbps, j / interval)),
        }
    }

    /// Sending plus receiving thread CPU seconds per GB.
    pub fn both_cpu_s_per_gb(&self) -> f64 {
        self.send_cpu_s_per_gb.0
            + self.send_cpu_s_per_gb.1
            + self.recv_cpu_s_per_gb.0
            + self.recv_cpu_s_per_gb.1
    }

    /// Receiving thread CPU seconds per GB.
    pub fn recv_cpu(&self) -> f64 {
        self.recv_cpu_s_per_gb.0 + self.recv_cpu_s_per_gb.1
    }
}

/// The end of a test that runs on this side: starts the meters, sends, stops them.
pub(crate) fn send_measured(
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

/// One transport's repeats reduced to medians.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportSummary {
    /// The transport.
    pub transport: Option<Transport>,
    /// How the receive path was set up (from the first repeat).
    pub detail: String,
    /// TCP: the sender's congestion control (from the first repeat).
    #[serde(default)]
    pub tcp_congestion: Option<String>,
    /// Repeats measured.
    pub repeats: usize,
    /// Median Gb/s.
    #[serde(deserialize_with = "nan")]
    pub gbps: f64,
    /// (max - min) / median of Gb/s over the repeats.
    #[serde(deserialize_with = "nan")]
    pub gbps_spread: f64,
    /// Median loss fraction.
    #[serde(deserialize_with = "nan")]
    pub loss: f64,
    /// Median sending-thread CPU s/GB (user + system).
    #[serde(deserialize_with = "nan")]
    pub send_cpu: f64,
    /// Median receiving-thread CPU s/GB (user + system).
    #[serde(deserialize_with = "nan")]
    pub recv_cpu: f64,
    /// (max - min) / median of the receiving thread's CPU s/GB.
    #[serde(deserialize_with = "nan")]
    pub recv_cpu_spread: f64,
    /// Median receiving-thread user and system s/GB.
    #[serde(deserialize_with = "nan")]
    pub recv_user: f64,
    /// See `recv_user`.
    #[serde(deserialize_with = "nan")]
    pub recv_system: f64,
    /// Median sending-thread user and system s/GB.
    #[serde(deserialize_with = "nan")]
    pub send_user: f64,
    /// See `send_user`.
    #[serde(deserialize_with = "nan")]
    pub send_system: f64,
    /// Median host softirq s/GB (machine-wide).
    #[serde(deserialize_with = "nan")]
    pub host_softirq: f64,
    /// Median host busy (user + system + softirq) s/GB (machine-wide).
    #[serde(deserialize_with = "nan")]
    pub host_busy: f64,
    /// GB received per receiving-thread CPU second, relative to the best transport of the series (1 = best).
    #[serde(deserialize_with = "nan")]
    pub recv_efficiency: f64,
    /// GB moved per CPU second of both threads, relative to the best (1 = best).
    #[serde(deserialize_with = "nan")]
    pub both_efficiency: f64,
    /// Median J/GB where RAPL was readable.
    pub joules_per_gb: Option<f64>,
    /// Median Gb/s per Watt where RAPL was readable.
    pub gbps_per_watt: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// 1/x, or NaN when x is not a positive figure (CPU time below the tick resolution of a short test).
fn inverse(x: f64) -> f64 {
    if x > 0.0 && x.is_finite() {
        1.0 / x
    } else {
        f64::NAN
    }
}

fn spread(v: &[f64]) -> f64 {
    let m = median(v.to_vec());
    let max = v
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::max);
    let min = v
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::min);
    if m > 0.0 {
        (max - min) / m
    } else {
        f64::NAN
    }
}

/// Reduces `runs` to one summary per transport (in [`Transport::ALL`] order) with efficiencies relative
/// to the best transport.
pub fn summarise(runs: &[EffResult]) -> Vec<TransportSummary> {
    let mut out = Vec::new();
    for t in Transport::ALL {
        let mine: Vec<&EffResult> = runs.iter().filter(|r| r.params.setup.transport == t).collect();
        if mine.is_empty() {
            continue;
        }
        let col =
            |f: &dyn Fn(&EffMetrics) -> f64| -> Vec<f64> { mine.iter().map(|r| f(&r.metrics)).collect() };
        let opt = |f: &dyn Fn(&EffMetrics) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = mine.iter().filter_map(|r| f(&r.metrics)).collect();
            (!v.is_empty()).then(|| median(v))
        };
        let gbps = col(&|m| m.gbps);
        let recv = col(&|m| m.recv_cpu());
        out.push(TransportSummary {
            transport: Some(t),
            detail: mine[0].remote.detail.clone(),
            tcp_congestion: mine[0].send.tcp_congestion.clone(),
            repeats: mine.len(),
            gbps: median(gbps.clone()),
            gbps_spread: spread(&gbps),
            loss: median(col(&|m| m.loss)),
            send_cpu: median(col(&|m| m.send_cpu_s_per_gb.0 + m.send_cpu_s_per_gb.1)),
            recv_cpu: median(recv.clone()),
            recv_cpu_spread: spread(&recv),
            recv_user: median(col(&|m| m.recv_cpu_s_per_gb.0)),
            recv_system: median(col(&|m| m.recv_cpu_s_per_gb.1)),
            send_user: median(col(&|m| m.send_cpu_s_per_gb.0)),
            send_system: median(col(&|m| m.send_cpu_s_per_gb.1)),
            host_softirq: median(col(&|m| m.host_cpu_s_per_gb.2)),
            host_busy: median(col(&|m| {
                m.host_cpu_s_per_gb.0 + m.host_cpu_s_per_gb.1 + m.host_cpu_s_per_gb.2
            })),
            recv_efficiency: inverse(median(recv)),
            both_efficiency: inverse(median(col(&|m| m.both_cpu_s_per_gb()))),
            joules_per_gb: opt(&|m| m.joules_per_gb),
            gbps_per_watt: opt(&|m| m.gbps_per_watt),
        });
    }
    let best_recv = out
        .iter()
        .map(|s| s.recv_efficiency)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    let best_both = out
        .iter()
        .map(|s| s.both_efficiency)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    for s in &mut out {
        s.recv_efficiency /= best_recv;
        s.both_efficiency /= best_both;
    }
    out
}

/// The order transports run in for repeat `r`: as given on even repeats, reversed on odd ones.
pub fn order(transports: &[Transport], r: u32) -> Vec<Transport> {
    let mut v = transports.to_vec();
    if r % 2 == 1 {
        v.reverse();
    }
    v
}

/// A whole series: every transport, every repeat, and their summaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffReport {
    /// When the series started (UTC, RFC 3339).
    pub date: String,
    /// The responder's software.
    pub responder: String,
    /// Free-form label (e.g. the path emulator's setting).
    pub label: Option<String>,
    /// Random loss of the path the user says the traffic crossed (fraction), for loss sweeps.
    pub path_loss: Option<f64>,
    /// Transports not measured and why (not offered at the responder).
    pub unavailable: Vec<Availability>,
    /// Every test.
    pub runs: Vec<EffResult>,
    /// Medians per transport.
    pub summary: Vec<TransportSummary>,
}

/// Progress of a series.
#[derive(Debug, Clone)]
pub enum EffEvent<'a> {
    /// A test is about to start.
    Starting {
        /// Transport.
        transport: Transport,
        /// Repeat number.
        repeat: u32,
    },
    /// A test finished.
    Finished(&'a EffResult),
    /// A test failed, or the responder refused it; the series goes on.
    Failed {
        /// Transport.
        transport: Transport,
        /// Repeat number.
        repeat: u32,
        /// Why.
        error: String,
        /// The responder refused the setup (the transport is then listed as unavailable with the reason,
        /// as one it does not offer), rather than a test that started and failed.
        refused: bool,
    },
}

/// Runs `base` (its transport replaced) over every transport of `transports` the responder offers,
/// `repeats` times in alternating order. Tests that fail are reported through `on_event` and left out.
pub fn run_series(
    client: &mut crate::Client,
    base: &EffParams,
    transports: &[Transport],
    repeats: u32,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(EffEvent),
) -> Result<EffReport, crate::NetError> {
    let offered = client.eff_transports()?;
    let mut report = EffReport {
        date: vlbiflow_formats::time::UtcTime::now().to_iso8601(),
        responder: client.remote_software().to_owned(),
        ..Default::default()
    };
    let mut usable = Vec::new();
    for &t in transports {
        match offered.iter().find(|a| a.transport == t) {
            Some(Availability {
                unavailable: None, ..
            }) => usable.push(t),
            Some(a) => report.unavailable.push(a.clone()),
            None => report.unavailable.push(Availability {
                transport: t,
                unavailable: Some("the responder does not know it (older version)".into()),
            }),
        }
    }
    for r in 0..repeats {
        for t in order(&usable, r) {
            if report.unavailable.iter().any(|a| a.transport == t) {
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                report.summary = summarise(&report.runs);
                return Ok(report);
            }
            on_event(EffEvent::Starting {
                transport: t,
                repeat: r,
            });
            let mut p = base.clone();
            p.setup.transport = t;
            match client.efficiency(&p, stop) {
                Ok(mut res) => {
                    res.repeat = r;
                    on_event(EffEvent::Finished(&res));
                    report.runs.push(res);
                }
                Err(crate::NetError::Interrupted) => break,
                Err(e) => {
                    let refused = matches!(&e, crate::NetError::Proto(crate::proto::ProtoError::Remote(_)));
                    if let crate::NetError::Proto(crate::proto::ProtoError::Remote(why)) = &e {
                        // Refused by the responder (e.g. a size the path cannot take): said once, not retried.
                        if !report.unavailable.iter().any(|a| a.transport == t) {
                            report.unavailable.push(Availability {
                                transport: t,
                                unavailable: Some(why.clone()),
                            });
                        }
                    }
                    on_event(EffEvent::Failed {
                        transport: t,
                        repeat: r,
                        error: e.to_string(),
                        refused,
                    });
                    // A refusal or failure the responder reported leaves the session usable; a broken or
                    // confused control connection does not.
                    if matches!(&e, crate::NetError::Proto(p) if !matches!(p, crate::proto::ProtoError::Remote(_)))
                    {
                        return Err(e);
                    }
                }
            }
        }
    }
    report.summary = summarise(&report.runs);
    Ok(report)
}

/// Formats a figure or "-" when there is none.
fn fig(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// The summary as an aligned text table with notes (energy, shared host, transports left out).
pub fn table_lines(r: &EffReport) -> Vec<String> {
    let head = [
        "transport",
        "n",
        "Gb/s",
        "±%",
        "loss%",
        "send_usr",
        "send_sys",
        "recv_usr",
        "recv_sys",
        "recv±%",
        "host_sirq",
        "host_busy",
        "J/GB",
        "Gb/s/W",
        "eff_recv",
        "eff_both",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for s in &r.summary {
        let opt = |v: Option<f64>, d: usize| v.map(|x| fig(x, d)).unwrap_or_else(|| "-".into());
        rows.push(vec![
            s.transport.map(|t| t.name().to_owned()).unwrap_or_default(),
            s.repeats.to_string(),
            fig(s.gbps, 2),
            fig(s.gbps_spread * 100.0, 1),
            fig(s.loss * 100.0, 3),
            fig(s.send_user, 3),
            fig(s.send_system, 3),
            fig(s.recv_user, 3),
            fig(s.recv_system, 3),
            fig(s.recv_cpu_spread * 100.0, 1),
            fig(s.host_softirq, 3),
            fig(s.host_busy, 3),
            opt(s.joules_per_gb, 1),
            opt(s.gbps_per_watt, 3),
            fig(s.recv_efficiency, 2),
            fig(s.both_efficiency, 2),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(c, v)| {
                    if c == 0 {
                        format!("{v:<w$}", w = widths[c])
                    } else {
                        format!("{v:>w$}", w = widths[c])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect();
    out.push(String::new());
    out.push(
        "CPU columns: seconds per GB (sender per GB sent, receiver and host per GB received); send_/recv_: the one \
         sending / receiving thread; host_: whole machine from /proc/stat (all processes). ±%: (max-min)/median over \
         the repeats. eff_*: GB per CPU second of the receiving thread (recv) or of both threads (both), relative \
         to the best transport."
            .into(),
    );
    if let Some(run) = r.runs.first() {
        if run.metrics.same_host {
            out.push(
                "Both ends share one kernel (same boot id): host figures and energy are counted once, and the kernel's \
                 receive work (softirq) runs largely in the sender's system calls."
                    .into(),
            );
        }
        match (&run.remote.usage.energy, &run.remote.usage.energy_note) {
            (Some(_), _) => out.push("Energy: RAPL package counters (powercap).".into()),
            (None, Some(n)) => out.push(format!("Energy (RAPL): {n}.")),
            (None, None) => {}
        }
    }
    for s in &r.summary {
        let cc = match &s.tcp_congestion {
            Some(cc) => format!("; sender congestion control {cc}"),
            None => String::new(),
        };
        out.push(format!(
            "{}: {}{cc}",
            s.transport.map(|t| t.name()).unwrap_or(""),
            s.detail
        ));
    }
    for a in &r.unavailable {
        out.push(format!(
            "{}: not measured: {}",
            a.transport,
            a.unavailable.as_deref().unwrap_or("?")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(t: Transport, gbps: f64, recv_cpu: f64) -> EffResult {
        let setup = EffSetup {
            transport: t,
            streams: 1,
            size: 8232,
            duration_ms: 1000,
            recv_buffer: None,
        };
        EffResult {
            params: EffParams {
                setup,
                rate_bps: None,
                gso: 0,
                send_buffer: 1 << 20,
                tcp_congestion: None,
            },
            repeat: 0,
            send: SendOutcome::default(),
            sender: EndUsage::default(),
            remote: EffRemote::default(),
            metrics: EffMetrics {
                gbps,
                recv_cpu_s_per_gb: (recv_cpu / 2.0, recv_cpu / 2.0),
                send_cpu_s_per_gb: (0.1, 0.1),
                ..Default::default()
            },
        }
    }

    #[test]
    fn summaries_take_medians_and_normalise_to_the_best() {
        let runs = vec![
            run(Transport::Udp, 5.0, 0.4),
            run(Transport::Udp, 6.0, 0.5),
            run(Transport::Udp, 5.5, 0.6),
            run(Transport::UdpGro, 8.0, 0.25),
            run(Transport::Tcp, 4.0, 1.0),
        ];
        let s = summarise(&runs);
        assert_eq!(s.len(), 3);
        let udp = &s[0];
        assert_eq!((udp.transport, udp.repeats), (Some(Transport::Udp), 3));
        assert!((udp.gbps - 5.5).abs() < 1e-12);
        assert!((udp.gbps_spread - 1.0 / 5.5).abs() < 1e-12);
        assert!((udp.recv_cpu - 0.5).abs() < 1e-12);
        assert!((s[1].recv_efficiency - 1.0).abs() < 1e-12);
        assert!((udp.recv_efficiency - 0.5).abs() < 1e-12);
        assert!((s[2].recv_efficiency - 0.25).abs() < 1e-12);
        assert!(s.iter().all(|x| x.joules_per_gb.is_none()));
    }

    #[test]
    fn order_alternates() {
        let t = [Transport::Udp, Transport::Uring, Transport::Tcp];
        assert_eq!(order(&t, 0), t.to_vec());
        assert_eq!(
            order(&t, 1),
            vec![Transport::Tcp, Transport::Uring, Transport::Udp]
        );
        assert_eq!(order(&t, 2), t.to_vec());
    }

    #[test]
    fn metrics_count_loss_and_per_gb_costs() {
        let p = run(Transport::Udp, 0.0, 0.0).params;
        let send = SendOutcome {
            sent: vec![600, 400],
            bytes: 1000 * 8232,
            active_s: 1.0,
            thread: ProcessCpu {
                user_s: 0.01,
                system_s: 0.03,
            },
            tcp_congestion: None,
        };
        let mut remote = EffRemote {
            received: 990,
            bytes: 990 * 8232,
            active_s: 0.5,
            ..Default::default()
        };
        remote.usage.thread = ProcessCpu {
            user_s: 0.02,
            system_s: 0.02,
        };
        remote.usage.boot_id = "b".into();
        remote.usage.interval_s = 1.0;
        let sender = EndUsage {
            boot_id: "b".into(),
            ..Default::default()
        };
        let m = EffMetrics::derive(&p, &send, &sender, &remote);
        assert!((m.loss - 0.01).abs() < 1e-12);
        assert!(m.same_host);
        let gb = 990.0 * 8232.0 / 1e9;
        assert!((m.gbps - gb * 8.0 / 0.5).abs() < 1e-9);
        assert!((m.recv_cpu() - 0.04 / gb).abs() < 1e-9);
        assert!((m.send_cpu_s_per_gb.1 - 0.03 / (8232.0 * 1000.0 / 1e9)).abs() < 1e-9);
        assert_eq!(m.joules_per_gb, None);
    }

    #[test]
    fn setup_checks_name_the_field() {
        let mut s = run(Transport::Udp, 0.0, 0.0).params;
        s.setup.streams = 0;
        assert!(s.validate().unwrap_err().contains("streams"));
        s.setup.streams = 2;
        s.setup.size = 8;
        assert!(s.validate().unwrap_err().contains("size"));
        s.setup.size = 8232;
        s.gso = 16;
        assert!(s.validate().unwrap_err().contains("65507"));
        s.gso = 3;
        assert!(s.validate().unwrap_err().contains("divide"));
        s.gso = 4;
        s.validate().unwrap();
    }
}
