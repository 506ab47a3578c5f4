//! `vlbiflow net hub`: plans every run ([`Ledger`]), takes the agents' reports, archives them,
//! evaluates alerts ([`Alerts`]) and delivers their changes to the log and a webhook, and serves the
//! dashboard, the JSON API the `vlbiflow net mesh` commands use, and `/metrics` for Prometheus.
//!
//! Authentication: with keys (per-host keys, or the mesh's shared token for hosts without one), every
//! agent exchange carries a MAC both ways, once only, the answer bound to its request
//! ([`crate::auth`]); the host an exchange reports for is the one its key authenticates. Pages and API
//! answer only requests with `Authorization: Bearer TOKEN` (the shared or the read token; or HTTP basic
//! authentication with it as password), from loopback too, unless `public_read` is set. Without any
//! key the hub listens on loopback only and answers requests that name it by a loopback address
//! ([`access`]).
//!
//! Files by concern: `state` what the handlers share; `routes` the HTTP routes; `sync` the agents'
//! exchange; `webhook` alert delivery; `access` who may read; `http` replies; `matrix` the newest figure
//! per pair; `html` the dashboard and pair pages; `svg` plots; `api` the JSON API; `metrics` Prometheus.

mod access;
mod api;
mod html;
mod http;
mod matrix;
mod metrics;
mod routes;
mod state;
mod svg;
mod sync;
mod webhook;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::alerts::Alerts;
use crate::archive::Archive;
use crate::auth::{Key, Keyring, Verifier};
use crate::config::Config;
use crate::report::Outcome;
use crate::schedule::{Ledger, LedgerAction};
use crate::timespec::{now_ms, rfc3339, Ms};

pub use api::{AgentStatus, AlertsView, RunsQuery, Status};
pub use http::PairQuery;
pub use matrix::{Cell, CellValue, Matrix};
use state::{lock, store_alerts, Shared};
use webhook::webhook_loop;

/// How far ahead the hub archives planned runs, ms.
pub const LOOKAHEAD: Ms = 30_000;

/// How to run a hub.
#[derive(Clone)]
pub struct HubOptions {
    /// The mesh configuration.
    pub config: Arc<Config>,
    /// HTTP address.
    pub listen: SocketAddr,
    /// Archive: a SQLite path or a postgresql:// URL.
    pub archive: String,
    /// The mesh's shared token: authenticates agents without a key of their own (any holder can speak
    /// for any such host) and readers. None with no `host_keys`: loopback only.
    pub token: Option<String>,
    /// Per-host keys: each authenticates its host's agent only ([`Keyring::parse_keys_file`]).
    pub host_keys: Vec<(String, Key)>,
    /// A token for readers of pages and the API only (`Authorization: Bearer ...`).
    pub read_token: Option<String>,
    /// Serve pages and the read API to anyone.
    pub public_read: bool,
    /// Read-only token for `GET /metrics` (`Authorization: Bearer ...`); grants nothing else.
    pub metrics_token: Option<String>,
    /// Serve on TLS with this certificate and key (else plain HTTP).
    pub tls: Option<vlbiflow_http::Tls>,
}

