//! The mesh configuration: one TOML file naming the hosts, the shared links that tests may not load
//! together, the scheduled tests with their parameters, the thresholds of the dashboard and the alert
//! rules. Parsed and checked here; every error names the entry and field at fault.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};

use crate::timespec::{parse_duration, Cron, Ms};

/// What can be wrong with a configuration.
#[derive(Debug, thiserror::Error)]
#[error("mesh configuration{}: {msg}", .source_name.as_deref().map(|s| format!(" {s}")).unwrap_or_default())]
pub struct ConfigError {
    /// The file, if known.
    pub source_name: Option<String>,
    /// What and where.
    pub msg: String,
}

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError {
        source_name: None,
        msg: msg.into(),
    }
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    mesh: RawMesh,
    #[serde(default, rename = "host")]
    hosts: Vec<Host>,
    #[serde(default, rename = "link")]
    links: Vec<RawLink>,
    #[serde(default, rename = "test")]
    tests: Vec<RawTest>,
    #[serde(default, rename = "threshold")]
    thresholds: Vec<Threshold>,
    #[serde(default, rename = "alert")]
    alerts: Vec<RawAlert>,
    #[serde(default)]
    passive: Option<RawPassive>,
    #[serde(default)]
    webhook: Option<Webhook>,
    /// The hub's own settings (`vlbiflow net hub`: listen, archive); read by the CLI, not here.
    #[serde(default, rename = "hub")]
    _hub: Option<toml::Table>,
    /// An agent's own settings (`vlbiflow net agent`); read by the CLI, not here.
    #[serde(default, rename = "agent")]
    _agent: Option<toml::Table>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMesh {
    name: Option<String>,
    seed: Option<u64>,
    guard: Option<String>,
    retention: Option<String>,
    grace: Option<String>,
    stale_after: Option<f64>,
}

/// A host running an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Short unique name (used in pairs, run ids and the dashboard).
    pub name: String,
    /// Address other agents test against (IP or host name, no port).
    pub address: String,
    /// Site (station, correlator); hosts of one site share the site's links.
    #[serde(default)]
    pub site: Option<String>,
    /// The responder's control port.
    #[serde(default = "default_port")]
    pub port: u16,
}

fn default_port() -> u16 {
    vlbiflow_net::DEFAULT_PORT
}

/// Which traffic of a link's hosts crosses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Traffic leaving the hosts.
    Out,
    /// Traffic arriving at the hosts.
    In,
    /// Both.
    Both,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    name: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    sites: Vec<String>,
    #[serde(default)]
    direction: Option<Direction>,
}

/// A shared link: the hosts behind it and which direction of their traffic it carries. A test from
/// `src` to `dst` uses the link when its traffic crosses the link's boundary in a direction it carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Name (a station uplink, the correlator ingress).
    pub name: String,
    /// Indexes of the hosts behind the link.
    pub hosts: BTreeSet<usize>,
    /// Direction carried.
    pub direction: Direction,
}

impl Link {
    /// True when a test from host `src` to host `dst` loads this link.
    pub fn used_by(&self, src: usize, dst: usize) -> bool {
        let (s, d) = (self.hosts.contains(&src), self.hosts.contains(&dst));
        let out = s && !d && matches!(self.direction, Direction::Out | Direction::Both);
        let inn = d && !s && matches!(self.direction, Direction::In | Direction::Both);
        out || inn
    }
}

/// The kind of a scheduled test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// UDPmon-style throughput sweep (sizes x spacings or one offered rate).
    Sweep,
    /// RFC 2544 search for the highest loss-free rate.
    ZeroLoss,
    /// Request-response latency.
    Latency,
    /// Memory-to-memory TCP throughput.
    Tcp,
    /// Bottleneck capacity by packet dispersion.
    Capacity,
}

