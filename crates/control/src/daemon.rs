//! The daemon's network side: the TCP command port (tokio) and the HTTP port (axum) around one
//! [`Controller`] behind a mutex. Every controller call is short (it decides; it does not start or stop
//! recordings): the slow work it hands out as [`Action`]s (starting a recording allocates its block pool,
//! stopping one waits up to a second for capture) is carried out here, outside the lock, on tokio's
//! blocking pool, and the outcome fed back. So other sessions, `/status` and `/metrics` keep answering
//! while a recording starts or stops.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use vlbiflow_formats::time::UtcTime;
use vlbiflow_guard::gate::{Gate, GateConfig, Verdict};

use crate::config::DaemonConfig;
use crate::controller::{Action, Answer, Controller, Ticket};
use crate::disks::SystemDisks;
use crate::engine::Engine;
use crate::proto::Reply;
use crate::session::{constant_time_eq, Mark6Session, Screened};

/// The dashboard page (self-contained: inline CSS and JS, no external resources).
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");
/// A write to a client that does not read is abandoned after this long.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for a recording to flush.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(30);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot listen for commands on {addr}: {source}")]
    Control {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The line with the bound addresses could not be written (a reader of standard output that left).
    #[error("writing to standard output: {0}")]
    Stdout(#[source] std::io::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

pub(crate) struct Shared {
    ctl: Mutex<Controller>,
    /// Used only to carry out [`Action::Start`], never while `ctl` is locked.
    engine: Mutex<Box<dyn Engine>>,
    token: Option<String>,
    pub(crate) control_token: Option<String>,
    http_token: Option<String>,
    pub(crate) idle: Duration,
    /// Time to send the token when one is required.
    pub(crate) auth_timeout: Duration,
    /// Admission of connections that have not given the token yet (when one is required).
    gate: Option<Mutex<Gate>>,
    /// Peers that need no token (`allow`).
    allow: vlbiflow_guard::net::AllowList,
    /// The jive5ab dialect's state when the command port speaks it (`dialect = "jive5ab"`).
    pub(crate) j5: Option<crate::jive5ab::daemon::SharedJive5ab>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Controller> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Carries out the controller's actions outside its lock, feeding outcomes back (which may hand out more);
/// returns the replies to the `record=on` statements whose starts these were.
pub(crate) async fn perform(sh: &Arc<Shared>, mut actions: Vec<Action>) -> Vec<(Ticket, Reply)> {
    let mut replies = Vec::new();
    while !actions.is_empty() {
        for a in std::mem::take(&mut actions) {
            match a {
                Action::Start {
                    ticket,
                    config,
                    forward,
                } => {
                    let sh2 = sh.clone();
                    let outcome = tokio::task::spawn_blocking(move || {
                        sh2.engine
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .start_forwarding(*config, forward)
                    })
                    .await
                    .unwrap_or_else(|_| Err("the recorder panicked while starting".into()));
                    let (reply, more) = with_ctl(sh, move |c| {
                        let r = c.started(ticket, outcome, UtcTime::now());
                        (r, c.take_actions())
                    })
                    .await;
                    if let Some(r) = reply {
                        replies.push((ticket, r));
                    }
                    actions.extend(more);
                }
                Action::Stop(rec) => {
                    let _ = tokio::task::spawn_blocking(move || rec.stop()).await;
                }
                Action::Release(rec) => {
                    let _ = tokio::task::spawn_blocking(move || drop(rec)).await;
                }
            }
        }
    }
    replies
}

/// Runs `f` on the controller from the blocking pool.
pub(crate) async fn with_ctl<T: Send + 'static>(
    sh: &Arc<Shared>,
    f: impl FnOnce(&mut Controller) -> T + Send + 'static,
) -> T {
    let sh = sh.clone();
    tokio::task::spawn_blocking(move || f(&mut sh.lock()))
        .await
        .expect("controller call panicked")
}

/// A daemon running on a background thread (for tests and embedding).
pub struct DaemonHandle {
    /// Bound command address.
    pub control_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DaemonHandle {
    /// Stops the daemon (any recording is stopped and flushed) and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, DaemonError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .thread_name("vf-control")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)
}

async fn bind(cfg: &DaemonConfig) -> Result<(TcpListener, TcpListener), DaemonError> {
    let c = TcpListener::bind(cfg.control)
        .await
        .map_err(|source| DaemonError::Control {
            addr: cfg.control,
            source,
        })?;
    let h = TcpListener::bind(cfg.http)
        .await
        .map_err(|source| DaemonError::Http {
            addr: cfg.http,
            source,
        })?;
    Ok((c, h))
}

/// Starts the daemon on a background thread; returns once both ports are bound.
pub fn spawn(cfg: DaemonConfig, engine: Box<dyn Engine>) -> Result<DaemonHandle, DaemonError> {
    cfg.check_token()?;
    let rt = runtime()?;
    let (control, http) = rt.block_on(bind(&cfg))?;
    let control_addr = control.local_addr().map_err(DaemonError::Runtime)?;
    let http_addr = http.local_addr().map_err(DaemonError::Runtime)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("vf-daemon".into())
        .spawn(move || {
            rt.block_on(run(cfg, engine, control, http, stop_rx, None));
        })
        .map_err(DaemonError::Runtime)?;
    Ok(DaemonHandle {
        control_addr,
        http_addr,
        stop: stop_tx,
        thread: Some(thread),
    })
}

/// Runs the daemon in the foreground until SIGINT or SIGTERM, printing one line with the bound addresses
/// on standard output (`listening control=ADDR http=ADDR`) and events on standard error.
pub fn serve(cfg: DaemonConfig, engine: Box<dyn Engine>) -> Result<(), DaemonError> {
    serve_notifying(cfg, engine, |_, _| {})
}

/// Called by the daemon's controller loop after each pass that ticked the controller and carried out its
/// actions: proof that the loop doing the work is alive (a service manager's watchdog).
pub type Alive = Arc<dyn Fn() + Send + Sync>;

/// [`serve`], calling `ready` with the bound command and HTTP addresses once both listen (where a service
/// manager is told that the daemon is up).
pub fn serve_notifying(
    cfg: DaemonConfig,
    engine: Box<dyn Engine>,
    ready: impl FnOnce(SocketAddr, SocketAddr),
) -> Result<(), DaemonError> {
    serve_watched(cfg, engine, ready, Arc::new(|| {}))
}

/// [`serve_notifying`], calling `alive` from the controller loop after each pass (every 200 ms, finer
/// while a start time is pending), so a stuck controller stops the calls.
pub fn serve_watched(
    cfg: DaemonConfig,
    engine: Box<dyn Engine>,
    ready: impl FnOnce(SocketAddr, SocketAddr),
    alive: Alive,
) -> Result<(), DaemonError> {
    serve_foreground(cfg, engine, ready, alive, None)
}

/// Asks a daemon run by [`serve_until`] to stop; callable from any thread (a process's signal thread).
#[derive(Clone)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    /// Starts the daemon's stop (any recording is stopped and flushed), once; later calls do nothing.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// The daemon's end of a [`stop_channel`], given to [`serve_until`].
pub struct StopRequest(watch::Receiver<bool>);

/// A channel to stop a [`serve_until`] daemon from outside, for a process that handles its signals
/// itself (and so tells SIGINT from SIGTERM).
pub fn stop_channel() -> (StopHandle, StopRequest) {
    let (tx, rx) = watch::channel(false);
    (StopHandle(Arc::new(tx)), StopRequest(rx))
}

/// [`serve_watched`] that stops when `stop` is asked to ([`StopHandle::stop`]) instead of on SIGINT or
/// SIGTERM, which the daemon leaves to its caller.
pub fn serve_until(
    cfg: DaemonConfig,
    engine: Box<dyn Engine>,
    ready: impl FnOnce(SocketAddr, SocketAddr),
    alive: Alive,
    stop: StopRequest,
) -> Result<(), DaemonError> {
    serve_foreground(cfg, engine, ready, alive, Some(stop))
}

/// The foreground daemon, stopped by `stop` or, without one, by SIGINT or SIGTERM.
fn serve_foreground(
    cfg: DaemonConfig,
    engine: Box<dyn Engine>,
    ready: impl FnOnce(SocketAddr, SocketAddr),
    alive: Alive,
    stop: Option<StopRequest>,
) -> Result<(), DaemonError> {
    cfg.check_token()?;
    let rt = runtime()?;
    rt.block_on(async move {
        let (control, http) = bind(&cfg).await?;
        let c = control.local_addr().map_err(DaemonError::Runtime)?;
        let h = http.local_addr().map_err(DaemonError::Runtime)?;
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening control={c} http={h}").map_err(DaemonError::Stdout)?;
        }
        tracing::info!(
            target: "vlbiflow::serve",
            control = %c,
            dashboard = %format!("http://{h}/"),
            "{}; commands with vlbiflow ctl --host {c}",
            crate::controller::describe(&cfg)
        );
        ready(c, h);
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            match stop {
                Some(StopRequest(mut rx)) => {
                    // the handle dropped unused: never asked to stop
                    if rx.wait_for(|s| *s).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => {
                    let mut term =
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
                    }
                }
            }
            tracing::info!(target: "vlbiflow::serve", "stopping (any recording is stopped and flushed)");
            let _ = stop_tx.send(true);
        });
        run(cfg, engine, control, http, stop_rx, Some(alive)).await;
        Ok(())
    })
}

