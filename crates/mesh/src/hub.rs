//! `vlbiflow net hub`: plans every run ([`Ledger`]), takes the agents' reports, archives them,
//! evaluates alerts ([`Alerts`]) and delivers their changes to the log and a webhook, and serves the
//! dashboard, the JSON API the `vlbiflow net mesh` commands use, and `/metrics` for Prometheus.
//!
//! Authentication: with a token, every agent exchange carries a MAC both ways ([`crate::auth`]), and
//! pages and API answer only loopback clients or requests with `Authorization: Bearer TOKEN` (or
//! HTTP basic authentication with the token as password), unless `public_read` is set. Without a
//! token the hub listens on loopback only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::agent::{SyncRequest, SyncResponse, SYNC_PATH};
use crate::alerts::Alerts;
use crate::archive::{AlertEvent, Archive, RunFilter, RunRow};
use crate::auth::{Key, MAC_HEADER, TIME_HEADER};
use crate::config::Config;
use crate::report::{Outcome, RunReport};
use crate::schedule::{Ledger, LedgerAction};
use crate::timespec::{now_ms, rfc3339, Ms};

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
    /// The shared token (None: loopback only).
    pub token: Option<String>,
    /// Serve pages and the read API to anyone.
    pub public_read: bool,
}

/// A running hub.
pub struct HubHandle {
    /// The bound HTTP address.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HubHandle {
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

type Log = Arc<dyn Fn(&str) + Send + Sync>;

struct Shared {
    cfg: Arc<Config>,
    key: Option<Key>,
    token: Option<String>,
    public_read: bool,
    archive: Mutex<Archive>,
    ledger: Mutex<Ledger>,
    alerts: Mutex<Alerts>,
    log: Log,
    started: Ms,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a hub on its own thread; `stop` ends it.
pub fn spawn(opts: HubOptions, stop: Arc<AtomicBool>, log: Log) -> Result<HubHandle, HubError> {
    if opts.token.is_none() && !opts.listen.ip().is_loopback() {
        return Err(HubError(format!(
            "{} is not a loopback address: give a token (--token-file) so agents and readers authenticate",
            opts.listen
        )));
    }
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
    log(&format!(
        "hub of mesh {} on http://{addr}/ ({} hosts, {} tests, archive {} {}, planning from {})",
        opts.config.name,
        opts.config.hosts.len(),
        opts.config.tests.len(),
        archive.kind(),
        archive.location(),
        rfc3339(planned_through)
    ));
    let shared = Arc::new(Shared {
        cfg: opts.config.clone(),
        key: opts.token.as_deref().map(Key::from_token),
        token: opts.token.clone(),
        public_read: opts.public_read,
        archive: Mutex::new(archive),
        ledger: Mutex::new(ledger),
        alerts: Mutex::new(alerts),
        log,
        started: now,
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread_stop = stop.clone();
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
                    (shared.log)(&format!("cannot start the runtime: {e}"));
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
                        (shared.log)(&format!("listener: {e}"));
                        return;
                    }
                };
                let ticker = {
                    let (s, stop) = (shared.clone(), thread_stop.clone());
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
                        }
                    })
                };
                let app = Router::new()
                    .route(SYNC_PATH, post(sync))
                    .route("/", get(dashboard))
                    .route("/pair", get(pair_page))
                    .route("/plot/series.svg", get(plot_series))
                    .route("/plot/sweep.svg", get(plot_sweep))
                    .route("/metrics", get(metrics))
                    .route("/api/v1/status", get(api_status))
                    .route("/api/v1/runs", get(api_runs))
                    .route("/api/v1/results", get(api_results))
                    .route("/api/v1/alerts", get(api_alerts))
                    .route("/api/v1/matrix", get(api_matrix))
                    .with_state(shared.clone());
                let serve = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                    .with_graceful_shutdown(async move {
                        let _ = rx.await;
                    });
                if let Err(e) = serve.await {
                    (shared.log)(&format!("http: {e}"));
                }
                ticker.abort();
            });
            thread_stop.store(true, Ordering::SeqCst);
            let _ = webhook.join();
        })
        .map_err(|e| HubError(e.to_string()))?;
    Ok(HubHandle {
        addr,
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
            (s.log)(&format!("archive: {e}"));
            return;
        }
    }
    for r in &records {
        if let Outcome::Failed { reason, detail } = &r.outcome {
            (s.log)(&format!("run {}: {}: {detail}", r.run.id, reason.as_str()));
        }
    }
    if let Err(e) = a.record(&records, now) {
        (s.log)(&format!("archive: {e}"));
    }
    let _ = a.set_meta("planned_through", &through.to_string());
    let events = lock(&s.alerts).tick(now);
    store_alerts(s, &mut a, &events);
    if retention {
        match a.retain(now - s.cfg.retention) {
            Ok(n) if n > 0 => (s.log)(&format!(
                "retention: {n} rows older than {} deleted",
                rfc3339(now - s.cfg.retention)
            )),
            Ok(_) => {}
            Err(e) => (s.log)(&format!("retention: {e}")),
        }
    }
}

