//! A receiver that discards what it gets: for benchmarks, tests and checking that a sender reaches its
//! rate. Counts datagrams and bytes per wall-clock (UTC) second and in total and, when the datagrams
//! start with a packet sequence number (PSN, [`vlbiflow_formats::psn`]), accounts lost, out-of-order and
//! duplicate datagrams with the workspace's sequence tracker ([`vlbiflow_seq::SequenceTracker`], the same
//! one the recorder uses, so both report the same loss for the same stream).

#![forbid(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vlbiflow_formats::psn;
use vlbiflow_seq::split::{self, PartTracker, Runs};
use vlbiflow_seq::{SequenceCounters, SequenceTracker};

use vlbiflow_udp::recv::BatchReceiver;
use vlbiflow_udp::socket::{open_udp, SocketError, SocketReport, UdpConfig};
use vlbiflow_udp::steer::open_run_group;

/// Loss accounting from packet sequence numbers: the workspace's one tracker's counters (the recorder
/// reports the same figures for the same stream).
pub type PsnStats = SequenceCounters;

/// How to run the sink.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The socket to open (bind address, buffer size, GRO, SO_RXQ_OVFL).
    pub udp: UdpConfig,
    /// Messages per `recvmmsg`.
    pub batch: usize,
    /// Bytes per receive buffer; 0 picks 65536 with GRO and 9216 without.
    pub buffer_size: usize,
    /// Datagrams start with an 8-byte little-endian sequence number to account.
    pub psn: bool,
    /// Stop when nothing arrived for this long after the first datagram.
    pub idle_timeout: Option<Duration>,
    /// Stop after this long in total.
    pub max_duration: Option<Duration>,
    /// Spin this long on an empty queue before sleeping (see [`BatchReceiver::with_busy_wait`]).
    pub busy_wait: Duration,
    /// Sockets (and threads) the stream is split over, by runs of `run_len` PSNs (1: one socket). A
    /// power of two; needs `psn`.
    pub split: u32,
    /// PSNs per run when split (a power of two).
    pub run_len: u64,
}

impl SinkConfig {
    /// A sink on `bind` with a forced 64 MiB receive buffer, SO_RXQ_OVFL, 64-message batches, a 2 s
    /// idle timeout and no PSN accounting.
    pub fn new(bind: SocketAddr) -> Self {
        let mut udp = UdpConfig::receiver(bind);
        udp.recv_buffer = Some(64 << 20);
        udp.rxq_ovfl = true;
        SinkConfig {
            udp,
            batch: 64,
            buffer_size: 0,
            psn: false,
            idle_timeout: Some(Duration::from_secs(2)),
            max_duration: None,
            busy_wait: Duration::ZERO,
            split: 1,
            run_len: 1024,
        }
    }
}

/// Counts for one wall-clock second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkSecond {
    /// The UTC second (seconds since the Unix epoch) these counts belong to.
    pub unix_second: u64,
    /// False for the first and last seconds, which the run covers only partly.
    pub complete: bool,
    /// Datagrams received.
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Change in the PSN loss count (may be negative when late datagrams fill earlier gaps).
    pub lost: i64,
    /// Out-of-order datagrams.
    pub out_of_order: u64,
    /// Duplicate datagrams.
    pub duplicate: u64,
    /// Datagrams the kernel dropped on this socket.
    pub kernel_drops: u64,
}

impl SinkSecond {
    /// Payload rate in Gb/s (assuming a whole second).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / 1e9
    }
}

/// Why the sink stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The stop flag was set.
    Stopped,
    /// Nothing arrived for the idle timeout.
    Idle,
    /// The maximum duration passed.
    MaxDuration,
}