async fn run(
    cfg: DaemonConfig,
    engine: Box<dyn Engine>,
    control: TcpListener,
    http: TcpListener,
    mut stop: watch::Receiver<bool>,
    // the foreground daemon (events logged, liveness reported); `None` for one spawned in a process
    alive: Option<Alive>,
) {
    let log = alive.is_some();
    let control_token = (cfg.require_token || !cfg.control.ip().is_loopback())
        .then(|| cfg.token.clone())
        .flatten();
    let http_token = (cfg.require_token || !cfg.http.ip().is_loopback())
        .then(|| cfg.token.clone())
        .flatten();
    let max = cfg.max_connections;
    let j5 = (cfg.dialect == crate::config::Dialect::Jive5ab).then(|| {
        Mutex::new(crate::jive5ab::Jive5ab::new(crate::jive5ab::daemon::identity(
            &cfg.name,
        )))
    });
    // Half the connections are kept for those that gave the token.
    let gate = control_token.is_some().then(|| {
        let pending = (max / 2).max(1);
        Mutex::new(Gate::new(GateConfig {
            pending,
            per_address: GateConfig::default().per_address.min(pending),
            ..GateConfig::default()
        }))
    });
    let sh = Arc::new(Shared {
        j5,
        gate,
        allow: cfg.allow.clone(),
        auth_timeout: cfg.auth_timeout,
        token: cfg.token.clone(),
        control_token,
        http_token,
        idle: cfg.idle_timeout,
        ctl: Mutex::new(Controller::new(cfg, Box::new(SystemDisks), UtcTime::now())),
        engine: Mutex::new(engine),
    });
    let _ = &sh.token;
    let ticker = tokio::spawn(tick_loop(sh.clone(), stop.clone(), log, alive));
    let app = Router::new()
        .route("/", get(dashboard))
        .route("/status", get(status))
        .route("/history", get(history))
        .with_state(sh.clone())
        .merge(metrics_router(&sh));
    let mut http_stop = stop.clone();
    let http_task = tokio::spawn(vlbiflow_http::serve(
        http,
        app,
        vlbiflow_http::Limits::DEFAULT,
        async move {
            let _ = http_stop.wait_for(|s| *s).await;
        },
    ));
    let permits = Arc::new(Semaphore::new(max));
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = control.accept() => {
                let Ok((stream, peer)) = accepted else {
                    // EMFILE and the like: back off briefly rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                // a peer of the allow-list needs no token: the gate does not see it
                let trusted = sh.allow.allows(peer.ip());
                let gate = sh.gate.as_ref().filter(|_| !trusted);
                let delay = match gate.map(|g| lock(g).arrive(peer.ip(), Instant::now())) {
                    None => Duration::ZERO,
                    Some(Verdict::Admit { delay }) => delay,
                    Some(Verdict::AddressBusy | Verdict::Full) => {
                        sh.lock().count_connection(true);
                        tokio::spawn(refuse_unauthenticated(stream));
                        continue;
                    }
                };
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        sh.lock().count_connection(false);
                        let sh = sh.clone();
                        let admitted = Admitted { ip: peer.ip(), delay, trusted };
                        tokio::spawn(async move {
                            connection(stream, admitted, sh).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        if let Some(g) = gate {
                            lock(g).left(peer.ip());
                        }
                        sh.lock().count_connection(true);
                        tokio::spawn(refuse(stream, max));
                    }
                }
            }
        }
    }
    drop(control);
    let _ = http_task.await;
    let _ = ticker.await;
    shutdown(&sh).await;
}