fn store_alerts(s: &Shared, a: &mut Archive, events: &[AlertEvent]) {
    for e in events {
        (s.log)(&format!("alert {}: {}", e.state, e.message));
        if let Err(err) = a.alert_event(e) {
            (s.log)(&format!("archive: {err}"));
        }
    }
}

/// Delivers alert changes to the webhook, each once (retried until the receiver answers 2xx).
fn webhook_loop(s: &Shared, stop: &AtomicBool) {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut backoff = Duration::from_millis(500);
    while !stop.load(Ordering::Relaxed) {
        let pending = lock(&s.archive).undelivered_alerts().unwrap_or_default();
        let mut failed = false;
        for e in pending {
            let Some(w) = &s.cfg.webhook else {
                let _ = lock(&s.archive).alert_delivered(&e.id);
                continue;
            };
            let body = serde_json::json!({
                "mesh": s.cfg.name,
                "id": e.id,
                "state": e.state,
                "rule": e.rule,
                "src": e.src,
                "dst": e.dst,
                "metric": e.metric,
                "value": e.value,
                "threshold": e.threshold,
                "time": rfc3339(e.t),
                "message": e.message,
            });
            match http
                .post(&w.url)
                .header("content-type", "application/json")
                .send(body.to_string())
            {
                Ok(r) if r.status().is_success() => {
                    let _ = lock(&s.archive).alert_delivered(&e.id);
                }
                Ok(r) => {
                    (s.log)(&format!("webhook {}: answered {}; will retry", w.url, r.status()));
                    failed = true;
                    break;
                }
                Err(err) => {
                    (s.log)(&format!("webhook {}: {err}; will retry", w.url));
                    failed = true;
                    break;
                }
            }
        }
        backoff = if failed {
            (backoff * 2).min(Duration::from_secs(60))
        } else {
            Duration::from_millis(500)
        };
        let until = std::time::Instant::now() + backoff;
        while std::time::Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

/// The reply to work run with [`blocking`]: `ok` of its value, 503 with the archive's error, or the
/// internal error.
fn reply<T>(res: Result<Result<T, String>, Response>, ok: impl FnOnce(T) -> Response) -> Response {
    match res {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => text(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(r) => r,
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error: {e}")))
}

async fn sync(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = now_ms();
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    match &s.key {
        Some(k) => {
            if let Err(e) = k.verify(
                "POST",
                SYNC_PATH,
                h(TIME_HEADER).as_deref(),
                h(MAC_HEADER).as_deref(),
                &body,
                now,
            ) {
                (s.log)(&format!("agent exchange from {peer} refused: {e}"));
                return text(StatusCode::UNAUTHORIZED, e.to_string());
            }
        }
        None if !peer.ip().is_loopback() => {
            return text(
                StatusCode::UNAUTHORIZED,
                "this hub has no token and serves loopback only".into(),
            );
        }
        None => {}
    }
    let req: SyncRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid exchange: {e}")),
    };
    if s.cfg.host_index(&req.host).is_none() {
        return text(
            StatusCode::FORBIDDEN,
            format!("host {:?} is not in the mesh configuration", req.host),
        );
    }
    let s2 = s.clone();
    let res = blocking(move || accept(&s2, req, now)).await;
    let resp = match res {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return text(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(r) => return r,
    };
    let body = serde_json::to_vec(&resp).unwrap_or_default();
    let mut out = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.clone(),
    )
        .into_response();
    if let Some(k) = &s.key {
        let t = now_ms();
        let mac = k.mac("RESPONSE", SYNC_PATH, t, &body);
        if let (Ok(tv), Ok(mv)) = (t.to_string().parse(), mac.parse()) {
            out.headers_mut().insert(TIME_HEADER, tv);
            out.headers_mut().insert(MAC_HEADER, mv);
        }
    }
    out
}

fn accept(s: &Shared, mut req: SyncRequest, now: Ms) -> Result<SyncResponse, String> {
    // Only outcomes of runs the agent sources.
    req.reports
        .retain(|r| r.run.src == req.host || r.reported_by == "hub");
    req.counters.retain(|c| c.host == req.host);
    {
        let mut a = lock(&s.archive);
        a.record(&req.reports, now).map_err(|e| e.to_string())?;
        a.counters(&req.counters).map_err(|e| e.to_string())?;
        a.agent_seen(&req.host, now, &req.software, &req.config_hash)
            .map_err(|e| e.to_string())?;
    }
    {
        let mut l = lock(&s.ledger);
        l.contact(&req.host, now);
        for r in &req.reports {
            l.reported(&r.run);
        }
    }
    let mut ok: Vec<&RunReport> = req
        .reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Ok { .. }))
        .collect();
    ok.sort_by_key(|r| r.run.start);
    let mut events = Vec::new();
    {
        let mut al = lock(&s.alerts);
        for r in ok {
            if let Outcome::Ok { metrics, .. } = &r.outcome {
                let m: Vec<(&str, f64)> = crate::config::METRICS
                    .iter()
                    .filter_map(|&n| metrics.get(n).map(|v| (n, v)))
                    .collect();
                events.extend(al.result(&r.run.src, &r.run.dst, r.ended_at.unwrap_or(r.run.start), &m));
            }
        }
    }
    store_alerts(s, &mut lock(&s.archive), &events);
    Ok(SyncResponse {
        accepted: true,
        config: (req.config_hash != s.cfg.hash).then(|| s.cfg.text.clone()),
        hub_time: now,
    })
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim().trim_end_matches('=');
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// May this request read pages and the API?
fn may_read(s: &Shared, peer: &SocketAddr, headers: &HeaderMap) -> bool {
    let Some(token) = &s.token else { return true };
    if s.public_read || peer.ip().is_loopback() {
        return true;
    }
    let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let given = if let Some(b) = auth.strip_prefix("Bearer ") {
        b.trim().to_string()
    } else if let Some(b) = auth.strip_prefix("Basic ") {
        match b64_decode(b).and_then(|v| String::from_utf8(v).ok()) {
            Some(up) => up.split_once(':').map(|(_, p)| p.to_string()).unwrap_or_default(),
            None => return false,
        }
    } else {
        return false;
    };
    // Compare as hashes: constant time.
    blake3::hash(given.as_bytes()) == blake3::hash(token.as_bytes())
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"vlbiflow mesh\"")],
        "authentication required: Authorization: Bearer TOKEN, or basic authentication with the token as password",
    )
        .into_response()
}

