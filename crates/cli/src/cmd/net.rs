//! `vlbiflow net`: network measurement (UDPmon-style throughput/loss/latency, TCP with CPU accounting),
//! its responder, and the archive of results.

use crate::units::{parse_bit_rate, parse_bytes, parse_seconds};
use crate::usage;
use anyhow::{anyhow, Context};
use clap::Subcommand;
use serde::Serialize;
use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vlbiflow_net::archive::{Archive, Filter, Record};
use vlbiflow_net::client::WIRE_OVERHEAD;
use vlbiflow_net::load::{parse_nice_sweep, CpuLoad, CpuLoadSpec};
use vlbiflow_net::plot::{plot_bw, plot_lat, plot_series, Series};
use vlbiflow_net::{
    BwParams, BwResult, Client, LatParams, LatResult, NetError, Responder, ResponderConfig, TcpParams,
    TcpResult, ZeroLossSearch,
};

/// The responder's default control port.
pub const DEFAULT_PORT: u16 = 14233;

const EXAMPLES: &str = "\
Examples:
  # On the far host
  vlbiflow net responder --listen 0.0.0.0:14233

  # UDPmon's standard sweep: 3 sizes, spacing 0..40 µs, 10000 frames each, with a plot
  vlbiflow net bw far.example.org --size 64,1472,8192 --wait 0:40:1 --plot sweep.png

  # Highest loss-free rate (RFC 2544 search) for 1472- and 8192-byte frames
  vlbiflow net bw far.example.org --size 1472,8192 --find-zero-loss

  # Latency against message size, TCP with 1, 2 and 4 streams
  vlbiflow net lat far.example.org --plot lat.svg
  vlbiflow net tcp far.example.org --streams 1,2,4 --duration 10s

  # Throughput while a CPU hog runs at nice 19 down to 0 (the Mark5A experiment)
  vlbiflow net bw far.example.org --rate 512Mbps --count 20000 --cpu-load-sweep 19:0

  # Results over time
  vlbiflow net history --kind bw-zero-loss --plot history.png";

/// Network measurement: throughput, loss, jitter, latency and TCP tests against a responder.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES, subcommand_required = true, arg_required_else_help = true)]
pub struct Args {
    #[command(subcommand)]
    cmd: NetCmd,
}

#[derive(Subcommand)]
enum NetCmd {
    /// Run the far end: answer control connections, receive and echo test traffic
    Responder(ResponderArgs),
    /// UDP throughput, loss, jitter, reordering and 1-way delay against frame size and spacing
    Bw(BwArgs),
    /// Request-response latency against message size, with histograms and a least-squares line
    Lat(LatArgs),
    /// Memory-to-memory TCP throughput over 1..N streams with CPU use at both ends
    Tcp(TcpArgs),
    /// List or plot archived results over time
    History(HistoryArgs),
}

const RESPONDER_EXAMPLES: &str = "\
Examples:
  vlbiflow net responder                          # 127.0.0.1:14233, for loopback tests
  vlbiflow net responder --listen 0.0.0.0:14233   # all interfaces";

#[derive(clap::Args)]
#[command(after_help = RESPONDER_EXAMPLES)]
struct ResponderArgs {
    /// Control address (TCP); test sockets use the same IP and ephemeral ports
    #[arg(long, default_value = "127.0.0.1:14233", value_name = "HOST:PORT")]
    listen: String,
    /// Close a control connection silent for this long
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    idle_timeout: String,
    /// Receive buffer for UDP test sockets unless the client asks for one
    #[arg(long, default_value = "8MiB", value_name = "BYTES")]
    recv_buffer: String,
}

#[derive(clap::Args)]
struct Common {
    /// Responder host or HOST:PORT (default port 14233)
    host: String,
    /// Longest wait for any control answer
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    timeout: String,
    /// Print CSV instead of the table
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print JSON (all statistics) instead of the table
    #[arg(long)]
    json: bool,
    /// Write a plot (.png or .svg)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Archive file (default $XDG_DATA_HOME/vlbiflow/net.sqlite or ~/.local/share/vlbiflow/net.sqlite)
    #[arg(long, value_name = "PATH")]
    archive: Option<PathBuf>,
    /// Do not archive the results
    #[arg(long)]
    no_archive: bool,
    /// Run a CPU-hungry competitor during each test: nice=N[,threads=K]
    #[arg(long, value_name = "SPEC", conflicts_with = "cpu_load_sweep")]
    cpu_load: Option<String>,
    /// Repeat the test with the competitor at each nice level FROM..TO, e.g. 19:0
    #[arg(long, value_name = "FROM:TO")]
    cpu_load_sweep: Option<String>,
    /// Competitor threads for --cpu-load-sweep (default: one per CPU)
    #[arg(long, value_name = "K")]
    cpu_load_threads: Option<usize>,
    /// No progress lines on standard error
    #[arg(long, short)]
    quiet: bool,
}