impl Kind {
    /// The name as in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sweep => "sweep",
            Kind::ZeroLoss => "zero-loss",
            Kind::Latency => "latency",
            Kind::Tcp => "tcp",
            Kind::Capacity => "capacity",
        }
    }

    /// Whether tests of this kind load the path (and so run exclusively) unless configured otherwise.
    pub fn exclusive_by_default(self) -> bool {
        !matches!(self, Kind::Latency)
    }

    /// Time allowed per run unless configured.
    pub fn default_slot(self) -> Ms {
        match self {
            Kind::Sweep => 20_000,
            Kind::ZeroLoss => 60_000,
            Kind::Latency => 10_000,
            Kind::Tcp => 20_000,
            Kind::Capacity => 20_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    name: String,
    kind: Kind,
    interval: Option<String>,
    cron: Option<String>,
    slot: Option<String>,
    slip: Option<String>,
    exclusive: Option<bool>,
    #[serde(default)]
    pairs: Vec<String>,
    #[serde(flatten)]
    params: Params,
}

/// Parameters of a test; which apply depends on its kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// sweep, zero-loss, capacity: frame sizes (UDP payload bytes).
    pub sizes: Option<Vec<usize>>,
    /// sweep: offered UDP payload rates, e.g. ["200Mbps", "1Gbps"] (one test each).
    pub rates: Option<Vec<String>>,
    /// sweep: spacings between frames, µs (one test each), instead of rates.
    pub waits: Option<Vec<f64>>,
    /// sweep: frames per test; capacity: packet pairs.
    pub count: Option<u64>,
    /// zero-loss: length of each trial (ISO-8601).
    pub trial: Option<String>,
    /// zero-loss: upper end of the search.
    pub max_rate: Option<String>,
    /// zero-loss: resolution as a fraction of the upper end.
    pub resolution: Option<f64>,
    /// latency: requests per size.
    pub requests: Option<u64>,
    /// tcp: parallel streams.
    pub streams: Option<u32>,
    /// tcp: sending time (ISO-8601).
    pub duration: Option<String>,
    /// capacity: the longest train, packets.
    pub train: Option<usize>,
}

/// When a test repeats.
#[derive(Debug, Clone, PartialEq)]
pub enum Repeat {
    /// Every this many ms, cycles aligned to multiples of it since the epoch.
    Every(Ms),
    /// At the firing times of a cron expression (UTC).
    Cron(Cron),
}

impl Repeat {
    /// The start of the cycle containing `t` (at or before it) and the start of the next one.
    pub fn cycle_at(&self, t: Ms) -> Option<(Ms, Ms)> {
        match self {
            Repeat::Every(i) => {
                let s = t.div_euclid(*i) * i;
                Some((s, s + i))
            }
            Repeat::Cron(c) => {
                let s = c.prev_at_or_before(t)?;
                Some((s, c.next_after(s)?))
            }
        }
    }

    /// The start of the first cycle starting after `t` and the start of the one after it.
    pub fn next_cycle(&self, t: Ms) -> Option<(Ms, Ms)> {
        match self {
            Repeat::Every(i) => {
                let s = (t.div_euclid(*i) + 1) * i;
                Some((s, s + i))
            }
            Repeat::Cron(c) => {
                let s = c.next_after(t)?;
                Some((s, c.next_after(s)?))
            }
        }
    }

    /// A description for people.
    pub fn describe(&self) -> String {
        match self {
            Repeat::Every(i) => format!("every {}", crate::timespec::format_duration(*i)),
            Repeat::Cron(c) => format!("cron {:?}", c.text()),
        }
    }

    /// The typical time between cycles (for staleness).
    pub fn typical_interval(&self) -> Ms {
        match self {
            Repeat::Every(i) => *i,
            Repeat::Cron(c) => {
                let a = c.next_after(0).unwrap_or(0);
                c.next_after(a).map(|b| b - a).unwrap_or(60_000)
            }
        }
    }
}