macro_rules! guard {
    ($s:expr, $peer:expr, $headers:expr) => {
        if !may_read(&$s, &$peer, &$headers) {
            return unauthorized();
        }
    };
}

fn json<T: Serialize>(v: &T) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(v)).into_response()
}

/// One cell of the matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    /// Source.
    pub src: String,
    /// Destination.
    pub dst: String,
    /// Newest figure per metric of any test: (value, time, test, class "good"/"warn"/"bad"/"none",
    /// stale). Where several tests give a metric (a sweep's loss and a latency test's) this is
    /// whichever ran last: `by_test` keeps them apart.
    pub metrics: BTreeMap<String, CellValue>,
    /// Newest figure per test and metric.
    #[serde(default)]
    pub by_test: BTreeMap<String, BTreeMap<String, CellValue>>,
}

/// A figure in a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellValue {
    /// Value.
    pub value: f64,
    /// When measured (planned start), ms.
    pub t: Ms,
    /// Test it came from.
    pub test: String,
    /// good, warn, bad or none (no threshold).
    pub class: String,
    /// Older than stale_after intervals of its test.
    pub stale: bool,
}

/// The matrix of host pairs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Matrix {
    /// Host names in configuration order.
    pub hosts: Vec<String>,
    /// One cell per directed pair that has results.
    pub cells: Vec<Cell>,
    /// When computed.
    pub now: Ms,
}

fn matrix(s: &Shared) -> Result<Matrix, String> {
    let latest = lock(&s.archive).latest().map_err(|e| e.to_string())?;
    Ok(matrix_of(&s.cfg, &latest, now_ms()))
}

/// The matrix from the newest result of each (test, src, dst).
fn matrix_of(cfg: &Config, latest: &[RunRow], now: Ms) -> Matrix {
    let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
    for r in latest {
        let interval = cfg
            .tests
            .iter()
            .find(|t| t.name == r.test)
            .map(|t| t.repeat.typical_interval())
            .unwrap_or(60_000);
        let cell = cells
            .entry((r.src.clone(), r.dst.clone()))
            .or_insert_with(|| Cell {
                src: r.src.clone(),
                dst: r.dst.clone(),
                metrics: BTreeMap::new(),
                by_test: BTreeMap::new(),
            });
        for (name, v) in [
            ("throughput_mbps", r.throughput_mbps),
            ("loss_percent", r.loss_percent),
            ("rtt_ms", r.rtt_ms),
            ("capacity_mbps", r.capacity_mbps),
        ] {
            let Some(v) = v else { continue };
            let value = CellValue {
                value: v,
                t: r.planned_start,
                test: r.test.clone(),
                class: cfg
                    .threshold(name)
                    .map(|t| t.classify(v))
                    .unwrap_or("none")
                    .into(),
                stale: (now - r.planned_start) as f64 > cfg.stale_after * interval as f64,
            };
            let per_test = cell.by_test.entry(r.test.clone()).or_default();
            if per_test.get(name).is_none_or(|c| c.t < r.planned_start) {
                per_test.insert(name.into(), value.clone());
            }
            if cell.metrics.get(name).is_none_or(|c| c.t < r.planned_start) {
                cell.metrics.insert(name.into(), value);
            }
        }
    }
    Matrix {
        hosts: cfg.hosts.iter().map(|h| h.name.clone()).collect(),
        cells: cells.into_values().collect(),
        now,
    }
}

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str =
    "body{font-family:sans-serif;margin:1em;color:#222}table{border-collapse:collapse;margin:.5em 0}\
td,th{border:1px solid #bbb;padding:.3em .5em;text-align:center;font-size:.9em}th{background:#eee}\
td.good{background:#b8e6b8}td.warn{background:#ffe08a}td.bad{background:#f4a3a3}td.none{background:#fff}\
td.stale{background:#ddd;color:#777}td.empty{background:#f6f6f6;color:#aaa}td.self{background:#333}\
.failed{color:#b00}.raised{color:#b00;font-weight:bold}.small{font-size:.8em;color:#666}\
.wrap{overflow-x:auto;max-width:100%}a{color:#225}";