/// Stops any recording and waits (bounded) for it to flush.
async fn shutdown(sh: &Arc<Shared>) {
    let actions = with_ctl(sh, |c| {
        c.begin_shutdown();
        c.take_actions()
    })
    .await;
    perform(sh, actions).await;
    run_until_idle(sh, SHUTDOWN_FLUSH).await;
}

/// Ticks the controller and carries out its actions until it is idle (a recording flushed) or `limit`
/// has passed.
pub(crate) async fn run_until_idle(sh: &Arc<Shared>, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let (idle, actions) = with_ctl(sh, |c| {
            c.tick(UtcTime::now());
            (c.is_idle(), c.take_actions())
        })
        .await;
        perform(sh, actions).await;
        if idle || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn tick_loop(sh: Arc<Shared>, mut stop: watch::Receiver<bool>, log: bool, alive: Option<Alive>) {
    let mut seen = 0;
    loop {
        let (pending, lines, new_seen, actions) = with_ctl(&sh, move |c| {
            c.tick(UtcTime::now());
            let (lines, n) = c.events_since(seen);
            (c.waiting_for_start(), lines, n, c.take_actions())
        })
        .await;
        perform(&sh, actions).await;
        if let Some(a) = &alive {
            a();
        }
        seen = new_seen;
        if log {
            for l in lines {
                // the event's own time stamp (UTC seconds, first word) is kept as a field
                let (at, text) = l.split_once(' ').unwrap_or(("", &l));
                tracing::info!(target: "vlbiflow::serve", event_time = at, "{text}");
            }
        }
        // Finer ticks while a start time is pending, so the recording starts early in its second.
        let period = if pending {
            Duration::from_millis(20)
        } else {
            Duration::from_millis(200)
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(period) => {}
        }
    }
}

async fn refuse(mut stream: TcpStream, max: usize) {
    let msg = format!("!error = 6 : too many connections (limit {max}), try again later ;\n");
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(msg.as_bytes())).await;
}

