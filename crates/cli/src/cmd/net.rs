//! `vlbiflow net`: network measurement (UDPmon-style throughput/loss/latency, TCP with CPU accounting),
//! its responder, and the archive of results. Arguments and printing only: the series of tests run in
//! `vlbiflow_net::sweep`.

use crate::units::{parse_bit_rate, parse_bytes, parse_seconds};
use crate::usage;
use anyhow::{anyhow, Context};
use clap::Subcommand;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vlbiflow_net::archive::{Archive, ArchiveStore, Filter};
use vlbiflow_net::plot::{plot_history, plot_report};
use vlbiflow_net::sweep::{self, parse_list, parse_whole_list, Series, Store, ZeroLossPlan};
use vlbiflow_net::table::{self, history_cells, Table, HISTORY_COLUMNS};
use vlbiflow_net::{load, resolve_responder, wire::HEADER_LEN, BwParams, BwSweep, Client, LatParams};
use vlbiflow_net::{NetError, Responder, ResponderConfig, Spacing, SweepError, SweepEvent, SweepOptions};
use vlbiflow_net::{TcpParams, TcpSweep};

const EXAMPLES: &str = "\
Examples:
  # On the far host
  vlbiflow net responder --listen 0.0.0.0:14233

  # UDPmon's standard sweep: 3 sizes, spacing 0..40 µs, 10000 frames each, with a plot
  vlbiflow net bw far.example.org --sizes 64,1472,8192 --wait 0:40:1 --plot sweep.png

  # Highest loss-free rate (RFC 2544 search) for 1472- and 8192-byte frames
  vlbiflow net bw far.example.org --sizes 1472,8192 --find-zero-loss

  # Latency against message size, TCP with 1, 2 and 4 streams
  vlbiflow net lat far.example.org --plot lat.svg
  vlbiflow net tcp far.example.org --streams 1,2,4 --duration 10s

  # Throughput while a CPU hog runs at nice 19 down to 0 (the Mark5A experiment)
  vlbiflow net bw far.example.org --rate 512Mbps --count 20000 --cpu-load-sweep 19:0

  # Results over time
  vlbiflow net history --kind bw-zero-loss --plot history.png

  # Scheduled monitoring of a whole network (docs/mesh.md), bottleneck capacity
  vlbiflow net hub --config mesh.toml
  vlbiflow net agent --name Ef --hub http://127.0.0.1:8090
  vlbiflow net mesh status
  vlbiflow net capacity far.example.org

  # What receiving costs per transport (recvmmsg, GRO, io_uring, AF_XDP, TCP), with a plot
  vlbiflow net efficiency far.example.org --plot eff.png";

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
    /// UDP throughput, loss, jitter, reordering, 1-way delay against frame size and spacing
    Bw(BwArgs),
    /// Request-response latency against message size: histograms and a least-squares line
    Lat(LatArgs),
    /// Memory-to-memory TCP throughput over 1..N streams with CPU use at both ends
    Tcp(TcpArgs),
    /// List or plot archived results over time
    History(HistoryArgs),
    /// Mesh agent: responder for the other hosts and runner of this host's scheduled tests
    Agent(super::mesh::AgentArgs),
    /// Mesh hub: plans runs, collects results; archive, dashboard, metrics, alerts
    Hub(super::mesh::HubArgs),
    /// Ask the mesh hub: status, runs, results, alerts
    Mesh(super::mesh::MeshArgs),
    /// Bottleneck capacity by packet dispersion (pairs and trains against a responder)
    Capacity(super::mesh::CapacityArgs),
    /// Receive cost per transport (recvmmsg, GRO, io_uring, AF_XDP, TCP): rate, loss, CPU
    Efficiency(super::efficiency::Args),
}

const RESPONDER_EXAMPLES: &str = "\
Examples:
  vlbiflow net responder                          # 127.0.0.1:14233, for loopback tests
  vlbiflow net responder --listen 0.0.0.0:14233   # all interfaces

Limits: 16 sessions at once (one more is told the responder is busy). A connection has 2 s for its
hello (with the token, when --token-file is given) and takes a session only once its hello passed;
at most 8 connections without a hello per address (IPv6: per /64) and 32 in all, more are closed at
once. Beyond loopback, give --token-file and --allow (docs/security.md).";

