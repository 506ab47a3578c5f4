//! The serving daemon: accepts authenticated control connections, checks each request against its roots,
//! and runs the transfers (several at once, each on its own threads and UDP port).
//!
//! Unauthenticated connections get nothing but a handshake attempt: a peer that cannot complete it within
//! the handshake timeout is dropped (a port scan or a probe is counted, nothing else happens); a wrong key
//! is counted as a failed login, and an address with too many failed logins in a minute is refused for a
//! minute before any handshake.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::XferError;
use crate::link::{Inbound, Link};
use crate::secure::{self, AuthError};
use crate::session::Session;

/// A daemon event as a `tracing` event (target `vlbiflow::xfer`), when the configuration asks for a log.
/// Strings a peer chose are formatted with `{:?}` at the call sites, so they arrive escaped.
macro_rules! log {
    ($sh:expr, $($t:tt)*) => {
        if $sh.cfg.log {
            tracing::info!(target: "vlbiflow::xfer", "{}", format_args!($($t)*));
        }
    };
}

mod metrics;
mod pull;
mod push;
mod relay;
mod shared;

use shared::{refuse_unreadable, Conn, Shared};
pub use shared::{Active, Counters, ServeConfig};

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