fn lock(g: &Mutex<Gate>) -> MutexGuard<'_, Gate> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}

async fn refuse_unauthenticated(mut stream: TcpStream) {
    let msg = "!error = 6 : too many connections without the token from this address or in all, try again later ;\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(msg.as_bytes())).await;
}

/// How a command connection was let in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admitted {
    pub(crate) ip: IpAddr,
    /// The gate's tarpit for an address with failed or silent attempts.
    pub(crate) delay: Duration,
    /// From the allow-list: needs no token, not seen by the gate.
    pub(crate) trusted: bool,
}

/// A connection admitted by the gate that has not given the token yet: when dropped still pending (the
/// peer left, stayed silent, sent garbage or wrong tokens), its address gets a strike.
pub(crate) struct Pending<'a> {
    gate: Option<&'a Mutex<Gate>>,
    ip: IpAddr,
}

impl<'a> Pending<'a> {
    /// The gate's hold on an admitted connection (none for a trusted one, or without a gate).
    pub(crate) fn new(sh: &'a Shared, a: Admitted) -> Self {
        Pending {
            gate: sh.gate.as_ref().filter(|_| !a.trusted),
            ip: a.ip,
        }
    }

    /// The connection gave the token: no strike when it goes.
    pub(crate) fn passed(&mut self) {
        if let Some(g) = self.gate.take() {
            lock(g).passed(self.ip);
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            lock(g).struck(self.ip, Instant::now());
        }
    }
}

