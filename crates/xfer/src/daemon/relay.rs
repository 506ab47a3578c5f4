//! A relay: the daemon pushes to another daemon on its client's behalf, retrying, and reports to the
//! client as it goes.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::pull::source_set;
use super::shared::{Active, Conn};
use crate::error::XferError;
use crate::link::Link;
use crate::progress::Progress;
use crate::session::{Options, ScanRequest, Session};
use crate::utc_now;
use vlbiflow_guard::net::AllowList;

/// A relay request: `sources` (or `scan`) to `dest` on the daemon `to`, up to `retries` more attempts.
pub(super) struct Relay {
    pub to: String,
    pub dest: String,
    pub sources: Vec<String>,
    pub scan: Option<ScanRequest>,
    pub options: Options,
    pub retries: u32,
}

pub(super) fn relay_session(c: &Conn<'_>, r: Relay) {
    let Relay {
        to,
        dest,
        sources,
        scan,
        options,
        retries,
    } = r;
    let (sh, link, client) = (c.sh, c.link, c.peer);
    let set = match source_set(&sh.cfg.roots, &sources, scan.as_ref(), c.scope) {
        Ok(set) => set,
        Err(e) => return c.refuse(e),
    };
    if let Err(why) = target_allowed(&sh.cfg.relay_to, &to) {
        return c.refuse(why);
    }
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
        Err(e) => return c.busy(e),
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
    let from = sources.join(" ");
    log!(
        sh,
        peer = %client,
        files = set.files.len(),
        bytes = total,
        source = ?from,
        to = %to,
        dest = ?dest,
        "{client}: relay of {} files, {total} bytes from {from:?} to {to}/{dest:?}",
        set.files.len()
    );
    let started = utc_now();
    let t0 = Instant::now();
    let mut attempt = 0u32;
    let result = loop {
        attempt += 1;
        // every attempt reports into the one the daemon's list of transfers shows
        let progress = relay_progress.clone();
        let r = reporting(link, &progress, || {
            crate::client::push(
                &ccfg,
                set.clone(),
                &dest,
                options.clone(),
                rate,
                &progress,
                &sh.stop,
            )
        });
        match r {
            Err(XferError::Failed(e) | XferError::Busy(e) | XferError::Io(e))
                if attempt <= retries && !sh.stop.load(Relaxed) =>
            {
                let wait = Duration::from_secs(1 << (attempt - 1).min(6));
                log!(
                    sh,
                    peer = %client,
                    to = %to,
                    attempt,
                    error = %e,
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
        peer = %client,
        to = %to,
        ok,
        bytes = moved,
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

/// Runs `push`, telling the client its progress every half second meanwhile.
fn reporting<T>(link: &Link, progress: &Progress, push: impl FnOnce() -> T) -> T {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
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
        let r = push();
        done.store(true, Relaxed);
        r
    })
}

/// Whether the daemon may connect to `to` for a relay: every address it resolves to lies in `allowed`.
/// The error names the target, the address and the option.
fn target_allowed(allowed: &AllowList, to: &str) -> Result<(), String> {
    if allowed.is_empty() {
        return Err(format!(
            "relay to {to}: this daemon relays to no address (its operator allows targets with --relay-to ADDR[/PREFIX] or relay_to in its configuration)"
        ));
    }
    let addrs = vlbiflow_udp::net::resolve_all(to).map_err(|e| format!("relay target: {e}"))?;
    match addrs.iter().find(|a| !allowed.allows(a.ip())) {
        Some(a) => Err(format!(
            "relay to {to} ({}): not among the addresses this daemon may relay to (--relay-to)",
            a.ip()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_outside_the_list_or_with_no_list_are_refused() {
        let none = AllowList::default();
        let e = target_allowed(&none, "127.0.0.1:4000").unwrap_err();
        assert!(
            e.contains("relays to no address") && e.contains("--relay-to"),
            "{e}"
        );
        let lo = AllowList(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(target_allowed(&lo, "127.0.0.1:4000").is_ok());
        assert!(target_allowed(&lo, "127.3.2.1:9").is_ok());
        let e = target_allowed(&lo, "10.1.2.3:22").unwrap_err();
        assert!(e.contains("10.1.2.3") && e.contains("--relay-to"), "{e}");
        let e = target_allowed(&lo, "no-such-host.invalid:1").unwrap_err();
        assert!(e.contains("cannot resolve"), "{e}");
    }
}