#[derive(clap::Args)]
#[command(after_help = RESPONDER_EXAMPLES)]
struct ResponderArgs {
    /// Control address (TCP); test sockets use the same IP and ephemeral ports
    #[arg(long, default_value = "127.0.0.1:14233", value_name = "HOST:PORT")]
    listen: String,
    /// Close a control connection silent for this long
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    idle_timeout: String,
    /// Serve only clients from this address or block (e.g. 192.0.2.0/24); repeat; default: anyone
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    allow: Vec<vlbiflow_guard::net::Prefix>,
    /// Receive buffer for UDP test sockets unless the client asks for one
    #[arg(long, default_value = "8MiB", value_name = "BYTES")]
    recv_buffer: String,
    /// Most memory a test of one stream may reserve (statistics, buffers, kernel socket buffers)
    #[arg(long, default_value = "256MiB", value_name = "BYTES")]
    test_memory: String,
    /// What each further stream of a test (TCP, efficiency) adds to --test-memory
    #[arg(long, default_value = "32MiB", value_name = "BYTES")]
    stream_memory: String,
    /// Most memory all running tests together may reserve
    #[arg(long, default_value = "1GiB", value_name = "BYTES")]
    memory_budget: String,
    /// Longest a test may send for (bw, efficiency); latency and TCP tests end at --idle-timeout
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    max_test_duration: String,
    // clients must send this token (`net bw/lat/tcp --token-file`); recommended with --allow
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
}

