//! The experiment file of `xfer collect` (TOML):
//!
//! ```toml
//! experiment = "r41c"
//! dest = "/data/corr"              # scans land in DEST/r41c/<station>/<scan>.vdif (gather layout)
//! total_rate = "8Gbps"             # the correlator link, shared among the stations
//! scans = ["no0001", "no0002"]     # optional: else every scan named r41c_* the stations hold
//! # vex = "r41c.vex"               # optional: the scan names of its $SCHED section
//!
//! [[station]]
//! name = "ef"
//! daemon = "ef.example.org:46230/data/disks/*/*/data"   # DAEMON[:PORT]/ROOT/DISK-GLOB
//! weight = 2                       # default 1
//! rate_limit = "2Gbps"             # the station's path; default: none but the link
//! ```
//!
//! An entry of `scans` (or a VEX scan name) `E` is the station's scan named `E`, or
//! `<experiment>_<station>_<E>` (the usual `exp_st_scan` naming), compared without regard to case.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use vlbiflow_units::{parse_bit_rate, parse_bytes, parse_duration};

/// The experiment file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    experiment: String,
    dest: PathBuf,
    #[serde(default)]
    layout: Option<String>,
    total_rate: String,
    #[serde(default)]
    scans: Vec<String>,
    #[serde(default)]
    vex: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
    #[serde(default)]
    state: Option<PathBuf>,
    #[serde(default)]
    follow: bool,
    #[serde(default)]
    follow_timeout: Option<String>,
    #[serde(default)]
    follow_min_new: Option<String>,
    #[serde(default)]
    stall_timeout: Option<String>,
    #[serde(default)]
    backoff_max: Option<String>,
    #[serde(default)]
    give_up_after: Option<String>,
    #[serde(default)]
    chunk_size: Option<String>,
    #[serde(default)]
    block_size: Option<u32>,
    #[serde(default)]
    verify_written: bool,
    #[serde(rename = "station")]
    stations: Vec<StationFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StationFile {
    name: String,
    daemon: String,
    #[serde(default)]
    weight: Option<f64>,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    concurrency: Option<usize>,
}

/// A station to collect from.
#[derive(Debug, Clone)]
pub struct Station {
    /// Its name (the directory under `DEST/<experiment>/`, and `<st>` in `exp_st_scan`).
    pub name: String,
    /// The daemon's `HOST:PORT`.
    pub server: String,
    /// Its disks as `ROOT/relative/dir` patterns.
    pub disks: Vec<String>,
    pub weight: f64,
    /// The station's path, bits/s.
    pub rate_limit_bps: Option<f64>,
    /// Pulls from it at once.
    pub concurrency: usize,
}

/// An experiment to collect, checked.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub experiment: String,
    /// Destination root: scans land in `dest/<experiment>/<station>/`.
    pub dest: PathBuf,
    /// The correlator link, bits/s.
    pub total_bps: f64,
    /// Expected scans (names or `exp_st_` suffixes); empty: every scan named `<experiment>_*`.
    pub scans: Vec<String>,
    /// Key file (`None`: the client's default).
    pub key: Option<PathBuf>,
    /// The SQLite archive of what arrived (default `dest/<experiment>/.collect.sqlite`).
    pub state: PathBuf,
    /// Follow scans still being recorded.
    pub follow: bool,
    /// `--follow`: give up on a scan that neither grows nor completes for this long.
    pub follow_timeout: Duration,
    /// `--follow`: bytes new on disk before a partial round.
    pub follow_min_new: u64,
    /// A pull with no progress for this long is stalled.
    pub stall_timeout: Duration,
    /// Back-offs double up to this.
    pub backoff_max: Duration,
    /// A station that fails for this long without any progress is given up.
    pub give_up_after: Duration,
    pub chunk_size: u64,
    pub block_size: u32,
    pub verify_written: bool,
    pub stations: Vec<Station>,
}

fn dur(v: &Option<String>, default: Duration, what: &str) -> Result<Duration, String> {
    v.as_deref()
        .map_or(Ok(default), parse_duration)
        .map_err(|e| format!("{what}: {e}"))
}