/// Totals of a sink run.
#[derive(Debug, Clone)]
pub struct SinkReport {
    /// What opening the socket achieved.
    pub socket: SocketReport,
    /// Datagrams received (GRO segments counted individually).
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// `recvmmsg` messages (fewer than datagrams with GRO).
    pub messages: u64,
    /// `recvmmsg` calls that returned messages.
    pub syscalls: u64,
    /// Messages cut short by a too-small buffer.
    pub truncated: u64,
    /// Datagrams too short to hold a PSN (with PSN accounting on).
    pub short: u64,
    /// PSN accounting, when enabled.
    pub psn: Option<PsnStats>,
    /// Datagrams the kernel dropped on this socket (SO_RXQ_OVFL).
    pub kernel_drops: u64,
    /// Time from the first to the last datagram.
    pub active: Duration,
    /// Time from start to stop.
    pub elapsed: Duration,
    /// Why it stopped (split: why the last socket's thread stopped).
    pub stop_reason: StopReason,
    /// Sockets the stream was split over, and the datagrams that arrived at the socket of the run
    /// before theirs (the tail of a coalesced train) and were accounted by their own socket's thread.
    pub parts: u32,
    pub handed_on: u64,
    /// Datagrams whose number could not be handed on (the owner's queue was full): counted lost.
    pub handoff_full: u64,
}

impl SinkReport {
    /// Payload rate between the first and last datagram, in Gb/s (0 with fewer than two batches).
    pub fn gbps(&self) -> f64 {
        let s = self.active.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 * 8.0 / s / 1e9
        } else {
            0.0
        }
    }
}

/// An opened sink, ready to [`run`](Sink::run).
pub struct Sink {
    config: SinkConfig,
    socks: Vec<UdpSocket>,
    runs: Option<Runs>,
    report: SocketReport,
}

