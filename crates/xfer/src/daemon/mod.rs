//! The serving daemon: accepts authenticated control connections, checks each request against its roots,
//! and runs the transfers (several at once, each on its own threads and UDP port).
//!
//! Unauthenticated connections get nothing but a handshake attempt: a peer that cannot complete it within
//! the handshake timeout is dropped (a port scan or a probe is counted, nothing else happens); a wrong key
//! is counted as a failed login, and an address with too many failed logins in a minute is refused for a
//! minute before any handshake.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vlbiflow_udp::{open_udp, UdpConfig};

use crate::dest::Roots;
use crate::error::XferError;
use crate::key::Key;
use crate::link::{Inbound, Link};
use crate::progress::Progress;
use crate::recv::{self, RecvParams};
use crate::secure::{self, AuthError};
use crate::session::Session;
use crate::share::RateCap;
use crate::utc_now;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Control address (TCP); data ports are opened on the same IP.
    pub listen: SocketAddr,
    /// Where files may be written and read.
    pub roots: Roots,
    /// The pre-shared key.
    pub key: Key,
    /// Dead-peer timeout of transfers.
    pub dead_timeout: Duration,
    /// Time allowed for the handshake and the request.
    pub handshake_timeout: Duration,
    /// Most transfers at once (more are refused with a clear message).
    pub max_transfers: usize,
    /// Failed logins from one address within a minute before it is refused for a minute.
    pub max_failed_logins: u32,
    /// Write a line per event to standard error.
    pub log: bool,
    /// Archive of transfers (SQLite), if any.
    pub archive: Option<std::path::PathBuf>,
    /// Prometheus metrics on this address (loopback only), if any.
    pub metrics: Option<SocketAddr>,
    /// Rate ceiling of each transfer, bits/s on the wire.
    pub max_rate_bps: Option<f64>,
    /// Rate ceiling of all transfers together, shared equally among those running (again whenever one starts
    /// or ends; receiving transfers hear their new share with a `rate_cap` message).
    pub total_rate_bps: Option<f64>,
    /// Key for daemons this one pushes to on a client's behalf (default: its own key).
    pub peer_key: Option<Key>,
    /// Read every chunk received back from the disk before committing, whatever the client asked
    /// (`--verify-written` as the station's policy).
    pub verify_written: bool,
    /// Run the data threads of every transfer in the real-time class (`--realtime`; checked at start).
    pub realtime: bool,
}

impl ServeConfig {
    /// Defaults: 10 s dead timeout, 10 s handshake, 16 transfers, 5 failed logins a minute.
    pub fn new(listen: SocketAddr, roots: Roots, key: Key) -> Self {
        ServeConfig {
            listen,
            roots,
            key,
            dead_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_transfers: 16,
            max_failed_logins: 5,
            log: false,
            archive: None,
            metrics: None,
            max_rate_bps: None,
            total_rate_bps: None,
            peer_key: None,
            verify_written: false,
            realtime: false,
        }
    }
}

/// Daemon-wide counters (exported as metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub probes: AtomicU64,
    pub auth_failures: AtomicU64,
    pub auth_blocked: AtomicU64,
    pub refused: AtomicU64,
    /// Requests turned away for now: at the transfer limit, or a destination file being written.
    pub refused_busy: AtomicU64,
    pub transfers_ok: AtomicU64,
    pub transfers_failed: AtomicU64,
    pub bytes_received: AtomicU64,
    pub datagrams_bad_tag: AtomicU64,
    pub datagrams_malformed: AtomicU64,
    pub bytes_written_direct: AtomicU64,
    pub bytes_read_back: AtomicU64,
}

/// A transfer the daemon runs now.
#[derive(Debug)]
pub struct Active {
    pub id: u32,
    pub peer: SocketAddr,
    pub direction: &'static str,
    pub path: String,
    pub data_port: u16,
    pub progress: Arc<Progress>,
    /// This transfer's ceiling now: `--max-rate`, and its share of `--total-rate` among the transfers
    /// running, shared again whenever one starts or ends.
    pub cap: Arc<RateCap>,
}

impl Active {
    /// A transfer about to run, with fresh counters and no ceiling yet (the daemon sets it on admitting
    /// it).
    fn new(id: u32, peer: SocketAddr, direction: &'static str, path: String, data_port: u16) -> Arc<Active> {
        Arc::new(Active {
            id,
            peer,
            direction,
            path,
            data_port,
            progress: Arc::new(Progress::default()),
            cap: Arc::new(RateCap::new()),
        })
    }
}

/// A transfer counted among the daemon's running ones (its limit and the shares of its total rate)
/// for as long as this lives.
struct Admitted<'a> {
    sh: &'a Shared,
    act: Arc<Active>,
}

