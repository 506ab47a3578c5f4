//! `xfer ls` (a daemon's scans) and `xfer collect` (the correlator pulls every station's scans of an
//! experiment).

use std::path::PathBuf;
use std::process::ExitCode;

use vlbiflow_units::fmt_bytes;
use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::{remote, Key};

use super::xerr;
use crate::usage;

const LS_EXAMPLES: &str = "\
Examples:
  # Every scan of experiment r41c on the station daemon's Mark6 disks (root `data`)
  vlbiflow xfer ls st1.example.org/data/disks/*/*/data --scan 'r41c_*'

  # FlexBuff mount points under root `flexbuf`, as JSON
  vlbiflow xfer ls st1.example.org:46230/flexbuf/disk* --json

The daemon lists the scans on the disks (ROOT/relative/dir, globs allowed below the root, confined to its \
roots as a pull is) whose names match --scan (`*` and `?`), each with the size of its gathered stream(s), \
what `xfer pull --scan NAME` fetches in the gather layout: for a scan still being recorded (its \
`NAME.vlbiflow.json` says not complete), the complete blocks on disk now. A scan the daemon cannot lay \
out (damaged) is listed with its error. Exit status: 0 listed (also when none match); 2 usage; 3 refused \
(key, unknown root, outside the roots); 5 the daemon cannot be reached.";

#[derive(clap::Args)]
#[command(after_help = LS_EXAMPLES)]
pub(super) struct LsArgs {
    /// The station daemon's disks: DAEMON[:PORT]/ROOT/DIR (globs allowed below the root; all on one daemon)
    #[arg(required = true, value_name = "DAEMON/ROOT/DISKS")]
    disks: Vec<String>,
    /// Only scans whose names match this pattern (`*` and `?`, e.g. the experiment code `r41c_*`)
    #[arg(long, value_name = "PATTERN")]
    scan: Option<String>,
    /// Key file (default ~/.local/state/vlbiflow/xfer/xfer.key)
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// A JSON array instead of a table
    #[arg(long)]
    json: bool,
}

/// The daemon and its `ROOT/DIR` disk patterns from `DAEMON/ROOT/DIR` arguments (all on one daemon).
pub(super) fn split_disks(args: &[String]) -> Result<(String, Vec<String>), String> {
    let mut server: Option<String> = None;
    let mut disks = Vec::new();
    for a in args {
        let (h, p) = remote::split(a)?;
        if server.as_ref().is_some_and(|s| *s != h) {
            return Err(format!(
                "{a}: every disk must be on one daemon ({} first)",
                server.unwrap_or_default()
            ));
        }
        server = Some(h);
        disks.push(p);
    }
    Ok((server.unwrap_or_default(), disks))
}