impl Sink {
    /// Opens the socket (split: the group of sockets, steered by PSN runs).
    pub fn open(config: SinkConfig) -> Result<Self, SocketError> {
        let invalid = |what: String| SocketError {
            addr: config.udp.bind,
            step: "split",
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, what),
        };
        if config.split <= 1 {
            let (sock, report) = open_udp(&config.udp)?;
            return Ok(Sink {
                config,
                socks: vec![sock],
                runs: None,
                report,
            });
        }
        if !config.psn {
            return Err(invalid("splitting a stream over sockets needs its PSNs".into()));
        }
        let runs = Runs::new(config.split, config.run_len).map_err(|e| invalid(e.to_string()))?;
        let (socks, report) = open_run_group(&config.udp, runs.parts(), runs.shift())?;
        Ok(Sink {
            config,
            socks,
            runs: Some(runs),
            report,
        })
    }

    /// The bound address (with the real port when port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.report.local
    }

    /// Receives and discards until the stop flag, the idle timeout or the maximum duration, calling
    /// `on_second` at each wall-clock second boundary (checks happen at least every 50 ms). Split over
    /// several sockets, one thread each: a second is reported once every thread has finished it, and
    /// the PSN figures of the last one make the totals the merged ones ([`vlbiflow_seq::split`]).
    pub fn run(
        self,
        stop: &AtomicBool,
        mut on_second: impl FnMut(&SinkSecond),
    ) -> std::io::Result<SinkReport> {
        let Sink {
            config,
            mut socks,
            runs,
            report,
        } = self;
        let start = Instant::now();
        let Some(runs) = runs else {
            let sock = socks.remove(0);
            let mut acc = Accounting::One(SequenceTracker::default());
            let part = receive(&config, &sock, &report, stop, start, &mut acc, &mut on_second)?;
            let psn = config.psn.then(|| acc.counters());
            return Ok(part.into_report(report, psn, start, 1, 0));
        };
        let n = runs.parts() as usize;
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n)
            .map(|_| crossbeam_channel::bounded::<u64>(split::HANDOFF_QUEUE))
            .unzip();
        let (sec_tx, sec_rx) = std::sync::mpsc::channel::<(usize, Option<SinkSecond>)>();
        // The threads stop on this: the caller's stop (passed on below), or a thread that failed.
        let halt = AtomicBool::new(false);
        let results = std::thread::scope(|scope| {
            let handles: Vec<_> = socks
                .iter()
                .zip(rxs)
                .enumerate()
                .map(|(i, (sock, inbox))| {
                    let (cfg, rep, txs, sec_tx, halt) =
                        (&config, &report, txs.clone(), sec_tx.clone(), &halt);
                    std::thread::Builder::new()
                        .name(format!("vf-sink-{i}"))
                        .spawn_scoped(scope, move || {
                            let mut acc = Accounting::Part {
                                tracker: PartTracker::new(runs, i as u32),
                                inbox,
                                outboxes: txs,
                                dropped: 0,
                            };
                            let r = receive(cfg, sock, rep, halt, start, &mut acc, &mut |s: &SinkSecond| {
                                let _ = sec_tx.send((i, Some(*s)));
                            });
                            if r.is_err() {
                                halt.store(true, Ordering::Relaxed);
                            }
                            let _ = sec_tx.send((i, None));
                            r.map(|p| (p, acc))
                        })
                })
                .collect::<std::io::Result<_>>()
                .inspect_err(|_| halt.store(true, Ordering::Relaxed))?;
            drop(sec_tx);
            // Seconds, each once every thread has finished it (or stopped): a thread reports its
            // seconds in order, once each, so a second is complete when no thread's latest is before it.
            // The newest stays pending: the last one takes the merged figure's rest below.
            let mut pending: std::collections::BTreeMap<u64, SinkSecond> = Default::default();
            let mut latest = vec![0u64; n];
            let mut emitted_lost = 0i64;
            let mut emit = |sec: SinkSecond, lost: &mut i64| {
                *lost += sec.lost;
                on_second(&sec);
            };
            loop {
                if stop.load(Ordering::Relaxed) {
                    halt.store(true, Ordering::Relaxed);
                }
                let (i, s) = match sec_rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(m) => m,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                    // Every thread has stopped.
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                };
                match s {
                    Some(s) => {
                        latest[i] = s.unix_second;
                        let e = pending.entry(s.unix_second).or_insert(SinkSecond {
                            unix_second: s.unix_second,
                            complete: true,
                            ..SinkSecond::default()
                        });
                        add(e, &s);
                    }
                    None => latest[i] = u64::MAX,
                }
                let through = latest.iter().copied().min().unwrap_or(0);
                while pending.len() > 1 {
                    let (&t, _) = pending.iter().next().expect("non-empty");
                    if t > through {
                        break;
                    }
                    let sec = pending.remove(&t).expect("present");
                    emit(sec, &mut emitted_lost);
                }
            }
            let mut parts = Vec::with_capacity(n);
            for h in handles {
                parts.push(
                    h.join()
                        .map_err(|_| std::io::Error::other("a sink thread panicked"))??,
                );
            }
            // Every thread stopped: hand on what is left in the inboxes, then merge.
            let mut summaries = Vec::with_capacity(n);
            let mut full = 0;
            for (_, acc) in parts.iter_mut() {
                acc.take_handed();
                if let Accounting::Part { tracker, dropped, .. } = acc {
                    tracker.finish();
                    summaries.push(tracker.summary());
                    full += *dropped;
                }
            }
            let merged = split::merge(&summaries);
            // The last second carries the rest of the merged loss (the edges only the merge sees).
            let last = pending.len();
            for (i, (_, mut sec)) in std::mem::take(&mut pending).into_iter().enumerate() {
                if i + 1 == last {
                    sec.lost = merged.lost as i64 - emitted_lost;
                }
                emit(sec, &mut emitted_lost);
            }
            let handed_on = summaries.iter().map(|t| t.foreign).sum::<u64>();
            let mut total = Received::default();
            for (p, _) in &parts {
                total.merge(p);
            }
            std::io::Result::Ok((total, merged, handed_on, full))
        })?;
        let (total, merged, handed_on, full) = results;
        let mut r = total.into_report(report, Some(merged), start, n as u32, handed_on);
        r.handoff_full = full;
        Ok(r)
    }
}