const BW_EXAMPLES: &str = "\
Examples:
  vlbiflow net bw 10.0.0.2 --size 1472 --wait 10 --count 10000
  vlbiflow net bw 10.0.0.2 --size 64,1472,8192 --wait 0:40:1 --plot sweep.png --csv > sweep.csv
  vlbiflow net bw 10.0.0.2 --size 8192 --rate 2Gbps --count 100000
  vlbiflow net bw 10.0.0.2 --size 1472 --find-zero-loss --trial-duration 2s

Columns: size, frames sent, wait (µs), send user rate, received, lost, out of order, % lost, lost
in network (lost minus the receiving socket's drops), receive user rate = 8 x size x received /
(last - first arrival), receive wire rate (+66 bytes per frame), RFC 3550 jitter, 1-way delay above
its minimum (median, 99th percentile), RFC 4737 reordered ratio, CPU idle at sender/receiver.";

#[derive(clap::Args)]
#[command(after_help = BW_EXAMPLES)]
struct BwArgs {
    #[command(flatten)]
    common: Common,
    /// Frame sizes (UDP payload bytes): list and/or FROM:TO[:STEP] ranges
    #[arg(long, default_value = "1472", value_name = "LIST")]
    size: String,
    /// Spacing between frames in µs: list and/or FROM:TO[:STEP] ranges (0 = as fast as possible)
    #[arg(long, value_name = "LIST", conflicts_with = "rate")]
    wait: Option<String>,
    /// Offered rate instead of a spacing (UDP payload), e.g. 500Mbps
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Frames per test
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Search for the highest loss-free rate (RFC 2544) for each size
    #[arg(long, conflicts_with_all = ["wait", "rate"])]
    find_zero_loss: bool,
    /// Length of each search trial
    #[arg(long, default_value = "2", value_name = "SECONDS")]
    trial_duration: String,
    /// Upper end of the search (default: 1.25 x the received rate of a flat-out trial)
    #[arg(long, value_name = "RATE")]
    max_rate: Option<String>,
    /// Stop the search when the bracket is narrower than this fraction of the upper end
    #[arg(long, default_value_t = 0.005)]
    resolution: f64,
    /// Socket send buffer
    #[arg(long, default_value = "4MiB", value_name = "BYTES")]
    send_buffer: String,
    /// Responder socket receive buffer
    #[arg(long, default_value = "8MiB", value_name = "BYTES")]
    recv_buffer: String,
    /// Frames per sendmmsg at most (when behind schedule or at wait 0)
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Send frames that are due together one by one instead of as GSO super-datagrams
    #[arg(long)]
    no_gso: bool,
}

const LAT_EXAMPLES: &str = "\
Examples:
  vlbiflow net lat 10.0.0.2
  vlbiflow net lat 10.0.0.2 --sizes 64:1472:128 --count 2000 --plot lat.png

The slope of the least-squares line (fitted to the median round trip per size) is the per-byte cost
of both directions; the intercept is the fixed cost of a round trip.";

#[derive(clap::Args)]
#[command(after_help = LAT_EXAMPLES)]
struct LatArgs {
    #[command(flatten)]
    common: Common,
    /// Message sizes (bytes): list and/or FROM:TO[:STEP] ranges
    #[arg(
        long,
        default_value = "64,256,512,1024,1472,2048,4096,8192",
        value_name = "LIST"
    )]
    sizes: String,
    /// Measured requests per size
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Unmeasured requests before each size
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// How long to wait for each reply
    #[arg(long, default_value = "1", value_name = "SECONDS")]
    reply_timeout: String,
}

const TCP_EXAMPLES: &str = "\
Examples:
  vlbiflow net tcp 10.0.0.2 --duration 10s
  vlbiflow net tcp 10.0.0.2 --streams 1:4 --send-buffer 16MiB --recv-buffer 16MiB";

#[derive(clap::Args)]
#[command(after_help = TCP_EXAMPLES)]
struct TcpArgs {
    #[command(flatten)]
    common: Common,
    /// Parallel streams: list and/or FROM:TO ranges, one test each
    #[arg(long, default_value = "1", value_name = "LIST")]
    streams: String,
    /// Sending time per test
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    duration: String,
    /// Bytes per write
    #[arg(long, default_value = "128KiB", value_name = "BYTES")]
    write_size: String,
    /// Send buffer per stream (default: the kernel's autotuning)
    #[arg(long, value_name = "BYTES")]
    send_buffer: Option<String>,
    /// Receive buffer per stream at the responder (default: autotuning)
    #[arg(long, value_name = "BYTES")]
    recv_buffer: Option<String>,
}

const HISTORY_EXAMPLES: &str = "\
Examples:
  vlbiflow net history
  vlbiflow net history --kind bw-zero-loss --remote 10.0.0.2 --plot zero-loss.png
  vlbiflow net history --since 2025-01-01 --json";

