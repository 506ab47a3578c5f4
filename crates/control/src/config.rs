//! The daemon's TOML configuration: listening addresses, access token, disk groups, streams committed at
//! start-up and the recorder engine's knobs. See `docs/vlbiflow.example.toml` for a commented example.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use vlbiflow_recorder::{RecorderConfig, StreamSpec};
use vlbiflow_scan::ScanFormat;

/// Default command port (Mark6 c-plane's).
pub const DEFAULT_CONTROL: &str = "127.0.0.1:14242";
/// Default HTTP port (status, metrics, dashboard).
pub const DEFAULT_HTTP: &str = "127.0.0.1:14280";

/// A configuration error, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Name shown in status (default: the host name).
    pub name: Option<String>,
    /// Command port address (default 127.0.0.1:14242).
    pub control: Option<String>,
    /// HTTP address (default 127.0.0.1:14280).
    pub http: Option<String>,
    /// Access token; required when either address is not loopback.
    pub token: Option<String>,
    /// Read-only token for `GET /metrics` (`Authorization: Bearer ...`); grants nothing else.
    pub metrics_token: Option<String>,
    /// Most simultaneous command connections (default 64); more are refused with a reply.
    pub max_connections: Option<usize>,
    /// A command connection silent this long is closed (`600s`, `10m`; default 10 minutes). A bare
    /// number of seconds is still read, with a warning.
    pub idle_timeout: Option<Seconds>,
    /// How long a command connection has to send `auth=<token>` when a token is required (`2s`;
    /// default 2 s). A bare number of seconds is still read, with a warning.
    pub auth_timeout: Option<Seconds>,
    /// Require the token on loopback addresses too (default false: only beyond loopback).
    pub require_token: Option<bool>,
    /// Address blocks (`ADDR[/PREFIX]`) whose command connections need no token: peers that cannot
    /// send one, such as the NASA Field System on the jive5ab dialect. Others still need it.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Group opened at start-up.
    pub open_group: Option<String>,
    /// Disk groups: name -> directories or globs, e.g. `mod1 = ["/mnt/disks/1/*/data"]`.
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
    /// Streams committed at start-up, in `vlbiflow record --stream` form.
    #[serde(default)]
    pub streams: Vec<String>,
    /// Source addresses (`ADDR[/PREFIX]`) that streams added with `input_stream=add` accept; datagrams
    /// from others are dropped and counted as wrong_source. Empty: any source.
    #[serde(default)]
    pub from: Vec<String>,
    /// Default experiment and station names for `record=on` without them.
    pub experiment: Option<String>,
    pub station: Option<String>,
    #[serde(default)]
    pub recorder: RecorderSection,
    /// Forwarding destinations (real-time e-VLBI), in `vlbiflow record --forward` form, e.g.
    /// `["jive=udps@10.0.0.2:46227,rate=2.1Gbps"]`; taken by every recording.
    #[serde(default)]
    pub forward: Vec<String>,
    /// Frames flow to the destinations from start-up (default false: `in2net=on` or `forward=on`).
    pub forward_on: Option<bool>,
    /// Command dialect: "mark6" (default) or "jive5ab".
    pub dialect: Option<String>,
}

impl ConfigFile {
    /// Reads and parses a file (not yet checked: see [`DaemonConfig::from_file`]).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim().to_string(),
        })
    }
}

/// `[recorder]`: engine knobs, as `vlbiflow record` has them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecorderSection {
    /// "mark6" (default) or "flexbuff".
    pub format: Option<String>,
    /// Nominal block size (`10MB`, or a number of bytes; default 10000000).
    pub block_size: Option<Bytes>,
    /// Socket receive buffer per stream (`256MiB`, or a number of bytes).
    pub recv_buffer: Option<Bytes>,
    /// Block buffers in the pool.
    pub pool_blocks: Option<usize>,
    pub capture_threads: Option<usize>,
    /// Try O_DIRECT (default true).
    pub direct_io: Option<bool>,
    /// Metadata refresh while recording (`1s`, `500ms`); a bare number of seconds is still read, with a
    /// warning.
    pub metadata_interval: Option<Seconds>,
}

/// A duration in the command line's syntax (`10s`, `500ms`, `5m`), or (until the next release) a bare
/// number of seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Seconds {
    /// Bare seconds, the former form.
    Number(f64),
    /// `10s`, `5m`.
    Text(String),
}

impl Seconds {
    /// The value in seconds; the former form warns, naming the key and the new form.
    pub fn seconds(&self, key: &str) -> Result<f64, ConfigError> {
        match self {
            Seconds::Number(v) => {
                tracing::warn!(
                    target: "vlbiflow::config",
                    key,
                    "a bare number of seconds is deprecated and will not be read by the next release: write {key} = \"{v}s\""
                );
                Ok(*v)
            }
            Seconds::Text(t) => vlbiflow_units::parse_seconds(t).map_err(|e| invalid(key, e)),
        }
    }
}

