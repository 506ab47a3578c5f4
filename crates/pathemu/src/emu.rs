//! The I/O layer: two network namespaces, a TUN device in each, and one thread per direction that reads
//! packets from one device, feeds them to that direction's [`Link`], and writes them to the other device
//! when they are due. Dropped packets go, as fixed-size [`DropRecord`]s through a bounded channel, to a
//! writer thread that formats the drop log; the forwarding threads never format, allocate or block on it.
//!
//! Timing: a thread sleeps in `ppoll` on its input device until the next packet is due (timer slack set to
//! 1 ns), and writes every packet that is due when it wakes. With [`PathConfig::spin`] it wakes that much
//! early and spins the rest, so packets leave within a few microseconds of their due time on an idle
//! machine, at the price of a core: at 2 Gb/s of 9000-byte packets one is due every 36 µs, so a spin
//! window of 50 µs keeps the thread on the CPU all the time (measured in docs/pathemu.md).

use crate::model::{Counters, Link, LinkConfig, Nanos, Verdict};
use crate::packet::{Direction, DropRecord, LogFormat, PacketSummary, CSV_HEADER};
use crate::sys::{self, Tun};
use serde::Serialize;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vlbiflow_sched as sched;

/// The forwarding threads' priority in the real-time class (`realtime`): above the 5 of vlbiflow's own
/// data-plane threads (`--realtime`), so that the path's timing holds while they run.
const EMU_PRIORITY: i32 = 10;

/// The default of [`PathConfig::wake_every`]: at most 100 µs late, and about a third of the emulator's CPU
/// at 2 Gb/s of jumbo datagrams on a 2-vCPU VM of 2026-11-27 (0.96-1.49 CPU s/GB at 100-200 µs against
/// 2.08-2.38 waking for every packet; docs/pathemu.md).
pub const DEFAULT_WAKE_EVERY: Duration = Duration::from_micros(100);

/// Longest a forwarding thread sleeps before it looks at the stop flag again.
const IDLE: Duration = Duration::from_millis(20);
/// Most packets read in a row before due packets are written again.
const READ_BATCH: usize = 64;
/// Drop records queued to the log writer before further ones are counted as lost to the log.
const LOG_QUEUE: usize = 1 << 16;
/// txqueuelen of the devices: packets the kernel holds for the emulator to read.
const TXQUEUELEN: &str = "10000";

/// Errors of the I/O layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration the emulator cannot run.
    #[error("{0}")]
    Config(String),
    /// A system call or command failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Everything the emulator is asked to set up.
#[derive(Debug, Clone)]
pub struct PathConfig {
    /// Namespace of side A (created if missing).
    pub ns_a: String,
    /// Namespace of side B (created if missing).
    pub ns_b: String,
    /// Address of side A's device (point-to-point to `addr_b`).
    pub addr_a: Ipv4Addr,
    /// Address of side B's device.
    pub addr_b: Ipv4Addr,
    /// MTU of both devices.
    pub mtu: u32,
    /// Leave the namespaces it created when it ends.
    pub keep: bool,
    /// Impairments from A to B.
    pub a_to_b: LinkConfig,
    /// Impairments from B to A.
    pub b_to_a: LinkConfig,
    /// Drop log file and format.
    pub drop_log: Option<(PathBuf, LogFormat)>,
    /// Run the forwarding threads in the SCHED_FIFO real-time class (tighter timing on a busy machine).
    pub realtime: bool,
    /// Wake this long before a packet is due and spin the rest (tighter timing, but a core per busy
    /// direction); zero: sleep until it is due.
    pub spin: Duration,
    /// Wake at most once per this long (ignored with `spin`): packets are read and leave in batches, up
    /// to this much after their time, as a router's interrupt moderation does; zero: at every arrival
    /// and every due time.
    pub wake_every: Duration,
}

/// What one direction did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DirReport {
    /// The model's counters.
    #[serde(flatten)]
    pub counters: Counters,
    /// Packets still in the model (queued or in flight) when it stopped.
    pub in_flight_at_stop: u64,
    /// Failed reads from the input device.
    pub read_errors: u64,
    /// Failed writes to the output device (the packet is lost, and not in the drop log).
    pub write_errors: u64,
    /// Packets the kernel dropped before the emulator could read them (tx_dropped of the input device).
    pub kernel_dropped_in: Option<u64>,
    /// Packets the kernel dropped after the emulator wrote them (rx_dropped of the output device).
    pub kernel_dropped_out: Option<u64>,
    /// The loss model's long-run loss fraction.
    pub expected_loss: f64,
    /// How late packets were written after their due time: counts below 10 µs, 10-100 µs, 0.1-1 ms and
    /// above 1 ms.
    pub late_hist: [u64; 4],
    /// The latest a packet was written after its due time, nanoseconds.
    pub late_max_ns: u64,
}

