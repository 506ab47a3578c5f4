//! `vlbiflow xfer`: verified, resumable, authenticated bulk transfer over UDP (daemon and client verbs).
//! The work is done in `vlbiflow-xfer`; this module parses, shows progress and prints summaries.

mod collect;
mod config;
mod report;

use crate::usage;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_units::{fmt_bit_rate, fmt_bytes, parse_bit_rate, parse_bytes, parse_duration};
use vlbiflow_xfer::archive::{self, Archive};
use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::remote;
use vlbiflow_xfer::scan::{scan_source, Layout};
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress, XferError};
use vlbiflow_xfer_proto::RateConfig;

use report::{json_on_failure, print_json, print_summary, receiver_line, with_progress};

const EXAMPLES: &str = "\
Examples:
  # At the correlator: serve two roots (creates the key file on first start, mode 0600)
  vlbiflow xfer serve --listen 0.0.0.0:46230 --root data=/mnt/raid --root scratch=/scratch

  # Copy the key file to the station once (any secure way), then push files or directories
  scp corr:.local/state/vlbiflow/xfer/xfer.key ~/.local/state/vlbiflow/xfer/xfer.key
  vlbiflow xfer push /data/exp1/*.vdif corr.example.org:46230/data/exp1

  # Rerun the same command after any interruption: only what is missing moves
  vlbiflow xfer push /data/exp1 corr.example.org/data --rate 4Gbps --json

Exit status: 0 only when every file is verified at the destination and synced under its final name; \
1 the transfer failed (rerun to resume); 2 usage error (also a local file, scan or pattern that is not \
there); 3 refused by the daemon (key, root, path, no such scan there, exists); 4 busy; 5 the daemon cannot \
be reached; 130 interrupted.";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Run the daemon: receive (and serve) files under its roots
    Serve(ServeArgs),
    /// Send files or directories to a daemon
    Push(PushArgs),
    /// Fetch files or directories from a daemon's roots into a local directory
    Pull(PullArgs),
    /// Have one daemon push files from its roots to another daemon (started from a third host)
    Copy(CopyArgs),
    /// Show the key's fingerprint (compare it on both hosts), or create a key file
    Key(KeyArgs),
    /// List past transfers from the archive (this host's daemon and client runs)
    History(HistoryArgs),
    /// List a daemon's scans (of an experiment) with the size a gather pull fetches
    Ls(collect::LsArgs),
    /// At the correlator: pull every station's scans of an experiment over one shared link
    Collect(collect::CollectArgs),
}

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  vlbiflow xfer history\n  vlbiflow xfer history --limit 100 --json\n\nThe archive is \
~/.local/state/vlbiflow/xfer/xfer.sqlite unless --archive says otherwise. The daemon (`serve`) writes \
each transfer it receives, sends or relays to it, and the client verbs each run of theirs: `push` as \
send, `pull` as receive, `copy` as copy. No archive yet is an empty list."
)]
struct HistoryArgs {
    /// Archive file
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,
    /// Newest N transfers (0: all)
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// A JSON array (oldest first) instead of a table
    #[arg(long)]
    json: bool,
}

const SERVE_EXAMPLES: &str = "\
Examples:
  vlbiflow xfer serve --root data=/mnt/raid
  vlbiflow xfer serve --listen 0.0.0.0:46230 --root data=/mnt/raid --key /etc/vlbiflow/xfer.key
  vlbiflow xfer serve --root data=/mnt/raid --verify-written --metrics 127.0.0.1:9466
  # receiving (and, for pulls, pacing) in the real-time class on a busy host (root or CAP_SYS_NICE)
  vlbiflow xfer serve --root data=/mnt/raid --realtime

Clients write only below a root (`ROOT/relative/dir`, no `..`, symbolic links not followed) and never \
replace an existing file unless they ask (--overwrite). Without --key the key file is \
~/.local/state/vlbiflow/xfer/xfer.key, created with a new random key on first start (mode 0600). The control \
port is TCP; each transfer gets its own UDP data port on the same address. Stop with Ctrl-C or SIGTERM: \
running transfers keep their .part files and resume when the client reruns its command.";

#[derive(clap::Args)]
#[command(after_help = SERVE_EXAMPLES)]
struct ServeArgs {
    /// Configuration file (TOML; deploy/config/xfer.toml is an annotated example); flags override it
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check a configuration file, print a one-line summary and exit (2 and the error if it is wrong)
    #[arg(long, value_name = "FILE", exclusive = true)]
    check_config: Option<PathBuf>,
    /// Control address (TCP) [default: 127.0.0.1:46230]
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// A directory clients may write to and read from: NAME=DIR, or DIR (named after its last
    /// component), with :ro (pull only) or :wo (push only) after it; repeat (required here or as
    /// [roots] in the configuration)
    #[arg(long, value_name = "NAME=DIR[:ro|:wo]")]
    root: Vec<String>,
    /// Key file (created when missing); this key may use every root
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// A further key that may use the roots named only: FILE=ROOT[,ROOT...]; repeat, one per client
    #[arg(long, value_name = "FILE=ROOTS")]
    client_key: Vec<String>,
    /// Transfers at once (more are refused with "busy") [default: 16]
    #[arg(long)]
    max_transfers: Option<usize>,
    /// A peer silent this long is dead [default: 10s]
    #[arg(long, value_parser = parse_duration)]
    dead_timeout: Option<Duration>,
    /// Archive of transfers (SQLite; default STATE/xfer.sqlite, STATE being $STATE_DIRECTORY under
    /// systemd, else ~/.local/state/vlbiflow/xfer)
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback addresses only, unless --metrics-token-file)
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Read-only token that GET /metrics must carry (Authorization: Bearer TOKEN); grants nothing else
    #[arg(long, value_name = "FILE")]
    metrics_token_file: Option<PathBuf>,
    /// Rate ceiling of each transfer (e.g. 2Gbps)
    #[arg(long, value_parser = parse_bit_rate)]
    max_rate: Option<f64>,
    /// Rate ceiling of all transfers together, shared equally among those running (shared again as they start and end)
    #[arg(long, value_parser = parse_bit_rate)]
    total_rate: Option<f64>,
    /// Key for the daemons this one pushes to on behalf of `xfer copy` (default: its own key)
    #[arg(long, value_name = "FILE")]
    peer_key: Option<PathBuf>,
    /// An address block this daemon may push to on behalf of `xfer copy` (ADDR or ADDR/PREFIX; repeat);
    /// without one no copy is relayed, so that a key holder cannot make the daemon connect anywhere
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    relay_to: Vec<vlbiflow_guard::net::Prefix>,
    /// Read every chunk received back from the disk, past the page cache, and check its hash before
    /// committing the file, whether or not the client asked (push --verify-written as this station's policy)
    #[arg(long)]
    verify_written: bool,
    #[command(flatten)]
    rt: Realtime,
}

const PUSH_EXAMPLES: &str = "\
Examples:
  vlbiflow xfer push scan1.vdif scan2.vdif corr:46230/data/exp1
  vlbiflow xfer push /data/exp1 corr/data --rate 2Gbps
  vlbiflow xfer push big.vdif '[::1]:46230/data' --chunk-size 64MiB --json
  # the daemon also reads every chunk back from its disk before it commits the file
  vlbiflow xfer push /data/exp1 corr/data --verify-written
  # pacing in the real-time class, so that the rate holds on a busy host (root or CAP_SYS_NICE)
  vlbiflow xfer push /data/exp1 corr/data --realtime

  # A Mark6 scan on its module disks, read in place, arriving as one VDIF file (no gather step)
  vlbiflow xfer push --scan exp_st_no0001 --disk '/mnt/disks/*/*/data' corr/data/exp
  # ... or in its own layout, or as FlexBuff chunks
  vlbiflow xfer push --scan exp_st_no0001 --disk '/mnt/disks/*/*/data' --layout flexbuff \\
      corr/data/fb

