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
use vlbiflow_seq::{SequenceCounters, SequenceTracker};

use vlbiflow_udp::recv::BatchReceiver;
use vlbiflow_udp::socket::{open_udp, SocketError, SocketReport, UdpConfig};

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
    /// Why it stopped.
    pub stop_reason: StopReason,
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
    sock: UdpSocket,
    report: SocketReport,
}

impl Sink {
    /// Opens the socket.
    pub fn open(config: SinkConfig) -> Result<Self, SocketError> {
        let (sock, report) = open_udp(&config.udp)?;
        Ok(Sink { config, sock, report })
    }

    /// The bound address (with the real port when port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.report.local
    }

    /// Receives and discards until the stop flag, the idle timeout or the maximum duration, calling
    /// `on_second` at each wall-clock second boundary (checks happen at least every 50 ms).
    pub fn run(
        self,
        stop: &AtomicBool,
        mut on_second: impl FnMut(&SinkSecond),
    ) -> std::io::Result<SinkReport> {
        let cfg = &self.config;
        let buf_size = match cfg.buffer_size {
            0 if self.report.gro.is_enabled() => 65_536,
            0 => 9_216,
            n => n,
        };
        let batch = cfg.batch.max(1);
        let mut storage = vec![0u8; batch * buf_size];
        let mut rx = BatchReceiver::new(batch).with_busy_wait(cfg.busy_wait);
        let mut tracker = SequenceTracker::default();
        let mut short = 0u64;

        let start = Instant::now();
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

        let mut first: Option<Instant> = None;
        let mut last = start;
        let poll_slice = Duration::from_millis(50);
        let reason = loop {
            if stop.load(Ordering::Relaxed) {
                break StopReason::Stopped;
            }
            let now = Instant::now();
            while now >= next_boundary {
                let psn = tracker.counters();
                second.lost = psn.lost as i64 - psn_at_second.lost as i64;
                second.out_of_order = psn.out_of_order - psn_at_second.out_of_order;
                second.duplicate = psn.duplicates - psn_at_second.duplicates;
                second.kernel_drops = rx.kernel_drops() - drops_at_second;
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
            let got = rx.recv(&self.sock, storage.chunks_exact_mut(buf_size), wait)?;
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
                            Some(n) => {
                                tracker.observe(n);
                            }
                            None => short += 1,
                        }
                    }
                }
            }
        };
        // The partial last second.
        let psn = tracker.counters();
        second.complete = false;
        second.lost = psn.lost as i64 - psn_at_second.lost as i64;
        second.out_of_order = psn.out_of_order - psn_at_second.out_of_order;
        second.duplicate = psn.duplicates - psn_at_second.duplicates;
        second.kernel_drops = rx.kernel_drops() - drops_at_second;
        on_second(&second);

        let stats = rx.stats();
        Ok(SinkReport {
            socket: self.report,
            datagrams: stats.datagrams,
            bytes: stats.bytes,
            messages: stats.messages,
            syscalls: stats.syscalls,
            truncated: stats.truncated,
            short,
            psn: cfg.psn.then_some(psn),
            kernel_drops: rx.kernel_drops(),
            active: first.map(|f| last - f).unwrap_or_default(),
            elapsed: start.elapsed(),
            stop_reason: reason,
        })
    }
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