fn fmt_metric(name: &str, v: f64) -> String {
    match name {
        "throughput_mbps" | "capacity_mbps" => format!("{v:.0} Mb/s"),
        "loss_percent" => format!("{v:.2} %"),
        "rtt_ms" => format!("{v:.2} ms"),
        _ => format!("{v}"),
    }
}

/// The matrix tables of the dashboard: one per metric, or one per test and metric where several
/// tests give the metric (a sweep's loss at rates above the path's and a latency test's loss are
/// different figures; one table would show whichever ran last).
fn matrix_tables(cfg: &Config, m: &Matrix) -> String {
    let mut h = String::new();
    for metric in ["throughput_mbps", "loss_percent", "rtt_ms", "capacity_mbps"] {
        let mut tests: Vec<&str> = m
            .cells
            .iter()
            .flat_map(|c| c.by_test.iter())
            .filter(|(_, ms)| ms.contains_key(metric))
            .map(|(t, _)| t.as_str())
            .collect();
        tests.sort_unstable();
        tests.dedup();
        if tests.is_empty() && cfg.threshold(metric).is_none() {
            continue;
        }
        let th = cfg
            .threshold(metric)
            .map(|t| format!(" (warn {} / bad {})", t.warn, t.bad))
            .unwrap_or_default();
        // One table per test giving the metric; a threshold's metric without results yet: one empty.
        let tables: Vec<Option<&str>> = match tests.len() {
            0 => vec![None],
            1 => vec![Some(tests[0])],
            _ => tests.iter().map(|t| Some(*t)).collect(),
        };
        for test in tables {
            let (title, attr) = match test {
                Some(t) if tests.len() > 1 => (
                    format!("{metric} &middot; {}{th}", esc(t)),
                    format!(" data-test=\"{}\"", esc(t)),
                ),
                Some(t) => (format!("{metric}{th}"), format!(" data-test=\"{}\"", esc(t))),
                None => (format!("{metric}{th}"), String::new()),
            };
            let _ = write!(
                h,
                "<h2>{title}</h2><div class=\"wrap\"><table class=\"matrix\" data-metric=\"{metric}\"{attr}><tr><th>from \\ to</th>"
            );
            for d in &m.hosts {
                let _ = write!(h, "<th>{}</th>", esc(d));
            }
            h += "</tr>";
            for src in &m.hosts {
                let _ = write!(h, "<tr><th>{}</th>", esc(src));
                for dst in &m.hosts {
                    if src == dst {
                        h += "<td class=\"self\"></td>";
                        continue;
                    }
                    let v = m
                        .cells
                        .iter()
                        .find(|c| &c.src == src && &c.dst == dst)
                        .and_then(|c| c.by_test.get(test?))
                        .and_then(|ms| ms.get(metric));
                    let pair = format!("{src}->{dst}");
                    match v {
                        Some(v) => {
                            let class = if v.stale { "stale" } else { v.class.as_str() };
                            let _ = write!(
                                h,
                                "<td class=\"{class}\" data-pair=\"{}\" data-class=\"{class}\" title=\"{} at {}\">\
                                 <a href=\"/pair?src={}&amp;dst={}\">{}</a></td>",
                                esc(&pair),
                                esc(&v.test),
                                rfc3339(v.t),
                                esc(src),
                                esc(dst),
                                fmt_metric(metric, v.value)
                            );
                        }
                        None => {
                            let _ = write!(
                                h,
                                "<td class=\"empty\" data-pair=\"{}\" data-class=\"empty\">&ndash;</td>",
                                esc(&pair)
                            );
                        }
                    }
                }
                h += "</tr>";
            }
            h += "</table></div>";
        }
    }
    h
}