#[derive(clap::Args)]
#[command(after_help = HISTORY_EXAMPLES)]
struct HistoryArgs {
    /// Archive file (default $XDG_DATA_HOME/vlbiflow/net.sqlite or ~/.local/share/vlbiflow/net.sqlite)
    #[arg(long, value_name = "PATH")]
    archive: Option<PathBuf>,
    /// Only this kind: bw, bw-zero-loss, lat, tcp
    #[arg(long)]
    kind: Option<String>,
    /// Only remotes containing this text
    #[arg(long)]
    remote: Option<String>,
    /// Only from this time on (RFC 3339 or a date, UTC)
    #[arg(long)]
    since: Option<String>,
    /// Newest N results
    #[arg(long)]
    limit: Option<usize>,
    /// Print CSV
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print JSON with full results
    #[arg(long)]
    json: bool,
    /// Plot the headline figure over time (.png or .svg)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        NetCmd::Responder(a) => run_responder(a),
        NetCmd::Bw(a) => run_bw(a),
        NetCmd::Lat(a) => run_lat(a),
        NetCmd::Tcp(a) => run_tcp(a),
        NetCmd::History(a) => run_history(a),
    }
}

fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A second handler (another subcommand in the same process) cannot be installed; ignore that.
    let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
    stop
}

fn seconds(s: &str, what: &str) -> anyhow::Result<Duration> {
    match parse_seconds(s).map(Duration::try_from_secs_f64) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(_)) => usage!("{what}: {s:?} is out of range"),
        Err(e) => usage!("{what}: {e}"),
    }
}

fn bytes(s: &str, what: &str) -> anyhow::Result<usize> {
    match parse_bytes(s) {
        Ok(b) => Ok(b as usize),
        Err(e) => usage!("{what}: {e}"),
    }
}

/// Parses "64,1472,8192" and "0:40:1" (FROM:TO[:STEP], inclusive) and mixes of both.
fn parse_list(spec: &str, what: &str) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let num = |s: &str| -> anyhow::Result<f64> {
            match s.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => usage!("{what}: {s:?} in {spec:?} is not a non-negative number"),
            }
        };
        match parts.len() {
            1 => out.push(num(parts[0])?),
            2 | 3 => {
                let (a, b) = (num(parts[0])?, num(parts[1])?);
                let step = if parts.len() == 3 { num(parts[2])? } else { 1.0 };
                if step <= 0.0 {
                    usage!("{what}: step in {item:?} must be positive");
                }
                let n = ((b - a).abs() / step).floor() as usize;
                if n > 100_000 {
                    usage!("{what}: {item:?} has too many steps");
                }
                let dir = if b >= a { 1.0 } else { -1.0 };
                out.extend((0..=n).map(|i| a + dir * step * i as f64));
            }
            _ => usage!("{what}: {item:?} is not N or FROM:TO[:STEP]"),
        }
    }
    if out.is_empty() {
        usage!("{what}: empty list {spec:?}");
    }
    Ok(out)
}

fn whole(list: Vec<f64>, what: &str) -> anyhow::Result<Vec<usize>> {
    list.into_iter()
        .map(|v| {
            if v.fract() != 0.0 {
                usage!("{what}: {v} is not a whole number");
            }
            Ok(v as usize)
        })
        .collect()
}

fn resolve(host: &str) -> anyhow::Result<SocketAddr> {
    let with_port = if host.parse::<SocketAddr>().is_ok()
        || host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{DEFAULT_PORT}")
    } else {
        format!("{host}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve responder address {host:?}"))?
        .next()
        .ok_or_else(|| anyhow!("responder address {host:?} resolves to nothing"))
}

/// The competitor levels to run: none, one, or a sweep.
fn load_plan(c: &Common) -> anyhow::Result<Vec<Option<CpuLoadSpec>>> {
    if let Some(spec) = &c.cpu_load {
        return match CpuLoadSpec::parse(spec) {
            Ok(s) => Ok(vec![Some(s)]),
            Err(e) => usage!("--cpu-load: {e}"),
        };
    }
    if let Some(sweep) = &c.cpu_load_sweep {
        let levels = match parse_nice_sweep(sweep) {
            Ok(l) => l,
            Err(e) => usage!("--cpu-load-sweep: {e}"),
        };
        let threads = c
            .cpu_load_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        return Ok(levels
            .into_iter()
            .map(|nice| Some(CpuLoadSpec { nice, threads }))
            .collect());
    }
    Ok(vec![None])
}

/// Where results go: the archive (unless disabled) with the host pair.
struct Sink {
    archive: Option<Archive>,
    local: String,
    remote: String,
}

impl Sink {
    fn open(c: &Common, remote: SocketAddr, local: String) -> anyhow::Result<Sink> {
        let archive = if c.no_archive {
            None
        } else {
            let path = c.archive.clone().unwrap_or_else(Archive::default_path);
            Some(Archive::open(&path)?)
        };
        Ok(Sink {
            archive,
            local,
            remote: remote.to_string(),
        })
    }

    fn store<P: Serialize, R: Serialize>(
        &self,
        kind: &str,
        metric: &str,
        value: f64,
        params: &P,
        result: &R,
    ) -> anyhow::Result<()> {
        if let Some(a) = &self.archive {
            a.insert(&Record {
                time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                kind: kind.into(),
                local: self.local.clone(),
                remote: self.remote.clone(),
                metric: metric.into(),
                value,
                params: serde_json::to_value(params)?,
                result: serde_json::to_value(result)?,
            })?;
        }
        Ok(())
    }
}

