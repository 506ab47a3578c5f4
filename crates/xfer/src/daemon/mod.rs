//! The serving daemon: accepts authenticated control connections, checks each request against its roots,
//! and runs the transfers (several at once, each on its own threads and UDP port).
//!
//! Unauthenticated connections get nothing but a handshake attempt, admitted by a
//! [`Gate`](vlbiflow_guard::gate::Gate): a limited number at once per address and in all (so a flood of
//! idle connections cannot take the slots of a client with the key, nor those of authenticated sessions,
//! which are limited separately), each with a short deadline for the handshake and the request. A peer
//! that cannot complete the handshake in time (a port scan, a probe) and a wrong key are both strikes
//! against the address: past a few, its new connections are held back for a delay that doubles up to a
//! few seconds before their handshake starts. The right key still gets in after the delay, and clears the
//! strikes.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vlbiflow_guard::gate::{Gate, Verdict};

use crate::error::XferError;
use crate::link::{Inbound, Link};
use crate::secure::{self, AuthError};
use crate::session::Session;

/// A daemon event as a `tracing` event (target `vlbiflow::xfer`), when the configuration asks for a log.
/// Strings a peer chose are formatted with `{:?}` at the call sites, so they arrive escaped.
/// A log event of the daemon (when it logs): tracing fields first (`peer = %peer, transfer_id = ...`),
/// then the message. Strings a peer chose (paths, reasons) are written with `?` (escaped).
macro_rules! log {
    ($sh:expr, $($t:tt)*) => {
        if $sh.cfg.log {
            tracing::info!(target: "vlbiflow::xfer", $($t)*);
        }
    };
}

mod ls;
/// A transfer id as the logs write it (eight hex digits).
fn tid(id: u32) -> String {
    format!("{id:08x}")
}

mod metrics;
mod pull;
mod push;
mod relay;
mod shared;