fn dashboard_html(s: &Shared) -> Result<String, String> {
    let m = matrix(s)?;
    let (active, runs, failures, agents) = {
        let mut a = lock(&s.archive);
        (
            a.active_alerts().map_err(|e| e.to_string())?,
            a.runs(&RunFilter {
                limit: Some(30),
                until: Some(now_ms() + 1),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
            a.runs(&RunFilter {
                status: Some("failed".into()),
                limit: Some(30),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
            a.agents().map_err(|e| e.to_string())?,
        )
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <meta http-equiv=\"refresh\" content=\"15\"><title>vlbiflow mesh {}</title><style>{STYLE}</style></head><body>\
         <h1>Mesh {}</h1><p class=\"small\">updated {} &middot; {} hosts &middot; {} tests &middot; \
         <a href=\"/metrics\">metrics</a></p>",
        esc(&s.cfg.name),
        esc(&s.cfg.name),
        rfc3339(m.now),
        m.hosts.len(),
        s.cfg.tests.len()
    );
    let _ = write!(h, "<h2>Alerts</h2><ul id=\"alerts\">");
    if active.is_empty() {
        h += "<li class=\"small\">none active</li>";
    }
    for e in &active {
        let _ = write!(
            h,
            "<li class=\"raised\" data-alert=\"{}\">{} &middot; since {}</li>",
            esc(&format!("{}/{}->{}", e.rule, e.src, e.dst)),
            esc(&e.message),
            rfc3339(e.t)
        );
    }
    h += "</ul>";
    h += &matrix_tables(&s.cfg, &m);
    let run_table = |h: &mut String, rows: &[RunRow], id: &str| {
        let _ = write!(
            h,
            "<div class=\"wrap\"><table id=\"{id}\"><tr><th>planned</th><th>test</th><th>pair</th><th>status</th><th>figures or reason</th></tr>"
        );
        for r in rows {
            let what = if r.status == "failed" {
                format!(
                    "<span class=\"failed\">{}: {}</span>",
                    esc(r.reason.as_deref().unwrap_or("")),
                    esc(r.detail.as_deref().unwrap_or(""))
                )
            } else {
                [
                    ("throughput_mbps", r.throughput_mbps),
                    ("loss_percent", r.loss_percent),
                    ("rtt_ms", r.rtt_ms),
                    ("capacity_mbps", r.capacity_mbps),
                ]
                .iter()
                .filter_map(|(n, v)| v.map(|v| fmt_metric(n, v)))
                .collect::<Vec<_>>()
                .join(", ")
            };
            let _ = write!(
                h,
                "<tr data-run=\"{}\"><td>{}</td><td>{}</td><td>{}&rarr;{}</td><td>{}</td><td>{what}</td></tr>",
                esc(&r.id),
                rfc3339(r.planned_start),
                esc(&r.test),
                esc(&r.src),
                esc(&r.dst),
                esc(&r.status)
            );
        }
        h.push_str("</table></div>");
    };
    h += "<h2>Run log</h2>";
    run_table(&mut h, &runs, "runs");
    h += "<h2>Failures</h2>";
    run_table(&mut h, &failures, "failures");
    h += "<h2>Agents</h2><table id=\"agents\"><tr><th>agent</th><th>last contact</th><th>software</th></tr>";
    for (name, seen, sw, _) in &agents {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{} ({:.0} s ago)</td><td>{}</td></tr>",
            esc(name),
            rfc3339(*seen),
            (now_ms() - seen) as f64 / 1000.0,
            esc(sw)
        );
    }
    h += "</table></body></html>";
    Ok(h)
}

async fn dashboard(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || dashboard_html(&s)).await, |h| {
        ([(header::CACHE_CONTROL, "no-store")], Html(h)).into_response()
    })
}

/// Query of pair pages and plots.
#[derive(Debug, Deserialize)]
pub struct PairQuery {
    src: String,
    dst: String,
    metric: Option<String>,
    hours: Option<f64>,
}

async fn pair_page(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let runs = lock(&s.archive)
            .runs(&RunFilter {
                src: Some(q.src.clone()),
                dst: Some(q.dst.clone()),
                limit: Some(40),
                until: Some(now_ms() + 1),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        let (src, dst) = (esc(&q.src), esc(&q.dst));
        let mut h = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
             <title>{src} to {dst}</title><style>{STYLE}</style></head><body><p><a href=\"/\">&larr; matrix</a></p>\
             <h1>{src} &rarr; {dst}</h1>"
        );
        for m in ["throughput_mbps", "loss_percent", "rtt_ms", "capacity_mbps"] {
            if runs.iter().any(|r| match m {
                "throughput_mbps" => r.throughput_mbps.is_some(),
                "loss_percent" => r.loss_percent.is_some(),
                "rtt_ms" => r.rtt_ms.is_some(),
                _ => r.capacity_mbps.is_some(),
            }) {
                let _ = write!(
                    h,
                    "<div class=\"wrap\"><img alt=\"{m}\" src=\"/plot/series.svg?src={src}&amp;dst={dst}&amp;metric={m}\"></div>"
                );
            }
        }
        let _ = write!(
            h,
            "<h2>Latest sweep</h2><div class=\"wrap\"><img alt=\"sweep\" src=\"/plot/sweep.svg?src={src}&amp;dst={dst}\"></div><h2>Runs</h2><ul>"
        );
        for r in &runs {
            let _ = write!(
                h,
                "<li class=\"{}\">{} {} {}{}</li>",
                esc(&r.status),
                rfc3339(r.planned_start),
                esc(&r.test),
                esc(&r.status),
                r.reason
                    .as_deref()
                    .map(|x| format!(": {}: {}", esc(x), esc(r.detail.as_deref().unwrap_or(""))))
                    .unwrap_or_default()
            );
        }
        h += "</ul></body></html>";
        Ok(h)
    })
    .await;
    reply(res, |h| Html(h).into_response())
}

