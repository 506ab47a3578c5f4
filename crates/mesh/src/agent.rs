//! `vlbiflow net agent`: the responder for the other hosts' tests, and the runner of this host's
//! own runs on the [`AgentMachine`]'s schedule. Every outcome goes first into a persistent outbox
//! (SQLite in the state directory) and leaves it only when the hub has acknowledged it, so a hub
//! that is away loses nothing; the configuration last received from the hub is kept there too, so
//! the agent keeps its schedule across its own restarts while the hub is away.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::{Key, Request, HOST_HEADER, MAC_HEADER, NONCE_HEADER, TIME_HEADER};
use crate::config::Config;
use crate::counters::{self, Sampler};
use crate::report::{CounterSample, RunReport};
use crate::schedule::{AgentAction, AgentMachine};
use crate::timespec::{now_ms, rfc3339, Ms};

/// The path of the agent-hub exchange.
pub const SYNC_PATH: &str = "/api/v1/agent/sync";
/// Most reports per exchange.
pub const BATCH: usize = 200;

/// Agent to hub: who, what it runs, and what it has to deliver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncRequest {
    /// Host name.
    pub host: String,
    /// Software version.
    pub software: String,
    /// Hash of the configuration the agent runs.
    pub config_hash: String,
    /// Outcomes.
    pub reports: Vec<RunReport>,
    /// Passive counter samples.
    pub counters: Vec<CounterSample>,
}

/// Hub to agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncResponse {
    /// Reports and samples were archived.
    pub accepted: bool,
    /// The configuration text, when the agent's hash differs from the hub's.
    pub config: Option<String>,
    /// The hub's clock.
    pub hub_time: Ms,
}

/// Why the agent cannot run.
#[derive(Debug, thiserror::Error)]
#[error("agent: {0}")]
pub struct AgentError(pub String);

/// The persistent outbox and state.
pub struct Outbox {
    db: rusqlite::Connection,
}