/// The loss accounting of one socket's thread.
enum Accounting {
    /// The whole stream.
    One(SequenceTracker),
    /// One part of a split stream: numbers of other parts' runs go to their outboxes, numbers of this
    /// part's runs that arrived elsewhere come in through the inbox.
    Part {
        tracker: PartTracker,
        inbox: crossbeam_channel::Receiver<u64>,
        outboxes: Vec<crossbeam_channel::Sender<u64>>,
        /// Numbers a full outbox did not take (its owner's figures then miss them).
        dropped: u64,
    },
}

impl Accounting {
    #[inline]
    fn observe(&mut self, n: u64) {
        match self {
            Accounting::One(t) => {
                t.observe(n);
            }
            Accounting::Part {
                tracker,
                outboxes,
                dropped,
                ..
            } => {
                if let Some(owner) = tracker.arrived(n) {
                    if outboxes[owner as usize].try_send(n).is_err() {
                        *dropped += 1;
                    }
                }
            }
        }
    }

    /// Takes the numbers handed here (once per batch).
    fn take_handed(&mut self) {
        if let Accounting::Part { tracker, inbox, .. } = self {
            while let Ok(n) = inbox.try_recv() {
                tracker.handed(n);
            }
        }
    }

    fn counters(&self) -> PsnStats {
        match self {
            Accounting::One(t) => t.counters(),
            Accounting::Part { tracker, .. } => tracker.counters(),
        }
    }
}

fn add(to: &mut SinkSecond, s: &SinkSecond) {
    to.complete &= s.complete;
    to.datagrams += s.datagrams;
    to.bytes += s.bytes;
    to.lost += s.lost;
    to.out_of_order += s.out_of_order;
    to.duplicate += s.duplicate;
    to.kernel_drops += s.kernel_drops;
}

/// What one socket's thread received.
#[derive(Default)]
struct Received {
    datagrams: u64,
    bytes: u64,
    messages: u64,
    syscalls: u64,
    truncated: u64,
    short: u64,
    kernel_drops: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    stop_reason: Option<StopReason>,
}