/// A scheduled test.
#[derive(Debug, Clone, PartialEq)]
pub struct Test {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: Kind,
    /// Repetition.
    pub repeat: Repeat,
    /// Time allowed per run, ms; a run still going at its end is stopped and fails as timed out.
    pub slot: Ms,
    /// Largest random delay of a cycle's start, ms (spreads load; clamped so the cycle still fits).
    pub slip: Ms,
    /// Whether runs hold their hosts and links exclusively.
    pub exclusive: bool,
    /// Directed pairs (source, destination host index) in configuration order.
    pub pairs: Vec<(usize, usize)>,
    /// Kind parameters.
    pub params: Params,
}

/// A colour threshold of the dashboard for one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// Metric name (throughput_mbps, loss_percent, rtt_ms, capacity_mbps).
    pub metric: String,
    /// At or beyond this the cell is a warning (yellow).
    pub warn: f64,
    /// At or beyond this the cell is bad (red).
    pub bad: f64,
}

impl Threshold {
    /// True when larger values are worse (warn < bad).
    pub fn higher_is_worse(&self) -> bool {
        self.bad > self.warn
    }

    /// "good", "warn" or "bad".
    pub fn classify(&self, v: f64) -> &'static str {
        let worse = |a: f64, b: f64| if self.higher_is_worse() { a >= b } else { a <= b };
        if worse(v, self.bad) {
            "bad"
        } else if worse(v, self.warn) {
            "warn"
        } else {
            "good"
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    name: String,
    metric: String,
    #[serde(default)]
    pairs: Vec<String>,
    below: Option<f64>,
    above: Option<f64>,
    clear: Option<f64>,
    after: Option<u32>,
    no_data: Option<String>,
}

/// An alert rule: a threshold on one metric for a group of pairs with raise/clear hysteresis, and
/// optionally a no-data alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertRule {
    /// Unique name.
    pub name: String,
    /// Metric name.
    pub metric: String,
    /// Pairs the rule watches.
    pub pairs: Vec<(usize, usize)>,
    /// Raise when the value is below (true) or above (false) `raise`.
    pub below: bool,
    /// The raising threshold.
    pub raise: f64,
    /// The clearing threshold (hysteresis: above `raise` for below-rules, below it otherwise).
    pub clear: f64,
    /// Consecutive results beyond the threshold needed to raise (and within the clearing one to clear).
    pub after: u32,
    /// Raise a no-data alert when no result came for this long, ms.
    pub no_data: Option<Ms>,
}

/// Passive counter sampling on every agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Passive {
    /// Sampling period, ms.
    pub interval: Ms,
    /// Interfaces to sample (empty: all but loopback).
    pub interfaces: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPassive {
    interval: String,
    #[serde(default)]
    interfaces: Vec<String>,
}

/// Where alert changes are POSTed as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// http:// or https:// URL.
    pub url: String,
    /// PEM file of the CA certificates trusted for an https:// URL instead of Mozilla's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<std::path::PathBuf>,
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Name of the mesh.
    pub name: String,
    /// Seed of the random slip and round order.
    pub seed: u64,
    /// Pause between consecutive exclusive slots, ms (covers clock offsets between agents).
    pub guard: Ms,
    /// How long results are kept, ms.
    pub retention: Ms,
    /// How long after a run's end the hub waits for its agent before recording it as lost, ms.
    pub grace: Ms,
    /// A cell is stale when its newest result is older than this many intervals.
    pub stale_after: f64,
    /// Hosts.
    pub hosts: Vec<Host>,
    /// Shared links.
    pub links: Vec<Link>,
    /// Tests, in priority order (earlier tests are planned first).
    pub tests: Vec<Test>,
    /// Dashboard thresholds.
    pub thresholds: Vec<Threshold>,
    /// Alert rules.
    pub alerts: Vec<AlertRule>,
    /// Passive counters.
    pub passive: Option<Passive>,
    /// Alert webhook.
    pub webhook: Option<Webhook>,
    /// The text it was parsed from.
    pub text: String,
    /// A hash of the text (agents compare it with the hub's).
    pub hash: String,
    /// Durations written in the former ISO-8601 form, each as `key = "PT2M"` with the form to write
    /// instead (the CLI logs them as warnings).
    pub warnings: Vec<String>,
}