impl Shared {
    /// Counts `act` among the running transfers, or says why not (the daemon runs as many as it may).
    fn admit(&self, act: Arc<Active>) -> Result<Admitted<'_>, String> {
        let mut active = self.active.lock().expect("active");
        if active.len() >= self.cfg.max_transfers {
            return Err(format!(
                "{} transfers running, the limit is {}; retry later",
                active.len(),
                self.cfg.max_transfers
            ));
        }
        active.push(act.clone());
        self.reshare(&active);
        Ok(Admitted { sh: self, act })
    }

    /// Gives each running transfer its ceiling: `--max-rate`, and an equal share of `--total-rate`.
    fn reshare(&self, active: &[Arc<Active>]) {
        let c = crate::share::share(self.cfg.max_rate_bps, self.cfg.total_rate_bps, active.len());
        for a in active {
            a.cap.set(c);
        }
    }

    /// Claims the destination files of a receive for transfer `id` from `peer`, or names the transfer
    /// that is writing one of them.
    fn claim(&self, plan: &recv::Plan, id: u32, peer: SocketAddr) -> Result<Claim<'_>, String> {
        let paths: Vec<PathBuf> = plan
            .files
            .iter()
            .map(|f| f.dir.iter().fold(f.root.clone(), |p, c| p.join(c)).join(&f.leaf))
            .collect();
        let mut claims = self.claims.lock().expect("claims");
        for (p, f) in paths.iter().zip(&plan.files) {
            if let Some((other, from)) = claims.get(p) {
                let mut shown = f.dir.join("/");
                if !shown.is_empty() {
                    shown.push('/');
                }
                shown.push_str(&f.leaf);
                return Err(format!(
                    "{shown} is being received by transfer {other:08x} from {from}; retry when it has ended"
                ));
            }
        }
        for p in &paths {
            claims.insert(p.clone(), (id, peer));
        }
        Ok(Claim { sh: self, paths })
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut active = self.sh.active.lock().expect("active");
        active.retain(|a| !Arc::ptr_eq(a, &self.act));
        self.sh.reshare(&active);
    }
}

/// Destination files a receive holds (no other transfer of this daemon may write them) until dropped.
struct Claim<'a> {
    sh: &'a Shared,
    paths: Vec<PathBuf>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut claims = self.sh.claims.lock().expect("claims");
        for p in &self.paths {
            claims.remove(p);
        }
    }
}

/// Failed logins of one address: count, start of the counting minute, refused until.
type FailedLogins = (u32, Instant, Option<Instant>);

struct Shared {
    archive: Option<Mutex<crate::archive::Archive>>,
    cfg: ServeConfig,
    counters: Counters,
    active: Mutex<Vec<Arc<Active>>>,
    /// Destination files of running receives: by whom.
    claims: Mutex<HashMap<PathBuf, (u32, SocketAddr)>>,
    failed: Mutex<HashMap<IpAddr, FailedLogins>>,
    stop: AtomicBool,
}

/// A running daemon.
pub struct Daemon {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    metrics_thread: Option<JoinHandle<()>>,
}

macro_rules! log {
    ($sh:expr, $($t:tt)*) => {
        if $sh.cfg.log {
            eprintln!("{} xfer: {}", utc_now(), format!($($t)*));
        }
    };
}

