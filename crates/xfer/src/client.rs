//! Client verbs: connect, authenticate, ask, and run the sending or receiving side.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_xfer_proto::RateConfig;

use crate::error::{failed, XferError};
use crate::key::Key;
use crate::link::{Inbound, Link};
use crate::progress::Progress;
use crate::secure::{self, AuthError, SecureConn};
use crate::send::{self, SendOutcome, SendParams};
use crate::session::{FileSpec, Options, Session};
use crate::share::RateCap;
use crate::source::SourceSet;

/// The error for a daemon's refusal.
fn refused(error: &str, busy: bool) -> XferError {
    if busy {
        XferError::Busy(format!("the daemon is busy: {error}"))
    } else {
        XferError::Refused(format!("the daemon refused: {error}"))
    }
}

/// How to reach a daemon.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `HOST:PORT` of the daemon's control port.
    pub server: String,
    /// The pre-shared key.
    pub key: Key,
    /// Connecting and authenticating may take this long.
    pub connect_timeout: Duration,
    /// Dead-peer timeout.
    pub dead_timeout: Duration,
    /// This side's data threads in the real-time class (`--realtime`; checked before connecting).
    pub realtime: bool,
    /// A ceiling this side sets while a transfer runs: on a push, for its own sending (a daemon's share of
    /// its limits, when it relays); on a pull, sent to the daemon as the receiver's `rate_cap` each time
    /// it changes (`xfer collect`'s share of the link).
    pub rate_cap: Option<Arc<RateCap>>,
}

impl ClientConfig {
    /// Defaults: 10 s to connect, 10 s dead-peer timeout.
    pub fn new(server: impl Into<String>, key: Key) -> Self {
        ClientConfig {
            server: server.into(),
            key,
            connect_timeout: Duration::from_secs(10),
            dead_timeout: Duration::from_secs(10),
            realtime: false,
            rate_cap: None,
        }
    }
}

/// Connects and authenticates.
pub fn connect(cfg: &ClientConfig) -> Result<SecureConn, XferError> {
    if cfg.realtime {
        crate::check_realtime()?;
    }
    let addrs = vlbiflow_udp::net::resolve_all(&cfg.server)
        .map_err(|e| XferError::Usage(format!("daemon address: {e}")))?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                return secure::client_handshake(s, &cfg.key.0, cfg.connect_timeout).map_err(|e| match e {
                    AuthError::BadKey(m) | AuthError::Blocked(m) => XferError::Refused(m),
                    other => failed!("{a}: {other}"),
                })
            }
            Err(e) => last = Some(format!("{a}: {e}")),
        }
    }
    Err(XferError::Io(format!(
        "cannot reach the daemon at {}: {}",
        cfg.server,
        last.unwrap_or_else(|| "no address".into())
    )))
}

/// Pushes `set` into `dest` (`ROOT/relative/dir`) on the daemon. Returns when every file is verified and
/// committed there.
pub fn push(
    cfg: &ClientConfig,
    set: SourceSet,
    dest: &str,
    options: Options,
    rate: RateConfig,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<SendOutcome, XferError> {
    set.check_names()?;
    let conn = connect(cfg)?;
    let (secret, peer) = (conn.secret, conn.peer);
    let link = Link::start(conn, crate::link::control_stall_limit(cfg.dead_timeout));
    let files: Vec<FileSpec> = set
        .files
        .iter()
        .map(|f| FileSpec {
            name: f.name.clone(),
            size: f.size,
        })
        .collect();
    link.send_session(&Session::Push {
        dest: dest.to_string(),
        files,
        options: options.clone(),
    });
    progress.set_phase("waiting for the daemon to accept");
    let (transfer_id, data_port, have, cap) = match link.rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Inbound::Sess(Session::Accept {
            transfer_id,
            data_port,
            have,
            rate_cap_bps,
            ..
        })) => (transfer_id, data_port, have, rate_cap_bps),
        Ok(Inbound::Sess(Session::Refuse { error, busy })) => return Err(refused(&error, busy)),
        Ok(Inbound::Closed(why) | Inbound::Refused(why)) => return Err(failed!("{why}")),
        Ok(other) => return Err(failed!("unexpected answer from the daemon: {other:?}")),
        Err(_) => return Err(failed!("the daemon did not answer the request within 60 s")),
    };

    let params = SendParams {
        transfer_id,
        secret,
        options,
        rate,
        dest: SocketAddr::new(peer.ip(), data_port),
        dead_timeout: cfg.dead_timeout,
        commit_timeout: Duration::from_secs(600),
        realtime: cfg.realtime,
        rate_cap: cfg.rate_cap.clone(),
        receiver_cap: cap,
    };
    let out = send::run_sender(&link, Arc::new(set), &have, &params, progress, stop);
    link.close();
    out
}