fn connect(c: &Common) -> anyhow::Result<(Client, Sink, Duration)> {
    let timeout = seconds(&c.timeout, "--timeout")?;
    let addr = resolve(&c.host)?;
    let client = Client::connect(addr, timeout).with_context(|| format!("responder {addr}"))?;
    let local = hostname();
    let sink = Sink::open(c, addr, local)?;
    Ok((client, sink, timeout))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn progress(c: &Common, msg: &str) {
    if !c.quiet {
        eprintln!("{msg}");
    }
}

/// A result with the competitor that ran during it.
#[derive(Serialize)]
struct Row<T: Serialize> {
    load: Option<CpuLoadSpec>,
    /// Whole-machine idle share on this end during the test, percent: the CPU left.
    cpu_left_percent: f64,
    #[serde(flatten)]
    result: T,
}

fn with_load<T>(spec: Option<CpuLoadSpec>, f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let load = match spec {
        Some(s) => Some(CpuLoad::start(s).map_err(|e| anyhow!(e))?),
        None => None,
    };
    let out = f();
    drop(load);
    Ok(out)
}

/// Turns an aborted test into an error that shows what was measured.
fn test_error(e: NetError) -> anyhow::Error {
    if let NetError::Aborted { partial, .. } = &e {
        if let Ok(j) = serde_json::to_string(partial) {
            eprintln!("vlbiflow: partial result: {j}");
        }
    }
    anyhow!(e)
}

// ---------------------------------------------------------------- responder

fn run_responder(a: ResponderArgs) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr = match a.listen.parse() {
        Ok(x) => x,
        Err(_) => resolve(&a.listen)?,
    };
    let mut cfg = ResponderConfig::new(listen);
    cfg.idle_timeout = seconds(&a.idle_timeout, "--idle-timeout")?;
    cfg.default_recv_buffer = bytes(&a.recv_buffer, "--recv-buffer")?;
    let r = Responder::bind(cfg)?;
    eprintln!(
        "vlbiflow net responder: listening on {} (Ctrl-C to stop)",
        r.local_addr()
    );
    let stop = stop_flag();
    let log = |m: &str| eprintln!("{} {m}", chrono::Utc::now().format("%H:%M:%S%.3f"));
    r.run(stop, &log)?;
    let c = r.counters();
    eprintln!(
        "vlbiflow net responder: stopped; {} sessions, {} tests, {} aborted, {} bad requests, {} foreign datagrams",
        c.sessions.load(Ordering::Relaxed),
        c.tests.load(Ordering::Relaxed),
        c.aborted.load(Ordering::Relaxed),
        c.bad_requests.load(Ordering::Relaxed),
        c.foreign_datagrams.load(Ordering::Relaxed)
    );
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- bw

const BW_COLUMNS: &[(&str, usize)] = &[
    ("load", 6),
    ("size", 6),
    ("sent", 8),
    ("wait_us", 8),
    ("send_Mbps", 10),
    ("recv", 8),
    ("lost", 7),
    ("ooo", 5),
    ("%lost", 7),
    ("lost_net", 8),
    ("recv_Mbps", 10),
    ("wire_Mbps", 10),
    ("jitter_us", 9),
    ("dly50_us", 9),
    ("dly99_us", 9),
    ("reord", 7),
    ("idle_s%", 7),
    ("idle_r%", 7),
];

fn bw_cells(load: Option<CpuLoadSpec>, r: &BwResult) -> Vec<String> {
    let a = &r.remote.arrivals;
    let (d50, d99) = a
        .delay
        .as_ref()
        .map(|d| (d.hist.p50, d.hist.p99))
        .unwrap_or((0.0, 0.0));
    vec![
        load.map(|l| l.nice.to_string()).unwrap_or_else(|| "-".into()),
        r.size.to_string(),
        r.local.sent.to_string(),
        format!("{:.2}", r.wait_us),
        format!("{:.2}", r.send_user_rate_mbps),
        r.received.to_string(),
        r.lost.to_string(),
        r.out_of_order.to_string(),
        format!("{:.3}", r.loss_percent),
        r.lost_in_network.to_string(),
        format!("{:.2}", r.recv_user_rate_mbps),
        format!("{:.2}", r.recv_wire_rate_mbps),
        format!("{:.2}", a.jitter_us),
        format!("{d50:.1}"),
        format!("{d99:.1}"),
        format!("{:.4}", a.reorder.ratio),
        format!("{:.1}", r.local.host.cpu.idle),
        format!("{:.1}", r.remote.host.cpu.idle),
    ]
}

/// Prints a table header/rows or CSV as rows complete.
struct Table {
    columns: &'static [(&'static str, usize)],
    csv: bool,
    silent: bool,
}

impl Table {
    fn header(&self) {
        if self.silent {
            return;
        }
        let names: Vec<&str> = self.columns.iter().map(|c| c.0).collect();
        if self.csv {
            println!("{}", names.join(","));
        } else {
            let mut s = String::new();
            for (n, w) in self.columns {
                let _ = write!(s, "{n:>w$} ");
            }
            println!("{}", s.trim_end());
        }
    }