impl Daemon {
    /// Binds the control port and starts accepting.
    pub fn start(cfg: ServeConfig) -> Result<Daemon, XferError> {
        if cfg.realtime {
            crate::check_realtime()?;
        }
        let l = TcpListener::bind(cfg.listen)
            .map_err(|e| XferError::Io(format!("listening on {}: {e}", cfg.listen)))?;
        l.set_nonblocking(true)
            .map_err(|e| XferError::Io(format!("listening on {}: {e}", cfg.listen)))?;
        let addr = l.local_addr().map_err(|e| XferError::Usage(e.to_string()))?;
        let archive = match &cfg.archive {
            Some(p) => Some(Mutex::new(
                crate::archive::Archive::open(p).map_err(XferError::Usage)?,
            )),
            None => None,
        };
        let metrics = match cfg.metrics {
            Some(m) if !m.ip().is_loopback() => {
                return Err(XferError::Usage(format!(
                    "--metrics {m}: metrics are served on loopback only (they are not authenticated); scrape through an authenticating proxy or an SSH tunnel"
                )))
            }
            Some(m) => {
                let ml = TcpListener::bind(m).map_err(|e| XferError::Usage(format!("metrics on {m}: {e}")))?;
                ml.set_nonblocking(true).map_err(|e| XferError::Usage(e.to_string()))?;
                Some(ml)
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            archive,
            cfg,
            counters: Counters::default(),
            active: Mutex::new(Vec::new()),
            claims: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("xfer-accept".into())
            .spawn(move || accept_loop(l, sh))
            .map_err(|e| XferError::Usage(e.to_string()))?;
        let metrics_addr = metrics.as_ref().and_then(|m| m.local_addr().ok());
        let metrics_thread = match metrics {
            Some(ml) => {
                let sh = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("xfer-metrics".into())
                        .spawn(move || metrics_loop(ml, sh))
                        .map_err(|e| XferError::Usage(e.to_string()))?,
                )
            }
            None => None,
        };
        Ok(Daemon {
            addr,
            metrics_addr,
            shared,
            thread: Some(thread),
            metrics_thread,
        })
    }

    /// The control address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics address, if serving metrics.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The metrics text (Prometheus exposition format).
    pub fn metrics_text(&self) -> String {
        metrics_text(&self.shared)
    }

    /// Daemon-wide counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Transfers running now.
    pub fn active(&self) -> Vec<Arc<Active>> {
        self.shared.active.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Stops accepting, tells running transfers to stop (they keep their `.part` files) and waits for them.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.shared.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.metrics_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn accept_loop(l: TcpListener, sh: Arc<Shared>) {
    let mut sessions: Vec<JoinHandle<()>> = Vec::new();
    while !sh.stop.load(Relaxed) {
        match l.accept() {
            Ok((s, peer)) => {
                sh.counters.connections.fetch_add(1, Relaxed);
                sessions.retain(|h| !h.is_finished());
                if sessions.len() >= sh.cfg.max_transfers + 16 {
                    // too many connections at once: drop this one unanswered
                    drop(s);
                    continue;
                }
                let sh2 = sh.clone();
                if let Ok(h) = std::thread::Builder::new()
                    .name("xfer-session".into())
                    .spawn(move || session(s, peer, sh2))
                {
                    sessions.push(h);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    for h in sessions {
        let _ = h.join();
    }
}

fn blocked(sh: &Shared, ip: IpAddr) -> bool {
    let mut m = sh.failed.lock().expect("failed logins");
    match m.get(&ip) {
        Some(&(_, _, Some(until))) if Instant::now() < until => true,
        Some(&(_, _, Some(_))) => {
            m.remove(&ip);
            false
        }
        _ => false,
    }
}

fn note_failure(sh: &Shared, ip: IpAddr) {
    let mut m = sh.failed.lock().expect("failed logins");
    let now = Instant::now();
    let e = m.entry(ip).or_insert((0, now, None));
    if now.duration_since(e.1) > Duration::from_secs(60) {
        *e = (0, now, None);
    }
    e.0 += 1;
    if e.0 >= sh.cfg.max_failed_logins {
        e.2 = Some(now + Duration::from_secs(60));
    }
    if m.len() > 100_000 {
        m.retain(|_, v| now.duration_since(v.1) < Duration::from_secs(60));
    }
}

/// An authenticated client sent a session message this daemon cannot read (another release, most
/// likely): counted and logged as a refusal, and the client hears why.
fn refuse_unreadable(sh: &Shared, link: &Link, peer: SocketAddr, why: &str) {
    sh.counters.refused.fetch_add(1, Relaxed);
    log!(sh, "{peer}: refused: {why}");
    link.send_session(&Session::Refuse {
        error: format!("{why} (the daemon runs vlbiflow {})", env!("CARGO_PKG_VERSION")),
        busy: false,
    });
}

fn session(s: TcpStream, peer: SocketAddr, sh: Arc<Shared>) {
    if blocked(&sh, peer.ip()) {
        sh.counters.auth_blocked.fetch_add(1, Relaxed);
        secure::refuse_blocked(s);
        return;
    }
    let conn = match secure::server_handshake(s, &sh.cfg.key.0, sh.cfg.handshake_timeout) {
        Ok(c) => c,
        Err(AuthError::BadKey(why)) => {
            sh.counters.auth_failures.fetch_add(1, Relaxed);
            note_failure(&sh, peer.ip());
            log!(sh, "{peer}: failed login: {why}");
            return;
        }
        Err(_) => {
            sh.counters.probes.fetch_add(1, Relaxed);
            return;
        }
    };
    let secret = conn.secret;
    let link = Link::start(conn, crate::link::control_stall_limit(sh.cfg.dead_timeout));
    let req = match link.rx.recv_timeout(sh.cfg.handshake_timeout) {
        Ok(Inbound::Sess(s)) => s,
        Ok(Inbound::Refused(why)) => return refuse_unreadable(&sh, &link, peer, &why),
        Ok(other) => {
            log!(sh, "{peer}: expected a request, got {other:?}");
            return;
        }
        Err(_) => return,
    };
    let refuse = |why: String| {
        sh.counters.refused.fetch_add(1, Relaxed);
        log!(sh, "{peer}: refused: {why}");
        link.send_session(&Session::Refuse {
            error: why,
            busy: false,
        });
    };
    let busy = |why: String| {
        sh.counters.refused_busy.fetch_add(1, Relaxed);
        log!(sh, "{peer}: busy: {why}");
        link.send_session(&Session::Refuse {
            error: why,
            busy: true,
        });
    };
    match req {
        Session::Push {
            dest,
            files,
            mut options,
        } => {
            options.verify_written |= sh.cfg.verify_written;
            let (root, comps) = match sh.cfg.roots.resolve(&dest) {
                Ok(x) => x,
                Err(e) => return refuse(e),
            };
            let plan = match recv::plan(&root.path, &comps, &files, &options) {
                Ok(p) => Arc::new(p),
                Err(e) => return refuse(e),
            };
            let transfer_id: u32 = rand::random();
            let _claim = match sh.claim(&plan, transfer_id, peer) {
                Ok(c) => c,
                Err(e) => return busy(e),
            };
            let mut ucfg = UdpConfig::receiver(SocketAddr::new(sh.cfg.listen.ip(), 0));
            ucfg.recv_buffer = Some(64 << 20);
            ucfg.timestamps = true; // the path's timing is read from the kernel's receive times
            ucfg.gro = true;
            ucfg.rxq_ovfl = true;
            let (sock, _rep) = match open_udp(&ucfg) {
                Ok(x) => x,
                Err(e) => return refuse(format!("no data port: {e}")),
            };
            let data_port = sock.local_addr().map(|a| a.port()).unwrap_or(0);
            let act = Active::new(transfer_id, peer, "receive", dest.clone(), data_port);
            let progress = act.progress.clone();
            let admitted = match sh.admit(act.clone()) {
                Ok(a) => a,
                Err(e) => return busy(e),
            };
            let rate_cap_bps = act.cap.get();
            link.send_session(&Session::Accept {
                transfer_id,
                data_port,
                have: plan.have(),
                files: Vec::new(),
                rate_cap_bps,
            });
            let started = utc_now();
            let total: u64 = files.iter().map(|f| f.size).sum();
            log!(
                sh,
                "{peer}: transfer {transfer_id:08x}: receiving {} files, {total} bytes into {dest} (data port {data_port})",
                files.len()
            );
            let params = RecvParams {
                transfer_id,
                secret,
                dead_timeout: sh.cfg.dead_timeout,
                source: peer.to_string(),
                realtime: sh.cfg.realtime,
                rate_cap: Some(act.cap.clone()),
            };
            let r = recv::run_receiver(&link, &sock, plan, &params, &progress, &sh.stop);
            drop(admitted);
            if let Some(a) = &sh.archive {
                let e = crate::archive::Entry {
                    id: 0,
                    started,
                    ended: utc_now(),
                    role: "receive".into(),
                    peer: peer.to_string(),
                    path: dest.clone(),
                    transfer_id: format!("{transfer_id:08x}"),
                    files: files.len() as u64,
                    bytes: total,
                    bytes_resumed: Progress::get(&progress.bytes_resumed),
                    bytes_moved: Progress::get(&progress.bytes_moved),
                    seconds: r.as_ref().map_or(0.0, |o| o.seconds),
                    ok: r.is_ok(),
                    error: r.as_ref().err().map(|e| e.to_string()),
                    detail: match &r {
                        Ok(o) => serde_json::json!({
                            "files": o.committed,
                            "datagrams": o.stats.delivered, "duplicates": o.stats.duplicates,
                            "reported_lost": o.stats.reported_lost, "bad_tag": o.stats.bad_tag,
                            "malformed": o.stats.malformed, "wrong_transfer": o.stats.wrong_transfer,
                            "unknown_file": o.stats.unknown_file,
                            "bytes_written_direct": o.bytes_written_direct,
                            "bytes_read_back": o.bytes_read_back,
                        }),
                        Err(_) => serde_json::Value::Null,
                    },
                };
                if let Err(x) = a.lock().expect("archive").insert(&e) {
                    log!(sh, "{x}");
                }
            }
            match r {
                Ok(o) => {
                    // before transfers_ok, which is what a reader of the metrics waits for
                    sh.counters
                        .bytes_written_direct
                        .fetch_add(o.bytes_written_direct, Relaxed);
                    sh.counters.bytes_read_back.fetch_add(o.bytes_read_back, Relaxed);
                    sh.counters.transfers_ok.fetch_add(1, Relaxed);
                    log!(
                        sh,
                        "{peer}: transfer {transfer_id:08x}: verified and committed {} files ({} bytes already here, {} written with O_DIRECT, {} read back) in {:.1} s; datagrams: {} accepted, {} duplicate, {} reported lost, {} bad tag, {} malformed, {} of another transfer or before its hello, {} for files not yet announced",
                        o.committed.len(),
                        o.bytes_resumed,
                        o.bytes_written_direct,
                        o.bytes_read_back,
                        o.seconds,
                        o.stats.delivered,
                        o.stats.duplicates,
                        o.stats.reported_lost,
                        o.stats.bad_tag,
                        o.stats.malformed,
                        o.stats.wrong_transfer,
                        o.stats.unknown_file
                    );
                    sh.counters.datagrams_bad_tag.fetch_add(o.stats.bad_tag, Relaxed);
                    sh.counters.datagrams_malformed.fetch_add(
                        o.stats.malformed + o.stats.wrong_transfer + o.stats.unknown_file,
                        Relaxed,
                    );
                }
                Err(e) => {
                    sh.counters.transfers_failed.fetch_add(1, Relaxed);
                    log!(sh, "{peer}: transfer {transfer_id:08x} failed: {e}");
                }
            }
            link.close();
        }
        Session::Pull {
            sources,
            options,
            data_port,
            scan,
        } => pull_session(
            &sh,
            &link,
            peer,
            secret,
            sources,
            options,
            data_port,
            scan,
            (&refuse, &busy),
        ),
        Session::Relay {
            peer: to,
            sources,
            dest,
            options,
            retries,
            scan,
        } => relay_session(
            &sh,
            &link,
            peer,
            (to, dest),
            sources,
            scan,
            options,
            retries,
            (&refuse, &busy),
        ),
        other => refuse(format!(
            "this daemon does not serve {:?} requests yet",
            other.to_line()
        )),
    }
}

fn metrics_text(sh: &Shared) -> String {
    use std::fmt::Write;
    let c = &sh.counters;
    let g = |a: &AtomicU64| a.load(Relaxed);
    let mut t = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(t, "# HELP vlbiflow_xfer_{name} {help}\n# TYPE vlbiflow_xfer_{name} counter\nvlbiflow_xfer_{name} {v}");
    };
    counter(
        "connections_total",
        "Control connections accepted.",
        g(&c.connections),
    );
    counter(
        "probes_total",
        "Connections that sent no complete handshake (probes, port scans).",
        g(&c.probes),
    );
    counter(
        "auth_failures_total",
        "Handshakes with a wrong key.",
        g(&c.auth_failures),
    );
    counter(
        "auth_blocked_total",
        "Connections refused after too many failed logins.",
        g(&c.auth_blocked),
    );
    counter(
        "refused_total",
        "Authenticated requests refused (root, path, exists).",
        g(&c.refused),
    );
    counter(
        "busy_total",
        "Authenticated requests turned away for now (the transfer limit, or a destination file being written).",
        g(&c.refused_busy),
    );
    counter(
        "transfers_ok_total",
        "Transfers verified and committed.",
        g(&c.transfers_ok),
    );
    counter(
        "transfers_failed_total",
        "Transfers that failed (kept for a resume).",
        g(&c.transfers_failed),
    );
    counter(
        "datagrams_bad_tag_total",
        "Data datagrams dropped for a wrong authentication tag (finished transfers).",
        g(&c.datagrams_bad_tag),
    );
    counter(
        "datagrams_malformed_total",
        "Data datagrams dropped as malformed, of another transfer, or of a file not announced (finished transfers).",
        g(&c.datagrams_malformed),
    );
    counter(
        "bytes_written_direct_total",
        "Bytes received and written with O_DIRECT, past the page cache (finished transfers).",
        g(&c.bytes_written_direct),
    );
    counter(
        "bytes_read_back_total",
        "Bytes read back from the disk after writing and found equal (verify-written; finished transfers).",
        g(&c.bytes_read_back),
    );
    let active = sh.active.lock().map(|a| a.clone()).unwrap_or_default();
    let _ = writeln!(t, "# HELP vlbiflow_xfer_active_transfers Transfers running now.\n# TYPE vlbiflow_xfer_active_transfers gauge\nvlbiflow_xfer_active_transfers {}", active.len());
    let per = [
        ("bytes_total", "Bytes of all files of the transfer."),
        ("bytes_verified", "Bytes in verified chunks."),
        ("bytes_resumed", "Bytes found already at the destination."),
        ("datagrams", "Datagrams accepted."),
        ("datagrams_bad_tag", "Datagrams dropped for a wrong tag."),
        (
            "datagrams_malformed",
            "Datagrams dropped as malformed, of another transfer, or of a file not announced.",
        ),
        ("datagrams_lost", "Datagrams reported lost."),
        (
            "rate_cap_bps",
            "The transfer's ceiling now, bits/s (--max-rate, and its share of --total-rate; 0: none).",
        ),
    ];
    for (name, help) in per {
        let _ = writeln!(
            t,
            "# HELP vlbiflow_xfer_transfer_{name} {help}\n# TYPE vlbiflow_xfer_transfer_{name} gauge"
        );
        for a in &active {
            let p = &a.progress;
            let v = match name {
                "bytes_total" => g(&p.bytes_total),
                "bytes_verified" => g(&p.bytes_verified),
                "bytes_resumed" => g(&p.bytes_resumed),
                "datagrams" => g(&p.datagrams),
                "datagrams_bad_tag" => g(&p.bad_tag),
                "datagrams_malformed" => g(&p.malformed),
                "rate_cap_bps" => a.cap.get().map_or(0, |c| c as u64),
                _ => g(&p.lost),
            };
            let _ = writeln!(
                t,
                "vlbiflow_xfer_transfer_{name}{{id=\"{:08x}\",peer=\"{}\",direction=\"{}\"}} {v}",
                a.id, a.peer, a.direction
            );
        }
    }
    t
}

fn metrics_loop(l: TcpListener, sh: Arc<Shared>) {
    use std::io::{Read, Write};
    while !sh.stop.load(Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                let mut req = [0u8; 2048];
                let n = s.read(&mut req).unwrap_or(0);
                let line = String::from_utf8_lossy(&req[..n]);
                let (status, body) = if line.starts_with("GET /metrics ") {
                    ("200 OK", metrics_text(&sh))
                } else {
                    ("404 Not Found", "only /metrics here\n".to_string())
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Resolves `ROOT/rel` sources to real paths under the roots (canonicalised: a symbolic link may not lead
/// out of its root).
fn resolve_sources(roots: &Roots, sources: &[String]) -> Result<Vec<std::path::PathBuf>, String> {
    let mut out = Vec::new();
    for s in sources {
        let (root, comps) = roots.resolve(s)?;
        let mut p = root.path.clone();
        for c in &comps {
            p.push(c);
        }
        let canon = p.canonicalize().map_err(|e| format!("{s}: {e}"))?;
        if !canon.starts_with(&root.path) {
            return Err(format!(
                "{s} leads outside root {:?} (through a symbolic link)",
                root.name
            ));
        }
        out.push(canon);
    }
    Ok(out)
}

/// What a pull or a relay sends: `sources` (files and directories under the roots) or a scan on disks under
/// the roots. A scan's name and disk patterns are confined like paths, and every file the scan is read
/// from must lie inside a root after symbolic links are resolved.
fn source_set(
    roots: &Roots,
    sources: &[String],
    scan: Option<&crate::session::ScanRequest>,
) -> Result<crate::source::SourceSet, String> {
    let Some(sc) = scan else {
        let paths = resolve_sources(roots, sources)?;
        return crate::source::collect_paths(&paths)
            .map(|(set, _)| set)
            .map_err(|e| e.to_string());
    };
    if sc.name.is_empty() || sc.name.contains(['/', '\\', '\0']) || sc.name == "." || sc.name == ".." {
        return Err(format!("scan name {:?}: one file stem, no path", sc.name));
    }
    let layout: crate::scan::Layout = sc.layout.parse()?;
    if sc.disks.is_empty() {
        return Err("a scan needs its disks (ROOT/relative/dir, globs allowed)".into());
    }
    let mut disks = Vec::new();
    for d in &sc.disks {
        let (root, comps) = roots.resolve(d)?;
        let mut p = root.path.clone();
        for c in &comps {
            p.push(c);
        }
        disks.push(p.to_string_lossy().into_owned());
    }
    let (set, _) = crate::scan::scan_source(&sc.name, &disks, layout).map_err(|e| e.to_string())?;
    for p in &set.paths {
        let canon = p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))?;
        if !roots.0.iter().any(|r| canon.starts_with(&r.path)) {
            return Err(format!(
                "scan {}: {} leads outside the roots (through a symbolic link)",
                sc.name,
                p.display()
            ));
        }
    }
    Ok(set)
}

#[allow(clippy::too_many_arguments)]
fn pull_session(
    sh: &Arc<Shared>,
    link: &Link,
    peer: SocketAddr,
    secret: [u8; 32],
    sources: Vec<String>,
    options: crate::session::Options,
    data_port: u16,
    scan: Option<crate::session::ScanRequest>,
    (refuse, busy): (&dyn Fn(String), &dyn Fn(String)),
) {
    let set = match source_set(&sh.cfg.roots, &sources, scan.as_ref()) {
        Ok(set) => set,
        Err(e) => return refuse(e),
    };
    if !crate::hash::valid_chunk_size(options.chunk_size) {
        return refuse(format!(
            "chunk size {} is not a power of two of at least 4 KiB",
            options.chunk_size
        ));
    }
    let transfer_id: u32 = rand::random();
    let act = Active::new(transfer_id, peer, "send", sources.join(" "), data_port);
    let progress = act.progress.clone();
    let admitted = match sh.admit(act.clone()) {
        Ok(a) => a,
        Err(e) => return busy(e),
    };
    let files: Vec<crate::session::FileSpec> = set
        .files
        .iter()
        .map(|f| crate::session::FileSpec {
            name: f.name.clone(),
            size: f.size,
        })
        .collect();
    let total = set.total_bytes();
    link.send_session(&Session::Accept {
        transfer_id,
        data_port: 0,
        have: Vec::new(),
        files: files.clone(),
        rate_cap_bps: None,
    });
    let have = match link.rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Inbound::Sess(Session::Ready { have })) => have,
        Ok(Inbound::Refused(why)) => return refuse_unreadable(sh, link, peer, &why),
        Ok(other) => {
            log!(sh, "{peer}: pull: expected ready, got {other:?}");
            return;
        }
        Err(_) => return,
    };
    log!(
        sh,
        "{peer}: transfer {transfer_id:08x}: sending {} files, {total} bytes from {}",
        files.len(),
        sources.join(" ")
    );
    let started = utc_now();
    // the daemon's ceiling (its share of --total-rate changes as others start and end) is applied by
    // the data loop, under the rate asked for
    let rate = match options.rate_bps {
        Some(r) => vlbiflow_xfer_proto::RateConfig::fixed(r),
        None => vlbiflow_xfer_proto::RateConfig::auto(100e6f64.min(act.cap.get().unwrap_or(f64::INFINITY))),
    };
    let params = crate::send::SendParams {
        transfer_id,
        secret,
        options,
        rate,
        dest: SocketAddr::new(peer.ip(), data_port),
        dead_timeout: sh.cfg.dead_timeout,
        commit_timeout: Duration::from_secs(600),
        realtime: sh.cfg.realtime,
        rate_cap: Some(act.cap.clone()),
        receiver_cap: None,
    };
    let r = crate::send::run_sender(link, Arc::new(set), &have, &params, &progress, &sh.stop);
    drop(admitted);
    match &r {
        Ok(o) => {
            sh.counters.transfers_ok.fetch_add(1, Relaxed);
            log!(
                sh,
                "{peer}: transfer {transfer_id:08x}: sent, verified and committed at the client in {:.1} s",
                o.seconds
            );
        }
        Err(e) => {
            sh.counters.transfers_failed.fetch_add(1, Relaxed);
            log!(sh, "{peer}: transfer {transfer_id:08x} failed: {e}");
        }
    }
    if let Some(a) = &sh.archive {
        let e = crate::archive::Entry {
            id: 0,
            started,
            ended: utc_now(),
            role: "send".into(),
            peer: peer.to_string(),
            path: sources.join(" "),
            transfer_id: format!("{transfer_id:08x}"),
            files: files.len() as u64,
            bytes: total,
            bytes_resumed: Progress::get(&progress.bytes_resumed),
            bytes_moved: Progress::get(&progress.bytes_moved),
            seconds: r.as_ref().map_or(0.0, |o| o.seconds),
            ok: r.is_ok(),
            error: r.as_ref().err().map(|e| e.to_string()),
            detail: match &r {
                Ok(o) => {
                    serde_json::json!({"files": o.committed, "retransmits": o.stats.retransmits, "datagrams": o.stats.datagrams})
                }
                Err(_) => serde_json::Value::Null,
            },
        };
        if let Err(x) = a.lock().expect("archive").insert(&e) {
            log!(sh, "{x}");
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn relay_session(
    sh: &Arc<Shared>,
    link: &Link,
    client: SocketAddr,
    (to, dest): (String, String),
    sources: Vec<String>,
    scan: Option<crate::session::ScanRequest>,
    options: crate::session::Options,
    retries: u32,
    (refuse, busy): (&dyn Fn(String), &dyn Fn(String)),
) {
    let set = match source_set(&sh.cfg.roots, &sources, scan.as_ref()) {
        Ok(set) => set,
        Err(e) => return refuse(e),
    };
    let act = Active::new(
        rand::random(),
        client,
        "relay",
        format!("{} -> {to}/{dest}", sources.join(" ")),
        0,
    );
    let relay_progress = act.progress.clone();
    let admitted = match sh.admit(act.clone()) {
        Ok(a) => a,
        Err(e) => return busy(e),
    };
    link.send_session(&Session::Accept {
        transfer_id: 0,
        data_port: 0,
        have: Vec::new(),
        files: set
            .files
            .iter()
            .map(|f| crate::session::FileSpec {
                name: f.name.clone(),
                size: f.size,
            })
            .collect(),
        rate_cap_bps: None,
    });
    let key = sh.cfg.peer_key.clone().unwrap_or_else(|| sh.cfg.key.clone());
    let mut ccfg = crate::client::ClientConfig::new(to.clone(), key);
    ccfg.dead_timeout = sh.cfg.dead_timeout;
    ccfg.realtime = sh.cfg.realtime;
    ccfg.rate_cap = Some(act.cap.clone());
    let rate = match options.rate_bps {
        Some(r) => vlbiflow_xfer_proto::RateConfig::fixed(r),
        None => vlbiflow_xfer_proto::RateConfig::auto(100e6),
    };
    let total = set.total_bytes();
    log!(
        sh,
        "{client}: relay of {} files, {total} bytes from {} to {to}/{dest}",
        set.files.len(),
        sources.join(" ")
    );
    let started = utc_now();
    let t0 = Instant::now();
    let mut attempt = 0u32;
    let result = loop {
        attempt += 1;
        // every attempt reports into the one the daemon's list of transfers shows
        let progress = relay_progress.clone();
        let done = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Relaxed) {
                    link.send_session(&Session::Progress {
                        bytes_total: Progress::get(&progress.bytes_total),
                        bytes_verified: Progress::get(&progress.bytes_verified),
                        bytes_sent: Progress::get(&progress.bytes_moved),
                        retransmits: Progress::get(&progress.retransmits),
                        rate_bps: Progress::get(&progress.rate_bps) as f64,
                    });
                    let t = Instant::now();
                    while !done.load(Relaxed) && t.elapsed() < Duration::from_millis(500) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            });
            let r = crate::client::push(
                &ccfg,
                set.clone(),
                &dest,
                options.clone(),
                rate,
                &progress,
                &sh.stop,
            );
            done.store(true, Relaxed);
            r
        });
        match r {
            Err(XferError::Failed(e) | XferError::Busy(e) | XferError::Io(e))
                if attempt <= retries && !sh.stop.load(Relaxed) =>
            {
                let wait = Duration::from_secs(1 << (attempt - 1).min(6));
                log!(
                    sh,
                    "{client}: relay to {to}: attempt {attempt} failed ({e}); retrying in {wait:?}"
                );
                link.send_session(&Session::Retrying {
                    attempt,
                    error: e,
                    wait_s: wait.as_secs_f64(),
                });
                let until = Instant::now() + wait;
                while Instant::now() < until && !sh.stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            other => break other,
        }
    };
    drop(admitted);
    let (ok, error, files, moved, receiver) = match &result {
        Ok(o) => (true, None, o.committed.clone(), o.stats.bytes, Some(o.receiver)),
        Err(e) => (false, Some(e.to_string()), Vec::new(), 0, None),
    };
    let code = result.as_ref().err().map(XferError::exit_code);
    log!(
        sh,
        "{client}: relay to {to}: {}",
        if ok {
            "verified and committed there".to_string()
        } else {
            format!("failed: {}", error.clone().unwrap_or_default())
        }
    );
    if ok {
        sh.counters.transfers_ok.fetch_add(1, Relaxed);
    } else {
        sh.counters.transfers_failed.fetch_add(1, Relaxed);
    }
    if let Some(a) = &sh.archive {
        let e = crate::archive::Entry {
            id: 0,
            started,
            ended: utc_now(),
            role: "relay".into(),
            peer: to.clone(),
            path: format!("{} -> {dest}", sources.join(" ")),
            transfer_id: String::new(),
            files: set.files.len() as u64,
            bytes: total,
            bytes_resumed: result.as_ref().map_or(0, |o| o.bytes_resumed),
            bytes_moved: moved,
            seconds: t0.elapsed().as_secs_f64(),
            ok,
            error: error.clone(),
            detail: serde_json::json!({"files": files, "attempts": attempt, "client": client.to_string()}),
        };
        if let Err(x) = a.lock().expect("archive").insert(&e) {
            log!(sh, "{x}");
        }
    }
    link.send_session(&Session::Result {
        ok,
        error,
        files,
        bytes_moved: moved,
        seconds: t0.elapsed().as_secs_f64(),
        receiver,
        code,
    });
}