use shared::{refuse_unreadable, Conn, Shared};
pub use shared::{Active, ClientKey, Counters, ServeConfig};

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
        cfg.check_client_keys().map_err(XferError::Usage)?;
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
            Some(m) if !m.ip().is_loopback() && cfg.metrics_token.is_none() => {
                return Err(XferError::Usage(format!(
                    "--metrics {m}: without a metrics token metrics are served on loopback only; give one (--metrics-token-file), or scrape through an SSH tunnel"
                )))
            }
            Some(m) => {
                let ml = TcpListener::bind(m).map_err(|e| XferError::Usage(format!("metrics on {m}: {e}")))?;
                ml.set_nonblocking(true).map_err(|e| XferError::Usage(e.to_string()))?;
                Some(ml)
            }
            None => None,
        };
        let cfg_gate = cfg.gate;
        let shared = Arc::new(Shared {
            archive,
            cfg,
            counters: Counters::default(),
            active: Mutex::new(Vec::new()),
            claims: Mutex::new(HashMap::new()),
            gate: Mutex::new(vlbiflow_guard::gate::Gate::new(cfg_gate)),
            stop: AtomicBool::new(false),
            accept_passes: std::sync::atomic::AtomicU64::new(0),
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

    /// How many passes the accept loop has made: it advances at least every 50 ms while the loop runs,
    /// so a service manager's watchdog can be told only when it moved.
    pub fn accept_passes(&self) -> u64 {
        self.shared.accept_passes.load(Relaxed)
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
        sh.accept_passes.fetch_add(1, Relaxed);
        match l.accept() {
            Ok((s, peer)) => {
                sh.counters.connections.fetch_add(1, Relaxed);
                sessions.retain(|h| !h.is_finished());
                let delay = match gate(&sh).arrive(peer.ip(), Instant::now()) {
                    Verdict::Admit { delay } => delay,
                    Verdict::AddressBusy | Verdict::Full => {
                        // too many unauthenticated connections: close this one unanswered
                        sh.counters.auth_blocked.fetch_add(1, Relaxed);
                        drop(s);
                        continue;
                    }
                };
                if sessions.len() >= sh.cfg.max_transfers + 16 + sh.cfg.gate.pending {
                    gate(&sh).left(peer.ip());
                    drop(s);
                    continue;
                }
                let sh2 = sh.clone();
                let spawned = std::thread::Builder::new()
                    .name("xfer-session".into())
                    .spawn(move || session(s, peer, delay, sh2));
                match spawned {
                    Ok(h) => sessions.push(h),
                    Err(_) => gate(&sh).left(peer.ip()),
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

fn gate(sh: &Shared) -> std::sync::MutexGuard<'_, Gate> {
    sh.gate.lock().unwrap_or_else(|e| e.into_inner())
}

/// Authenticates the connection within the handshake deadline (after any back-off delay of its address)
/// and reads its request; reports the outcome to the gate.
fn authenticate(
    s: TcpStream,
    peer: SocketAddr,
    delay: Duration,
    sh: &Shared,
) -> Option<(Link, [u8; 32], Session, Option<usize>)> {
    if !delay.is_zero() {
        sh.counters.tarpitted.fetch_add(1, Relaxed);
        // hold the connection unread; a stop ends the wait early
        let until = Instant::now() + delay;
        while Instant::now() < until && !sh.stop.load(Relaxed) {
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
        if sh.stop.load(Relaxed) {
            gate(sh).left(peer.ip());
            return None;
        }
    }
    let deadline = Instant::now() + sh.cfg.handshake_timeout;
    let psks: Vec<&[u8; 32]> = std::iter::once(&sh.cfg.key.0)
        .chain(sh.cfg.client_keys.iter().map(|k| &k.key.0))
        .collect();
    // which client key it was (index into client_keys), None for the daemon's own key
    let (conn, scope) = match secure::server_handshake_any(s, &psks, sh.cfg.handshake_timeout) {
        Ok((c, i)) => (c, i.checked_sub(1)),
        Err(AuthError::BadKey(why)) => {
            sh.counters.auth_failures.fetch_add(1, Relaxed);
            gate(sh).struck(peer.ip(), Instant::now());
            log!(sh, peer = %peer, reason = ?why, "{peer}: failed login: {why:?}");
            return None;
        }
        Err(_) => {
            sh.counters.probes.fetch_add(1, Relaxed);
            gate(sh).struck(peer.ip(), Instant::now());
            return None;
        }
    };
    let secret = conn.secret;
    let link = Link::start(conn, crate::link::control_stall_limit(sh.cfg.dead_timeout));
    // the key is proven: the address is no longer pending, and its strikes are cleared
    gate(sh).passed(peer.ip());
    let left = deadline.saturating_duration_since(Instant::now());
    match link.rx.recv_timeout(left.max(Duration::from_millis(100))) {
        Ok(Inbound::Sess(req)) => Some((link, secret, req, scope)),
        Ok(Inbound::Refused(why)) => {
            refuse_unreadable(sh, &link, peer, &why);
            None
        }
        Ok(other) => {
            log!(sh, peer = %peer, "{peer}: expected a request, got {other:?}");
            None
        }
        Err(_) => None,
    }
}

fn session(s: TcpStream, peer: SocketAddr, delay: Duration, sh: Arc<Shared>) {
    let Some((link, secret, req, scope)) = authenticate(s, peer, delay, &sh) else {
        return;
    };
    let scope = scope.and_then(|i| sh.cfg.client_keys.get(i));
    if let Some(k) = scope {
        log!(sh, "{peer}: key {} (roots {})", k.name, k.roots.join(", "));
    }
    let c = Conn {
        sh: &sh,
        link: &link,
        peer,
        secret,
        scope: scope.map(|k| k.roots.as_slice()),
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
        Session::Ls { disks, pattern } => {
            ls::ls_session(&c, &disks, pattern.as_deref());
            link.close();
        }
        other => c.refuse(format!(
            "this daemon does not serve {:?} requests yet",
            other.to_line()
        )),
    }
}