pub(super) fn ls(a: LsArgs) -> anyhow::Result<ExitCode> {
    let (server, disks) = match split_disks(&a.disks) {
        Ok(x) => x,
        Err(e) => usage!("{e}"),
    };
    let key = match Key::load(&a.key.unwrap_or_else(remote::default_key_path)) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let cfg = ClientConfig::new(server, key);
    let scans = match client::ls(&cfg, &disks, a.scan.as_deref()) {
        Ok(s) => s,
        Err(e) => return xerr(e),
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&scans)?);
        return Ok(ExitCode::SUCCESS);
    }
    if scans.is_empty() {
        outln!(
            "no scans{} on {}",
            a.scan.map_or(String::new(), |p| format!(" matching {p:?}")),
            cfg.server
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{:<32} {:>12} {:<10} streams", "scan", "gathered", "state");
    for s in &scans {
        let state = match (&s.error, s.complete) {
            (Some(_), _) => "ERROR",
            (None, Some(true)) => "complete",
            (None, Some(false)) => "recording",
            (None, None) => "foreign",
        };
        let streams = match &s.error {
            Some(e) => e.clone(),
            None => s
                .streams
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        };
        outln!(
            "{:<32} {:>12} {:<10} {}",
            s.name,
            fmt_bytes(s.bytes),
            state,
            streams
        );
    }
    Ok(ExitCode::SUCCESS)
}

const COLLECT_EXAMPLES: &str = "\
Examples:
  # At the correlator: pull every station's scans of r41c into /data/corr/r41c/<station>/
  vlbiflow xfer collect --config r41c.toml

  # Also follow scans still being recorded; metrics and a page of stations by scans on loopback
  vlbiflow xfer collect --config r41c.toml --follow --metrics 127.0.0.1:9479

  # What has arrived (from the status file a running or ended collect rewrites each second)
  vlbiflow xfer collect --config r41c.toml --status --json

The experiment file (TOML):

  experiment = \"r41c\"
  dest = \"/data/corr\"            # scans land in DEST/r41c/<station>/<scan>.vdif
  total_rate = \"8Gbps\"           # the correlator link, shared among the stations by weight
  scans = [\"no0001\", \"no0002\"]   # optional (or vex = \"r41c.vex\"); else every r41c_* scan
  [[station]]
  name = \"ef\"
  daemon = \"ef.example.org:46230/data/disks/*/*/data\"
  weight = 2                     # optional, default 1
  rate_limit = \"2Gbps\"           # optional: the station's path

Optional keys: key, state (default DEST/<exp>/.collect.sqlite), follow, follow_timeout (60s), \
follow_min_new (256MiB), stall_timeout (60s), backoff_max (60s), give_up_after (6h), chunk_size (32MiB), \
block_size (8192), verify_written; per station concurrency (1).

Each station's daemon lists its scans (`xfer ls`); one pull per station runs at a time, each with its \
share of total_rate (water-filling by weight under each station's rate_limit, re-divided whenever a \
station finishes, stalls, fails or comes back) sent to the daemon as the receiver's rate cap. Failures \
are retried with resume after a back-off doubling from 1 s to backoff_max; a station whose destination \
disk is full is stopped and the others go on. What arrived is kept in an SQLite archive: a collect run \
again pulls nothing already verified. Exit status: 0 every expected scan verified here; 1 some did not \
arrive (listed per station and scan on standard error); 2 usage; 130 interrupted (rerun to resume).";

#[derive(clap::Args)]
#[command(after_help = COLLECT_EXAMPLES)]
pub(super) struct CollectArgs {
    /// The experiment file (TOML; see below)
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Follow scans still being recorded (rounds of what is on disk, then the rest when complete)
    #[arg(long)]
    follow: bool,
    /// Key file (default: the file's `key`, else ~/.local/state/vlbiflow/xfer/xfer.key)
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// The SQLite archive of what arrived (default: the file's `state`, else DEST/<exp>/.collect.sqlite)
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// The status file, rewritten atomically each second [default: DEST/<exp>/collect-status.json]
    #[arg(long, value_name = "FILE")]
    status_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics and a page of stations by scans at http://ADDR/
    /// (loopback addresses only)
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Print the status file (what has arrived) instead of collecting
    #[arg(long)]
    status: bool,
    /// The status as JSON on standard output (at the end, or with --status)
    #[arg(long)]
    json: bool,
}

pub(super) fn collect(a: CollectArgs) -> anyhow::Result<ExitCode> {
    use vlbiflow_collect::run::{default_status_file, not_arrived, run, RunOptions};
    let mut cfg = match vlbiflow_collect::CollectConfig::load(&a.config) {
        Ok(c) => c,
        Err(e) => usage!("{e}"),
    };
    cfg.follow |= a.follow;
    if let Some(s) = a.state {
        cfg.state = s;
    }
    let status_file = a.status_file.unwrap_or_else(|| default_status_file(&cfg));
    if a.status {
        let st = match vlbiflow_collect::status::Status::read(&status_file) {
            Ok(s) => s,
            Err(e) => usage!("no status yet: {e}"),
        };
        print_status(&st, a.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let metrics = match a.metrics {
        Some(m) if !m.ip().is_loopback() => {
            usage!("--metrics {m}: served on loopback addresses only; scrape through an SSH tunnel")
        }
        Some(m) => match std::net::TcpListener::bind(m) {
            Ok(l) => {
                eprintln!("collect: metrics at http://{}/metrics", l.local_addr()?);
                Some(l)
            }
            Err(e) => usage!("--metrics {m}: {e}"),
        },
        None => None,
    };
    let key_path = a.key.or(cfg.key.clone()).unwrap_or_else(remote::default_key_path);
    let key = match Key::load(&key_path) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let opts = RunOptions {
        status_file: Some(status_file),
        metrics,
        log: Box::new(|l| eprintln!("collect: {l}")),
    };
    let st = match run(&cfg, key, opts, &stop) {
        Ok(s) => s,
        Err(e) => {
            return Err(crate::cmd::ExitError::error(crate::cmd::exit::IO, e));
        }
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&st)?);
    }
    for line in vlbiflow_collect::run::faults(&st) {
        eprintln!("collect {}: {line}", st.experiment);
    }
    if st.complete {
        eprintln!(
            "collect {}: every expected scan verified: {} scans, {}",
            st.experiment,
            st.scans_verified,
            fmt_bytes(st.bytes_verified)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let missing = not_arrived(&st);
    let code = if stop.load(std::sync::atomic::Ordering::Relaxed) {
        crate::cmd::exit::INTERRUPTED
    } else {
        crate::cmd::exit::PROBLEMS
    };
    Err(crate::cmd::ExitError::error(
        code,
        format!(
            "collect {}: {} of {} scans verified; did not arrive:\n  {}",
            st.experiment,
            st.scans_verified,
            st.scans_expected,
            missing.join("\n  ")
        ),
    ))
}

fn print_status(st: &vlbiflow_collect::status::Status, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(st)?);
        return Ok(());
    }
    outln!(
        "collect {} (updated {}): {} of {} scans verified, {}{}",
        st.experiment,
        st.updated,
        st.scans_verified,
        st.scans_expected,
        fmt_bytes(st.bytes_verified),
        if st.ended { ", ended" } else { "" }
    );
    for s in &st.stations {
        outln!(
            "{:<10} {:<12} {:>12} {}",
            s.name,
            s.state,
            vlbiflow_units::fmt_bit_rate(s.rate_bps),
            s.error
                .as_ref()
                .map_or(String::new(), |e| format!("{}: {}", e.time, e.error))
        );
        for c in &s.scans {
            outln!(
                "  {:<30} {:<10} {:>12} of {:>12}{}",
                c.name,
                c.state,
                fmt_bytes(c.bytes_verified),
                fmt_bytes(c.bytes),
                c.errors
                    .last()
                    .map_or(String::new(), |e| format!("  {}: {}", e.time, e.error))
            );
        }
    }
    Ok(())
}

/// `pull --follow`.
#[derive(clap::Args)]
pub(super) struct PullFollow {
    /// With --scan: fetch the scan while it is still being recorded at the station (rounds of what is on
    /// its disks, then the rest when its recorder marks it complete; gather layout)
    #[arg(long, requires = "scan")]
    pub(super) follow: bool,
    /// With --follow: give up when the scan neither grows nor is marked complete for this long
    #[arg(long, default_value = "60s", value_parser = vlbiflow_units::parse_duration, requires = "follow")]
    follow_timeout: std::time::Duration,
}

/// `pull --follow`: rounds of the scan as it is recorded at the daemon, then the whole of it.
pub(super) fn pull_follow(
    cfg: &ClientConfig,
    scan: &vlbiflow_xfer::session::ScanRequest,
    into: &std::path::Path,
    opts: vlbiflow_xfer::session::Options,
    f: &PullFollow,
    (json, quiet): (bool, bool),
) -> anyhow::Result<ExitCode> {
    use std::sync::Arc;
    let follow = vlbiflow_xfer::follow::FollowConfig {
        stall_timeout: f.follow_timeout,
        ..Default::default()
    };
    let progress = Arc::new(vlbiflow_xfer::Progress::default());
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let r = super::report::with_progress(&progress, quiet || json, || {
        vlbiflow_xfer::follow::pull_follow(
            cfg,
            scan,
            into,
            opts,
            &follow,
            (&progress, &stop),
            &|bytes, last| {
                if last {
                    eprintln!(
                        "{}: complete at the station: fetching the rest of {}",
                        scan.name,
                        fmt_bytes(bytes)
                    );
                } else {
                    eprintln!(
                        "{}: still recording: fetching up to {}",
                        scan.name,
                        fmt_bytes(bytes)
                    );
                }
            },
        )
    });
    match r {
        Ok(run) => {
            let total: u64 = run.last.committed.iter().map(|c| c.size).sum();
            if json {
                outln!(
                    "{}",
                    serde_json::json!({
                        "verified": true,
                        "files": run.last.committed,
                        "bytes_total": total,
                        "bytes_received": run.bytes_sent,
                        "rounds_while_recording": run.partial_rounds,
                        "seconds": run.seconds,
                    })
                );
            } else {
                outln!(
                    "verified: {} files, {} in {:.1} s; followed the recording: {} round(s) while recording",
                    run.last.committed.len(),
                    fmt_bytes(total),
                    run.seconds,
                    run.partial_rounds
                );
                for c in &run.last.committed {
                    outln!("  {}  {}  {}", c.blake3, fmt_bytes(c.size), c.name);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => xerr(e),
    }
}