/// A running hub.
pub struct HubHandle {
    /// The bound HTTP address.
    pub addr: SocketAddr,
    /// Passes of the hub's tick (schedule, alerts, retention), every 500 ms.
    ticks: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HubHandle {
    /// How many ticks (schedule, alerts, retention; each with the archive's and ledger's locks) have
    /// completed: it advances every 500 ms while the hub works, so a service manager's watchdog can be
    /// told only when it moved.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Stops the hub and waits for it.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Waits until the hub ends (after `stop` is set from elsewhere).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HubHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Why the hub could not start.
#[derive(Debug, thiserror::Error)]
#[error("hub: {0}")]
pub struct HubError(pub String);

/// Starts a hub on its own thread; `stop` ends it. Its events are `tracing` events (target
/// `vlbiflow::mesh`).
pub fn spawn(opts: HubOptions, stop: Arc<AtomicBool>) -> Result<HubHandle, HubError> {
    let mut keys = Keyring::new(opts.token.as_deref().map(Key::from_token));
    for (host, key) in &opts.host_keys {
        if opts.config.host_index(host).is_none() {
            return Err(HubError(format!(
                "keys: host {host} is not in the mesh configuration"
            )));
        }
        keys.insert(host, key.clone());
    }
    if keys.is_empty() && !opts.listen.ip().is_loopback() {
        return Err(HubError(format!(
            "{} is not a loopback address: give keys (--keys-file, --token-file) so agents and readers authenticate",
            opts.listen
        )));
    }
    let agent_cfg = Arc::new(
        opts.config
            .for_agents()
            .map_err(|e| HubError(format!("the configuration for agents: {e}")))?,
    );
    let mut archive = Archive::open(&opts.archive).map_err(|e| HubError(e.to_string()))?;
    let now = now_ms();
    let planned_through = archive
        .meta("planned_through")
        .map_err(|e| HubError(e.to_string()))?
        .and_then(|v| v.parse().ok())
        .unwrap_or(now);
    let mut ledger = Ledger::new(opts.config.clone(), planned_through, now, LOOKAHEAD);
    ledger.restore_pending(archive.pending().map_err(|e| HubError(e.to_string()))?);
    let active = archive.active_alerts().map_err(|e| HubError(e.to_string()))?;
    let alerts = Alerts::new(opts.config.clone(), now, &active);
    let listener = std::net::TcpListener::bind(opts.listen)
        .map_err(|e| HubError(format!("bind {}: {e}", opts.listen)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HubError(e.to_string()))?;
    let addr = listener.local_addr().map_err(|e| HubError(e.to_string()))?;
    tracing::info!(
        target: "vlbiflow::mesh",
        mesh = %opts.config.name,
        listen = %addr,
        "hub of mesh {} on {}://{addr}/ ({} hosts, {} tests, archive {} {}, planning from {})",
        opts.config.name,
        if opts.tls.is_some() { "https" } else { "http" },
        opts.config.hosts.len(),
        opts.config.tests.len(),
        archive.kind(),
        archive.location(),
        rfc3339(planned_through)
    );
    if keys.has_shared() {
        let own: Vec<&str> = keys.hosts().collect();
        let shared: Vec<&str> = opts
            .config
            .hosts
            .iter()
            .map(|h| h.name.as_str())
            .filter(|h| !own.contains(h))
            .collect();
        if !shared.is_empty() {
            tracing::warn!(
                target: "vlbiflow::mesh",
                hosts = %shared.join(","),
                "hosts {} authenticate with the shared token, and any holder of it can report as them: \
                 give each its own key (--keys-file; see docs/mesh.md)",
                shared.join(", ")
            );
        }
    }
    let read_tokens = [opts.token.as_deref(), opts.read_token.as_deref()]
        .into_iter()
        .flatten()
        .map(|t| blake3::hash(t.trim().as_bytes()))
        .collect();
    let shared = Arc::new(Shared {
        cfg: opts.config.clone(),
        verifier: (!keys.is_empty()).then(|| Mutex::new(Verifier::new(keys))),
        read_tokens,
        public_read: opts.public_read,
        agent_cfg,
        archive: Mutex::new(archive),
        ledger: Mutex::new(ledger),
        alerts: Mutex::new(alerts),
        started: now,
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let metrics_token = opts.metrics_token.clone();
    let tls = opts.tls.clone();
    let thread_stop = stop.clone();
    let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tick_count = ticks.clone();
    let thread = std::thread::Builder::new()
        .name("hub".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(target: "vlbiflow::mesh", error = %e, "cannot start the runtime: {e}");
                    return;
                }
            };
            let webhook = {
                let (s, stop) = (shared.clone(), thread_stop.clone());
                std::thread::spawn(move || webhook_loop(&s, &stop))
            };
            let async_stop = thread_stop.clone();
            rt.block_on(async move {
                let thread_stop = async_stop;
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(target: "vlbiflow::mesh", error = %e, "listener: {e}");
                        return;
                    }
                };
                let ticker = {
                    let (s, stop) = (shared.clone(), thread_stop.clone());
                    let ticks = tick_count;
                    tokio::spawn(async move {
                        let mut iv = tokio::time::interval(Duration::from_millis(500));
                        let mut next_retention = 0;
                        while !stop.load(Ordering::Relaxed) {
                            iv.tick().await;
                            let s = s.clone();
                            let due = now_ms() >= next_retention;
                            if due {
                                next_retention = now_ms() + 3_600_000;
                            }
                            let _ = tokio::task::spawn_blocking(move || tick(&s, due)).await;
                            ticks.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                };
                let app = routes::router(shared.clone(), metrics_token);
                let limits = vlbiflow_http::Limits::DEFAULT;
                vlbiflow_http::serve_with_tls(listener, app, limits, tls, async move {
                    let _ = rx.await;
                })
                .await;
                ticker.abort();
            });
            thread_stop.store(true, Ordering::SeqCst);
            let _ = webhook.join();
        })
        .map_err(|e| HubError(e.to_string()))?;
    Ok(HubHandle {
        addr,
        ticks,
        stop,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

/// Plans, infers lost runs, raises no-data alerts; runs every half second.
fn tick(s: &Shared, retention: bool) {
    let now = now_ms();
    let actions = lock(&s.ledger).poll(now);
    let through = lock(&s.ledger).planned_through();
    let (mut plans, mut records) = (Vec::new(), Vec::new());
    for a in actions {
        match a {
            LedgerAction::Plan(r) => plans.push(r),
            LedgerAction::Record(r) => records.push(r),
        }
    }
    let mut a = lock(&s.archive);
    if !plans.is_empty() {
        if let Err(e) = a.plan(&plans, now) {
            tracing::warn!(target: "vlbiflow::mesh", error = %e, "archive: {e}");
            return;
        }
    }
    for r in &records {
        if let Outcome::Failed { reason, detail } = &r.outcome {
            tracing::info!(
                target: "vlbiflow::mesh",
                run_id = %r.run.id,
                test = %r.run.test,
                host = %r.run.src,
                target = %r.run.dst,
                reason = reason.as_str(),
                error = ?detail,
                // the detail is the agent's text
                "run {}: {}: {detail:?}",
                r.run.id,
                reason.as_str()
            );
        }
    }
    if let Err(e) = a.record(&records, now) {
        tracing::warn!(target: "vlbiflow::mesh", error = %e, "archive: {e}");
    }
    let _ = a.set_meta("planned_through", &through.to_string());
    let events = lock(&s.alerts).tick(now);
    store_alerts(&mut a, &events);
    if retention {
        match a.retain(now - s.cfg.retention) {
            Ok(n) if n > 0 => tracing::info!(
                target: "vlbiflow::mesh",
                rows = n,
                "retention: {n} rows older than {} deleted",
                rfc3339(now - s.cfg.retention)
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(target: "vlbiflow::mesh", error = %e, "retention: {e}"),
        }
    }
}