impl Received {
    fn merge(&mut self, o: &Received) {
        self.datagrams += o.datagrams;
        self.bytes += o.bytes;
        self.messages += o.messages;
        self.syscalls += o.syscalls;
        self.truncated += o.truncated;
        self.short += o.short;
        self.kernel_drops += o.kernel_drops;
        self.first = match (self.first, o.first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if o.last >= self.last {
            self.last = o.last;
            self.stop_reason = o.stop_reason;
        }
    }

    fn into_report(
        self,
        socket: SocketReport,
        psn: Option<PsnStats>,
        start: Instant,
        parts: u32,
        handed_on: u64,
    ) -> SinkReport {
        SinkReport {
            socket,
            datagrams: self.datagrams,
            bytes: self.bytes,
            messages: self.messages,
            syscalls: self.syscalls,
            truncated: self.truncated,
            short: self.short,
            psn,
            kernel_drops: self.kernel_drops,
            active: match (self.first, self.last) {
                (Some(f), Some(l)) => l - f,
                _ => Duration::ZERO,
            },
            elapsed: start.elapsed(),
            stop_reason: self.stop_reason.unwrap_or(StopReason::Stopped),
            parts,
            handed_on,
            handoff_full: 0,
        }
    }
}

/// One socket's receive loop: counts per wall-clock second into `on_second`, PSNs into `acc`.
fn receive(
    cfg: &SinkConfig,
    sock: &UdpSocket,
    report: &SocketReport,
    stop: &AtomicBool,
    start: Instant,
    acc: &mut Accounting,
    on_second: &mut dyn FnMut(&SinkSecond),
) -> std::io::Result<Received> {
    let buf_size = match cfg.buffer_size {
        0 if report.gro.is_enabled() => 65_536,
        0 => 9_216,
        n => n,
    };
    let batch = cfg.batch.max(1);
    let mut storage = vec![0u8; batch * buf_size];
    let mut rx = BatchReceiver::new(batch).with_busy_wait(cfg.busy_wait);
    let mut short = 0u64;

    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut second = SinkSecond {
        unix_second: since_epoch.as_secs(),
        ..SinkSecond::default()
    };
    let mut next_boundary =
        start + (Duration::from_secs(1) - Duration::from_nanos(since_epoch.subsec_nanos() as u64));
    // Counters at the start of the current second, for per-second differences.
    let mut psn_at_second = PsnStats::default();
    let mut drops_at_second = 0u64;
    let close = |second: &mut SinkSecond, psn: PsnStats, at: &PsnStats, drops: u64| {
        second.lost = psn.lost as i64 - at.lost as i64;
        second.out_of_order = psn.out_of_order - at.out_of_order;
        second.duplicate = psn.duplicates - at.duplicates;
        second.kernel_drops = drops;
    };

    let mut first: Option<Instant> = None;
    let mut last = start;
    let poll_slice = Duration::from_millis(50);
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break StopReason::Stopped;
        }
        let now = Instant::now();
        while now >= next_boundary {
            let psn = acc.counters();
            close(
                &mut second,
                psn,
                &psn_at_second,
                rx.kernel_drops() - drops_at_second,
            );
            on_second(&second);
            psn_at_second = psn;
            drops_at_second = rx.kernel_drops();
            second = SinkSecond {
                unix_second: second.unix_second + 1,
                complete: true,
                ..SinkSecond::default()
            };
            next_boundary += Duration::from_secs(1);
        }
        let mut wait = (next_boundary - now).min(poll_slice);
        if let (Some(idle), Some(_)) = (cfg.idle_timeout, first) {
            let quiet = now - last;
            if quiet >= idle {
                break StopReason::Idle;
            }
            wait = wait.min(idle - quiet);
        }
        if let Some(max) = cfg.max_duration {
            let ran = now - start;
            if ran >= max {
                break StopReason::MaxDuration;
            }
            wait = wait.min(max - ran);
        }
        acc.take_handed();
        let got = rx.recv(sock, storage.chunks_exact_mut(buf_size), wait)?;
        if got.is_empty() {
            continue;
        }
        let t = Instant::now();
        first.get_or_insert(t);
        last = t;
        for (i, meta) in got.messages().iter().enumerate() {
            let buf = &storage[i * buf_size..(i + 1) * buf_size];
            for datagram in meta.segments(buf) {
                second.datagrams += 1;
                second.bytes += datagram.len() as u64;
                if cfg.psn {
                    match psn::read_prefix(datagram) {
                        Some(n) => acc.observe(n),
                        None => short += 1,
                    }
                }
            }
        }
    };
    // The partial last second.
    let psn = acc.counters();
    second.complete = false;
    close(
        &mut second,
        psn,
        &psn_at_second,
        rx.kernel_drops() - drops_at_second,
    );
    on_second(&second);

    let stats = rx.stats();
    Ok(Received {
        datagrams: stats.datagrams,
        bytes: stats.bytes,
        messages: stats.messages,
        syscalls: stats.syscalls,
        truncated: stats.truncated,
        short,
        kernel_drops: rx.kernel_drops(),
        first,
        last: first.map(|_| last),
        stop_reason: Some(reason),
    })
}

/// Errors of [`run_sink`].
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Opening the socket failed.
    #[error(transparent)]
    Open(#[from] SocketError),
    /// Receiving failed.
    #[error("receiving on {addr}: {source}")]
    Recv {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Opens a sink as `config` says and runs it (see [`Sink::run`]).
pub fn run_sink(
    config: SinkConfig,
    stop: &AtomicBool,
    on_second: impl FnMut(&SinkSecond),
) -> Result<SinkReport, SinkError> {
    let sink = Sink::open(config)?;
    let addr = sink.local_addr();
    sink.run(stop, on_second)
        .map_err(|source| SinkError::Recv { addr, source })
}