The destination is DAEMON[:PORT]/ROOT/DIR (port 46230 by default). A directory arrives as DIR/<its name>/... \
Every chunk is hashed (BLAKE3) where it is read and where it is written; the command succeeds only when all \
match and the daemon has synced and renamed every file (with --verify-written, also read every chunk back \
from its disk and found it equal). Rerun the same command after an interruption: what \
is already there is re-verified at disk speed and only what is missing or different moves.";

#[derive(clap::Args)]
#[command(after_help = PUSH_EXAMPLES)]
struct PushArgs {
    /// Files or directories, then the destination DAEMON[:PORT]/ROOT/DIR (with --scan: only the destination)
    #[arg(required = true, num_args = 1.., value_name = "SOURCE... DEST")]
    args: Vec<String>,
    /// Send this Mark6 or FlexBuff scan, found by name on --disk, read in place
    #[arg(long, value_name = "NAME", requires = "disk")]
    scan: Option<String>,
    /// Disk directories of the scan; repeat, or a glob pattern ('/mnt/disks/*/*/data')
    #[arg(long, short, value_name = "DIR")]
    disk: Vec<String>,
    /// Layout of a scan at the destination: gather (one VDIF/Mark5B file, what DiFX reads), same (one
    /// directory per source disk) or flexbuff (one chunk file per block)
    #[arg(long, default_value = "gather", value_parser = ["gather", "same", "flexbuff"])]
    layout: String,
    /// With --scan: send the scan while it is still being recorded (what is on disk, then what the
    /// recorder adds) and finish when the recorder marks it complete (gather layout)
    #[arg(long, requires = "scan")]
    follow: bool,
    /// With --follow: give up when the scan neither grows nor is marked complete for this long
    #[arg(long, default_value = "60s", value_parser = parse_duration, requires = "follow")]
    follow_timeout: std::time::Duration,
    #[command(flatten)]
    rt: Realtime,
    #[command(flatten)]
    common: Common,
}