impl CollectConfig {
    /// Reads and checks an experiment file; a relative `dest`, `vex`, `key` or `state` is taken relative
    /// to the file's directory.
    pub fn load(path: &Path) -> Result<CollectConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses an experiment file's text; relative paths are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<CollectConfig, String> {
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        if f.experiment.is_empty() || f.experiment.contains(['/', '\\', '\0', '*', '?']) {
            return Err(format!(
                "experiment {:?}: a plain code such as r41c",
                f.experiment
            ));
        }
        if let Some(l) = &f.layout {
            if l != "gather" {
                return Err(format!(
                    "layout {l:?}: collect gathers each scan (layout = \"gather\")"
                ));
            }
        }
        let total_bps = parse_bit_rate(&f.total_rate).map_err(|e| format!("total_rate: {e}"))?;
        let rel = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let dest = rel(&f.dest);
        let mut scans = f.scans.clone();
        if let Some(v) = &f.vex {
            let p = rel(v);
            let text = std::fs::read_to_string(&p).map_err(|e| format!("vex {}: {e}", p.display()))?;
            let names = vex_scan_names(&text);
            if names.is_empty() {
                return Err(format!("vex {}: no scans in its $SCHED section", p.display()));
            }
            scans.extend(names);
        }
        for s in &scans {
            if s.is_empty() || s.contains(['/', '\\', '\0']) {
                return Err(format!("scan {s:?}: a scan name"));
            }
        }
        if f.stations.is_empty() {
            return Err("no [[station]]".into());
        }
        let mut stations = Vec::new();
        for s in &f.stations {
            if s.name.is_empty() || s.name.contains(['/', '\\', '\0']) || s.name == "." || s.name == ".." {
                return Err(format!("station name {:?}: one directory name", s.name));
            }
            if stations.iter().any(|o: &Station| o.name == s.name) {
                return Err(format!("station {:?} appears twice", s.name));
            }
            let (server, disk) = vlbiflow_xfer::remote::split(&s.daemon)
                .map_err(|e| format!("station {}: daemon: {e}", s.name))?;
            let weight = s.weight.unwrap_or(1.0);
            if !(weight.is_finite() && weight > 0.0) {
                return Err(format!("station {}: weight {weight}: positive", s.name));
            }
            let rate_limit_bps = s
                .rate_limit
                .as_deref()
                .map(parse_bit_rate)
                .transpose()
                .map_err(|e| format!("station {}: rate_limit: {e}", s.name))?;
            stations.push(Station {
                name: s.name.clone(),
                server,
                disks: vec![disk],
                weight,
                rate_limit_bps,
                concurrency: s.concurrency.unwrap_or(1).max(1),
            });
        }
        let chunk_size = f
            .chunk_size
            .as_deref()
            .map_or(Ok(32 << 20), parse_bytes)
            .map_err(|e| format!("chunk_size: {e}"))?;
        if !chunk_size.is_power_of_two() || !(4096..=1 << 30).contains(&chunk_size) {
            return Err(format!(
                "chunk_size {chunk_size}: a power of two from 4KiB to 1GiB"
            ));
        }
        let state = f
            .state
            .as_deref()
            .map(rel)
            .unwrap_or_else(|| dest.join(&f.experiment).join(".collect.sqlite"));
        Ok(CollectConfig {
            experiment: f.experiment.clone(),
            dest,
            total_bps,
            scans,
            key: f.key.as_deref().map(rel),
            state,
            follow: f.follow,
            follow_timeout: dur(&f.follow_timeout, Duration::from_secs(60), "follow_timeout")?,
            follow_min_new: f
                .follow_min_new
                .as_deref()
                .map_or(Ok(256 << 20), parse_bytes)
                .map_err(|e| format!("follow_min_new: {e}"))?,
            stall_timeout: dur(&f.stall_timeout, Duration::from_secs(60), "stall_timeout")?,
            backoff_max: dur(&f.backoff_max, Duration::from_secs(60), "backoff_max")?,
            give_up_after: dur(&f.give_up_after, Duration::from_secs(6 * 3600), "give_up_after")?,
            chunk_size,
            block_size: f.block_size.unwrap_or(8192),
            verify_written: f.verify_written,
            stations,
        })
    }

    /// Where a station's scans land.
    pub fn station_dir(&self, station: &str) -> PathBuf {
        self.dest.join(&self.experiment).join(station)
    }

    /// Whether the station's scan `name` is one of the expected ones (every `<experiment>_*` scan when no
    /// list was given); the list entry it matches.
    pub fn expected_entry(&self, station: &str, name: &str) -> Option<String> {
        let lower = name.to_ascii_lowercase();
        if self.scans.is_empty() {
            let prefix = format!("{}_", self.experiment.to_ascii_lowercase());
            return lower.starts_with(&prefix).then(|| name.to_string());
        }
        self.scans
            .iter()
            .find(|e| {
                let e = e.to_ascii_lowercase();
                lower == e
                    || lower
                        == format!(
                            "{}_{}_{e}",
                            self.experiment.to_ascii_lowercase(),
                            station.to_ascii_lowercase()
                        )
            })
            .cloned()
    }

    /// The `ls` pattern for a station's scans of the experiment.
    pub fn pattern(&self) -> String {
        // names are compared without regard to case afterwards; the pattern only narrows the listing
        "*".to_string()
    }
}