/// Pulls `sources` (`ROOT/path` on the daemon, files or directories) into the local directory `into`.
/// Returns when every file is verified and synced under its final name here.
pub fn pull(
    cfg: &ClientConfig,
    sources: &[String],
    scan: Option<&crate::session::ScanRequest>,
    into: &std::path::Path,
    options: Options,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<crate::recv::RecvOutcome, XferError> {
    if !into.is_dir() {
        return Err(XferError::Usage(format!("{}: not a directory", into.display())));
    }
    let conn = connect(cfg)?;
    let (secret, peer) = (conn.secret, conn.peer);
    let mut ucfg = vlbiflow_udp::UdpConfig::receiver(SocketAddr::new(
        match peer.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        },
        0,
    ));
    ucfg.recv_buffer = Some(64 << 20);
    ucfg.timestamps = true; // the path's timing is read from the kernel's receive times
    ucfg.gro = true;
    ucfg.rxq_ovfl = true; // the host's drops are passed on to the sender, which does not read them as the path's
    let (sock, _) = vlbiflow_udp::open_udp(&ucfg).map_err(|e| failed!("data socket: {e}"))?;
    let data_port = sock.local_addr().map_err(|e| failed!("data socket: {e}"))?.port();
    let link = Link::start(conn, crate::link::control_stall_limit(cfg.dead_timeout));
    link.send_session(&Session::Pull {
        sources: sources.to_vec(),
        options: options.clone(),
        data_port,
        scan: scan.cloned(),
    });
    progress.set_phase("waiting for the daemon to accept");
    let (transfer_id, files) = match link.rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Inbound::Sess(Session::Accept {
            transfer_id, files, ..
        })) => (transfer_id, files),
        Ok(Inbound::Sess(Session::Refuse { error, busy })) => return Err(refused(&error, busy)),
        Ok(Inbound::Closed(why) | Inbound::Refused(why)) => return Err(failed!("{why}")),
        Ok(other) => return Err(failed!("unexpected answer from the daemon: {other:?}")),
        Err(_) => return Err(failed!("the daemon did not answer the request within 60 s")),
    };
    let canon = into
        .canonicalize()
        .map_err(|e| XferError::Usage(format!("{}: {e}", into.display())))?;
    let plan = match crate::recv::plan(&canon, &[], &files, &options) {
        Ok(p) => std::sync::Arc::new(p),
        Err(e) => {
            link.send(
                vlbiflow_xfer_proto::ControlMsg::Abort {
                    reason: format!("the client cannot take the files: {e}"),
                    kind: vlbiflow_xfer_proto::AbortKind::Refused,
                }
                .to_line(),
            );
            return Err(XferError::Usage(format!("{}: {e}", into.display())));
        }
    };
    link.send_session(&Session::Ready { have: plan.have() });
    let params = crate::recv::RecvParams {
        transfer_id,
        secret,
        dead_timeout: cfg.dead_timeout,
        source: peer.to_string(),
        realtime: cfg.realtime,
        // the receiver tells the sending daemon each new ceiling (`rate_cap` messages)
        rate_cap: cfg.rate_cap.clone(),
    };
    let out = crate::recv::run_receiver(&link, &sock, plan, &params, progress, stop);
    link.close();
    out
}

/// What a relay reported at the end.
#[derive(Debug, Clone)]
pub struct RelayOutcome {
    pub files: Vec<crate::session::Committed>,
    pub bytes_moved: u64,
    pub seconds: f64,
    pub attempts: u32,
    /// The counters of the receiving daemon.
    pub receiver: Option<crate::session::ReceiverReport>,
}

/// What a copy between daemons sends: `sources` (the source daemon's `ROOT/path`s) or `scan`, to the
/// daemon `to` into `dest`, with `options`; the source daemon tries `retries` more times on failure.
pub struct RelayRequest<'a> {
    pub sources: &'a [String],
    pub scan: Option<&'a crate::session::ScanRequest>,
    pub to: &'a str,
    pub dest: &'a str,
    pub options: Options,
    pub retries: u32,
}

/// A completed copy between daemons as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RelaySummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    pub files: &'a [crate::session::Committed],
    pub bytes_total: u64,
    pub bytes_sent: u64,
    pub seconds: f64,
    pub attempts: u32,
    pub receiver: Option<crate::session::ReceiverReport>,
}

