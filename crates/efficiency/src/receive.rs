//! The receiving end of an efficiency test, as the responder runs it: one thread receives every flow over
//! the transport asked for, counts each UDP flow's sequence numbers and meters its own CPU and energy.

use std::io;
use std::net::{IpAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_formats::psn;
use vlbiflow_net::eff::{Availability, EffReceive, EffRemote, EffService, EffSetup};
use vlbiflow_net::host::ProcessCpu;
use vlbiflow_rx::{open_udp_sockets, Rx, TcpRx, Transport};
use vlbiflow_seq::SequenceTracker;

use crate::meter::EndMeter;

/// How long the receiver keeps listening after the sender is done, without traffic.
const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// Poll slice of the receive loop.
const SLICE: Duration = Duration::from_millis(50);

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
                use vlbiflow_udp::poll::{wait, PollFlags};
                let _ = wait(l, PollFlags::IN, Duration::from_millis(50));
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

/// The receiving end as a responder's [`EffService`]: what this host offers, and [`Receiving`] per test.
#[derive(Debug, Clone, Copy, Default)]
pub struct Service;

impl EffService for Service {
    fn transports(&self) -> Vec<Availability> {
        probe_all()
    }

    fn start(
        &self,
        setup: &EffSetup,
        ip: IpAddr,
        default_recv_buffer: usize,
    ) -> Result<Box<dyn EffReceive>, String> {
        Receiving::start(setup, ip, default_recv_buffer).map(|r| Box::new(r) as Box<dyn EffReceive>)
    }
}

impl EffReceive for Receiving {
    fn ports(&self) -> Vec<u16> {
        self.ports.clone()
    }

    fn granted_buffer(&self) -> usize {
        self.granted_buffer
    }

    fn finish(self: Box<Self>) -> Result<EffRemote, String> {
        Receiving::finish(*self)
    }

    fn abort(self: Box<Self>) {
        Receiving::abort(*self)
    }
}
