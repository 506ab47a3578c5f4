//! What the daemon's threads share: its settings, counters and running transfers, and the control
//! connection a request came on.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vlbiflow_guard::gate::{Gate, GateConfig};
use vlbiflow_guard::net::AllowList;

use crate::dest::Roots;
use crate::key::Key;
use crate::link::Link;
use crate::progress::Progress;
use crate::recv;
use crate::session::Session;
use crate::share::RateCap;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Control address (TCP); data ports are opened on the same IP.
    pub listen: SocketAddr,
    /// Where files may be written and read.
    pub roots: Roots,
    /// The pre-shared key: every root (as the roots' access allows).
    pub key: Key,
    /// Further keys, each for some roots only (`--client-key PATH=ROOT,...`, `[[keys]]`): give each
    /// client its own, naming only the roots it needs.
    pub client_keys: Vec<ClientKey>,
    /// Dead-peer timeout of transfers.
    pub dead_timeout: Duration,
    /// Time allowed for the handshake and the request (after any back-off delay of the address).
    pub handshake_timeout: Duration,
    /// Limits on connections that have not authenticated yet, and the back-off of addresses whose
    /// handshakes fail or stay silent.
    pub gate: GateConfig,
    /// Most transfers at once (more are refused with a clear message).
    pub max_transfers: usize,
    /// Write a line per event to standard error.
    pub log: bool,
    /// Archive of transfers (SQLite), if any.
    pub archive: Option<std::path::PathBuf>,
    /// Prometheus metrics on this address, if any: loopback only, unless `metrics_token` is set.
    pub metrics: Option<SocketAddr>,
    /// The read-only token `GET /metrics` must carry (`Authorization: Bearer TOKEN`); it grants
    /// nothing else.
    pub metrics_token: Option<String>,
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
    /// Addresses this daemon may push to on a client's behalf (`xfer copy`, `--relay-to`): every address
    /// the target resolves to must be in one of these blocks. Empty (the default): no copy is relayed, so
    /// that a key holder cannot make the daemon connect to (and so probe) any host and port.
    pub relay_to: AllowList,
}

impl ServeConfig {
    /// Defaults: 10 s dead timeout, 2 s handshake, 16 transfers, the [`GateConfig`] defaults.
    pub fn new(listen: SocketAddr, roots: Roots, key: Key) -> Self {
        ServeConfig {
            listen,
            roots,
            key,
            client_keys: Vec::new(),
            dead_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(2),
            gate: GateConfig::default(),
            max_transfers: 16,
            log: false,
            archive: None,
            metrics: None,
            metrics_token: None,
            max_rate_bps: None,
            total_rate_bps: None,
            peer_key: None,
            verify_written: false,
            realtime: false,
            relay_to: AllowList::default(),
        }
    }
}

/// A key that may use some roots only.
#[derive(Debug, Clone)]
pub struct ClientKey {
    /// What the log calls it (its file).
    pub name: String,
    /// The key.
    pub key: Key,
    /// Names of the roots it may use (each still as the root's access allows).
    pub roots: Vec<String>,
}

impl ServeConfig {
    /// Checks that every client key names roots this daemon serves.
    pub fn check_client_keys(&self) -> Result<(), String> {
        for k in &self.client_keys {
            if let Some(r) = k
                .roots
                .iter()
                .find(|r| !self.roots.0.iter().any(|x| x.name == **r))
            {
                return Err(format!(
                    "key {}: unknown root {r:?}; this daemon serves {}",
                    k.name,
                    self.roots.names()
                ));
            }
        }
        Ok(())
    }
}

/// Daemon-wide counters (exported as metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub probes: AtomicU64,
    pub auth_failures: AtomicU64,
    /// Connections closed before their handshake: their address, or all addresses together, had as many
    /// unauthenticated connections as allowed.
    pub auth_blocked: AtomicU64,
    /// Connections held for a back-off delay before their handshake (their address had failed or silent
    /// handshakes).
    pub tarpitted: AtomicU64,
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
    /// Payload bytes sent by sending and relaying transfers, retransmissions included; moves while they
    /// run (see [`Shared::fold`]).
    pub sent_bytes: AtomicU64,
    /// Payload bytes accepted by receiving transfers; moves while they run.
    pub received_bytes: AtomicU64,
    /// Data datagrams sent; moves while transfers run.
    pub sent_datagrams: AtomicU64,
    /// Data datagrams accepted; moves while transfers run.
    pub received_datagrams: AtomicU64,
    /// Data datagrams retransmitted; moves while transfers run.
    pub retransmitted_datagrams: AtomicU64,
    /// Data datagrams reported lost by receivers; moves while transfers run.
    pub lost_datagrams: AtomicU64,
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
    /// How much of `progress` is already in the daemon-wide counters.
    folded: Folded,
}

/// The part of a transfer's progress counters added to the daemon-wide ones so far.
#[derive(Debug, Default)]
struct Folded {
    moved: AtomicU64,
    datagrams: AtomicU64,
    retransmits: AtomicU64,
    lost: AtomicU64,
    bad_tag: AtomicU64,
    malformed: AtomicU64,
}

impl Active {
    /// A transfer about to run, with fresh counters and no ceiling yet (the daemon sets it on admitting
    /// it).
    pub(super) fn new(
        id: u32,
        peer: SocketAddr,
        direction: &'static str,
        path: String,
        data_port: u16,
    ) -> Arc<Active> {
        Arc::new(Active {
            id,
            peer,
            direction,
            path,
            data_port,
            progress: Arc::new(Progress::default()),
            cap: Arc::new(RateCap::new()),
            folded: Folded::default(),
        })
    }
}