impl RelayOutcome {
    /// What `--json` prints of it.
    pub fn summary(&self) -> RelaySummary<'_> {
        RelaySummary {
            verified: true,
            files: &self.files,
            bytes_total: self.files.iter().map(|c| c.size).sum(),
            bytes_sent: self.bytes_moved,
            seconds: self.seconds,
            attempts: self.attempts,
            receiver: self.receiver,
        }
    }
}

/// Asks the daemon of `cfg` to push `sources` (its `ROOT/path`s) to the daemon `to` into `dest`, and follows
/// its progress (`progress` is filled from its reports; `on_retry` hears of failed attempts).
pub fn relay(
    cfg: &ClientConfig,
    req: RelayRequest<'_>,
    progress: &Progress,
    on_retry: &dyn Fn(u32, &str, f64),
) -> Result<RelayOutcome, XferError> {
    let RelayRequest {
        sources,
        scan,
        to,
        dest,
        options,
        retries,
    } = req;
    use std::sync::atomic::Ordering::Relaxed;
    let conn = connect(cfg)?;
    let link = Link::start(conn, Duration::from_secs(120));
    link.send_session(&Session::Relay {
        peer: to.to_string(),
        sources: sources.to_vec(),
        dest: dest.to_string(),
        options,
        retries,
        scan: scan.cloned(),
    });
    match link.rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Inbound::Sess(Session::Accept { .. })) => {}
        Ok(Inbound::Sess(Session::Refuse { error, busy })) => return Err(refused(&error, busy)),
        Ok(Inbound::Closed(why) | Inbound::Refused(why)) => return Err(failed!("{why}")),
        Ok(other) => return Err(failed!("unexpected answer from the daemon: {other:?}")),
        Err(_) => return Err(failed!("the daemon did not answer the request within 60 s")),
    }
    progress.set_phase("daemon to daemon");
    let mut attempts = 1;
    loop {
        match link.rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Inbound::Sess(Session::Progress {
                bytes_total,
                bytes_verified,
                bytes_sent,
                retransmits,
                rate_bps,
            })) => {
                progress.bytes_total.store(bytes_total, Relaxed);
                progress.bytes_verified.store(bytes_verified, Relaxed);
                progress.bytes_moved.store(bytes_sent, Relaxed);
                progress.retransmits.store(retransmits, Relaxed);
                progress.rate_bps.store(rate_bps as u64, Relaxed);
            }
            Ok(Inbound::Sess(Session::Retrying {
                attempt,
                error,
                wait_s,
            })) => {
                attempts = attempt + 1;
                on_retry(attempt, &error, wait_s);
            }
            Ok(Inbound::Sess(Session::Result {
                ok,
                error,
                files,
                bytes_moved,
                seconds,
                receiver,
                code,
            })) => {
                link.close();
                return if ok {
                    Ok(RelayOutcome {
                        files,
                        bytes_moved,
                        seconds,
                        attempts,
                        receiver,
                    })
                } else {
                    // refusals by the destination daemon stay refusals, busy stays busy
                    let e = error.unwrap_or_default();
                    Err(match code {
                        Some(3) => XferError::Refused(e),
                        Some(4) => XferError::Busy(e),
                        _ => failed!("{e}"),
                    })
                };
            }
            Ok(Inbound::Closed(why) | Inbound::Refused(why)) => {
                return Err(failed!(
                    "{why} (the daemon may still be retrying; see its log and `xfer history` there)"
                ))
            }
            Ok(_) => {}
            Err(_) => return Err(failed!("no report from the daemon for 120 s")),
        }
    }
}

/// Lists the scans on the daemon's `disks` (`ROOT/relative/dir`, globs allowed below the root) whose names
/// match `pattern` (`*` and `?`), as a pull in the gather layout would fetch them now.
pub fn ls(
    cfg: &ClientConfig,
    disks: &[String],
    pattern: Option<&str>,
) -> Result<Vec<crate::session::ScanEntry>, XferError> {
    let conn = connect(cfg)?;
    let link = Link::start(conn, crate::link::control_stall_limit(cfg.dead_timeout));
    link.send_session(&Session::Ls {
        disks: disks.to_vec(),
        pattern: pattern.map(str::to_string),
    });
    // a daemon reads every matching scan's block headers before it answers
    let out = match link.rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Inbound::Sess(Session::Scans { scans })) => Ok(scans),
        Ok(Inbound::Sess(Session::Refuse { error, busy })) => Err(refused(&error, busy)),
        Ok(Inbound::Closed(why) | Inbound::Refused(why)) => Err(failed!("{why}")),
        Ok(other) => Err(failed!("unexpected answer from the daemon: {other:?}")),
        Err(_) => Err(failed!("the daemon did not list the scans within 120 s")),
    };
    link.close();
    out
}