/// A size in the command line's syntax (`256MiB`, `10MB`) or a number of bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Bytes {
    /// A number of bytes.
    Number(u64),
    /// `256MiB`.
    Text(String),
}

impl Bytes {
    /// The value in bytes.
    pub fn bytes(&self, key: &str) -> Result<u64, ConfigError> {
        match self {
            Bytes::Number(v) => Ok(*v),
            Bytes::Text(t) => vlbiflow_units::parse_bytes(t).map_err(|e| invalid(key, e)),
        }
    }
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub name: String,
    pub control: SocketAddr,
    pub http: SocketAddr,
    pub token: Option<String>,
    /// Read-only token for `GET /metrics`; grants nothing else.
    pub metrics_token: Option<String>,
    pub max_connections: usize,
    pub idle_timeout: Duration,
    /// Time to send `auth=<token>` when a token is required; the connection is closed after it.
    pub auth_timeout: Duration,
    /// The token is required on loopback addresses too.
    pub require_token: bool,
    /// Command connections from these address blocks need no token ([`ConfigFile::allow`]).
    pub allow: vlbiflow_guard::net::AllowList,
    pub open_group: Option<String>,
    pub groups: BTreeMap<String, Vec<String>>,
    pub streams: Vec<StreamSpec>,
    /// Sources that streams added with `input_stream=add` accept (`from` in the file); empty: any.
    pub from: vlbiflow_guard::net::AllowList,
    pub experiment: Option<String>,
    pub station: Option<String>,
    /// Engine settings; streams, disks and scan are filled in per recording.
    pub recorder: RecorderConfig,
    /// Forwarding destinations at start-up.
    pub forward: Vec<vlbiflow_evlbi::DestSpec>,
    /// Forwarding on at start-up.
    pub forward_enabled: bool,
    /// The command port's dialect.
    pub dialect: Dialect,
}

/// The command dialect of the daemon's command port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// The Mark6 c-plane dialect (`docs/control.md`).
    #[default]
    Mark6,
    /// jive5ab's FlexBuff dialect, as the Field System speaks it (`docs/jive5ab-dialect.md`).
    Jive5ab,
}

impl std::str::FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mark6" => Ok(Dialect::Mark6),
            "jive5ab" => Ok(Dialect::Jive5ab),
            other => Err(format!("{other:?} is not mark6 or jive5ab")),
        }
    }
}