impl Config {
    /// Parses and checks a configuration text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| bad(e.to_string().trim_end().to_string()))?;
        Config::check(raw, text)
    }

    /// The configuration the hub sends to agents: this one without the webhook (its URL is often a
    /// secret itself) and without the hub's and agents' own sections (an archive URL may hold a
    /// password). Its hash is what agents running it report.
    pub fn for_agents(&self) -> Result<Config, ConfigError> {
        let mut t: toml::Table = toml::from_str(&self.text).map_err(|e| bad(e.to_string()))?;
        for k in ["webhook", "hub", "agent"] {
            t.remove(k);
        }
        let text = toml::to_string(&t).map_err(|e| bad(e.to_string()))?;
        Config::parse(&text)
    }

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source_name: Some(path.display().to_string()),
            msg: format!("cannot read: {e}"),
        })?;
        Config::parse(&text).map_err(|mut e| {
            e.source_name = Some(path.display().to_string());
            e
        })
    }

    /// Index of a host by name.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// Index of a test by name.
    pub fn test_index(&self, name: &str) -> Option<usize> {
        self.tests.iter().position(|t| t.name == name)
    }

    /// The resources a run from `src` to `dst` holds: both hosts and every link it loads.
    pub fn resources(&self, src: usize, dst: usize) -> Vec<String> {
        let mut r = vec![
            format!("host:{}", self.hosts[src].name),
            format!("host:{}", self.hosts[dst].name),
        ];
        for l in &self.links {
            if l.used_by(src, dst) {
                r.push(format!("link:{}", l.name));
            }
        }
        r
    }

    /// The threshold for a metric, if any.
    pub fn threshold(&self, metric: &str) -> Option<&Threshold> {
        self.thresholds.iter().find(|t| t.metric == metric)
    }

    fn check(raw: RawConfig, text: &str) -> Result<Config, ConfigError> {
        let dur = |s: &Option<String>, what: &str, default: Ms| -> Result<Ms, ConfigError> {
            match s {
                None => Ok(default),
                Some(s) => parse_duration(s).map_err(|e| bad(format!("{what}: {e}"))),
            }
        };
        let m = &raw.mesh;
        if raw.hosts.len() < 2 {
            return Err(bad(format!(
                "at least two [[host]] entries are needed, found {}",
                raw.hosts.len()
            )));
        }
        let mut names = HashSet::new();
        for (i, h) in raw.hosts.iter().enumerate() {
            if !valid_name(&h.name) {
                return Err(bad(format!(
                    "host {} (entry {}): name must be 1-32 letters, digits, '-', '_' or '.'",
                    h.name,
                    i + 1
                )));
            }
            if !names.insert(h.name.clone()) {
                return Err(bad(format!("host {}: the name appears twice", h.name)));
            }
            if h.address.trim().is_empty() || h.address.contains(char::is_whitespace) {
                return Err(bad(format!(
                    "host {}: address {:?} is empty or has spaces",
                    h.name, h.address
                )));
            }
        }
        let host_idx = |name: &str, what: &str| {
            raw.hosts
                .iter()
                .position(|h| h.name == name)
                .ok_or_else(|| bad(format!("{what}: no host named {name:?}")))
        };
        let mut links = Vec::new();
        let mut link_names = HashSet::new();
        for l in &raw.links {
            let what = format!("link {}", l.name);
            if !valid_name(&l.name) || !link_names.insert(l.name.clone()) {
                return Err(bad(format!("{what}: name invalid or repeated")));
            }
            let mut hosts = BTreeSet::new();
            for h in &l.hosts {
                hosts.insert(host_idx(h, &what)?);
            }
            for s in &l.sites {
                let before = hosts.len();
                hosts.extend(
                    raw.hosts
                        .iter()
                        .enumerate()
                        .filter(|(_, h)| h.site.as_deref() == Some(s))
                        .map(|(i, _)| i),
                );
                if hosts.len() == before && !raw.hosts.iter().any(|h| h.site.as_deref() == Some(s)) {
                    return Err(bad(format!("{what}: no host has site {s:?}")));
                }
            }
            if hosts.is_empty() {
                return Err(bad(format!("{what}: names no hosts or sites")));
            }
            links.push(Link {
                name: l.name.clone(),
                hosts,
                direction: l.direction.unwrap_or(Direction::Both),
            });
        }
        let pair_list = |patterns: &[String], what: &str| -> Result<Vec<(usize, usize)>, ConfigError> {
            let pats: Vec<String> = if patterns.is_empty() {
                vec!["*->*".into()]
            } else {
                patterns.to_vec()
            };
            let mut out = Vec::new();
            for p in &pats {
                let (a, b) = p
                    .split_once("->")
                    .ok_or_else(|| bad(format!("{what}: pair pattern {p:?} is not SRC->DST")))?;
                let side = |x: &str| -> Result<Vec<usize>, ConfigError> {
                    let x = x.trim();
                    let v: Vec<usize> = raw
                        .hosts
                        .iter()
                        .enumerate()
                        .filter(|(_, h)| match x.strip_prefix("site:") {
                            Some(site) => h.site.as_deref() == Some(site),
                            None => x == "*" || h.name == x,
                        })
                        .map(|(i, _)| i)
                        .collect();
                    if v.is_empty() {
                        return Err(bad(format!("{what}: {x:?} in {p:?} matches no host")));
                    }
                    Ok(v)
                };
                for s in side(a)? {
                    for d in side(b)? {
                        if s != d && !out.contains(&(s, d)) {
                            out.push((s, d));
                        }
                    }
                }
            }
            Ok(out)
        };
        let mut tests = Vec::new();
        let mut test_names = HashSet::new();
        for t in &raw.tests {
            let what = format!("test {}", t.name);
            if !valid_name(&t.name) || !test_names.insert(t.name.clone()) {
                return Err(bad(format!(
                    "{what}: name invalid (1-32 letters, digits, -_.) or repeated"
                )));
            }
            let repeat = match (&t.interval, &t.cron) {
                (Some(i), None) => {
                    let ms = parse_duration(i).map_err(|e| bad(format!("{what}: interval: {e}")))?;
                    if ms < 1000 {
                        return Err(bad(format!("{what}: interval {i} is shorter than 1 s")));
                    }
                    Repeat::Every(ms)
                }
                (None, Some(c)) => Repeat::Cron(Cron::parse(c).map_err(|e| bad(format!("{what}: {e}")))?),
                _ => return Err(bad(format!("{what}: give exactly one of interval or cron"))),
            };
            let slot = dur(&t.slot, &format!("{what}: slot"), t.kind.default_slot())?;
            if slot < 100 {
                return Err(bad(format!("{what}: slot shorter than 0.1 s")));
            }
            let slip = dur(&t.slip, &format!("{what}: slip"), 0)?;
            check_params(t.kind, &t.params).map_err(|e| bad(format!("{what}: {e}")))?;
            tests.push(Test {
                name: t.name.clone(),
                kind: t.kind,
                repeat,
                slot,
                slip,
                exclusive: t.exclusive.unwrap_or(t.kind.exclusive_by_default()),
                pairs: pair_list(&t.pairs, &what)?,
                params: t.params.clone(),
            });
        }
        for th in &raw.thresholds {
            if !METRICS.contains(&th.metric.as_str()) {
                return Err(bad(format!(
                    "threshold: unknown metric {:?} (one of {})",
                    th.metric,
                    METRICS.join(", ")
                )));
            }
            if th.warn == th.bad || !th.warn.is_finite() || !th.bad.is_finite() {
                return Err(bad(format!("threshold {}: warn and bad must differ", th.metric)));
            }
        }
        let mut alerts = Vec::new();
        let mut alert_names = HashSet::new();
        for a in &raw.alerts {
            let what = format!("alert {}", a.name);
            if !valid_name(&a.name) || !alert_names.insert(a.name.clone()) {
                return Err(bad(format!("{what}: name invalid or repeated")));
            }
            if !METRICS.contains(&a.metric.as_str()) {
                return Err(bad(format!(
                    "{what}: unknown metric {:?} (one of {})",
                    a.metric,
                    METRICS.join(", ")
                )));
            }
            let (below, raise) = match (a.below, a.above) {
                (Some(v), None) => (true, v),
                (None, Some(v)) => (false, v),
                _ => return Err(bad(format!("{what}: give exactly one of below or above"))),
            };
            let clear = a.clear.unwrap_or(raise);
            if (below && clear < raise) || (!below && clear > raise) {
                return Err(bad(format!(
                    "{what}: clear {clear} must be on the good side of {} {raise}",
                    if below { "below" } else { "above" }
                )));
            }
            alerts.push(AlertRule {
                name: a.name.clone(),
                metric: a.metric.clone(),
                pairs: pair_list(&a.pairs, &what)?,
                below,
                raise,
                clear,
                after: a.after.unwrap_or(1).max(1),
                no_data: a
                    .no_data
                    .as_ref()
                    .map(|s| parse_duration(s).map_err(|e| bad(format!("{what}: no_data: {e}"))))
                    .transpose()?,
            });
        }
        let passive = match &raw.passive {
            None => None,
            Some(p) => {
                let interval =
                    parse_duration(&p.interval).map_err(|e| bad(format!("passive: interval: {e}")))?;
                if interval < 1000 {
                    return Err(bad("passive: interval shorter than 1 s"));
                }
                Some(Passive {
                    interval,
                    interfaces: p.interfaces.clone(),
                })
            }
        };
        if let Some(w) = &raw.webhook {
            if !w.url.starts_with("http://") && !w.url.starts_with("https://") {
                return Err(bad(format!(
                    "webhook: url {:?} is not http:// or https://",
                    w.url
                )));
            }
        }
        let guard = dur(&m.guard, "mesh.guard", 1000)?;
        let retention = dur(&m.retention, "mesh.retention", 400 * 86_400_000)?;
        let longest = tests
            .iter()
            .map(|t| t.repeat.typical_interval())
            .max()
            .unwrap_or(60_000);
        let grace = dur(&m.grace, "mesh.grace", (2 * longest).max(120_000))?;
        let stale_after = m.stale_after.unwrap_or(2.5);
        if stale_after.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) && stale_after != 1.0 {
            return Err(bad("mesh.stale_after must be at least 1 (intervals)"));
        }
        Ok(Config {
            name: m.name.clone().unwrap_or_else(|| "mesh".into()),
            seed: m.seed.unwrap_or(1),
            guard,
            retention,
            grace,
            stale_after,
            hosts: raw.hosts,
            links,
            tests,
            thresholds: raw.thresholds,
            alerts,
            passive,
            webhook: raw.webhook,
            text: text.to_string(),
            hash: blake3::hash(text.as_bytes()).to_hex()[..16].to_string(),
            warnings: legacy_durations(text),
        })
    }
}