/// The scan names of a VEX file's `$SCHED` section (`scan NAME;` ... `endscan;`), in order.
pub fn vex_scan_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sched = false;
    // VEX statements end with ';'; comments start with '*'
    for line in text.lines() {
        let line = line.split('*').next().unwrap_or("").trim();
        for stmt in line.split(';') {
            let stmt = stmt.trim();
            if stmt.is_empty() {
                continue;
            }
            if let Some(block) = stmt.strip_prefix('$') {
                in_sched = block.trim().eq_ignore_ascii_case("SCHED");
                continue;
            }
            if !in_sched {
                continue;
            }
            let mut words = stmt.split_whitespace();
            if words.next().is_some_and(|w| w.eq_ignore_ascii_case("scan")) {
                if let Some(name) = words.next() {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
experiment = "r41c"
dest = "out"
total_rate = "2Gbps"
scans = ["no0001"]

[[station]]
name = "ef"
daemon = "127.0.0.1:46230/data/disks/*"
weight = 2
rate_limit = "1Gbps"

[[station]]
name = "wb"
daemon = "wb.example.org/data/d*"
"#;

    #[test]
    fn an_experiment_file_is_read_and_checked() {
        let c = CollectConfig::parse(TOML, Path::new("/etc/exp")).unwrap();
        assert_eq!(c.dest, Path::new("/etc/exp/out"));
        assert_eq!(c.total_bps, 2e9);
        assert_eq!(c.stations[0].server, "127.0.0.1:46230");
        assert_eq!(c.stations[0].disks, vec!["data/disks/*".to_string()]);
        assert_eq!(c.stations[0].rate_limit_bps, Some(1e9));
        assert_eq!(c.stations[1].server, "wb.example.org:46230");
        assert_eq!(c.stations[1].weight, 1.0);
        assert_eq!(c.state, Path::new("/etc/exp/out/r41c/.collect.sqlite"));
        assert_eq!(c.station_dir("ef"), Path::new("/etc/exp/out/r41c/ef"));
        assert_eq!(
            c.expected_entry("ef", "R41C_EF_No0001").as_deref(),
            Some("no0001")
        );
        assert_eq!(c.expected_entry("ef", "no0001").as_deref(), Some("no0001"));
        assert_eq!(c.expected_entry("ef", "r41c_ef_no0002"), None);
        for bad in [
            TOML.replace("\"gather\"", "x")
                .replace("dest = \"out\"", "dest = \"out\"\nlayout = \"same\""),
            TOML.replace("weight = 2", "weight = -1"),
            TOML.replace("name = \"wb\"", "name = \"ef\""),
            TOML.replace("total_rate = \"2Gbps\"", "total_rate = \"fast\""),
            TOML.replace("scans = [\"no0001\"]", "scanz = []"),
        ] {
            assert!(CollectConfig::parse(&bad, Path::new("/")).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_scan_of_the_experiment_without_a_list() {
        let t = TOML.replace("scans = [\"no0001\"]", "");
        let c = CollectConfig::parse(&t, Path::new("/")).unwrap();
        assert!(c.expected_entry("ef", "r41c_ef_no0007").is_some());
        assert!(c.expected_entry("ef", "r41d_ef_no0007").is_none());
    }

    #[test]
    fn vex_sched_scan_names() {
        let vex = "VEX_rev = 1.5;\n$EXPER;\n def r41c; exper_name = r41c; enddef;\n$SCHED;\n* a comment\nscan No0001;\n  start = 2026y333d06h00m00s; mode = m; source = 3C84;\n  station = Ef : 0 sec : 60 sec : : : &cable : 1;\nendscan;\nscan No0002; start=2026y333d06h02m00s;\nendscan;\n$SOURCE;\n def 3C84; enddef;\n";
        assert_eq!(vex_scan_names(vex), vec!["No0001", "No0002"]);
    }
}