/// A transfer counted among the daemon's running ones (its limit and the shares of its total rate)
/// for as long as this lives.
pub(super) struct Admitted<'a> {
    sh: &'a Shared,
    act: Arc<Active>,
}

impl Shared {
    /// Counts `act` among the running transfers, or says why not (the daemon runs as many as it may).
    pub(super) fn admit(&self, act: Arc<Active>) -> Result<Admitted<'_>, String> {
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

    /// Adds what `a`'s data path counted since the last fold to the daemon-wide counters (run at each
    /// scrape and when the transfer ends), so that those move while transfers run. The data path
    /// publishes its progress counters once per batch; this reads them, it adds nothing per datagram.
    pub(super) fn fold(&self, a: &Active) {
        let (p, f, c) = (&a.progress, &a.folded, &self.counters);
        let add = |now: &AtomicU64, seen: &AtomicU64, into: &AtomicU64| {
            // fetch_max: of concurrent folds, each adds only the part it moved the mark by.
            let now = now.load(Relaxed);
            let before = seen.fetch_max(now, Relaxed);
            if now > before {
                into.fetch_add(now - before, Relaxed);
            }
        };
        if a.direction == "receive" {
            add(&p.bytes_moved, &f.moved, &c.received_bytes);
            add(&p.datagrams, &f.datagrams, &c.received_datagrams);
        } else {
            add(&p.bytes_moved, &f.moved, &c.sent_bytes);
            add(&p.datagrams, &f.datagrams, &c.sent_datagrams);
        }
        add(&p.retransmits, &f.retransmits, &c.retransmitted_datagrams);
        add(&p.lost, &f.lost, &c.lost_datagrams);
        add(&p.bad_tag, &f.bad_tag, &c.datagrams_bad_tag);
        add(&p.malformed, &f.malformed, &c.datagrams_malformed);
    }

    /// Gives each running transfer its ceiling: `--max-rate`, and an equal share of `--total-rate`.
    pub(super) fn reshare(&self, active: &[Arc<Active>]) {
        let c = crate::share::share(self.cfg.max_rate_bps, self.cfg.total_rate_bps, active.len());
        for a in active {
            a.cap.set(c);
        }
    }

    /// Claims the destination files of a receive for transfer `id` from `peer`, or names the transfer
    /// that is writing one of them.
    pub(super) fn claim(&self, plan: &recv::Plan, id: u32, peer: SocketAddr) -> Result<Claim<'_>, String> {
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
        self.sh.fold(&self.act);
        let mut active = self.sh.active.lock().expect("active");
        active.retain(|a| !Arc::ptr_eq(a, &self.act));
        self.sh.reshare(&active);
    }
}

/// Destination files a receive holds (no other transfer of this daemon may write them) until dropped.
pub(super) struct Claim<'a> {
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

pub(super) struct Shared {
    pub(super) archive: Option<Mutex<crate::archive::Archive>>,
    pub(super) cfg: ServeConfig,
    pub(super) counters: Counters,
    pub(super) active: Mutex<Vec<Arc<Active>>>,
    /// Destination files of running receives: by whom.
    pub(super) claims: Mutex<HashMap<PathBuf, (u32, SocketAddr)>>,
    /// Admission of connections that have not authenticated yet.
    pub(super) gate: Mutex<Gate>,
    pub(super) stop: AtomicBool,
    /// Passes of the accept loop (each after accepting, refusing or finding nobody waiting).
    pub(super) accept_passes: std::sync::atomic::AtomicU64,
}

/// An authenticated client sent a session message this daemon cannot read (another release, most
/// likely): counted and logged as a refusal, and the client hears why.
pub(super) fn refuse_unreadable(sh: &Shared, link: &Link, peer: SocketAddr, why: &str) {
    sh.counters.refused.fetch_add(1, Relaxed);
    log!(sh, peer = %peer, reason = ?why, "{peer}: refused: {why:?}");
    link.send_session(&Session::Refuse {
        error: format!("{why} (the daemon runs vlbiflow {})", env!("CARGO_PKG_VERSION")),
        busy: false,
    });
}

/// An authenticated control connection, and how to turn its request away.
pub(super) struct Conn<'a> {
    pub(super) sh: &'a Arc<Shared>,
    pub(super) link: &'a Link,
    pub(super) peer: SocketAddr,
    /// The session secret of the control connection (the datagram keys are derived from it).
    pub(super) secret: [u8; 32],
    /// The roots the client's key may use; None: every root.
    pub(super) scope: Option<&'a [String]>,
}

impl Conn<'_> {
    /// Refuses the request (a refusal: rerunning does not help).
    pub(super) fn refuse(&self, why: String) {
        let (sh, peer) = (self.sh, self.peer);
        sh.counters.refused.fetch_add(1, Relaxed);
        log!(sh, peer = %peer, reason = ?why, "{peer}: refused: {why:?}");
        self.link.send_session(&Session::Refuse {
            error: why,
            busy: false,
        });
    }

    /// Turns the request away for now (the transfer limit, or a destination file being written).
    pub(super) fn busy(&self, why: String) {
        let (sh, peer) = (self.sh, self.peer);
        sh.counters.refused_busy.fetch_add(1, Relaxed);
        log!(sh, peer = %peer, reason = ?why, "{peer}: busy: {why:?}");
        self.link.send_session(&Session::Refuse {
            error: why,
            busy: true,
        });
    }
}