impl Outbox {
    /// Opens (creating) `dir/agent.sqlite`.
    pub fn open(dir: &Path) -> Result<Outbox, AgentError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| AgentError(format!("state directory {}: {e}", dir.display())))?;
        let path = dir.join("agent.sqlite");
        let db =
            rusqlite::Connection::open(&path).map_err(|e| AgentError(format!("{}: {e}", path.display())))?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        )
        .map_err(|e| AgentError(format!("{}: {e}", path.display())))?;
        Ok(Outbox { db })
    }

    fn e(e: rusqlite::Error) -> AgentError {
        AgentError(format!("outbox: {e}"))
    }

    /// Stores an outcome.
    pub fn push_report(&self, r: &RunReport) -> Result<(), AgentError> {
        let body = serde_json::to_string(r).map_err(|e| AgentError(e.to_string()))?;
        self.db
            .execute("INSERT INTO outbox (kind, body) VALUES ('report', ?1)", [body])
            .map_err(Self::e)?;
        Ok(())
    }

    /// Stores counter samples.
    pub fn push_counters(&self, s: &[CounterSample]) -> Result<(), AgentError> {
        for c in s {
            let body = serde_json::to_string(c).map_err(|e| AgentError(e.to_string()))?;
            self.db
                .execute("INSERT INTO outbox (kind, body) VALUES ('counters', ?1)", [body])
                .map_err(Self::e)?;
        }
        Ok(())
    }

    /// Up to `n` oldest entries: (last seq, reports, counters).
    pub fn peek(&self, n: usize) -> Result<(i64, Vec<RunReport>, Vec<CounterSample>), AgentError> {
        let mut st = self
            .db
            .prepare("SELECT seq, kind, body FROM outbox ORDER BY seq LIMIT ?1")
            .map_err(Self::e)?;
        let rows = st
            .query_map([n as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(Self::e)?;
        let (mut last, mut reports, mut counters) = (0, Vec::new(), Vec::new());
        for row in rows {
            let (seq, kind, body) = row.map_err(Self::e)?;
            last = seq;
            match kind.as_str() {
                "report" => reports.extend(serde_json::from_str(&body).ok()),
                _ => counters.extend(serde_json::from_str(&body).ok()),
            }
        }
        Ok((last, reports, counters))
    }

    /// Removes entries up to `seq` (acknowledged).
    pub fn ack(&self, seq: i64) -> Result<(), AgentError> {
        self.db
            .execute("DELETE FROM outbox WHERE seq <= ?1", [seq])
            .map_err(Self::e)?;
        Ok(())
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.db
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0) as usize
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A state value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.db
            .query_row("SELECT value FROM state WHERE key = ?1", [key], |r| r.get(0))
            .ok()
    }

    /// Deletes a state value.
    pub fn del(&self, key: &str) -> Result<(), AgentError> {
        self.db
            .execute("DELETE FROM state WHERE key = ?1", [key])
            .map_err(Self::e)?;
        Ok(())
    }

    /// State values whose key starts with `prefix`.
    pub fn with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>, AgentError> {
        let mut st = self
            .db
            .prepare("SELECT key, value FROM state WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key")
            .map_err(Self::e)?;
        let rows = st
            .query_map([prefix], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(Self::e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(Self::e)
    }

    /// Sets a state value.
    pub fn set(&self, key: &str, value: &str) -> Result<(), AgentError> {
        self.db
            .execute(
                "INSERT INTO state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value],
            )
            .map_err(Self::e)?;
        Ok(())
    }
}

/// A client of the hub's agent API.
pub struct HubClient {
    base: String,
    key: Option<Key>,
    http: ureq::Agent,
}

impl HubClient {
    /// For the hub at `base` (http://host:port or https://host:port; https with Mozilla's roots).
    pub fn new(base: &str, key: Option<Key>) -> HubClient {
        HubClient::with_ca(base, key, None)
    }

    /// For the hub at `base`; on https, `ca` are the only roots trusted (else Mozilla's).
    pub fn with_ca(
        base: &str,
        key: Option<Key>,
        ca: Option<&[ureq::tls::Certificate<'static>]>,
    ) -> HubClient {
        let http = crate::tls::http_agent(Duration::from_secs(10), ca);
        HubClient {
            base: base.trim_end_matches('/').to_string(),
            key,
            http,
        }
    }

    /// One exchange.
    pub fn sync(&self, req: &SyncRequest) -> Result<SyncResponse, String> {
        let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
        let now = now_ms();
        let mut r = self
            .http
            .post(format!("{}{SYNC_PATH}", self.base))
            .header("content-type", "application/json");
        let mut request_mac = None;
        if let Some(k) = &self.key {
            let nonce = crate::auth::nonce();
            let mac = k.sign_request(&Request {
                method: "POST",
                path: SYNC_PATH,
                host: &req.host,
                time: now,
                nonce: &nonce,
                body: &body,
            });
            r = r
                .header(HOST_HEADER, req.host.as_str())
                .header(TIME_HEADER, now.to_string())
                .header(NONCE_HEADER, nonce.as_str())
                .header(MAC_HEADER, mac.to_hex().as_str());
            request_mac = Some(mac);
        }
        let mut resp = r.send(&body[..]).map_err(|e| match crate::tls::tls_failure(&e) {
            Some(t) => format!("hub {}: TLS: {t} (is the hub's CA in --ca-file?)", self.base),
            None => format!("hub {}: {e}", self.base),
        })?;
        let status = resp.status().as_u16();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (t, mac) = (header(TIME_HEADER), header(MAC_HEADER));
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| format!("hub {}: reading the answer: {e}", self.base))?;
        if status != 200 {
            return Err(format!(
                "hub {} answered {status}: {}",
                self.base,
                String::from_utf8_lossy(&text)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
        }
        if let (Some(k), Some(request_mac)) = (&self.key, &request_mac) {
            // Only the answer to this request: a recorded one replayed is refused, and the
            // results stay in the outbox.
            k.verify_response(
                SYNC_PATH,
                request_mac,
                t.as_deref(),
                mac.as_deref(),
                &text,
                now_ms(),
            )
            .map_err(|e| format!("hub {}: answer refused: {e}", self.base))?;
        }
        serde_json::from_slice(&text).map_err(|e| format!("hub {}: bad answer: {e}", self.base))
    }
}

/// How to run an agent.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// This host's name in the configuration.
    pub name: String,
    /// The hub's base URL (None: standalone with `config`).
    pub hub: Option<String>,
    /// The shared token's key.
    pub key: Option<Key>,
    /// The CA certificates (PEM file) trusted for an https:// hub instead of Mozilla's roots.
    pub ca_file: Option<PathBuf>,
    /// The mesh's responder token: this agent's responder requires it in every hello, and its runs
    /// send it to the other agents' responders.
    pub responder_token: Option<String>,
    /// State directory (outbox, cached configuration, cursor).
    pub state_dir: PathBuf,
    /// Responder address (default: the configured address and port).
    pub listen: Option<SocketAddr>,
    /// A configuration file, used when the hub has not given one yet.
    pub config: Option<PathBuf>,
    /// Time between exchanges with the hub.
    pub sync_every: Duration,
    /// Completes the responder's configuration before it starts (the CLI installs the transport-efficiency
    /// service here, which lives in its own crate); `None` leaves it as the mesh made it.
    pub responder_setup: Option<fn(vlbiflow_net::ResponderConfig) -> vlbiflow_net::ResponderConfig>,
    /// Called once the responder listens (the CLI tells systemd that the agent is ready).
    pub on_ready: Option<fn()>,
    /// Called after each pass of the schedule loop (at least every 250 ms while it runs; the CLI tells
    /// systemd's watchdog that the agent is alive).
    pub on_pass: Option<fn()>,
}

/// Runs the agent until `stop`. Its events are `tracing` events (target `vlbiflow::mesh`).
pub fn run(opts: &AgentOptions, stop: Arc<AtomicBool>) -> Result<(), AgentError> {
    let outbox = Outbox::open(&opts.state_dir)?;
    let ca = match &opts.ca_file {
        Some(p) => Some(crate::tls::read_ca_file(p).map_err(AgentError)?),
        None => None,
    };
    let hub = opts
        .hub
        .as_deref()
        .map(|h| HubClient::with_ca(h, opts.key.clone(), ca.as_deref()));
    let software = format!("vlbiflow {}", env!("CARGO_PKG_VERSION"));
    // The configuration: the hub's, else the cached one, else the file.
    let mut cfg: Option<Arc<Config>> = None;
    if let Some(h) = &hub {
        let req = SyncRequest {
            host: opts.name.clone(),
            software: software.clone(),
            config_hash: String::new(),
            reports: Vec::new(),
            counters: Vec::new(),
        };
        match h.sync(&req) {
            Ok(SyncResponse {
                config: Some(text), ..
            }) => match Config::parse(&text) {
                Ok(c) => {
                    outbox.set("config", &text)?;
                    cfg = Some(Arc::new(c));
                }
                Err(e) => {
                    tracing::warn!(target: "vlbiflow::mesh", error = %e, "the hub's configuration is invalid: {e}")
                }
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: "vlbiflow::mesh", error = %e, "{e}; using the cached configuration")
            }
        }
    }
    if cfg.is_none() {
        if let Some(text) = outbox.get("config") {
            cfg = Config::parse(&text).ok().map(Arc::new);
        }
    }
    if cfg.is_none() {
        if let Some(p) = &opts.config {
            cfg = Some(Arc::new(Config::load(p).map_err(|e| AgentError(e.to_string()))?));
        }
    }
    let cfg = cfg.ok_or_else(|| {
        AgentError("no configuration: the hub did not answer and none is cached or given (--config)".into())
    })?;
    if cfg.host_index(&opts.name).is_none() {
        return Err(AgentError(format!(
            "host {} is not in the mesh configuration (hosts: {})",
            opts.name,
            cfg.hosts
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // The responder, serving the mesh's hosts only.
    let listen = match opts.listen {
        Some(l) => l,
        None => crate::runner::responder_addr(&cfg, &opts.name).map_err(AgentError)?,
    };
    let mut rc = vlbiflow_net::ResponderConfig::new(listen);
    let mut allow: Vec<std::net::IpAddr> = cfg
        .hosts
        .iter()
        .filter_map(|h| crate::runner::responder_addr(&cfg, &h.name).ok())
        .map(|a| a.ip())
        .collect();
    allow.push(std::net::Ipv4Addr::LOCALHOST.into());
    rc.allow = Some(allow);
    rc.token = opts.responder_token.clone();
    if let Some(setup) = opts.responder_setup {
        rc = setup(rc);
    }
    let responder = vlbiflow_net::Responder::bind(rc).map_err(|e| AgentError(e.to_string()))?;
    let hub_url = opts.hub.as_deref().map(crate::archive::redact);
    tracing::info!(
        target: "vlbiflow::mesh",
        host = %opts.name,
        mesh = %cfg.name,
        listen = %responder.local_addr(),
        url = hub_url.as_deref().unwrap_or(""),
        "agent {} of mesh {}: responder on {}, {} tests, hub {}",
        opts.name,
        cfg.name,
        responder.local_addr(),
        cfg.tests.len(),
        hub_url.as_deref().unwrap_or("none (standalone)")
    );
    if let Some(ready) = opts.on_ready {
        ready();
    }
    std::thread::scope(|scope| -> Result<(), AgentError> {
        let rstop = stop.clone();
        scope.spawn(move || {
            let _ = responder.run(
                rstop,
                &|m| tracing::info!(target: "vlbiflow::mesh", "responder: {m}"),
            );
        });
        let result = schedule_loop(opts, &outbox, hub.as_ref(), cfg, &software, &stop);
        stop.store(true, Ordering::SeqCst);
        result
    })
}

fn schedule_loop(
    opts: &AgentOptions,
    outbox: &Outbox,
    hub: Option<&HubClient>,
    mut cfg: Arc<Config>,
    software: &str,
    stop: &AtomicBool,
) -> Result<(), AgentError> {
    let now = now_ms();
    let cursor = outbox
        .get("cursor")
        .and_then(|c| c.parse().ok())
        .filter(|&c: &Ms| c <= now)
        .unwrap_or(now);
    if cursor < now {
        tracing::info!(
            target: "vlbiflow::mesh",
            "resuming the schedule from {} (the agent was down since)",
            rfc3339(cursor)
        );
    }
    // Runs that were in progress when the agent last stopped: they have no outcome but this.
    for (key, body) in outbox.with_prefix("running:")? {
        if let Ok(run) = serde_json::from_str::<crate::plan::PlannedRun>(&body) {
            tracing::info!(
                target: "vlbiflow::mesh",
                run_id = %run.id,
                test = %run.test,
                "run {}: the agent stopped while it was in progress",
                run.id
            );
            outbox.push_report(&RunReport::failed(
                &run,
                &opts.name,
                crate::report::Reason::AgentDown,
                format!("agent {} stopped while the run was in progress", opts.name),
            ))?;
        }
        outbox.del(&key)?;
    }
    let mut machine = AgentMachine::new(cfg.clone(), &opts.name, cursor);
    let (tx, rx) = mpsc::channel::<RunReport>();
    let mut running: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut next_sync = 0;
    let mut sampler = Sampler::default();
    let mut next_sample = now;
    let mut hub_ok = true;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ms();
        for a in machine.poll(now) {
            match a {
                AgentAction::Report(r) => {
                    if let crate::report::Outcome::Failed { .. } = &r.outcome {
                        log_outcome(&r);
                    }
                    outbox.push_report(&r)?;
                }
                AgentAction::Start(run) => {
                    outbox.set(
                        &format!("running:{}", run.id),
                        &serde_json::to_string(&run).unwrap_or_default(),
                    )?;
                    let (tx, cfg, me) = (tx.clone(), cfg.clone(), opts.name.clone());
                    let token = opts.responder_token.clone();
                    running.push(std::thread::spawn(move || {
                        let _ = tx.send(crate::runner::run_with_token(&cfg, &run, &me, token.as_deref()));
                    }));
                }
            }
        }
        outbox.set("cursor", &machine.cursor().to_string())?;
        if let Some(p) = &cfg.passive {
            if now >= next_sample {
                outbox.push_counters(&sampler.feed(&opts.name, now, counters::read(), &p.interfaces))?;
                next_sample = now + p.interval;
            }
        }
        if let Some(h) = hub {
            if now >= next_sync {
                next_sync = now + opts.sync_every.as_millis() as Ms;
                // Deliver the backlog in batches while the hub takes them.
                loop {
                    let (last, reports, counters) = outbox.peek(BATCH)?;
                    let n = reports.len() + counters.len();
                    let req = SyncRequest {
                        host: opts.name.clone(),
                        software: software.into(),
                        config_hash: cfg.hash.clone(),
                        reports,
                        counters,
                    };
                    match h.sync(&req) {
                        Ok(resp) => {
                            if !hub_ok {
                                tracing::info!(target: "vlbiflow::mesh", "hub reachable again; delivering the buffered results");
                                hub_ok = true;
                            }
                            if resp.accepted && n > 0 {
                                outbox.ack(last)?;
                            }
                            if let Some(text) = resp.config {
                                match Config::parse(&text) {
                                    Ok(c) if c.host_index(&opts.name).is_some() => {
                                        tracing::info!(target: "vlbiflow::mesh", config = %c.hash, "new configuration from the hub ({})", c.hash);
                                        outbox.set("config", &text)?;
                                        cfg = Arc::new(c);
                                        machine.set_config(cfg.clone());
                                    }
                                    Ok(_) => {
                                        tracing::warn!(target: "vlbiflow::mesh", host = %opts.name, "the hub's new configuration does not name this host; keeping the old one")
                                    }
                                    Err(e) => {
                                        tracing::warn!(target: "vlbiflow::mesh", error = %e, "the hub's new configuration is invalid, keeping the old one: {e}")
                                    }
                                }
                            }
                            if n < BATCH || !resp.accepted {
                                break;
                            }
                        }
                        Err(e) => {
                            if hub_ok {
                                tracing::warn!(target: "vlbiflow::mesh", error = %e, waiting = outbox.len(), "{e}; buffering results ({} waiting)", outbox.len());
                                hub_ok = false;
                            }
                            break;
                        }
                    }
                }
            }
        }
        if let Some(pass) = opts.on_pass {
            pass();
        }
        // Wait for a finished run or the next thing to do.
        let wake = machine
            .next_wake(3_600_000)
            .unwrap_or(now + 1000)
            .min(next_sync.max(now + 50))
            .min(next_sample.max(now + 50));
        let wait = Duration::from_millis((wake - now_ms()).clamp(10, 250) as u64);
        if let Ok(r) = rx.recv_timeout(wait) {
            let mut done = vec![r];
            done.extend(rx.try_iter());
            for r in done {
                machine.finished(&r.run.id);
                log_outcome(&r);
                outbox.push_report(&r)?;
                outbox.del(&format!("running:{}", r.run.id))?;
            }
        }
        running.retain(|h| !h.is_finished());
    }
    // Let running measurements end (they stop at their slot's end at the latest) and keep them.
    for h in running {
        let _ = h.join();
    }
    while let Ok(r) = rx.try_recv() {
        log_outcome(&r);
        outbox.push_report(&r)?;
        outbox.del(&format!("running:{}", r.run.id))?;
    }
    Ok(())
}

/// One line per finished run, `run ID: ok` or `run ID: REASON: detail`: the agent's own account of
/// its outcomes, to hold against the archive (bench/mesh-accept.sh does).
fn log_outcome(r: &RunReport) {
    let (id, test, target) = (&r.run.id, &r.run.test, &r.run.dst);
    match &r.outcome {
        crate::report::Outcome::Failed { reason, detail } => tracing::info!(
            target: "vlbiflow::mesh",
            run_id = %id,
            test = %test,
            target = %target,
            reason = reason.as_str(),
            error = %detail,
            "run {id}: {}: {detail}",
            reason.as_str()
        ),
        _ => {
            tracing::info!(target: "vlbiflow::mesh", run_id = %id, test = %test, target = %target, "run {id}: ok")
        }
    }
}