fn svg(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn plot_series(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let metric = q.metric.clone().unwrap_or_else(|| "throughput_mbps".into());
        if !crate::config::METRICS.contains(&metric.as_str()) {
            return Err(format!("unknown metric {metric:?}"));
        }
        let now = now_ms();
        let since = now - (q.hours.unwrap_or(24.0).clamp(0.01, 24.0 * 400.0) * 3_600_000.0) as Ms;
        let rows = lock(&s.archive)
            .runs(&RunFilter {
                src: Some(q.src.clone()),
                dst: Some(q.dst.clone()),
                status: Some("ok".into()),
                since: Some(since),
                limit: Some(5000),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        // One series per test: a sweep's loss (at rates above the path's) and a latency test's are
        // different figures.
        let mut series: Vec<(String, Vec<(Ms, f64)>)> = Vec::new();
        for r in &rows {
            let v = match metric.as_str() {
                "throughput_mbps" => r.throughput_mbps,
                "loss_percent" => r.loss_percent,
                "rtt_ms" => r.rtt_ms,
                _ => r.capacity_mbps,
            };
            let Some(v) = v else { continue };
            match series.iter_mut().find(|(t, _)| *t == r.test) {
                Some((_, pts)) => pts.push((r.planned_start, v)),
                None => series.push((r.test.clone(), vec![(r.planned_start, v)])),
            }
        }
        series.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, pts) in &mut series {
            pts.sort_by_key(|p| p.0);
        }
        Ok(crate::plots::series_svg(
            &format!("{} -> {}: {metric}", q.src, q.dst),
            &metric,
            &series,
            now,
        ))
    })
    .await;
    match res {
        Ok(Ok(b)) => svg(b),
        Ok(Err(e)) => text(StatusCode::BAD_REQUEST, e),
        Err(r) => r,
    }
}

async fn plot_sweep(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let mut a = lock(&s.archive);
        let pts = a
            .points(&q.src, &q.dst, now_ms() - 30 * 86_400_000)
            .map_err(|e| e.to_string())?;
        let last = pts.last().map(|p| p.1.clone());
        let latest: Vec<_> = pts
            .into_iter()
            .filter(|p| Some(&p.1) == last.as_ref())
            .map(|p| p.2)
            .collect();
        let title = match &last {
            Some(id) => format!("{} -> {}: {id}", q.src, q.dst),
            None => format!("{} -> {}", q.src, q.dst),
        };
        Ok(crate::plots::sweep_svg(&title, &latest))
    })
    .await;
    match res {
        Ok(Ok(b)) => svg(b),
        Ok(Err(e)) => text(StatusCode::BAD_REQUEST, e),
        Err(r) => r,
    }
}

/// Status for `vlbiflow net mesh status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// Mesh name.
    pub mesh: String,
    /// Configuration hash.
    pub config_hash: String,
    /// sqlite or postgresql.
    pub archive: String,
    /// Hub clock.
    pub now: Ms,
    /// Hub start.
    pub up_since: Ms,
    /// Runs awaiting an outcome.
    pub pending: usize,
    /// Agents: name, last contact, software, config hash (the configured hosts never seen have none).
    pub agents: Vec<AgentStatus>,
    /// Run counts: test, status, reason, count.
    pub counts: Vec<(String, String, String, i64)>,
    /// Alerts active.
    pub active_alerts: usize,
}

/// An agent as the hub sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Host name.
    pub name: String,
    /// Last contact, ms (None: never).
    pub last_seen: Option<Ms>,
    /// Software.
    pub software: String,
    /// Runs the configuration the hub has.
    pub config_current: bool,
}

async fn api_status(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<Status, String> {
        let pending = lock(&s.ledger).pending();
        let mut a = lock(&s.archive);
        let seen = a.agents().map_err(|e| e.to_string())?;
        let agents = s
            .cfg
            .hosts
            .iter()
            .map(|h| {
                let x = seen.iter().find(|x| x.0 == h.name);
                AgentStatus {
                    name: h.name.clone(),
                    last_seen: x.map(|x| x.1),
                    software: x.map(|x| x.2.clone()).unwrap_or_default(),
                    config_current: x.is_some_and(|x| x.3 == s.cfg.hash),
                }
            })
            .collect();
        Ok(Status {
            mesh: s.cfg.name.clone(),
            config_hash: s.cfg.hash.clone(),
            archive: a.kind().into(),
            now: now_ms(),
            up_since: s.started,
            pending,
            agents,
            counts: a.counts(None, None).map_err(|e| e.to_string())?,
            active_alerts: a.active_alerts().map_err(|e| e.to_string())?.len(),
        })
    })
    .await;
    reply(res, |v| json(&v))
}

