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

use crate::dest::Roots;
use crate::error::XferError;
use crate::key::Key;
use crate::link::{Inbound, Link};
use crate::progress::Progress;
use crate::recv;
use crate::secure::{self, AuthError};
use crate::session::Session;
use crate::share::RateCap;

macro_rules! log {
    ($sh:expr, $($t:tt)*) => {
        if $sh.cfg.log {
            eprintln!("{} xfer: {}", crate::utc_now(), format!($($t)*));
        }
    };
}

mod metrics;
mod pull;
mod push;
mod relay;

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
                let rt = metrics::runtime().map_err(|e| XferError::Usage(format!("metrics: {e}")))?;
                Some(
                    std::thread::Builder::new()
                        .name("xfer-metrics".into())
                        .spawn(move || metrics::serve(rt, ml, sh))
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
        metrics::metrics_text(&self.shared)
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
    let c = Conn {
        sh: &sh,
        link: &link,
        peer,
        secret,
    };
    match req {
        Session::Push { dest, files, options } => {
            push::push_session(&c, dest, files, options);
            // the receiver's commit report is sent: close the connection in order
            link.close();
        }
        Session::Pull {
            sources,
            options,
            data_port,
            scan,
        } => pull::pull_session(&c, sources, options, data_port, scan),
        Session::Relay {
            peer: to,
            sources,
            dest,
            options,
            retries,
            scan,
        } => relay::relay_session(
            &c,
            relay::Relay {
                to,
                dest,
                sources,
                scan,
                options,
                retries,
            },
        ),
        other => c.refuse(format!(
            "this daemon does not serve {:?} requests yet",
            other.to_line()
        )),
    }
}

/// An authenticated control connection, and how to turn its request away.
struct Conn<'a> {
    sh: &'a Arc<Shared>,
    link: &'a Link,
    peer: SocketAddr,
    /// The session secret of the control connection (the datagram keys are derived from it).
    secret: [u8; 32],
}

impl Conn<'_> {
    /// Refuses the request (a refusal: rerunning does not help).
    fn refuse(&self, why: String) {
        let (sh, peer) = (self.sh, self.peer);
        sh.counters.refused.fetch_add(1, Relaxed);
        log!(sh, "{peer}: refused: {why}");
        self.link.send_session(&Session::Refuse {
            error: why,
            busy: false,
        });
    }

    /// Turns the request away for now (the transfer limit, or a destination file being written).
    fn busy(&self, why: String) {
        let (sh, peer) = (self.sh, self.peer);
        sh.counters.refused_busy.fetch_add(1, Relaxed);
        log!(sh, "{peer}: busy: {why}");
        self.link.send_session(&Session::Refuse {
            error: why,
            busy: true,
        });
    }
}
