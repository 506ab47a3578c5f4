//! `vlbiflow xfer serve --config FILE`: the daemon's settings in TOML, overridden by command-line flags.
//! Durations and rates in the command line's syntax (`10s`, `2Gbps`). See deploy/config/xfer.toml.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use vlbiflow_guard::net::{AllowList, Prefix};

use crate::service;

/// Default control address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:46230";
/// Default transfers at once.
pub const DEFAULT_MAX_TRANSFERS: usize = 16;
/// Default time after which a silent peer is dead.
pub const DEFAULT_DEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The file as written; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Control address (TCP), `HOST:PORT`.
    pub listen: Option<SocketAddr>,
    /// Roots clients may write to and read from: `name = "/dir"`, `"/dir:ro"` (pull only) or
    /// `"/dir:wo"` (push only).
    #[serde(default)]
    pub roots: BTreeMap<String, String>,
    /// Key file (created when missing); this key may use every root.
    pub key: Option<PathBuf>,
    /// Further keys, each for the roots it names only: `[[keys]]` with `file` and `roots`.
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    /// Transfers at once.
    pub max_transfers: Option<usize>,
    /// A peer silent this long is dead (`10s`).
    pub dead_timeout: Option<String>,
    /// Archive of transfers (SQLite).
    pub archive: Option<PathBuf>,
    /// Prometheus metrics address (loopback only, unless `--metrics-token-file` is given).
    pub metrics: Option<SocketAddr>,
    /// Rate ceiling of each transfer (`2Gbps`).
    pub max_rate: Option<String>,
    /// Rate ceiling of all transfers together.
    pub total_rate: Option<String>,
    /// Key for the daemons this one pushes to on behalf of `xfer copy`.
    pub peer_key: Option<PathBuf>,
    /// Addresses (`ADDR[/PREFIX]`) this daemon may push to on behalf of `xfer copy`; none by default.
    #[serde(default)]
    pub relay_to: Vec<String>,
    /// Read every chunk back from the disk before committing.
    pub verify_written: Option<bool>,
    /// Data threads in SCHED_FIFO.
    pub realtime: Option<bool>,
}

/// A key for some roots only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// Key file (made with `vlbiflow xfer key --create`).
    pub file: PathBuf,
    /// Names of the roots it may use.
    pub roots: Vec<String>,
}

/// Settings after file and flags are merged and defaults applied.
#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub roots: Vec<String>,
    pub key: PathBuf,
    /// Key files for some roots only, with those roots.
    pub client_keys: Vec<(PathBuf, Vec<String>)>,
    pub max_transfers: usize,
    pub dead_timeout: Duration,
    pub archive: PathBuf,
    pub metrics: Option<SocketAddr>,
    pub max_rate: Option<f64>,
    pub total_rate: Option<f64>,
    pub peer_key: Option<PathBuf>,
    pub relay_to: AllowList,
    pub verify_written: bool,
    pub realtime: bool,
}

/// What the command line gave (flags win over the file).
#[derive(Debug, Default)]
pub struct Flags {
    pub listen: Option<SocketAddr>,
    pub roots: Vec<String>,
    pub key: Option<PathBuf>,
    /// `--client-key FILE=ROOT,...` as given.
    pub client_keys: Vec<String>,
    pub max_transfers: Option<usize>,
    pub dead_timeout: Option<Duration>,
    pub archive: Option<PathBuf>,
    pub metrics: Option<SocketAddr>,
    pub max_rate: Option<f64>,
    pub total_rate: Option<f64>,
    pub peer_key: Option<PathBuf>,
    pub relay_to: Vec<Prefix>,
    pub verify_written: bool,
    pub realtime: bool,
}

/// Reads `path` (if any) and merges `flags` over it. Roots given on the command line replace the file's.
pub fn settings(path: Option<&Path>, flags: Flags) -> Result<Settings, String> {
    let file: File = match path {
        Some(p) => service::load_toml(p)?,
        None => File::default(),
    };
    let at = |e: String| match path {
        Some(p) => format!("{}: {e}", p.display()),
        None => e,
    };
    let roots = if flags.roots.is_empty() {
        file.roots
            .iter()
            .map(|(name, dir)| format!("{name}={dir}"))
            .collect()
    } else {
        flags.roots
    };
    if roots.is_empty() {
        return Err(at(
            "no root: give --root NAME=DIR or [roots] in the configuration".into(),
        ));
    }
    let dead_timeout = match (flags.dead_timeout, &file.dead_timeout) {
        (Some(d), _) => d,
        (None, Some(s)) => service::duration("dead_timeout", s).map_err(at)?,
        (None, None) => DEFAULT_DEAD_TIMEOUT,
    };
    let rate = |flag: Option<f64>, key: &str, v: &Option<String>| -> Result<Option<f64>, String> {
        match (flag, v) {
            (Some(r), _) => Ok(Some(r)),
            (None, Some(s)) => service::bit_rate(key, s).map(Some).map_err(at),
            (None, None) => Ok(None),
        }
    };
    // keys given on the command line replace the file's
    let client_keys = if flags.client_keys.is_empty() {
        let mut out = Vec::new();
        for k in &file.keys {
            if k.roots.is_empty() {
                return Err(at(format!("keys: {} names no root", k.file.display())));
            }
            out.push((k.file.clone(), k.roots.clone()));
        }
        out
    } else {
        let mut out = Vec::new();
        for spec in &flags.client_keys {
            match spec.rsplit_once('=') {
                Some((f, r)) if !f.is_empty() && !r.is_empty() => out.push((
                    PathBuf::from(f),
                    r.split(',').map(|x| x.trim().to_string()).collect(),
                )),
                _ => return Err(format!("--client-key {spec:?}: give FILE=ROOT[,ROOT...]")),
            }
        }
        out
    };
    let state = service::state_dir("xfer");
    Ok(Settings {
        listen: flags
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("default address")),
        roots,
        key: flags.key.or(file.key).unwrap_or_else(|| state.join("xfer.key")),
        client_keys,
        max_transfers: flags
            .max_transfers
            .or(file.max_transfers)
            .unwrap_or(DEFAULT_MAX_TRANSFERS),
        dead_timeout,
        archive: flags
            .archive
            .or(file.archive)
            .unwrap_or_else(|| state.join("xfer.sqlite")),
        metrics: flags.metrics.or(file.metrics),
        max_rate: rate(flags.max_rate, "max_rate", &file.max_rate)?,
        total_rate: rate(flags.total_rate, "total_rate", &file.total_rate)?,
        peer_key: flags.peer_key.or(file.peer_key),
        relay_to: if flags.relay_to.is_empty() {
            let parsed: Result<Vec<Prefix>, _> = file.relay_to.iter().map(|s| s.parse::<Prefix>()).collect();
            AllowList(parsed.map_err(|e| at(format!("relay_to: {e}")))?)
        } else {
            AllowList(flags.relay_to)
        },
        verify_written: flags.verify_written || file.verify_written.unwrap_or(false),
        realtime: flags.realtime || file.realtime.unwrap_or(false),
    })
}

/// `--check-config`: the file read and checked as the daemon would, in one line.
pub fn check(path: &Path) -> Result<String, String> {
    // the roots' directories are looked for at start-up, on the host that serves them
    let s = settings(Some(path), Flags::default())?;
    Ok(format!(
        "{}: xfer serve on {}, {} root{}, {} transfers at once",
        path.display(),
        s.listen,
        s.roots.len(),
        if s.roots.len() == 1 { "" } else { "s" },
        s.max_transfers
    ))
}