/// Query of the runs API.
#[derive(Debug, Deserialize)]
pub struct RunsQuery {
    src: Option<String>,
    dst: Option<String>,
    test: Option<String>,
    status: Option<String>,
    since: Option<Ms>,
    until: Option<Ms>,
    limit: Option<usize>,
}

async fn api_runs(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<RunsQuery>,
) -> Response {
    guard!(s, peer, headers);
    let f = RunFilter {
        src: q.src,
        dst: q.dst,
        test: q.test,
        status: q.status,
        since: q.since,
        until: q.until,
        limit: Some(q.limit.unwrap_or(100).min(100_000)),
    };
    reply(
        blocking(move || lock(&s.archive).runs(&f).map_err(|e| e.to_string())).await,
        |v| json(&v),
    )
}

async fn api_results(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(
        blocking(move || lock(&s.archive).latest().map_err(|e| e.to_string())).await,
        |v| json(&v),
    )
}

/// Alerts for `vlbiflow net mesh alerts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlertsView {
    /// Raised and not cleared.
    pub active: Vec<AlertEvent>,
    /// Recent changes, newest first.
    pub events: Vec<AlertEvent>,
}

async fn api_alerts(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<AlertsView, String> {
        let mut a = lock(&s.archive);
        Ok(AlertsView {
            active: a.active_alerts().map_err(|e| e.to_string())?,
            events: a.alert_events(200).map_err(|e| e.to_string())?,
        })
    })
    .await;
    reply(res, |v| json(&v))
}

async fn api_matrix(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || matrix(&s)).await, |v| json(&v))
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn metrics_text(s: &Shared) -> Result<String, String> {
    let m = matrix(s)?;
    let pending = lock(&s.ledger).pending();
    let mut a = lock(&s.archive);
    let counts = a.counts(None, None).map_err(|e| e.to_string())?;
    let active = a.active_alerts().map_err(|e| e.to_string())?;
    let agents = a.agents().map_err(|e| e.to_string())?;
    drop(a);
    let mut out = String::new();
    let help = |out: &mut String, name: &str, kind: &str, text: &str| {
        let _ = writeln!(out, "# HELP {name} {text}\n# TYPE {name} {kind}");
    };
    for (metric, text) in [
        ("throughput_mbps", "Newest throughput of the pair, Mb/s"),
        ("loss_percent", "Newest loss of the pair, percent"),
        ("rtt_ms", "Newest round-trip time of the pair, ms"),
        ("capacity_mbps", "Newest bottleneck capacity of the pair, Mb/s"),
    ] {
        let name = format!("vlbiflow_mesh_{metric}");
        help(&mut out, &name, "gauge", text);
        // One series per test: a pair's loss from a sweep and from a latency test are two figures.
        for c in &m.cells {
            for v in c.by_test.values().filter_map(|ms| ms.get(metric)) {
                let _ = writeln!(
                    out,
                    "{name}{{src=\"{}\",dst=\"{}\",test=\"{}\"}} {}",
                    label(&c.src),
                    label(&c.dst),
                    label(&v.test),
                    v.value
                );
            }
        }
    }
    help(
        &mut out,
        "vlbiflow_mesh_result_timestamp_seconds",
        "gauge",
        "Planned start of the newest result of the pair, test and metric",
    );
    for c in &m.cells {
        for (test, ms) in &c.by_test {
            for (metric, v) in ms {
                let _ = writeln!(
                    out,
                    "vlbiflow_mesh_result_timestamp_seconds{{src=\"{}\",dst=\"{}\",test=\"{}\",metric=\"{metric}\"}} {}",
                    label(&c.src),
                    label(&c.dst),
                    label(test),
                    v.t as f64 / 1000.0
                );
            }
        }
    }
    help(
        &mut out,
        "vlbiflow_mesh_runs",
        "gauge",
        "Archived runs by test, status and failure reason",
    );
    for (test, status, reason, n) in &counts {
        let _ = writeln!(
            out,
            "vlbiflow_mesh_runs{{test=\"{}\",status=\"{}\",reason=\"{}\"}} {n}",
            label(test),
            label(status),
            label(reason)
        );
    }
    help(
        &mut out,
        "vlbiflow_mesh_pending_runs",
        "gauge",
        "Planned runs awaiting an outcome",
    );
    let _ = writeln!(out, "vlbiflow_mesh_pending_runs {pending}");
    help(
        &mut out,
        "vlbiflow_mesh_alerts_active",
        "gauge",
        "Alerts raised and not cleared",
    );
    let _ = writeln!(out, "vlbiflow_mesh_alerts_active {}", active.len());
    help(
        &mut out,
        "vlbiflow_mesh_agent_last_seen_seconds",
        "gauge",
        "Last contact of each agent",
    );
    for (name, seen, _, _) in &agents {
        let _ = writeln!(
            out,
            "vlbiflow_mesh_agent_last_seen_seconds{{agent=\"{}\"}} {}",
            label(name),
            *seen as f64 / 1000.0
        );
    }
    Ok(out)
}

