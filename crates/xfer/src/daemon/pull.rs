//! A pull: the daemon sends. Also what a pull or a relay may send.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::shared::{refuse_unreadable, Active, Conn};
use crate::dest::{Roots, Use};
use crate::link::Inbound;
use crate::progress::Progress;
use crate::session::{Options, ScanRequest, Session};
use crate::utc_now;

/// Resolves `ROOT/rel` sources to real paths under the roots (canonicalised: a symbolic link may not lead
/// out of its root).
fn resolve_sources(
    roots: &Roots,
    sources: &[String],
    scope: Option<&[String]>,
) -> Result<Vec<std::path::PathBuf>, String> {
    let mut out = Vec::new();
    for s in sources {
        let (root, comps) = roots.resolve_for(s, Use::Read, scope)?;
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
/// from must lie inside a root after symbolic links are resolved. Every root read from must be readable
/// and, when the client's key has a `scope`, one of its roots.
pub(super) fn source_set(
    roots: &Roots,
    sources: &[String],
    scan: Option<&ScanRequest>,
    scope: Option<&[String]>,
) -> Result<crate::source::SourceSet, String> {
    source_set_at(roots, sources, scan, false, scope)
}

/// [`source_set`]; with `growing` (a partial round of `pull --follow`) a scan in the gather layout is read
/// as it is being recorded: its complete-block prefix (`scan_source_growing`).
fn source_set_at(
    roots: &Roots,
    sources: &[String],
    scan: Option<&ScanRequest>,
    growing: bool,
    scope: Option<&[String]>,
) -> Result<crate::source::SourceSet, String> {
    let Some(sc) = scan else {
        let paths = resolve_sources(roots, sources, scope)?;
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
        let (root, comps) = roots.resolve_for(d, Use::Read, scope)?;
        let mut p = root.path.clone();
        for c in &comps {
            p.push(c);
        }
        disks.push(p.to_string_lossy().into_owned());
    }
    let found = if growing && layout == crate::scan::Layout::Gather {
        crate::scan::scan_source_growing(&sc.name, &disks)
    } else {
        crate::scan::scan_source(&sc.name, &disks, layout)
    };
    let (set, _) = found.map_err(|e| e.to_string())?;
    for p in &set.paths {
        let canon = p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))?;
        let readable = |r: &&crate::dest::Root| Roots::permit(r, Use::Read, scope).is_ok();
        if !roots
            .0
            .iter()
            .filter(readable)
            .any(|r| canon.starts_with(&r.path))
        {
            return Err(format!(
                "scan {}: {} leads outside the roots (through a symbolic link)",
                sc.name,
                p.display()
            ));
        }
    }
    Ok(set)
}

/// Sends `sources` (or `scan`) to the client of `c`, whose data port is `data_port`.
pub(super) fn pull_session(
    c: &Conn<'_>,
    sources: Vec<String>,
    options: Options,
    data_port: u16,
    scan: Option<ScanRequest>,
) {
    let (sh, link, peer, secret) = (c.sh, c.link, c.peer, c.secret);
    let set = match source_set_at(&sh.cfg.roots, &sources, scan.as_ref(), options.partial, c.scope) {
        Ok(set) => set,
        Err(e) => return c.refuse(e),
    };
    if !crate::hash::valid_chunk_size(options.chunk_size) {
        return c.refuse(format!(
            "chunk size {} is not a power of two of at least 4 KiB",
            options.chunk_size
        ));
    }
    let transfer_id: u32 = rand::random();
    let act = Active::new(transfer_id, peer, "send", sources.join(" "), data_port);
    let progress = act.progress.clone();
    let admitted = match sh.admit(act.clone()) {
        Ok(a) => a,
        Err(e) => return c.busy(e),
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
            log!(sh, peer = %peer, "{peer}: pull: expected ready, got {other:?}");
            return;
        }
        Err(_) => return,
    };
    let from = sources.join(" ");
    log!(
        sh,
        peer = %peer,
        transfer_id = %super::tid(transfer_id),
        files = files.len(),
        bytes = total,
        source = ?from,
        "{peer}: transfer {transfer_id:08x}: sending {} files, {total} bytes from {from:?}",
        files.len()
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
                peer = %peer,
                transfer_id = %super::tid(transfer_id),
                bytes = total,
                seconds = o.seconds,
                rate_bps = if o.seconds > 0.0 { total as f64 * 8.0 / o.seconds } else { 0.0 },
                "{peer}: transfer {transfer_id:08x}: sent, verified and committed at the client in {:.1} s",
                o.seconds
            );
        }
        Err(e) => {
            sh.counters.transfers_failed.fetch_add(1, Relaxed);
            log!(sh, peer = %peer, transfer_id = %super::tid(transfer_id), error = %e, "{peer}: transfer {transfer_id:08x} failed: {e}");
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