/// Every string value of the text written as an ISO-8601 duration (`PT2M`), with the key it is under
/// and the form to write instead: `test[0].interval = "PT2M": write "2m"`.
fn legacy_durations(text: &str) -> Vec<String> {
    fn walk(path: &str, v: &toml::Value, out: &mut Vec<String>) {
        match v {
            toml::Value::String(s) if crate::timespec::is_iso_duration(s) => {
                if let Ok(ms) = crate::timespec::parse_iso_duration(s) {
                    out.push(format!(
                        "{path} = {s:?}: ISO-8601 durations are deprecated and will not be read by the next release; write {:?}",
                        crate::timespec::format_units(ms)
                    ));
                }
            }
            toml::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(&format!("{path}[{i}]"), x, out);
                }
            }
            toml::Value::Table(t) => {
                for (k, x) in t {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&p, x, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = text.parse::<toml::Table>() {
        walk("", &toml::Value::Table(v), &mut out);
    }
    out
}

/// The metrics results carry, for thresholds and alerts.
pub const METRICS: &[&str] = &["throughput_mbps", "loss_percent", "rtt_ms", "capacity_mbps"];

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn check_params(kind: Kind, p: &Params) -> Result<(), String> {
    let not = |field: &str, set: bool| {
        if set {
            Err(format!("{field} does not apply to a {} test", kind.as_str()))
        } else {
            Ok(())
        }
    };
    let sized = matches!(kind, Kind::Sweep | Kind::ZeroLoss | Kind::Capacity);
    not("sizes", !sized && p.sizes.is_some())?;
    not("rates", kind != Kind::Sweep && p.rates.is_some())?;
    not("waits", kind != Kind::Sweep && p.waits.is_some())?;
    not(
        "count",
        !matches!(kind, Kind::Sweep | Kind::Capacity) && p.count.is_some(),
    )?;
    not("trial", kind != Kind::ZeroLoss && p.trial.is_some())?;
    not("max_rate", kind != Kind::ZeroLoss && p.max_rate.is_some())?;
    not("resolution", kind != Kind::ZeroLoss && p.resolution.is_some())?;
    not("requests", kind != Kind::Latency && p.requests.is_some())?;
    not("streams", kind != Kind::Tcp && p.streams.is_some())?;
    not("duration", kind != Kind::Tcp && p.duration.is_some())?;
    not("train", kind != Kind::Capacity && p.train.is_some())?;
    if p.rates.is_some() && p.waits.is_some() {
        return Err("give rates or waits, not both".into());
    }
    for &s in p.sizes.iter().flatten() {
        if !(vlbiflow_net::wire::HEADER_LEN..=65_507).contains(&s) {
            return Err(format!(
                "size {s} outside {}..=65507",
                vlbiflow_net::wire::HEADER_LEN
            ));
        }
    }
    if p.sizes.as_ref().is_some_and(|s| s.is_empty()) {
        return Err("sizes is empty".into());
    }
    for r in p.rates.iter().flatten().chain(p.max_rate.iter()) {
        match vlbiflow_net_rate(r) {
            Ok(v) if v > 0.0 => {}
            Ok(_) => return Err(format!("rate {r:?} must be positive")),
            Err(e) => return Err(e),
        }
    }
    for &w in p.waits.iter().flatten() {
        if !w.is_finite() || w < 0.0 {
            return Err(format!("wait {w} is not a non-negative number"));
        }
    }
    if p.count == Some(0) || p.requests == Some(0) || p.streams == Some(0) {
        return Err("count, requests and streams must be at least 1".into());
    }
    if p.streams.is_some_and(|s| s > 64) {
        return Err("streams above 64".into());
    }
    if let Some(c) = p.count {
        if c > 10_000_000 {
            return Err(format!("count {c} above 10000000"));
        }
    }
    if let Some(r) = p.resolution {
        if !(1e-4..=0.5).contains(&r) {
            return Err(format!("resolution {r} outside 0.0001..=0.5"));
        }
    }
    for d in [&p.trial, &p.duration].into_iter().flatten() {
        parse_duration(d)?;
    }
    if let Some(t) = p.train {
        if !(2..=100_000).contains(&t) {
            return Err(format!("train {t} outside 2..=100000"));
        }
    }
    Ok(())
}

/// Parses a bit rate such as "800Mbps", "2Gbps", "1e9" (bit/s).
pub fn vlbiflow_net_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = [
        ("gbps", 1e9),
        ("gbit", 1e9),
        ("g", 1e9),
        ("mbps", 1e6),
        ("mbit", 1e6),
        ("m", 1e6),
        ("kbps", 1e3),
        ("kbit", 1e3),
        ("k", 1e3),
        ("bps", 1.0),
    ]
    .iter()
    .find_map(|(suf, m)| lower.strip_suffix(suf).map(|n| (n.trim().to_string(), *m)))
    .unwrap_or((lower.clone(), 1.0));
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * mult),
        _ => Err(format!(
            "rate {s:?} is not a number with an optional unit (kbps, Mbps, Gbps)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_get_the_configuration_without_webhook_and_daemon_sections() {
        let text = format!(
            "{EXAMPLE}\n[webhook]\nurl = \"https://hooks.example.org/s/secret\"\n\
             [hub]\narchive = \"postgresql://u:pw@db/m\"\n[agent]\nname = \"A\"\n"
        );
        let full = Config::parse(&text).unwrap();
        let agents = full.for_agents().unwrap();
        assert!(
            !agents.text.contains("secret") && !agents.text.contains("pw@"),
            "{}",
            agents.text
        );
        assert_eq!(agents.webhook, None);
        assert_ne!(agents.hash, full.hash);
        // The same plan otherwise.
        assert_eq!(agents.hosts, full.hosts);
        assert_eq!(agents.tests, full.tests);
        assert_eq!(agents.seed, full.seed);
    }

    pub(crate) const EXAMPLE: &str = r#"
[mesh]
name = "test"
seed = 7

[[host]]
name = "A"
address = "10.0.0.1"
site = "Ef"
[[host]]
name = "B"
address = "10.0.0.2"
site = "Wb"
[[host]]
name = "J"
address = "10.0.0.9"
site = "JIVE"

[[link]]
name = "jive-in"
sites = ["JIVE"]
direction = "in"

[[test]]
name = "bw"
kind = "sweep"
interval = "PT2M"
slot = "PT10S"
rates = ["500Mbps"]
count = 1000

[[test]]
name = "lat"
kind = "latency"
cron = "* * * * *"
pairs = ["*->J"]

[[threshold]]
metric = "throughput_mbps"
warn = 800
bad = 400

[[alert]]
name = "slow"
metric = "throughput_mbps"
pairs = ["A->*"]
below = 300
clear = 350
"#;

    #[test]
    fn example_parses() {
        let c = Config::parse(EXAMPLE).unwrap();
        assert_eq!(c.hosts.len(), 3);
        assert_eq!(c.tests[0].pairs.len(), 6);
        assert!(c.tests[0].exclusive);
        assert!(!c.tests[1].exclusive);
        assert_eq!(c.tests[1].pairs, vec![(0, 2), (1, 2)]);
        assert_eq!(c.resources(0, 2), vec!["host:A", "host:J", "link:jive-in"]);
        assert_eq!(c.resources(2, 0), vec!["host:J", "host:A"]);
        assert_eq!(c.alerts[0].pairs, vec![(0, 1), (0, 2)]);
        let th = c.threshold("throughput_mbps").unwrap();
        assert_eq!(
            (th.classify(900.0), th.classify(500.0), th.classify(100.0)),
            ("good", "warn", "bad")
        );
    }

    #[test]
    fn errors_name_the_place() {
        let cases = [
            (EXAMPLE.replace("kind = \"sweep\"", "kind = \"sweeep\""), "sweeep"),
            (
                EXAMPLE.replace("interval = \"PT2M\"", "interval = \"2 minutes\""),
                "test bw: interval",
            ),
            (
                EXAMPLE.replace("pairs = [\"A->*\"]", "pairs = [\"X->*\"]"),
                "alert slow",
            ),
            (
                EXAMPLE.replace("count = 1000", "count = 1000\nstreams = 2"),
                "streams does not apply",
            ),
            (EXAMPLE.replace("clear = 350", "clear = 250"), "good side"),
            (EXAMPLE.replace("name = \"B\"", "name = \"A\""), "appears twice"),
            (
                EXAMPLE.replace("sites = [\"JIVE\"]", "sites = [\"Nowhere\"]"),
                "link jive-in",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(vlbiflow_net_rate("800Mbps").unwrap(), 800e6);
        assert_eq!(vlbiflow_net_rate("2G").unwrap(), 2e9);
        assert!(vlbiflow_net_rate("fast").is_err());
    }
}