async fn metrics(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || metrics_text(&s)).await, |t| {
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], t).into_response()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(test: &str, src: &str, dst: &str, t: Ms, thr: Option<f64>, loss: f64, rtt: Option<f64>) -> RunRow {
        RunRow {
            id: format!("{test}/{t}/{src}->{dst}"),
            test: test.into(),
            kind: if test == "lat" { "latency" } else { "sweep" }.into(),
            src: src.into(),
            dst: dst.into(),
            planned_start: t,
            planned_end: t + 5000,
            exclusive: test != "lat",
            status: "ok".into(),
            reason: None,
            detail: None,
            started_at: Some(t),
            ended_at: Some(t + 1000),
            throughput_mbps: thr,
            loss_percent: Some(loss),
            rtt_ms: rtt,
            capacity_mbps: None,
            reported_by: Some(src.into()),
        }
    }

    /// A sweep over a 100 Mb/s path at 300 Mb/s loses two thirds; the latency test after it loses
    /// nothing. The dashboard shows both losses in tables of their own (before, the loss table
    /// showed whichever ran last: 0 % for a path where the sweep had just lost 66 %); throughput,
    /// given by one test only, stays one table as it was; /metrics has a series per test.
    #[test]
    fn a_metric_of_two_tests_is_shown_per_test() {
        let cfg = Config::parse(
            "[mesh]\nname = \"t\"\n[[host]]\nname = \"A\"\naddress = \"10.0.0.1\"\n[[host]]\nname = \"J\"\naddress = \"10.0.0.2\"\n\
             [[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT2M\"\n[[test]]\nname = \"lat\"\nkind = \"latency\"\ninterval = \"PT30S\"\n\
             [[threshold]]\nmetric = \"throughput_mbps\"\nwarn = 250\nbad = 200\n",
        )
        .unwrap();
        let latest = [
            row("bw", "A", "J", 1_000_000, Some(97.0), 66.4, None),
            row("lat", "A", "J", 1_030_000, None, 0.0, Some(0.4)),
            row("lat", "J", "A", 1_030_000, None, 0.0, Some(0.5)),
        ];
        let m = matrix_of(&cfg, &latest, 1_040_000);
        let aj = m.cells.iter().find(|c| c.src == "A" && c.dst == "J").unwrap();
        assert_eq!(aj.by_test["bw"]["loss_percent"].value, 66.4);
        assert_eq!(aj.by_test["lat"]["loss_percent"].value, 0.0);
        assert_eq!(aj.by_test["bw"]["throughput_mbps"].class, "bad");
        // The newest of any test, as before.
        assert_eq!(aj.metrics["loss_percent"].test, "lat");

        let h = matrix_tables(&cfg, &m);
        let table = |attrs: &str| -> &str {
            let at = h.find(attrs).unwrap_or_else(|| panic!("no table {attrs}: {h}"));
            &h[at..at + h[at..].find("</table>").unwrap()]
        };
        assert_eq!(h.matches("data-metric=\"throughput_mbps\"").count(), 1, "{h}");
        assert!(table("data-metric=\"throughput_mbps\" data-test=\"bw\"").contains("97 Mb/s"));
        assert_eq!(h.matches("data-metric=\"loss_percent\"").count(), 2, "{h}");
        let bw_loss = table("data-metric=\"loss_percent\" data-test=\"bw\"");
        assert!(
            bw_loss.contains("66.40 %") && !bw_loss.contains("0.00 %"),
            "{bw_loss}"
        );
        let lat_loss = table("data-metric=\"loss_percent\" data-test=\"lat\"");
        assert!(
            lat_loss.contains("0.00 %") && !lat_loss.contains("66.40 %"),
            "{lat_loss}"
        );
        // J->A has no sweep result: an empty cell in the sweep's loss table.
        assert!(
            bw_loss.contains("data-pair=\"J-&gt;A\" data-class=\"empty\""),
            "{bw_loss}"
        );
        assert!(
            h.contains("<h2>loss_percent &middot; bw</h2>") && h.contains("<h2>rtt_ms</h2>"),
            "{h}"
        );
    }

    #[test]
    fn base64() {
        assert_eq!(super::b64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(super::b64_decode("YQ==").unwrap(), b"a");
        assert!(super::b64_decode("a b").is_none());
    }
}