const PULL_EXAMPLES: &str = "\
Examples:
  vlbiflow xfer pull corr:46230/data/exp1 /local/exp1
  vlbiflow xfer pull station/data/exp1/scan1.vdif station/data/exp1/scan2.vdif . --json

  # A Mark6 scan by name on the daemon's disks (under its root `data`), gathered here
  vlbiflow xfer pull --scan exp1_st_no0001 --disk 'station/data/disks/*/*/data' /local/exp1

  # The same scan while it is still being recorded there: rounds of what is on disk, then the rest
  vlbiflow xfer pull --scan exp1_st_no0001 --disk 'station/data/disks/*/*/data' --follow /local/exp1

Sources are DAEMON[:PORT]/ROOT/PATH (files or directories under the daemon's roots, all on one daemon); the \
last argument is the local directory. The daemon sends to this host's UDP port, so the daemon must be able \
to reach it. Rerun after an interruption: what is here already is re-verified and only the rest moves.";

#[derive(clap::Args)]
#[command(after_help = PULL_EXAMPLES)]
struct PullArgs {
    /// Sources DAEMON[:PORT]/ROOT/PATH, then the local directory (with --scan: only the directory)
    #[arg(required = true, num_args = 1.., value_name = "SOURCE... DIR")]
    args: Vec<String>,
    #[command(flatten)]
    scan: RemoteScan,
    #[command(flatten)]
    follow: collect::PullFollow,
    #[command(flatten)]
    rt: Realtime,
    #[command(flatten)]
    common: Common,
}

/// A scan by name on a daemon's disks.
#[derive(clap::Args)]
struct RemoteScan {
    /// Fetch this Mark6 or FlexBuff scan from the daemon's disks by name, read in place there
    #[arg(long, value_name = "NAME", requires = "disk")]
    scan: Option<String>,
    /// The scan's disk directories on the daemon: DAEMON[:PORT]/ROOT/DIR, globs allowed below the root
    /// ('station/data/disks/*'); repeat
    #[arg(long, short, value_name = "DAEMON/ROOT/DIR")]
    disk: Vec<String>,
    /// Layout of the scan at the destination: gather, same or flexbuff
    #[arg(long, default_value = "gather", value_parser = ["gather", "same", "flexbuff"])]
    layout: String,
}

const COPY_EXAMPLES: &str = "\
Examples:
  # From this laptop: the station's daemon sends to the correlator's daemon
  vlbiflow xfer copy station:46230/data/exp1 corr.example.org:46230/data/exp1

  # Retry up to 10 times (backoff 1, 2, 4, ... 64 s); every retry resumes
  vlbiflow xfer copy station/data/exp1/scan1.vdif corr/data/exp1 --retries 10 --json

  # A scan by name on the station's disks, gathered into one VDIF file at the correlator
  vlbiflow xfer copy --scan exp1_st_no0001 --disk 'station/data/disks/*/*/data' corr/data/exp1

The destination address is used by the source daemon, so give it as that daemon reaches it. The source \
daemon authenticates to the destination with its --peer-key (default: its own key). The command follows the \
transfer; if it is interrupted the source daemon still finishes (see `xfer history` there).";

#[derive(clap::Args)]
#[command(after_help = COPY_EXAMPLES)]
struct CopyArgs {
    /// Sources SRC_DAEMON[:PORT]/ROOT/PATH, then the destination DST_DAEMON[:PORT]/ROOT/DIR (with --scan:
    /// only the destination)
    #[arg(required = true, num_args = 1.., value_name = "SOURCE... DEST")]
    args: Vec<String>,
    #[command(flatten)]
    scan: RemoteScan,
    /// Attempts after the first that fail for a network or peer reason
    #[arg(long, default_value_t = 5)]
    retries: u32,
    #[command(flatten)]
    common: Common,
}

/// `--realtime`, the same for serve, push and pull.
#[derive(clap::Args)]
struct Realtime {
    /// Run this side's data threads (pacing, reading ahead, feedback; receiving, writing) in the real-time
    /// class SCHED_FIFO at priority 5, so that pacing holds on a loaded host; use it at both ends (needs
    /// root, CAP_SYS_NICE or `ulimit -r` >= 5; on a host that records, only below the recorder's priority).
    /// On a virtual machine compare with and without: on one it drew the hypervisor's steal and lost
    /// more than it gained (docs/xfer.md)
    #[arg(long)]
    realtime: bool,
}

#[derive(clap::Args)]
struct Common {
    /// Key file (default ~/.local/state/vlbiflow/xfer/xfer.key)
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Fixed rate ceiling on the wire (e.g. 4Gbps) for a dedicated path; default automatic
    #[arg(long, value_parser = parse_bit_rate)]
    rate: Option<f64>,
    /// Chunk size: the unit of hashing, verification and resume (a power of two)
    #[arg(long, default_value = "32MiB", value_parser = parse_bytes)]
    chunk_size: u64,
    /// Payload bytes per datagram (8192 fits a 9000-byte MTU; use 1400 on a 1500-byte path)
    #[arg(
        long = "payload-size",
        alias = "block-size",
        value_name = "BYTES",
        default_value_t = 8192
    )]
    block_size: u32,
    /// Replace files that exist at the destination with different content
    #[arg(long)]
    overwrite: bool,
    /// Encrypt the data (ChaCha20-Poly1305) instead of only authenticating it (control is always encrypted)
    #[arg(long)]
    encrypt: bool,
    /// The receiver reads every chunk back from its disk after writing it, past the page cache, and
    /// checks its hash before committing the file: proof of what is on the disk, for one more read of it
    #[arg(long)]
    verify_written: bool,
    /// A peer silent this long is dead
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    dead_timeout: Duration,
    /// JSON summary on standard output (no progress bar)
    #[arg(long)]
    json: bool,
    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