async fn connection(mut stream: TcpStream, a: Admitted, sh: Arc<Shared>) {
    if sh.j5.is_some() {
        return crate::jive5ab::daemon::connection(stream, a, sh).await;
    }
    let mut pending = Pending::new(&sh, a);
    if !a.delay.is_zero() {
        // an address with failed or silent attempts waits before it is read (a tarpit)
        tokio::time::sleep(a.delay).await;
    }
    let _ = stream.set_nodelay(true);
    let mut session = Mark6Session::new(sh.control_token.clone().filter(|_| !a.trusted));
    let auth_deadline = tokio::time::Instant::now() + sh.auth_timeout;
    let mut buf = vec![0u8; 4096];
    loop {
        let authenticated = session.authenticated();
        let read = if authenticated {
            tokio::time::timeout(sh.idle, stream.read(&mut buf)).await
        } else {
            tokio::time::timeout_at(auth_deadline, stream.read(&mut buf)).await
        };
        let n = match read {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
            Err(_) => {
                let msg: &[u8] = if authenticated {
                    b"!error = 4 : idle timeout, closing ;\n"
                } else {
                    b"!error = 4 : no auth=<token> in time, closing ;\n"
                };
                let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(msg)).await;
                return;
            }
        };
        let inputs = session.frame(&buf[..n]);
        if inputs.is_empty() {
            continue;
        }
        let mut out = String::new();
        for input in inputs {
            let reply = match session.screen(input) {
                None => break,
                Some(Screened::Reply(r)) => r,
                Some(Screened::Execute(st)) => execute(&sh, st).await,
            };
            out.push_str(&reply.format());
            out.push('\n');
        }
        if session.authenticated() {
            pending.passed();
        }
        match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(out.as_bytes())).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        if session.should_close() {
            return;
        }
    }
}

/// Executes one statement: the controller decides under its lock, the actions are carried out after.
async fn execute(sh: &Arc<Shared>, st: crate::proto::Statement) -> Reply {
    let (answer, actions) = with_ctl(sh, move |c| {
        c.count_command();
        let a = c.handle(&st, UtcTime::now());
        (a, c.take_actions())
    })
    .await;
    let replies = perform(sh, actions).await;
    match answer {
        Answer::Now(r) => r,
        Answer::Later(t) => replies
            .into_iter()
            .find(|(k, _)| *k == t)
            .map(|(_, r)| r)
            .unwrap_or_else(|| Reply::protocol_error("the recording's start was lost")),
    }
}

/// The bearer token of a request, if it sent one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// True when the request carries the token (in the Authorization header only: a token in the query
/// string ends up in logs and browser histories), or none is required.
fn authorised(sh: &Shared, headers: &HeaderMap, _q: &HashMap<String, String>) -> bool {
    let Some(token) = &sh.http_token else { return true };
    bearer(headers).is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

fn unauthorised() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "token required: Authorization: Bearer <token> (the dashboard: open http://HOST:PORT/#token=<token>)\n",
    )
        .into_response()
}

type Q = Query<HashMap<String, String>>;

/// The page itself holds no data, so a browser may load it without the token (it cannot send a header
/// on navigation); the page sends the token from its URL fragment with each request for data. A wrong
/// token is refused all the same.
async fn dashboard(State(sh): State<Arc<Shared>>, headers: HeaderMap, Query(q): Q) -> Response {
    if bearer(&headers).is_some() && !authorised(&sh, &headers, &q) {
        return unauthorised();
    }
    Html(DASHBOARD_HTML).into_response()
}

async fn status(State(sh): State<Arc<Shared>>, headers: HeaderMap, Query(q): Q) -> Response {
    if !authorised(&sh, &headers, &q) {
        return unauthorised();
    }
    let r = with_ctl(&sh, |c| c.report(UtcTime::now())).await;
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(r)).into_response()
}

async fn history(State(sh): State<Arc<Shared>>, headers: HeaderMap, Query(q): Q) -> Response {
    if !authorised(&sh, &headers, &q) {
        return unauthorised();
    }
    let h = with_ctl(&sh, |c| c.history()).await;
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(h)).into_response()
}

/// `GET /metrics`: readable with the read-only metrics token when one is configured, and as the other
/// pages are (the access token off loopback).
fn metrics_router(sh: &Arc<Shared>) -> Router {
    let token = sh.lock().config().metrics_token.clone();
    let (a, c) = (sh.clone(), sh.clone());
    vlbiflow_http::MetricsEndpoint::new(token).router(
        move |r: &vlbiflow_http::Asker<'_>| authorised(&a, r.headers, r.query),
        move || {
            let sh = c.clone();
            async move {
                let snap = with_ctl(&sh, |c| crate::metrics::Snapshot {
                    report: c.report(UtcTime::now()),
                    cumulative: c.cumulative(),
                })
                .await;
                Box::new(snap) as Box<dyn prometheus_client::collector::Collector>
            }
        },
    )
}
