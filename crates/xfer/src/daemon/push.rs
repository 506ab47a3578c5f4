//! A push: the daemon receives.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use vlbiflow_udp::{open_udp, UdpConfig};

use super::shared::{Active, Conn};
use crate::dest::Use;
use crate::progress::Progress;
use crate::recv::{self, RecvParams};
use crate::session::{FileSpec, Options, Session};
use crate::utc_now;

/// Receives `files` into `dest` for the client of `c`, if the roots, the plan and the daemon's limits
/// allow; the client hears the refusal otherwise. The caller closes the connection after it.
pub(super) fn push_session(c: &Conn<'_>, dest: String, files: Vec<FileSpec>, mut options: Options) {
    let (sh, link, peer) = (c.sh, c.link, c.peer);
    options.verify_written |= sh.cfg.verify_written;
    let (root, comps) = match sh.cfg.roots.resolve_for(&dest, Use::Write, c.scope) {
        Ok(x) => x,
        Err(e) => return c.refuse(e),
    };
    let plan = match recv::plan(&root.path, &comps, &files, &options) {
        Ok(p) => Arc::new(p),
        Err(e) => return c.refuse(e),
    };
    let transfer_id: u32 = rand::random();
    let _claim = match sh.claim(&plan, transfer_id, peer) {
        Ok(c) => c,
        Err(e) => return c.busy(e),
    };
    let mut ucfg = UdpConfig::receiver(SocketAddr::new(sh.cfg.listen.ip(), 0));
    ucfg.recv_buffer = Some(64 << 20);
    ucfg.timestamps = true; // the path's timing is read from the kernel's receive times
    ucfg.gro = true;
    ucfg.rxq_ovfl = true;
    let (sock, _rep) = match open_udp(&ucfg) {
        Ok(x) => x,
        Err(e) => return c.refuse(format!("no data port: {e}")),
    };
    let data_port = sock.local_addr().map(|a| a.port()).unwrap_or(0);
    let act = Active::new(transfer_id, peer, "receive", dest.clone(), data_port);
    let progress = act.progress.clone();
    let admitted = match sh.admit(act.clone()) {
        Ok(a) => a,
        Err(e) => return c.busy(e),
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
        peer = %peer,
        transfer_id = %super::tid(transfer_id),
        files = files.len(),
        bytes = total,
        dest = ?dest,
        data_port,
        "{peer}: transfer {transfer_id:08x}: receiving {} files, {total} bytes into {dest:?} (data port {data_port})",
        files.len()
    );
    let params = RecvParams {
        transfer_id,
        secret: c.secret,
        dead_timeout: sh.cfg.dead_timeout,
        source: peer.to_string(),
        realtime: sh.cfg.realtime,
        rate_cap: Some(act.cap.clone()),
    };
    let r = recv::run_receiver(link, &sock, plan, &params, &progress, &sh.stop);
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
                peer = %peer,
                transfer_id = %super::tid(transfer_id),
                files = o.committed.len(),
                bytes = total,
                seconds = o.seconds,
                rate_bps = if o.seconds > 0.0 { total as f64 * 8.0 / o.seconds } else { 0.0 },
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
        }
        Err(e) => {
            sh.counters.transfers_failed.fetch_add(1, Relaxed);
            log!(sh, peer = %peer, transfer_id = %super::tid(transfer_id), error = %e, "{peer}: transfer {transfer_id:08x} failed: {e}");
        }
    }
}