const KEY_EXAMPLES: &str = "\
Examples:
  # On the daemon's host and on each client: the same fingerprint means the same key
  vlbiflow xfer key
  # A key file copied from the correlator, before using it with --key
  vlbiflow xfer key --key ~/keys/corr.key
  # A new key file for one daemon (random key, mode 0600), then serve with it
  vlbiflow xfer key --create --key /etc/vlbiflow/xfer.key
  vlbiflow xfer serve --root data=/mnt/raid --key /etc/vlbiflow/xfer.key

Prints the key's fingerprint and the key file: `FINGERPRINT  PATH`. The key is 32 random bytes, \
stored as 64 hex digits in a file only its owner may read (mode 0600); a client and a daemon work \
together only when they hold the same key, so copy the daemon's key file to each client by any \
secure means. The fingerprint (a BLAKE3 derivation of the key) does not reveal the key and can be \
compared by eye or over the phone. Without --key the key file is \
~/.local/state/vlbiflow/xfer/xfer.key (under $XDG_STATE_HOME when that is set); `xfer serve` \
creates it on first start. Without --create a missing key file is an error (exit status 2).";

#[derive(clap::Args)]
#[command(after_help = KEY_EXAMPLES)]
struct KeyArgs {
    /// Key file (default ~/.local/state/vlbiflow/xfer/xfer.key)
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Create the key file if it does not exist
    #[arg(long)]
    create: bool,
}

/// An error of the transfer library as the CLI's error, with its exit status (`XferError::exit_code`).
fn xerr(e: XferError) -> anyhow::Result<ExitCode> {
    let code = e.exit_code();
    if code == 2 {
        return Err(anyhow::Error::new(crate::cmd::UsageError(e.to_string())));
    }
    Err(anyhow::Error::new(crate::cmd::ExitError {
        code,
        message: e.to_string(),
    }))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Push(a) => {
            let json = a.common.json;
            json_on_failure(json, interrupted(push(a)))
        }
        Cmd::Pull(a) => {
            let json = a.common.json;
            json_on_failure(json, interrupted(pull(a)))
        }
        Cmd::Copy(a) => {
            let json = a.common.json;
            json_on_failure(json, interrupted(copy(a)))
        }
        Cmd::Key(a) => key(a),
        Cmd::History(a) => history(a),
        Cmd::Ls(a) => collect::ls(a),
        Cmd::Collect(a) => interrupted(collect::collect(a)),
    }
}