/// What the emulator did, for the summary.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds it forwarded.
    pub duration_s: f64,
    /// From A to B.
    pub a_to_b: DirReport,
    /// From B to A.
    pub b_to_a: DirReport,
    /// Lines written to the drop log.
    pub drop_log_lines: u64,
    /// Drops that did not reach the log because its writer fell behind.
    pub drop_log_lost: u64,
}

/// Namespaces and devices made so far; removes them when dropped.
struct Resources {
    created_ns: Vec<String>,
    tuns: Vec<Tun>,
    keep: bool,
}

impl Drop for Resources {
    fn drop(&mut self) {
        // Closing a TUN device's descriptor removes the device (and its addresses and routes).
        self.tuns.clear();
        if !self.keep {
            for ns in self.created_ns.drain(..) {
                let _ = sys::ip(&["netns", "del", &ns]);
            }
        }
    }
}

/// A set-up path, ready to forward. Dropping it (or the end of [`Emulator::run`]) removes what it created.
pub struct Emulator {
    cfg: PathConfig,
    res: Resources,
    links: Option<(Link, Link)>,
}

fn tun_name(side: char) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) % 100;
    format!("vfpe{}{n}{side}", std::process::id())
}

impl Emulator {
    /// Creates the namespaces (if missing) and the devices, moves the devices into them, sets MTU and
    /// addresses, and allocates the two links. Needs CAP_NET_ADMIN and `ip` (iproute2).
    pub fn setup(cfg: PathConfig) -> Result<Emulator, Error> {
        sys::check_netns_name(&cfg.ns_a).map_err(Error::Config)?;
        sys::check_netns_name(&cfg.ns_b).map_err(Error::Config)?;
        if cfg.ns_a == cfg.ns_b {
            return Err(Error::Config(format!(
                "both sides are namespace {:?}; give two",
                cfg.ns_a
            )));
        }
        if cfg.addr_a == cfg.addr_b {
            return Err(Error::Config(format!("both sides have address {}", cfg.addr_a)));
        }
        if !(68..=65_535).contains(&cfg.mtu) {
            return Err(Error::Config(format!("MTU {} is outside 68..65535", cfg.mtu)));
        }
        let a_to_b = Link::new(cfg.a_to_b.clone()).map_err(|e| Error::Config(format!("a-b: {e}")))?;
        let b_to_a = Link::new(cfg.b_to_a.clone()).map_err(|e| Error::Config(format!("b-a: {e}")))?;
        let mut res = Resources {
            created_ns: Vec::new(),
            tuns: Vec::new(),
            keep: cfg.keep,
        };
        let mtu = cfg.mtu.to_string();
        for (ns, local, peer, side) in [
            (&cfg.ns_a, cfg.addr_a, cfg.addr_b, 'a'),
            (&cfg.ns_b, cfg.addr_b, cfg.addr_a, 'b'),
        ] {
            if !sys::netns_exists(ns) {
                sys::ip(&["netns", "add", ns]).map_err(io_err(format!("creating namespace {ns}")))?;
                res.created_ns.push(ns.clone());
            }
            let name = tun_name(side);
            let tun =
                Tun::create(&name).map_err(io_err(format!("creating TUN device {name} (/dev/net/tun)")))?;
            res.tuns.push(tun);
            let what = format!("setting up {name} in namespace {ns}");
            sys::ip(&["link", "set", &name, "netns", ns]).map_err(io_err(what.clone()))?;
            sys::ip(&["-n", ns, "link", "set", "lo", "up"]).map_err(io_err(what.clone()))?;
            // No IPv6 link-local address: the path carries only what the tests and benchmarks send.
            let _ = sys::ip(&["-n", ns, "link", "set", &name, "addrgenmode", "none"]);
            sys::ip(&[
                "-n",
                ns,
                "link",
                "set",
                &name,
                "mtu",
                &mtu,
                "txqueuelen",
                TXQUEUELEN,
            ])
            .map_err(io_err(what.clone()))?;
            let (local, peer) = (format!("{local}/32"), format!("{peer}/32"));
            sys::ip(&["-n", ns, "addr", "add", &local, "peer", &peer, "dev", &name])
                .map_err(io_err(what.clone()))?;
            sys::ip(&["-n", ns, "link", "set", &name, "up"]).map_err(io_err(what))?;
        }
        Ok(Emulator {
            cfg,
            res,
            links: Some((a_to_b, b_to_a)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PathConfig {
        &self.cfg
    }

    /// Device names in A and in B.
    pub fn devices(&self) -> (&str, &str) {
        (self.res.tuns[0].name(), self.res.tuns[1].name())
    }

    /// The namespaces this emulator created (and removes at the end unless told to keep them).
    pub fn created_namespaces(&self) -> &[String] {
        &self.res.created_ns
    }

    /// Forwards until `stop` is set or `duration` has passed, then stops every thread and removes what
    /// it created.
    pub fn run(mut self, stop: &AtomicBool, duration: Option<Duration>) -> Result<Report, Error> {
        let (ab, ba) = self.links.take().expect("run once");
        let start = Instant::now();
        let start_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let halt = AtomicBool::new(false);
        let log_lost = AtomicU64::new(0);
        let log_file = match &self.cfg.drop_log {
            Some((path, format)) => {
                let f =
                    File::create(path).map_err(io_err(format!("creating drop log {}", path.display())))?;
                Some((BufWriter::with_capacity(1 << 20, f), *format))
            }
            None => None,
        };
        let (tx, rx) = mpsc::sync_channel::<DropRecord>(LOG_QUEUE);
        let log_tx = log_file.is_some().then_some(tx);
        let (tun_a, tun_b) = (&self.res.tuns[0], &self.res.tuns[1]);
        let realtime = self.cfg.realtime;
        let spin = self.cfg.spin.as_nanos() as Nanos;
        // spinning asks for timing to the microsecond: no moderation then
        let wake_every = if spin > 0 {
            0
        } else {
            self.cfg.wake_every.as_nanos() as Nanos
        };
        let result = std::thread::scope(|s| {
            let writer = s.spawn(|| log_writer(rx, log_file, start_unix));
            let pace = Pace {
                start,
                realtime,
                spin,
                wake_every,
            };
            let spawn = |name: &str, dir, input, output, link| {
                let drops = DropLog {
                    tx: log_tx.clone(),
                    lost: &log_lost,
                };
                let halt = &halt;
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(s, move || forward(dir, input, output, link, pace, halt, drops))
                    .map_err(io_err("starting a thread"))
            };
            let t_ab = spawn("pathemu-a-b", Direction::AtoB, tun_a, tun_b, ab)?;
            let t_ba = spawn("pathemu-b-a", Direction::BtoA, tun_b, tun_a, ba)?;
            drop(log_tx);
            while !stop.load(Ordering::SeqCst) && duration.is_none_or(|d| start.elapsed() < d) {
                if t_ab.is_finished() || t_ba.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            halt.store(true, Ordering::SeqCst);
            let elapsed = start.elapsed();
            let ab = t_ab.join().expect("forwarding thread panicked");
            let ba = t_ba.join().expect("forwarding thread panicked");
            let lines = writer.join().expect("drop-log thread panicked");
            Ok::<_, Error>((elapsed, ab?, ba?, lines?))
        });
        let (elapsed, mut ab, mut ba, lines) = result?;
        let (dev_a, dev_b) = self.devices();
        let (drops_a, drops_b) = (
            sys::link_drops(&self.cfg.ns_a, dev_a),
            sys::link_drops(&self.cfg.ns_b, dev_b),
        );
        ab.kernel_dropped_in = drops_a.map(|d| d.0);
        ab.kernel_dropped_out = drops_b.map(|d| d.1);
        ba.kernel_dropped_in = drops_b.map(|d| d.0);
        ba.kernel_dropped_out = drops_a.map(|d| d.1);
        ab.expected_loss = self.cfg.a_to_b.loss.stationary_loss();
        ba.expected_loss = self.cfg.b_to_a.loss.stationary_loss();
        Ok(Report {
            duration_s: elapsed.as_secs_f64(),
            a_to_b: ab,
            b_to_a: ba,
            drop_log_lines: lines,
            drop_log_lost: log_lost.load(Ordering::SeqCst),
        })
    }
}

/// How a direction's loop keeps time: the run's start, the real-time class, the spin before a due time and
/// the wake-up moderation (0: none).
#[derive(Clone, Copy)]
struct Pace {
    start: Instant,
    realtime: bool,
    spin: Nanos,
    wake_every: Nanos,
}

/// Where a direction's loop logs its drops (if asked), and the count of records the log had no room for.
struct DropLog<'a> {
    tx: Option<SyncSender<DropRecord>>,
    lost: &'a AtomicU64,
}

/// One direction's loop: read what is waiting, write what is due, sleep until the next due time.
fn forward(
    dir: Direction,
    input: &Tun,
    output: &Tun,
    mut link: Link,
    pace: Pace,
    halt: &AtomicBool,
    drops: DropLog<'_>,
) -> Result<DirReport, Error> {
    let Pace {
        start,
        realtime,
        spin,
        wake_every,
    } = pace;
    let DropLog {
        tx: log,
        lost: log_lost,
    } = drops;
    sched::set_timer_slack(1);
    // the thread ends with the run, and its class with it
    let _rt = if realtime {
        Some(sched::enter_realtime(EMU_PRIORITY).map_err(io_err("entering the SCHED_FIFO real-time class"))?)
    } else {
        None
    };
    let now = || start.elapsed().as_nanos() as Nanos;
    let mut buf = vec![0u8; crate::model::MAX_PACKET + 1];
    let mut rep = DirReport::default();
    let mut woke = now();
    while !halt.load(Ordering::Relaxed) {
        let t = now();
        while let Some((due, pkt)) = link.poll_transmit_due(t) {
            let late = now().saturating_sub(due);
            rep.late_max_ns = rep.late_max_ns.max(late);
            rep.late_hist[match late {
                0..10_000 => 0,
                10_000..100_000 => 1,
                100_000..1_000_000 => 2,
                _ => 3,
            }] += 1;
            if output.write(pkt).is_err() {
                rep.write_errors += 1;
            }
        }
        let mut read = 0;
        while read < READ_BATCH {
            match input.read(&mut buf) {
                Ok(n) => {
                    read += 1;
                    let t = now();
                    if let Verdict::Dropped(reason) = link.push(t, &buf[..n]) {
                        if let Some(log) = &log {
                            let rec = DropRecord {
                                t_ns: t,
                                dir,
                                reason,
                                pkt: PacketSummary::parse(&buf[..n]),
                            };
                            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
                                log.try_send(rec)
                            {
                                log_lost.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    rep.read_errors += 1;
                    if rep.read_errors > 1000 {
                        return Err(Error::Io {
                            what: format!("reading from {}", input.name()),
                            source: e,
                        });
                    }
                    break;
                }
            }
        }
        if read == READ_BATCH {
            continue;
        }
        let mut t = now();
        if wake_every > 0 {
            // not before a wake-up interval has passed since the last one: arrivals meanwhile wait in
            // the device's queue (read with their time of reading), due packets go a little late
            let earliest = woke + wake_every;
            if earliest > t {
                std::thread::sleep(Duration::from_nanos(earliest - t));
                t = now();
            }
            woke = t;
        }
        let wait = link
            .next_wakeup()
            .map_or(IDLE.as_nanos() as Nanos, |due| due.saturating_sub(t));
        if wake_every > 0 && wait == 0 {
            continue;
        }
        if wait > spin {
            let sleep = Duration::from_nanos(wait - spin).min(IDLE);
            input
                .wait_readable(sleep)
                .map_err(io_err(format!("waiting on {}", input.name())))?;
        } else {
            std::hint::spin_loop();
        }
    }
    rep.counters = *link.counters();
    rep.in_flight_at_stop = rep.counters.in_flight();
    Ok(rep)
}

/// Formats drop records into the log until every sender is gone; returns the lines written.
fn log_writer(
    rx: Receiver<DropRecord>,
    file: Option<(BufWriter<File>, LogFormat)>,
    start_unix: f64,
) -> Result<u64, Error> {
    let Some((mut w, format)) = file else { return Ok(0) };
    let err = io_err("writing the drop log");
    let mut lines = 0;
    let res = (|| {
        if format == LogFormat::Csv {
            writeln!(w, "{CSV_HEADER}")?;
        }
        w.flush()?;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(rec) => {
                    rec.write_line(&mut w, format, start_unix)?;
                    lines += 1;
                }
                Err(RecvTimeoutError::Timeout) => w.flush()?,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        w.flush()
    })();
    res.map_err(err)?;
    Ok(lines)
}