#[derive(clap::Args)]
struct Common {
    /// Responder host or HOST:PORT (default port 14233)
    host: String,
    /// Longest wait for any control answer
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    timeout: String,
    // the responder's token, for a responder run with --token-file
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
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
  vlbiflow net bw 10.0.0.2 --sizes 1472 --wait 10 --count 10000
  vlbiflow net bw 10.0.0.2 --sizes 64,1472,8192 --wait 0:40:1 --plot sweep.png --csv > sweep.csv
  vlbiflow net bw 10.0.0.2 --sizes 8192 --rate 2Gbps --count 100000
  vlbiflow net bw 10.0.0.2 --sizes 1472 --find-zero-loss --trial-duration 2s

Columns: load (the competitor's nice level, - without one), size, frames sent, wait (µs), send user
rate, received, lost, ooo (out of order: arrived after a later frame), % lost, lost in network
(lost minus the receiving socket's drops), receive user rate = 8 x size x received / (last - first
arrival), receive wire rate (+66 bytes per frame), RFC 3550 jitter, 1-way delay above its minimum
(median, 99th percentile), RFC 4737 reordered ratio, CPU idle at sender/receiver (% of the whole
machine).";

#[derive(clap::Args)]
#[command(after_help = BW_EXAMPLES)]
struct BwArgs {
    #[command(flatten)]
    common: Common,
    /// Frame sizes (UDP payload bytes): list and/or FROM:TO[:STEP] ranges
    #[arg(long = "sizes", alias = "size", default_value = "1472", value_name = "LIST")]
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

Columns: load (the competitor's nice level, - without one), size (bytes), requests sent, replies
received, lost, then the round trip: minimum, median (p50), mean, 99th percentile (p99), maximum,
µs.

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
  vlbiflow net tcp 10.0.0.2 --streams 1:4 --send-buffer 16MiB --recv-buffer 16MiB
  vlbiflow net tcp 10.0.0.2 --cpu-load nice=19

Columns: load (the competitor's nice level, - without one), streams, Mbps (bytes received over the
receiver's first to last byte), GB received; s_cpu/GB and r_cpu/GB: CPU seconds (user + system) per
GB of the sender's and the receiver's test threads only, so a --cpu-load competitor or anything
else in the process is not counted; s_usr%, s_sys%, s_sirq%, s_idle% and the r_ ones: the sender's
and the receiver's whole machine in user (with nice), system, softirq (network receive processing)
and idle time, % of all CPUs; of the first stream: cc (congestion control), rtt_us (smoothed round
trip), cwnd (congestion window, segments); retrans (segments retransmitted, all streams); sndbuf
and rcvbuf (the first stream's send and receive socket buffers, bytes).";

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
        NetCmd::Agent(a) => super::mesh::run_agent(a),
        NetCmd::Hub(a) => super::mesh::run_hub(a),
        NetCmd::Mesh(a) => super::mesh::run_mesh(a),
        NetCmd::Capacity(a) => super::mesh::run_capacity(a),
        NetCmd::Efficiency(a) => super::efficiency::run(a),
    }
}

/// A parsed argument value, or a usage error naming the option.
fn arg<T>(r: Result<T, impl std::fmt::Display>, what: &str) -> anyhow::Result<T> {
    r.or_else(|e| usage!("{what}: {e}"))
}

fn seconds(s: &str, what: &str) -> anyhow::Result<Duration> {
    let range = |x| Duration::try_from_secs_f64(x).map_err(|_| format!("{s:?} is out of range"));
    arg(parse_seconds(s).and_then(range), what)
}

fn bytes(s: &str, what: &str) -> anyhow::Result<usize> {
    arg(parse_bytes(s).map(|b| b as usize), what)
}

fn bit_rate(spec: Option<&str>, what: &str) -> anyhow::Result<Option<f64>> {
    match spec.map(|s| arg(parse_bit_rate(s), what)).transpose()? {
        Some(r) if r <= 0.0 => usage!("{what} must be positive"),
        r => Ok(r),
    }
}

/// Connects, runs the series while printing its table (unless --json) and progress (unless --quiet),
/// then prints the JSON, writes the plot and exits 130 when Ctrl-C ended the series early.
fn run_series(c: &Common, series: Series) -> anyhow::Result<ExitCode> {
    let (spec, sweep) = (c.cpu_load.as_deref(), c.cpu_load_sweep.as_deref());
    let loads = match load::plan(spec, sweep, c.cpu_load_threads) {
        Ok(l) => l,
        Err(e) if spec.is_some() => usage!("--cpu-load: {e}"),
        Err(e) => usage!("--cpu-load-sweep: {e}"),
    };
    let timeout = seconds(&c.timeout, "--timeout")?;
    let addr = resolve_responder(&c.host).map_err(|e| anyhow!(e))?;
    let token = c.token.resolve()?;
    let mut client = Client::connect_with_token(addr, timeout, token.as_deref())
        .with_context(|| format!("responder {addr}"))?;
    let store = match c.no_archive {
        true => None,
        false => Some(ArchiveStore::open(c.archive.as_deref(), addr)?),
    };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let (stop, store): (&AtomicBool, _) = (&stop, store.as_ref().map(|s| s as &dyn Store));
    let opts = SweepOptions { loads, stop, store };
    let table = Table::new(table::columns(&series), c.csv);
    if !c.json {
        outln!("{}", table.header());
    }
    let say = |m: &str| {
        if !c.quiet {
            eprintln!("{m}")
        }
    };
    let mut on_event = |e: SweepEvent| match e {
        SweepEvent::Progress(m) => say(&m),
        SweepEvent::Warning(w) => say(&format!("warning: {w}")),
        e if !c.json => table::event_lines(&e, &table).iter().for_each(|l| outln!("{l}")),
        _ => {}
    };
    // Ctrl-C ends a bw or tcp series; what was measured is still printed, plotted and archived.
    let report = sweep::run(&mut client, &series, &opts, &mut on_event).map_err(|e| {
        if let SweepError::Test(NetError::Aborted { partial, .. }) = &e {
            eprintln!("vlbiflow: partial result: {}", serde_json::json!(partial));
        }
        anyhow!(e)
    })?;
    if c.json {
        outln!("{}", serde_json::to_string_pretty(&report.to_json(&client))?);
    }
    if let Some(path) = &c.plot {
        plot_report(path, &report, opts.is_load_sweep())?;
        say(&format!("plot written to {}", path.display()));
    }
    if !report.interrupted() {
        return Ok(ExitCode::SUCCESS);
    }
    say("interrupted: the results above are complete tests; the sweep stopped early");
    Ok(ExitCode::from(130))
}

fn run_responder(a: ResponderArgs) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr = match a.listen.parse() {
        Ok(x) => x,
        Err(_) => resolve_responder(&a.listen).map_err(|e| anyhow!(e))?,
    };
    // The responder also runs the receiving end of `vlbiflow net efficiency`.
    let mut cfg = vlbiflow_efficiency::with_service(ResponderConfig::new(listen));
    cfg.idle_timeout = seconds(&a.idle_timeout, "--idle-timeout")?;
    cfg.default_recv_buffer = bytes(&a.recv_buffer, "--recv-buffer")?;
    cfg.allow_blocks = vlbiflow_guard::net::AllowList(a.allow);
    cfg.max_test_memory = bytes(&a.test_memory, "--test-memory")? as u64;
    cfg.stream_memory = bytes(&a.stream_memory, "--stream-memory")? as u64;
    cfg.memory_budget = bytes(&a.memory_budget, "--memory-budget")? as u64;
    cfg.max_test_duration = seconds(&a.max_test_duration, "--max-test-duration")?;
    cfg.token = a.token.resolve()?;
    let authenticated = cfg.token.is_some();
    let r = Responder::bind(cfg)?;
    eprintln!(
        "vlbiflow net responder: listening on {}{} (Ctrl-C to stop)",
        r.local_addr(),
        if authenticated { ", token required" } else { "" }
    );
    let log = |m: &str| tracing::info!(target: "vlbiflow::net", "{m}");
    r.run(crate::stop::on_interrupt(crate::stop::Second::Wait)?, &log)?;
    let c = r.counters();
    let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    eprintln!(
        "vlbiflow net responder: stopped; {} sessions, {} tests, {} aborted, {} bad requests, {} foreign datagrams, {} unauthorized",
        n(&c.sessions), n(&c.tests), n(&c.aborted), n(&c.bad_requests), n(&c.foreign_datagrams), n(&c.unauthorized)
    );
    Ok(ExitCode::SUCCESS)
}

fn run_bw(a: BwArgs) -> anyhow::Result<ExitCode> {
    let sizes = arg(parse_whole_list(&a.size), "--sizes")?;
    if let Some(&bad) = sizes.iter().find(|&&s| !(HEADER_LEN..=65_507).contains(&s)) {
        usage!("--sizes: {bad} outside {HEADER_LEN}..=65507 bytes");
    }
    let waits = arg(a.wait.as_deref().map(parse_list).transpose(), "--wait")?;
    let rate = bit_rate(a.rate.as_deref(), "--rate")?;
    let max_rate_bps = bit_rate(a.max_rate.as_deref(), "--max-rate")?;
    if a.count == 0 {
        usage!("--count must be at least 1");
    }
    if !(1e-4..=0.5).contains(&a.resolution) {
        usage!("--resolution {} outside 0.0001..=0.5", a.resolution);
    }
    let (trial, resolution) = (seconds(&a.trial_duration, "--trial-duration")?, a.resolution);
    let spacing = match (a.find_zero_loss, waits, rate) {
        (true, _, _) => Spacing::ZeroLoss(ZeroLossPlan {
            trial,
            max_rate_bps,
            resolution,
        }),
        (false, Some(w), _) => Spacing::Waits(w),
        (false, None, Some(r)) => Spacing::Rate(r),
        (false, None, None) => Spacing::Waits(vec![0.0]),
    };
    let base = BwParams {
        send_buffer: Some(bytes(&a.send_buffer, "--send-buffer")?),
        recv_buffer: Some(bytes(&a.recv_buffer, "--recv-buffer")?),
        batch: a.batch.max(1),
        gso: !a.no_gso,
        ..BwParams::new(0, a.count, 0.0)
    };
    run_series(&a.common, Series::Bw(BwSweep { sizes, spacing, base }))
}

fn run_lat(a: LatArgs) -> anyhow::Result<ExitCode> {
    let sizes = arg(parse_whole_list(&a.sizes), "--sizes")?;
    if a.count == 0 {
        usage!("--count must be at least 1");
    }
    let reply_timeout = seconds(&a.reply_timeout, "--reply-timeout")?;
    let (count, warmup) = (a.count, a.warmup);
    run_series(
        &a.common,
        Series::Lat(LatParams {
            sizes,
            count,
            warmup,
            reply_timeout,
        }),
    )
}

fn run_tcp(a: TcpArgs) -> anyhow::Result<ExitCode> {
    let streams = arg(parse_whole_list(&a.streams), "--streams")?;
    if let Some(&bad) = streams.iter().find(|&&s| !(1..=64).contains(&s)) {
        usage!("--streams: {bad} outside 1..=64");
    }
    let write_size = bytes(&a.write_size, "--write-size")?;
    if write_size == 0 {
        usage!("--write-size must be positive");
    }
    let buffer = |b: &Option<String>, what| b.as_deref().map(|b| bytes(b, what)).transpose();
    let base = TcpParams {
        streams: 1,
        duration: seconds(&a.duration, "--duration")?,
        write_size,
        send_buffer: buffer(&a.send_buffer, "--send-buffer")?,
        recv_buffer: buffer(&a.recv_buffer, "--recv-buffer")?,
    };
    let streams = streams.into_iter().map(|s| s as u32).collect();
    run_series(&a.common, Series::Tcp(TcpSweep { streams, base }))
}

fn run_history(a: HistoryArgs) -> anyhow::Result<ExitCode> {
    let path = a.archive.clone().unwrap_or_else(Archive::default_path);
    if !path.exists() {
        usage!(
            "archive {} does not exist yet: run a test first (or pass --archive)",
            path.display()
        );
    }
    let (kind, remote, since, limit) = (a.kind, a.remote, a.since, a.limit);
    let rows = Archive::open(&path)?.list(&Filter {
        kind,
        remote,
        since,
        limit,
    })?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        let t = Table::new(HISTORY_COLUMNS, a.csv);
        outln!("{}", t.header());
        rows.iter().for_each(|s| outln!("{}", t.line(&history_cells(s))));
        if rows.is_empty() {
            eprintln!("no results match in {}", path.display());
        }
    }
    if let Some(plot) = &a.plot {
        plot_history(plot, &rows)?;
        eprintln!("plot written to {}", plot.display());
    }
    Ok(ExitCode::SUCCESS)
}