    fn row(&self, cells: &[String]) {
        if self.silent {
            return;
        }
        if self.csv {
            println!("{}", cells.join(","));
        } else {
            let mut s = String::new();
            for ((_, w), c) in self.columns.iter().zip(cells) {
                let _ = write!(s, "{c:>w$} ");
            }
            println!("{}", s.trim_end());
        }
    }
}

#[derive(Serialize)]
struct ZeroLoss {
    size: usize,
    load: Option<CpuLoadSpec>,
    /// Highest loss-free offered UDP payload rate, Mb/s (None: even the lowest trial lost).
    user_mbps: Option<f64>,
    /// The same on the wire (66 bytes per frame added), Mb/s.
    wire_mbps: Option<f64>,
    max_rate_mbps: f64,
    trial_duration_s: f64,
    trials: Vec<vlbiflow_net::search::Trial>,
}

fn run_bw(a: BwArgs) -> anyhow::Result<ExitCode> {
    let c = &a.common;
    let sizes = whole(parse_list(&a.size, "--size")?, "--size")?;
    if let Some(&bad) = sizes
        .iter()
        .find(|&&s| !(vlbiflow_net::wire::HEADER_LEN..=65_507).contains(&s))
    {
        usage!(
            "--size: {bad} outside {}..=65507 bytes",
            vlbiflow_net::wire::HEADER_LEN
        );
    }
    let waits: Option<Vec<f64>> = a.wait.as_deref().map(|w| parse_list(w, "--wait")).transpose()?;
    let rate = match a.rate.as_deref().map(parse_bit_rate) {
        Some(Ok(r)) if r > 0.0 => Some(r),
        Some(Ok(_)) => usage!("--rate must be positive"),
        Some(Err(e)) => usage!("--rate: {e}"),
        None => None,
    };
    let max_rate = match a.max_rate.as_deref().map(parse_bit_rate) {
        Some(Ok(r)) if r > 0.0 => Some(r),
        Some(Ok(_)) => usage!("--max-rate must be positive"),
        Some(Err(e)) => usage!("--max-rate: {e}"),
        None => None,
    };
    if a.count == 0 {
        usage!("--count must be at least 1");
    }
    if !(1e-4..=0.5).contains(&a.resolution) {
        usage!("--resolution {} outside 0.0001..=0.5", a.resolution);
    }
    let trial = seconds(&a.trial_duration, "--trial-duration")?;
    let send_buffer = bytes(&a.send_buffer, "--send-buffer")?;
    let recv_buffer = bytes(&a.recv_buffer, "--recv-buffer")?;
    let loads = load_plan(c)?;
    let (mut client, sink, _) = connect(c)?;
    let stop = stop_flag();
    let params = |size: usize, count: u64, wait_us: f64| BwParams {
        send_buffer: Some(send_buffer),
        recv_buffer: Some(recv_buffer),
        batch: a.batch.max(1),
        gso: !a.no_gso,
        ..BwParams::new(size, count, wait_us)
    };
    let table = Table {
        columns: BW_COLUMNS,
        csv: c.csv,
        silent: c.json,
    };
    table.header();
    let mut rows: Vec<Row<BwResult>> = Vec::new();
    let mut searches: Vec<ZeroLoss> = Vec::new();

    // One throughput test: run, print, archive.
    let one = |client: &mut Client,
               load: Option<CpuLoadSpec>,
               p: BwParams,
               kind: &str,
               rows: &mut Vec<Row<BwResult>>|
     -> anyhow::Result<BwResult> {
        let res = with_load(load, || client.bw(&p, &stop))?.map_err(test_error)?;
        table.row(&bw_cells(load, &res));
        for w in &res.warnings {
            progress(c, &format!("warning: {w}"));
        }
        sink.store(kind, "recv_user_rate_mbps", res.recv_user_rate_mbps, &p, &res)?;
        rows.push(Row {
            load,
            cpu_left_percent: res.local.host.cpu.idle,
            result: res.clone(),
        });
        Ok(res)
    };

    // Ctrl-C ends the sweep between tests; what was measured is still printed, plotted and archived.
    let mut interrupted = false;
    'tests: for &load in &loads {
        if let Some(l) = load {
            progress(c, &format!("competitor: {l}"));
        }
        if a.find_zero_loss {
            for &size in &sizes {
                let hi = match max_rate {
                    Some(r) => r,
                    None => {
                        progress(c, &format!("{size} B: flat-out trial to find the upper end"));
                        let res = match one(&mut client, load, params(size, a.count, 0.0), "bw", &mut rows) {
                            Ok(r) => r,
                            Err(_) if stop.load(Ordering::Relaxed) => {
                                interrupted = true;
                                break 'tests;
                            }
                            Err(e) => return Err(e),
                        };
                        if res.lost == 0 {
                            // Lossless flat out: the answer is the send rate, bounded by the sender.
                            res.send_user_rate_mbps * 1e6
                        } else {
                            (res.recv_user_rate_mbps * 1e6 * 1.25).max(1e6)
                        }
                    }
                };
                let mut search = ZeroLossSearch::new(hi, a.resolution, 24);
                while let Some(rate) = search.next_rate() {
                    if stop.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'tests;
                    }
                    let count = ((rate * trial.as_secs_f64() / (8.0 * size as f64)).ceil() as u64).max(100);
                    progress(
                        c,
                        &format!(
                            "{size} B: trial {} at {:.2} Mb/s ({count} frames)",
                            search.trials().len() + 1,
                            rate / 1e6
                        ),
                    );
                    let res = match one(
                        &mut client,
                        load,
                        params(size, count, BwParams::wait_for_rate(size, rate)),
                        "bw",
                        &mut rows,
                    ) {
                        Ok(r) => r,
                        Err(_) if stop.load(Ordering::Relaxed) => {
                            interrupted = true;
                            break 'tests;
                        }
                        Err(e) => return Err(e),
                    };
                    // A trial the sender could not offer in full says nothing about the path at
                    // that rate: it counts as a failure.
                    let offered = res.send_user_rate_mbps * 1e6 >= 0.98 * rate;
                    search.record(rate, res.lost == 0 && offered);
                }
                let best = search.best();
                let z = ZeroLoss {
                    size,
                    load,
                    user_mbps: best.map(|b| b / 1e6),
                    wire_mbps: best.map(|b| b / 1e6 * (size + WIRE_OVERHEAD) as f64 / size as f64),
                    max_rate_mbps: hi / 1e6,
                    trial_duration_s: trial.as_secs_f64(),
                    trials: search.trials().to_vec(),
                };
                if !c.json {
                    match (z.user_mbps, z.wire_mbps) {
                        (Some(u), Some(w)) => println!(
                            "# zero-loss rate, {size} B: {u:.2} Mb/s user, {w:.2} Mb/s wire ({} trials of {:.1} s)",
                            z.trials.len(),
                            z.trial_duration_s
                        ),
                        _ => println!("# zero-loss rate, {size} B: none found (every trial lost frames)"),
                    }
                }
                sink.store(
                    "bw-zero-loss",
                    "zero_loss_user_mbps",
                    z.user_mbps.unwrap_or(0.0),
                    &(size, a.resolution, trial.as_secs_f64()),
                    &z,
                )?;
                searches.push(z);
            }
        } else {
            let waits_us: Vec<f64> = match (&waits, rate) {
                (Some(w), _) => w.clone(),
                (None, Some(_)) => vec![f64::NAN],
                (None, None) => vec![0.0],
            };
            let total = sizes.len() * waits_us.len();
            let mut i = 0;
            for &size in &sizes {
                for &w in &waits_us {
                    i += 1;
                    let wait = rate.map(|r| BwParams::wait_for_rate(size, r)).unwrap_or(w);
                    if total > 1 {
                        progress(c, &format!("[{i}/{total}] {size} B, wait {wait:.2} µs"));
                    }
                    // Ctrl-C during a test leaves it incomplete: it is dropped, the finished ones are kept.
                    let done = one(&mut client, load, params(size, a.count, wait), "bw", &mut rows);
                    if stop.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'tests;
                    }
                    done?;
                }
            }
        }
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "responder": client.server().to_string(),
                "responder_software": client.remote_software(),
                "results": rows,
                "zero_loss": searches,
            }))?
        );
    }
    if let Some(path) = &c.plot {
        if loads.len() > 1 {
            let series: Vec<Series> = sizes
                .iter()
                .map(|&s| {
                    let pts = rows
                        .iter()
                        .filter(|r| r.result.size == s)
                        .filter_map(|r| r.load.map(|l| (l.nice as f64, r.result.recv_user_rate_mbps)))
                        .collect();
                    (format!("{s} bytes"), pts)
                })
                .collect();
            plot_series(
                path,
                "Throughput against the competitor's nice level",
                "nice",
                "receive user rate (Mb/s)",
                &series,
            )?;
        } else {
            let results: Vec<BwResult> = rows.iter().map(|r| r.result.clone()).collect();
            plot_bw(path, &results)?;
        }
        progress(c, &format!("plot written to {}", path.display()));
    }
    if interrupted {
        progress(
            c,
            "interrupted: the results above are complete tests; the sweep stopped early",
        );
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- lat

const LAT_COLUMNS: &[(&str, usize)] = &[
    ("load", 6),
    ("size", 6),
    ("sent", 7),
    ("recv", 7),
    ("lost", 6),
    ("min_us", 9),
    ("p50_us", 9),
    ("mean_us", 9),
    ("p99_us", 9),
    ("max_us", 9),
];

fn run_lat(a: LatArgs) -> anyhow::Result<ExitCode> {
    let c = &a.common;
    let sizes = whole(parse_list(&a.sizes, "--sizes")?, "--sizes")?;
    if a.count == 0 {
        usage!("--count must be at least 1");
    }
    let reply_timeout = seconds(&a.reply_timeout, "--reply-timeout")?;
    let loads = load_plan(c)?;
    let (mut client, sink, _) = connect(c)?;
    let stop = stop_flag();
    let p = LatParams {
        sizes,
        count: a.count,
        warmup: a.warmup,
        reply_timeout,
    };
    let table = Table {
        columns: LAT_COLUMNS,
        csv: c.csv,
        silent: c.json,
    };
    table.header();
    let mut rows: Vec<Row<LatResult>> = Vec::new();
    for &load in &loads {
        progress(
            c,
            &format!(
                "latency: {} sizes x {} requests{}",
                p.sizes.len(),
                p.count,
                load.map(|l| format!(", competitor {l}")).unwrap_or_default()
            ),
        );
        let before = vlbiflow_net::host::HostSnapshot::take();
        let res = with_load(load, || client.lat(&p, &stop))?.map_err(test_error)?;
        let idle = vlbiflow_net::host::HostSnapshot::take().since(&before).cpu.idle;
        for pt in &res.points {
            let h = &pt.rtt_us;
            table.row(&[
                load.map(|l| l.nice.to_string()).unwrap_or_else(|| "-".into()),
                pt.size.to_string(),
                pt.sent.to_string(),
                pt.received.to_string(),
                pt.lost.to_string(),
                format!("{:.1}", h.min),
                format!("{:.1}", h.p50),
                format!("{:.1}", h.mean),
                format!("{:.1}", h.p99),
                format!("{:.1}", h.max),
            ]);
        }
        if !c.json && !c.csv {
            println!(
                "# least squares on the medians: y = {:.6} x + {:.2} µs (slope µs/byte, intercept µs), r² = {:.3}",
                res.slope_us_per_byte, res.intercept_us, res.r2
            );
        }
        sink.store("lat", "intercept_us", res.intercept_us, &p, &res)?;
        rows.push(Row {
            load,
            cpu_left_percent: idle,
            result: res,
        });
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "responder": client.server().to_string(),
                "results": rows,
            }))?
        );
    }
    if let Some(path) = &c.plot {
        if let Some(r) = rows.last() {
            plot_lat(path, &r.result)?;
            progress(c, &format!("plot written to {}", path.display()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- tcp

const TCP_COLUMNS: &[(&str, usize)] = &[
    ("load", 6),
    ("streams", 7),
    ("Mbps", 10),
    ("GB", 7),
    ("s_cpu/GB", 9),
    ("r_cpu/GB", 9),
    ("s_usr%", 7),
    ("s_sys%", 7),
    ("s_sirq%", 7),
    ("s_idle%", 7),
    ("r_usr%", 7),
    ("r_sys%", 7),
    ("r_sirq%", 7),
    ("r_idle%", 7),
    ("cc", 8),
    ("rtt_us", 7),
    ("cwnd", 6),
    ("retrans", 7),
    ("sndbuf", 9),
    ("rcvbuf", 9),
];

fn run_tcp(a: TcpArgs) -> anyhow::Result<ExitCode> {
    let c = &a.common;
    let streams = whole(parse_list(&a.streams, "--streams")?, "--streams")?;
    if let Some(&bad) = streams.iter().find(|&&s| !(1..=64).contains(&s)) {
        usage!("--streams: {bad} outside 1..=64");
    }
    let duration = seconds(&a.duration, "--duration")?;
    let write_size = bytes(&a.write_size, "--write-size")?;
    if write_size == 0 {
        usage!("--write-size must be positive");
    }
    let send_buffer = a
        .send_buffer
        .as_deref()
        .map(|b| bytes(b, "--send-buffer"))
        .transpose()?;
    let recv_buffer = a
        .recv_buffer
        .as_deref()
        .map(|b| bytes(b, "--recv-buffer"))
        .transpose()?;
    let loads = load_plan(c)?;
    let (mut client, sink, _) = connect(c)?;
    let stop = stop_flag();
    let table = Table {
        columns: TCP_COLUMNS,
        csv: c.csv,
        silent: c.json,
    };
    table.header();
    let mut rows: Vec<Row<TcpResult>> = Vec::new();
    let mut interrupted = false;
    'tests: for &load in &loads {
        for &n in &streams {
            progress(
                c,
                &format!(
                    "tcp: {n} stream(s) for {:.1} s{}",
                    duration.as_secs_f64(),
                    load.map(|l| format!(", competitor {l}")).unwrap_or_default()
                ),
            );
            let p = TcpParams {
                streams: n as u32,
                duration,
                write_size,
                send_buffer,
                recv_buffer,
            };
            let res = match with_load(load, || client.tcp(&p, &stop))? {
                Ok(r) => r,
                // Ctrl-C during a test: that test is incomplete; the finished ones are still reported.
                Err(_) if stop.load(Ordering::Relaxed) => {
                    interrupted = true;
                    break 'tests;
                }
                Err(e) => return Err(test_error(e)),
            };
            let (l, r) = (&res.local_host.cpu, &res.remote.host.cpu);
            let s0 = res.local_sockets.first().cloned().unwrap_or_default();
            let r0 = res.remote.sockets.first().cloned().unwrap_or_default();
            table.row(&[
                load.map(|l| l.nice.to_string()).unwrap_or_else(|| "-".into()),
                n.to_string(),
                format!("{:.1}", res.rate_mbps),
                format!("{:.2}", res.bytes_received as f64 / 1e9),
                format!("{:.3}", res.sender_cpu_s_per_gb),
                format!("{:.3}", res.receiver_cpu_s_per_gb),
                format!("{:.1}", l.user),
                format!("{:.1}", l.system),
                format!("{:.1}", l.softirq),
                format!("{:.1}", l.idle),
                format!("{:.1}", r.user),
                format!("{:.1}", r.system),
                format!("{:.1}", r.softirq),
                format!("{:.1}", r.idle),
                s0.congestion.clone(),
                s0.rtt_us.to_string(),
                s0.snd_cwnd.to_string(),
                res.local_sockets
                    .iter()
                    .map(|s| s.total_retrans as u64)
                    .sum::<u64>()
                    .to_string(),
                s0.send_buffer.to_string(),
                r0.recv_buffer.to_string(),
            ]);
            sink.store("tcp", "rate_mbps", res.rate_mbps, &p, &res)?;
            rows.push(Row {
                load,
                cpu_left_percent: res.local_host.cpu.idle,
                result: res,
            });
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                break 'tests;
            }
        }
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "responder": client.server().to_string(),
                "results": rows,
            }))?
        );
    }
    if let Some(path) = &c.plot {
        let series: Vec<Series> = if loads.len() > 1 {
            streams
                .iter()
                .map(|&n| {
                    let pts = rows
                        .iter()
                        .filter(|r| r.result.streams as usize == n)
                        .filter_map(|r| r.load.map(|l| (l.nice as f64, r.result.rate_mbps)))
                        .collect();
                    (format!("{n} streams"), pts)
                })
                .collect()
        } else {
            vec![(
                "TCP".to_string(),
                rows.iter()
                    .map(|r| (r.result.streams as f64, r.result.rate_mbps))
                    .collect(),
            )]
        };
        let x = if loads.len() > 1 { "nice" } else { "streams" };
        plot_series(path, "TCP throughput", x, "Mb/s", &series)?;
        progress(c, &format!("plot written to {}", path.display()));
    }
    if interrupted {
        progress(
            c,
            "interrupted: the results above are complete tests; the sweep stopped early",
        );
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- history

fn run_history(a: HistoryArgs) -> anyhow::Result<ExitCode> {
    let path = a.archive.clone().unwrap_or_else(Archive::default_path);
    if !path.exists() {
        usage!(
            "archive {} does not exist yet: run a test first (or pass --archive)",
            path.display()
        );
    }
    let archive = Archive::open(&path)?;
    let rows = archive.list(&Filter {
        kind: a.kind.clone(),
        remote: a.remote.clone(),
        since: a.since.clone(),
        limit: a.limit,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let cols: &'static [(&'static str, usize)] = &[
            ("id", 5),
            ("time", 24),
            ("kind", 12),
            ("local", 16),
            ("remote", 22),
            ("metric", 22),
            ("value", 12),
        ];
        let t = Table {
            columns: cols,
            csv: a.csv,
            silent: false,
        };
        t.header();
        for s in &rows {
            let r = &s.record;
            t.row(&[
                s.id.to_string(),
                r.time.clone(),
                r.kind.clone(),
                r.local.clone(),
                r.remote.clone(),
                r.metric.clone(),
                format!("{:.3}", r.value),
            ]);
        }
        if rows.is_empty() {
            eprintln!("no results match in {}", path.display());
        }
    }
    if let Some(plot) = &a.plot {
        let times: Vec<Option<f64>> = rows
            .iter()
            .map(|s| {
                chrono::DateTime::parse_from_rfc3339(&s.record.time)
                    .ok()
                    .map(|t| t.timestamp_millis() as f64 / 1000.0)
            })
            .collect();
        let t0 = times.iter().flatten().copied().fold(f64::INFINITY, f64::min);
        let mut series: Vec<Series> = Vec::new();
        for (s, t) in rows.iter().zip(&times) {
            let Some(t) = t else { continue };
            let name = format!("{} {} {}", s.record.kind, s.record.remote, s.record.metric);
            let x = (t - t0) / 3600.0;
            match series.iter_mut().find(|x| x.0 == name) {
                Some(e) => e.1.push((x, s.record.value)),
                None => series.push((name, vec![(x, s.record.value)])),
            }
        }
        let first = rows.first().map(|r| r.record.time.clone()).unwrap_or_default();
        plot_series(
            plot,
            "vlbiflow net history",
            &format!("hours since {first}"),
            "value",
            &series,
        )?;
        eprintln!("plot written to {}", plot.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(
            parse_list("64,1472,8192", "x").unwrap(),
            vec![64.0, 1472.0, 8192.0]
        );
        assert_eq!(parse_list("0:4:2,10", "x").unwrap(), vec![0.0, 2.0, 4.0, 10.0]);
        assert_eq!(parse_list("3:1", "x").unwrap(), vec![3.0, 2.0, 1.0]);
        assert_eq!(parse_list("0:40:1", "x").unwrap().len(), 41);
        assert!(parse_list("a", "x").is_err());
        assert!(parse_list("1:2:0", "x").is_err());
        assert!(parse_list("", "x").is_err());
        assert!(whole(vec![1.5], "x").is_err());
    }

    #[test]
    fn host_gets_the_default_port() {
        assert_eq!(resolve("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("127.0.0.1:99").unwrap().port(), 99);
        assert_eq!(resolve("::1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:7").unwrap().port(), 7);
    }
}