impl DaemonConfig {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Invalid { field, reason } => ConfigError::Parse {
                path: path.to_owned(),
                message: format!("{field}: {reason}"),
            },
            e => e,
        })
    }

    /// Parses and checks configuration text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| invalid("toml", e.to_string().trim()))?;
        Self::from_file(file)
    }

    /// Checks a parsed file.
    pub fn from_file(f: ConfigFile) -> Result<Self, ConfigError> {
        let addr = |field: &str, v: Option<&str>, default: &str| -> Result<SocketAddr, ConfigError> {
            let v = v.unwrap_or(default);
            v.parse()
                .map_err(|_| invalid(field, format!("{v:?} is not IP:PORT")))
        };
        let control = addr("control", f.control.as_deref(), DEFAULT_CONTROL)?;
        let http = addr("http", f.http.as_deref(), DEFAULT_HTTP)?;
        if let Some(t) = &f.token {
            if t.len() < 8 || !t.bytes().all(|c| c.is_ascii_graphic() && c != b';' && c != b':') {
                return Err(invalid(
                    "token",
                    "must be at least 8 printable characters without ';' or ':'",
                ));
            }
        }
        if let Some(t) = &f.metrics_token {
            if t.len() < 16 || !t.bytes().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(
                    "metrics_token",
                    "must be at least 16 printable characters",
                ));
            }
            if f.token.as_deref() == Some(t.as_str()) {
                return Err(invalid(
                    "metrics_token",
                    "must differ from the access token (it grants reading the metrics only)",
                ));
            }
        }
        for (name, globs) in &f.groups {
            check_group_name(name).map_err(|r| invalid(format!("groups.{name}"), r))?;
            if globs.is_empty() {
                return Err(invalid(format!("groups.{name}"), "lists no directory"));
            }
            for g in globs {
                glob::Pattern::new(g)
                    .map_err(|e| invalid(format!("groups.{name}"), format!("{g:?}: {e}")))?;
            }
        }
        if let Some(g) = &f.open_group {
            if !f.groups.contains_key(g) {
                return Err(invalid("open_group", format!("{g:?} is not in [groups]")));
            }
        }
        let mut from = vlbiflow_guard::net::AllowList::default();
        for s in &f.from {
            from.0
                .push(s.parse().map_err(|e| invalid("from", format!("{s:?}: {e}")))?);
        }
        let mut streams = Vec::new();
        for s in &f.streams {
            streams.push(StreamSpec::parse(s).map_err(|e| invalid("streams", e.to_string()))?);
        }
        for (field, v) in [("experiment", &f.experiment), ("station", &f.station)] {
            if let Some(v) = v {
                vlbiflow_formats::names::validate_scan_name(v)
                    .map_err(|e| invalid(field, format!("{v:?}: {e}")))?;
            }
        }
        let r = &f.recorder;
        let mut rc = RecorderConfig::new(Vec::new(), Vec::new(), "");
        rc.format = match r.format.as_deref().unwrap_or("mark6") {
            "mark6" => ScanFormat::Mark6,
            "flexbuff" => ScanFormat::Flexbuff,
            other => {
                return Err(invalid(
                    "recorder.format",
                    format!("{other:?} is not mark6 or flexbuff"),
                ))
            }
        };
        if let Some(b) = &r.block_size {
            rc.block_size = b.bytes("recorder.block_size")?;
        }
        if let Some(b) = &r.recv_buffer {
            rc.recv_buffer = usize::try_from(b.bytes("recorder.recv_buffer")?)
                .map_err(|_| invalid("recorder.recv_buffer", "too large"))?;
        }
        rc.pool_blocks = r.pool_blocks;
        if let Some(n) = r.capture_threads {
            rc.capture_threads = n;
        }
        if let Some(d) = r.direct_io {
            rc.direct_io = d;
        }
        if let Some(s) = &r.metadata_interval {
            let s = s.seconds("recorder.metadata_interval")?;
            if !(0.1..=3600.0).contains(&s) {
                return Err(invalid(
                    "recorder.metadata_interval",
                    "must be 0.1 to 3600 seconds",
                ));
            }
            rc.metadata_interval = Duration::from_secs_f64(s);
        }
        let idle = match &f.idle_timeout {
            Some(s) => s.seconds("idle_timeout")?,
            None => 600.0,
        };
        if !(0.1..=86400.0).contains(&idle) {
            return Err(invalid("idle_timeout", "must be 0.1 to 86400 seconds"));
        }
        let auth_timeout = match &f.auth_timeout {
            Some(s) => s.seconds("auth_timeout")?,
            None => 2.0,
        };
        if !(0.1..=60.0).contains(&auth_timeout) {
            return Err(invalid("auth_timeout", "must be 0.1 to 60 seconds"));
        }
        let max_connections = f.max_connections.unwrap_or(64);
        if max_connections == 0 || max_connections > 4096 {
            return Err(invalid("max_connections", "must be 1 to 4096"));
        }
        let mut forward: Vec<vlbiflow_evlbi::DestSpec> = Vec::new();
        for s in &f.forward {
            let d = vlbiflow_evlbi::DestSpec::parse(s).map_err(|e| invalid("forward", e.to_string()))?;
            if forward.iter().any(|o| o.label == d.label) {
                return Err(invalid("forward", format!("label {:?} is used twice", d.label)));
            }
            forward.push(d);
        }
        let dialect = match f.dialect.as_deref() {
            None => Dialect::Mark6,
            Some(d) => d.parse().map_err(|e: String| invalid("dialect", e))?,
        };
        let allow = f
            .allow
            .iter()
            .map(|a| {
                a.parse()
                    .map_err(|e: vlbiflow_guard::net::PrefixError| invalid("allow", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = DaemonConfig {
            allow: vlbiflow_guard::net::AllowList(allow),
            dialect,
            name: f.name.unwrap_or_else(host_name),
            control,
            http,
            token: f.token,
            metrics_token: f.metrics_token,
            max_connections,
            idle_timeout: Duration::from_secs_f64(idle),
            auth_timeout: Duration::from_secs_f64(auth_timeout),
            require_token: f.require_token.unwrap_or(false),
            open_group: f.open_group,
            groups: f.groups,
            streams,
            from,
            experiment: f.experiment,
            station: f.station,
            recorder: rc,
            forward,
            forward_enabled: f.forward_on.unwrap_or(false),
        };
        cfg.check_token()?;
        Ok(cfg)
    }

    /// Refuses to listen beyond loopback without a token, and to require one that is not set.
    pub fn check_token(&self) -> Result<(), ConfigError> {
        if self.require_token && self.token.is_none() {
            return Err(invalid(
                "require_token",
                "a token is required on loopback too, but none is set (--token-file or VLBIFLOW_TOKEN)",
            ));
        }
        for (field, a) in [("control", self.control), ("http", self.http)] {
            if !a.ip().is_loopback() && self.token.is_none() {
                return Err(invalid(
                    field,
                    format!("{a} is not a loopback address: set a token (config `token = ...`, --token-file or VLBIFLOW_TOKEN)"),
                ));
            }
        }
        Ok(())
    }

    /// Every directory of a group: globs expanded (sorted), plain paths as given.
    pub fn group_disks(&self, group: &str) -> Vec<PathBuf> {
        self.groups.get(group).map(|g| expand(g)).unwrap_or_default()
    }

    /// Every directory of every group, without repeats (where the scan list is looked for).
    pub fn all_disks(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for g in self.groups.keys() {
            for d in self.group_disks(g) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }
}

/// Group names: like scan names (they appear in replies and file paths), at most 32 bytes.
pub fn check_group_name(name: &str) -> Result<(), String> {
    if name.len() > 32 {
        return Err("group name longer than 32 bytes".into());
    }
    vlbiflow_formats::names::validate_scan_name(name).map_err(|e| e.to_string())
}

/// Expands directory patterns: globs to their sorted matching directories, plain paths as given (a
/// module that is not mounted still counts as a nominal disk that was not found).
pub fn expand(patterns: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in patterns {
        if vlbiflow_scan::is_glob(p) {
            out.extend(vlbiflow_scan::expand_disk_pattern(p).unwrap_or_default());
        } else {
            out.push(PathBuf::from(p));
        }
    }
    out
}

fn host_name() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().into_owned();
    if name.is_empty() {
        "vlbiflow".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loopback_without_token() {
        let c = DaemonConfig::from_toml("").unwrap();
        assert_eq!(c.control.to_string(), DEFAULT_CONTROL);
        assert_eq!(c.http.to_string(), DEFAULT_HTTP);
        assert_eq!(c.max_connections, 64);
        assert!(c.token.is_none());
    }

    #[test]
    fn full_file_parses() {
        let c = DaemonConfig::from_toml(
            r#"
            control = "0.0.0.0:14242"
            token = "s3cret-token"
            open_group = "g1"
            streams = ["a=vdif@127.0.0.1:4001,psn"]
            station = "Xx"
            [groups]
            g1 = ["/tmp/a", "/tmp/b"]
            [recorder]
            format = "flexbuff"
            block_size = 1000000
            "#,
        )
        .unwrap();
        let c2 = DaemonConfig::from_toml(
            "idle_timeout = \"5m\"\n[recorder]\nblock_size = \"8MiB\"\nrecv_buffer = \"256MiB\"\nmetadata_interval = \"500ms\"",
        )
        .unwrap();
        assert_eq!(c2.idle_timeout, Duration::from_secs(300));
        assert_eq!(c2.recorder.block_size, 8 << 20);
        assert_eq!(c2.recorder.recv_buffer, 256 << 20);
        assert_eq!(c2.recorder.metadata_interval, Duration::from_millis(500));
        // the former bare seconds still parse (with a warning)
        let c3 = DaemonConfig::from_toml("idle_timeout = 30\n[recorder]\nmetadata_interval = 2.5").unwrap();
        assert_eq!(c3.idle_timeout, Duration::from_secs(30));
        assert_eq!(c3.recorder.metadata_interval, Duration::from_millis(2500));
        assert_eq!(
            c.group_disks("g1"),
            vec![PathBuf::from("/tmp/a"), PathBuf::from("/tmp/b")]
        );
        assert_eq!(c.streams[0].label, "a");
        assert_eq!(c.recorder.format, ScanFormat::Flexbuff);
        assert_eq!(c.recorder.block_size, 1_000_000);
    }

    #[test]
    fn errors_name_the_field() {
        for (text, field) in [
            ("control = \"0.0.0.0:1\"", "token"),
            ("control = \"nowhere\"", "control"),
            ("bogus = 1", "bogus"),
            ("open_group = \"x\"", "open_group"),
            ("streams = [\"a=udp@1.2.3.4:5\"]", "streams"),
            ("[groups]\n\"../x\" = [\"/tmp\"]", "groups"),
            ("[recorder]\nformat = \"tar\"", "recorder.format"),
            ("token = \"short\"", "token"),
            ("station = \"a/b\"", "station"),
        ] {
            let e = DaemonConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        // VDIF thread IDs are 10 bits.
        let e = DaemonConfig::from_toml("streams = [\"a=vdif@127.0.0.1:4001,threads=0,1024\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("streams") && e.contains("1024"), "{e}");
    }
}