/// A transfer that failed because Ctrl-C or SIGTERM stopped it exits 130 (interrupted), its message kept.
fn interrupted(r: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    match r {
        Err(e) if crate::stop::interrupted() => Err(crate::cmd::ExitError::error(
            crate::cmd::exit::INTERRUPTED,
            format!("{e:#}"),
        )),
        r => r,
    }
}

/// The archive the client verbs (push, pull, copy) write to.
fn client_archive() -> PathBuf {
    remote::state_dir().join("xfer.sqlite")
}

fn history(a: HistoryArgs) -> anyhow::Result<ExitCode> {
    let path = a.archive.unwrap_or_else(client_archive);
    // a new user has no archive yet: an empty list, and the archive is not created by looking
    let list = if path.exists() {
        let arch = match Archive::open(&path) {
            Ok(x) => x,
            Err(e) => usage!("{e}"),
        };
        match arch.list(a.limit) {
            Ok(l) => l,
            Err(e) => usage!("{e}"),
        }
    } else {
        Vec::new()
    };
    if list.is_empty() {
        eprintln!(
            "vlbiflow: no transfers in {}{} (serve, push, pull and copy write it)",
            path.display(),
            if path.exists() { "" } else { " yet" }
        );
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&list).expect("json"));
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<20}  {:<7}  {:<21}  {:>10}  {:>10}  {:>8}  {:>12}  {:<8}  path",
        "started (UTC)",
        "role",
        "peer",
        "bytes",
        "resumed",
        "seconds",
        "goodput",
        "result"
    );
    for e in &list {
        let goodput = (e.bytes - e.bytes_resumed.min(e.bytes)) as f64 * 8.0 / e.seconds.max(1e-9);
        outln!(
            "{:<20}  {:<7}  {:<21}  {:>10}  {:>10}  {:>8.1}  {:>12}  {:<8}  {}{}",
            e.started,
            e.role,
            e.peer,
            fmt_bytes(e.bytes),
            fmt_bytes(e.bytes_resumed),
            e.seconds,
            if e.ok { fmt_bit_rate(goodput) } else { "-".into() },
            if e.ok { "verified" } else { "FAILED" },
            e.path,
            e.error.as_ref().map(|x| format!("  ({x})")).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn key(a: KeyArgs) -> anyhow::Result<ExitCode> {
    let path = a.key.unwrap_or_else(remote::default_key_path);
    let k = if a.create {
        match Key::load_or_create(&path) {
            Ok((k, created)) => {
                if created {
                    eprintln!("created {} (mode 0600)", path.display());
                }
                k
            }
            Err(e) => return xerr(e),
        }
    } else {
        match Key::load(&path) {
            Ok(k) => k,
            Err(e) => return xerr(e),
        }
    };
    outln!("{}  {}", k.fingerprint(), path.display());
    Ok(ExitCode::SUCCESS)
}

fn serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(p) = &a.check_config {
        return crate::service::check_result(config::check(p));
    }
    let flags = config::Flags {
        listen: a.listen,
        roots: a.root,
        key: a.key,
        client_keys: a.client_key,
        max_transfers: a.max_transfers,
        dead_timeout: a.dead_timeout,
        archive: a.archive,
        metrics: a.metrics,
        max_rate: a.max_rate,
        total_rate: a.total_rate,
        peer_key: a.peer_key,
        relay_to: a.relay_to,
        verify_written: a.verify_written,
        realtime: a.rt.realtime,
    };
    let s = match config::settings(a.config.as_deref(), flags) {
        Ok(s) => s,
        Err(e) => usage!("{e}"),
    };
    let roots = match Roots::parse(&s.roots) {
        Ok(r) => r,
        Err(e) => return xerr(e),
    };
    let (key, created) = match Key::load_or_create(&s.key) {
        Ok(x) => x,
        Err(e) => return xerr(e),
    };
    if created {
        tracing::warn!(
            target: "vlbiflow::xfer",
            key_file = %s.key.display(),
            "created the key file (mode 0600); copy it to the clients"
        );
    }
    let mut cfg = ServeConfig::new(s.listen, roots.clone(), key.clone());
    cfg.max_transfers = s.max_transfers;
    cfg.dead_timeout = s.dead_timeout;
    cfg.log = true;
    cfg.archive = Some(s.archive);
    cfg.metrics = s.metrics;
    cfg.metrics_token = match crate::cmd::read_metrics_token(a.metrics_token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return xerr(XferError::Usage(e)),
    };
    cfg.max_rate_bps = s.max_rate;
    cfg.relay_to = s.relay_to.clone();
    if let Some(p) = &s.peer_key {
        cfg.peer_key = match Key::load(p) {
            Ok(k) => Some(k),
            Err(e) => return xerr(e),
        };
    }
    for (file, roots) in &s.client_keys {
        match Key::load(file) {
            Ok(key) => cfg.client_keys.push(vlbiflow_xfer::daemon::ClientKey {
                name: file.display().to_string(),
                key,
                roots: roots.clone(),
            }),
            Err(e) => return xerr(e),
        }
    }
    cfg.total_rate_bps = s.total_rate;
    cfg.verify_written = s.verify_written;
    cfg.realtime = s.realtime;
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let d = match Daemon::start(cfg) {
        Ok(d) => d,
        Err(e) => return xerr(e),
    };
    let root_list = roots
        .0
        .iter()
        .map(|r| format!("{}={}", r.name, r.path.display()))
        .collect::<Vec<_>>()
        .join(", ");
    tracing::info!(
        target: "vlbiflow::xfer",
        listen = %d.local_addr(),
        key_fingerprint = %key.fingerprint(),
        roots = %root_list,
        verify_written = s.verify_written,
        "serving on {}",
        d.local_addr()
    );
    if let Some(m) = d.metrics_addr() {
        tracing::info!(target: "vlbiflow::xfer", "metrics at http://{m}/metrics");
    }
    crate::service::notify_ready(&format!("serving on {}", d.local_addr()));
    // WATCHDOG=1 only when the accept loop has moved since the last look
    let watchdog = crate::service::Watchdog::from_env();
    let mut passes = d.accept_passes();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let now = d.accept_passes();
        if now != passes {
            watchdog.alive();
        }
        passes = now;
    }
    crate::service::notify_stopping();
    tracing::info!(target: "vlbiflow::xfer", "stopping");
    d.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// Splits `HOST[:PORT]/ROOT/DIR` into the daemon address and the destination.
fn options(c: &Common) -> anyhow::Result<Options> {
    if !c.chunk_size.is_power_of_two() || !(4096..=1 << 30).contains(&c.chunk_size) {
        usage!("--chunk-size {}: a power of two from 4KiB to 1GiB", c.chunk_size);
    }
    if c.block_size == 0 || c.block_size as usize > vlbiflow_xfer_proto::wire::MAX_PAYLOAD {
        usage!(
            "--payload-size {}: 1..={} bytes",
            c.block_size,
            vlbiflow_xfer_proto::wire::MAX_PAYLOAD
        );
    }
    if let Some(r) = c.rate {
        if r < 1e6 {
            usage!("--rate {r}: at least 1 Mb/s");
        }
    }
    Ok(Options {
        chunk_size: c.chunk_size,
        block_size: c.block_size,
        overwrite: c.overwrite,
        encrypt: c.encrypt,
        rate_bps: c.rate,
        partial: false,
        verify_written: c.verify_written,
    })
}

fn rate_config(c: &Common) -> RateConfig {
    match c.rate {
        Some(r) => RateConfig::fixed(r),
        None => RateConfig::auto(100e6),
    }
}

/// `xfer push`: sends, prints the summary, and archives the run on this host (a problem with the archive is
/// a warning, not an error of the transfer).
fn push(a: PushArgs) -> anyhow::Result<ExitCode> {
    let mut args = a.args.clone();
    let dest = args.pop().expect("two arguments at least");
    let (server, dest_path) = match remote::split(&dest) {
        Ok(x) => x,
        Err(e) => usage!("{e}"),
    };
    let opts = options(&a.common)?;
    if a.follow {
        return push_follow(&a, &server, &dest_path, opts);
    }
    let set = if let Some(scan) = &a.scan {
        if !args.is_empty() {
            usage!("with --scan give only the destination, not {}", args.join(" "));
        }
        let layout: Layout = a
            .layout
            .parse()
            .map_err(|e: String| anyhow::Error::new(crate::cmd::UsageError(e)))?;
        match scan_source(scan, &a.disk, layout) {
            Ok((set, info)) => {
                if info.complete == Some(false) && !a.common.quiet {
                    eprintln!("vlbiflow: scan {scan} is not marked complete by its recorder (still recording, or the recorder died)");
                }
                set
            }
            Err(e) => return xerr(e),
        }
    } else {
        if args.is_empty() {
            usage!(
                "give the files or directories to send before the destination (or --scan NAME --disk DIR)"
            );
        }
        let paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
        let (set, skipped) = match collect_paths(&paths) {
            Ok(x) => x,
            Err(e) => return xerr(e),
        };
        for s in &skipped {
            eprintln!("vlbiflow: skipped {s}");
        }
        set
    };
    let key = match Key::load(&a.common.key.clone().unwrap_or_else(remote::default_key_path)) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let mut cfg = ClientConfig::new(server, key);
    cfg.dead_timeout = a.common.dead_timeout;
    cfg.realtime = a.rt.realtime;
    let total = set.total_bytes();
    let progress = Arc::new(Progress::default());
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let rate = rate_config(&a.common);
    let started = vlbiflow_xfer::utc_now();
    let files = set.files.len() as u64;
    let r = with_progress(&progress, a.common.quiet || a.common.json, || {
        client::push(&cfg, set, &dest_path, opts, rate, &progress, &stop)
    });
    archive::record_send(
        archive::ClientRun {
            archive: &client_archive(),
            server: &cfg.server,
            started,
            progress: &progress,
        },
        &dest_path,
        files,
        total,
        r.as_ref(),
    );
    match r {
        Ok(out) => {
            print_summary(&out, total, a.common.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => xerr(e),
    }
}

fn push_follow(a: &PushArgs, server: &str, dest_path: &str, opts: Options) -> anyhow::Result<ExitCode> {
    if a.layout != "gather" {
        usage!(
            "--follow sends one gathered file per scan: --layout gather (not {})",
            a.layout
        );
    }
    let scan = a.scan.as_deref().expect("--follow requires --scan");
    let key = match Key::load(&a.common.key.clone().unwrap_or_else(remote::default_key_path)) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let mut cfg = ClientConfig::new(server, key);
    cfg.dead_timeout = a.common.dead_timeout;
    cfg.realtime = a.rt.realtime;
    let follow = vlbiflow_xfer::follow::FollowConfig {
        stall_timeout: a.follow_timeout,
        min_new: (8 * opts.chunk_size).min(256 << 20),
        ..Default::default()
    };
    let progress = Arc::new(Progress::default());
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let quiet = a.common.quiet || a.common.json;
    let started = vlbiflow_xfer::utc_now();
    let r = with_progress(&progress, quiet, || {
        vlbiflow_xfer::follow::push_follow(
            &cfg,
            vlbiflow_xfer::follow::FollowRequest {
                scan,
                disks: &a.disk,
                dest: dest_path,
                options: opts,
                rate: rate_config(&a.common),
            },
            &follow,
            &progress,
            &stop,
            &|bytes, last| {
                if !a.common.quiet {
                    let what = if last { "complete" } else { "still recording" };
                    eprintln!("vlbiflow: scan {scan} {what}: sending up to {}", fmt_bytes(bytes));
                }
            },
        )
    });
    archive::record_send(
        archive::ClientRun {
            archive: &client_archive(),
            server: &cfg.server,
            started,
            progress: &progress,
        },
        dest_path,
        Progress::get(&progress.files_total),
        Progress::get(&progress.bytes_total),
        r.as_ref().map(|f| &f.last),
    );
    match r {
        Ok(f) => {
            let total: u64 = f.last.committed.iter().map(|c| c.size).sum();
            if a.common.json {
                print_json(&f.summary());
            } else {
                print_summary(&f.last, total, false);
                outln!(
                    "followed the recording: {} round(s) while recording, {} sent in all in {:.1} s",
                    f.partial_rounds,
                    fmt_bytes(f.bytes_sent),
                    f.seconds
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => xerr(e),
    }
}

fn copy(a: CopyArgs) -> anyhow::Result<ExitCode> {
    let mut args = a.args;
    let dest = args.pop().expect("two arguments at least");
    let (to, dest_path) = match remote::split(&dest) {
        Ok(x) => x,
        Err(e) => usage!("{e}"),
    };
    let opts = options(&a.common)?;
    let (server, sources, scan) = remote_sources_of(&args, &a.scan)?;
    let key = match Key::load(&a.common.key.clone().unwrap_or_else(remote::default_key_path)) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let cfg = ClientConfig::new(server, key);
    let progress = Arc::new(Progress::default());
    let quiet = a.common.quiet || a.common.json;
    let started = vlbiflow_xfer::utc_now();
    let r = with_progress(&progress, quiet, || {
        client::relay(
            &cfg,
            client::RelayRequest {
                sources: &sources,
                scan: scan.as_ref(),
                to: &to,
                dest: &dest_path,
                options: opts,
                retries: a.retries,
            },
            &progress,
            &|n, e, w| {
                if !quiet {
                    eprintln!("vlbiflow: attempt {n} failed ({e}); the daemon retries in {w:.0} s");
                }
            },
        )
    });
    archive::record_copy(
        archive::ClientRun {
            archive: &client_archive(),
            server: &cfg.server,
            started,
            progress: &progress,
        },
        &archive::describe_sources(&sources, scan.as_ref()),
        (&to, &dest_path),
        r.as_ref(),
    );
    match r {
        Ok(out) => {
            let total: u64 = out.files.iter().map(|c| c.size).sum();
            if a.common.json {
                print_json(&out.summary());
            } else {
                outln!(
                    "verified at {to}: {} files, {} ({} sent) in {:.1} s, {} attempt(s)",
                    out.files.len(),
                    fmt_bytes(total),
                    fmt_bytes(out.bytes_moved),
                    out.seconds,
                    out.attempts
                );
                if let Some(r) = &out.receiver {
                    outln!("{}", receiver_line(r));
                }
                for c in out.files.iter().take(20) {
                    outln!("  {}  {}  {}", c.blake3, fmt_bytes(c.size), c.name);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => xerr(e),
    }
}

fn pull(a: PullArgs) -> anyhow::Result<ExitCode> {
    let mut args = a.args;
    let into = PathBuf::from(args.pop().expect("two arguments at least"));
    let opts = options(&a.common)?;
    let (server, sources, scan) = remote_sources_of(&args, &a.scan)?;
    let key = match Key::load(&a.common.key.clone().unwrap_or_else(remote::default_key_path)) {
        Ok(k) => k,
        Err(e) => return xerr(e),
    };
    let mut cfg = ClientConfig::new(server, key);
    cfg.dead_timeout = a.common.dead_timeout;
    cfg.realtime = a.rt.realtime;
    if a.follow.follow {
        let scan = scan.expect("--follow requires --scan");
        return collect::pull_follow(
            &cfg,
            &scan,
            &into,
            opts,
            &a.follow,
            (a.common.json, a.common.quiet),
        );
    }
    let progress = Arc::new(Progress::default());
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let started = vlbiflow_xfer::utc_now();
    let r = with_progress(&progress, a.common.quiet || a.common.json, || {
        client::pull(&cfg, &sources, scan.as_ref(), &into, opts, &progress, &stop)
    });
    archive::record_pull(
        archive::ClientRun {
            archive: &client_archive(),
            server: &cfg.server,
            started,
            progress: &progress,
        },
        &archive::describe_sources(&sources, scan.as_ref()),
        &into,
        r.as_ref(),
    );
    match r {
        Ok(out) => {
            let total: u64 = out.committed.iter().map(|c| c.size).sum();
            let goodput = (total - out.bytes_resumed) as f64 * 8.0 / out.seconds.max(1e-9);
            if a.common.json {
                print_json(&out.summary());
            } else {
                outln!(
                    "verified: {} files, {} ({} already here, re-verified) in {:.1} s: {} goodput",
                    out.committed.len(),
                    fmt_bytes(total),
                    fmt_bytes(out.bytes_resumed),
                    out.seconds,
                    fmt_bit_rate(goodput)
                );
                outln!("{}", receiver_line(&out.report()));
                for c in out.committed.iter().take(20) {
                    outln!("  {}  {}  {}", c.blake3, fmt_bytes(c.size), c.name);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => xerr(e),
    }
}

/// `remote::sources` for the CLI's arguments (a usage error on bad input).
fn remote_sources_of(
    args: &[String],
    rs: &RemoteScan,
) -> anyhow::Result<(String, Vec<String>, Option<vlbiflow_xfer::session::ScanRequest>)> {
    let scan = rs
        .scan
        .as_deref()
        .map(|n| (n, rs.disk.as_slice(), rs.layout.as_str()));
    match remote::sources(args, scan) {
        Ok(x) => Ok(x),
        Err(e) => usage!("{e}"),
    }
}
