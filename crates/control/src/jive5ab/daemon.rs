//! The jive5ab dialect on the daemon's command port: one task per connection framing requests, running
//! each statement through [`Jive5ab::handle`] under the controller's lock, and finishing slow steps (a
//! recording's start, a recording's flush) outside it, as the Mark6 side does.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vlbiflow_formats::time::UtcTime;

use crate::daemon::{perform, run_until_idle, with_ctl, Admitted, Pending, Shared, WRITE_TIMEOUT};
use crate::proto::{ReturnCode, Statement};

use super::session::{J5Session, Screened};
use super::{Conn, J5Reply, Jive5ab, Step};

/// How long a `record=off` waits for the recording to flush before answering anyway.
const FLUSH_WAIT: Duration = Duration::from_secs(60);

/// The dialect's state as the daemon keeps it.
pub type SharedJive5ab = Mutex<Jive5ab>;

fn lock(j: &SharedJive5ab) -> MutexGuard<'_, Jive5ab> {
    j.lock().unwrap_or_else(|e| e.into_inner())
}

/// The machine facts `dts_id?` and `os_rev?` report.
pub fn identity(host: &str) -> super::Identity {
    super::Identity {
        host: host.to_owned(),
        os_rev: std::fs::read_to_string("/proc/version")
            .ok()
            .and_then(|v| v.lines().next().map(str::to_owned)),
    }
}

/// Serves one command connection in the jive5ab dialect; when it closes, the runtimes it made
/// `transient` go.
pub(crate) async fn connection(stream: TcpStream, a: Admitted, sh: Arc<Shared>) {
    let mut conn = Conn::default();
    serve(stream, a, &sh, &mut conn).await;
    if !conn.transient.is_empty() {
        let sh2 = sh.clone();
        with_ctl(&sh, move |_| {
            if let Some(j) = &sh2.j5 {
                lock(j).close(&conn);
            }
        })
        .await;
    }
}

/// Reads requests and answers them, as the Mark6 side does: through the gate when a token is required
/// (tarpit delay, the token within `auth_timeout`, a strike for a connection that leaves without it),
/// screened by [`J5Session`].
async fn serve(mut stream: TcpStream, a: Admitted, sh: &Arc<Shared>, conn: &mut Conn) {
    let mut pending = Pending::new(sh, a);
    if !a.delay.is_zero() {
        // an address with failed or silent attempts waits before it is read (a tarpit)
        tokio::time::sleep(a.delay).await;
    }
    let _ = stream.set_nodelay(true);
    let mut session = J5Session::new(sh.control_token.clone().filter(|_| !a.trusted));
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
            Err(_) if authenticated => return,
            Err(_) => {
                let msg = b"!auth= 4 : no auth=<token> in time, closing ;\n";
                let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(msg)).await;
                return;
            }
        };
        for raw in session.frame(&buf[..n]) {
            let screened = session.screen(&raw);
            if screened.items.is_empty() {
                continue;
            }
            let mut out = String::new();
            for item in screened.items {
                let reply = match item {
                    Screened::Reply(r) => r,
                    Screened::Execute(st) => execute(sh, conn, st).await,
                };
                reply.write_to(&mut out);
            }
            out.push_str(if screened.crlf { "\r\n" } else { "\n" });
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
}

/// Executes one statement: decided under the controller's lock, slow work carried out after.
async fn execute(sh: &Arc<Shared>, conn: &mut Conn, st: Statement) -> J5Reply {
    let sh2 = sh.clone();
    let mut c = conn.clone();
    let (step, actions, c) = with_ctl(sh, move |ctl| {
        ctl.count_command();
        let Some(j) = &sh2.j5 else {
            unreachable!("jive5ab connections exist only with the dialect's state")
        };
        let step = lock(j).handle(&mut c, &st, ctl, UtcTime::now());
        (step, ctl.take_actions(), c)
    })
    .await;
    *conn = c;
    let replies = perform(sh, actions).await;
    match step {
        Step::Now(r) => r,
        Step::Start(p) => {
            let r = replies.into_iter().find(|(t, _)| *t == p.ticket).map(|(_, r)| r);
            let sh2 = sh.clone();
            with_ctl(sh, move |_| match &sh2.j5 {
                Some(j) => lock(j).started(&p, r, UtcTime::now()),
                None => unreachable!(),
            })
            .await
        }
        Step::WhenIdle(r) => {
            run_until_idle(sh, FLUSH_WAIT).await;
            r
        }
        Step::Disk2Net(job, r) => {
            let sh2 = sh.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = super::disk2net::run_disk2net(&job) {
                    if let Some(j) = &sh2.j5 {
                        lock(j).push_error(-1, format!("disk2net: {e}"), UtcTime::now());
                    }
                }
            });
            r
        }
        Step::Net2File(job) => {
            let opened = tokio::task::spawn_blocking(move || super::net2file::open_net2file(job))
                .await
                .unwrap_or_else(|_| Err("net2file: opening panicked".into()));
            match opened {
                Ok((o, size)) => {
                    let sh2 = sh.clone();
                    tokio::task::spawn_blocking(move || {
                        if let Err(e) = super::net2file::run_net2file(o) {
                            if let Some(j) = &sh2.j5 {
                                lock(j).push_error(-1, format!("net2file: {e}"), UtcTime::now());
                            }
                        }
                    });
                    J5Reply::new("net2file", false, ReturnCode::Done, vec![size.to_string()])
                }
                Err(e) => J5Reply::msg("net2file", false, ReturnCode::Error, e),
            }
        }
        Step::Disk2File(job, r) => {
            let sh2 = sh.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = super::transfer::run_disk2file(&job) {
                    if let Some(j) = &sh2.j5 {
                        lock(j).push_error(-1, format!("disk2file: {e}"), UtcTime::now());
                    }
                }
            });
            r
        }
    }
}
