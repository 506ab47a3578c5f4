//! Least privilege over loopback with a real daemon: read-only and write-only roots, and keys that may
//! use some roots only.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{ClientKey, Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress, XferError};
use vlbiflow_xfer_proto::RateConfig;

fn opts() -> Options {
    Options {
        chunk_size: 1 << 20,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
        partial: false,
        verify_written: false,
    }
}

struct Env {
    dirs: Vec<tempfile::TempDir>,
    file: PathBuf,
    daemon: Daemon,
}

const MAIN: Key = Key([9; 32]);
const INBOX_ONLY: Key = Key([5; 32]);

/// Roots rec (read-only), inbox (write-only) and scratch; the main key, and a key for inbox only.
fn env() -> Env {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let file = dirs[0].path().join("a.vdif");
    std::fs::write(&file, vec![7u8; 100_000]).unwrap();
    std::fs::write(dirs[1].path().join("old.vdif"), vec![1u8; 50_000]).unwrap();
    std::fs::write(dirs[2].path().join("in.vdif"), vec![2u8; 50_000]).unwrap();
    let roots = Roots::parse(&[
        format!("rec={}:ro", dirs[1].path().display()),
        format!("inbox={}:wo", dirs[2].path().display()),
        format!("scratch={}", dirs[3].path().display()),
    ])
    .unwrap();
    assert_eq!(roots.describe(), "rec:ro, inbox:wo, scratch");
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), roots, MAIN);
    cfg.client_keys.push(ClientKey {
        name: "inbox.key".into(),
        key: INBOX_ONLY,
        roots: vec!["inbox".into()],
    });
    let daemon = Daemon::start(cfg).unwrap();
    Env { dirs, file, daemon }
}

fn push(e: &Env, key: &Key, dest: &str) -> Result<(), XferError> {
    let (set, _) = collect_paths(std::slice::from_ref(&e.file)).unwrap();
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), key.clone());
    client::push(
        &cfg,
        set,
        dest,
        opts(),
        RateConfig::auto(500e6),
        &Progress::default(),
        &AtomicBool::new(false),
    )
    .map(|_| ())
}

fn pull(e: &Env, key: &Key, src: &str) -> Result<(), XferError> {
    let local = tempfile::tempdir().unwrap();
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), key.clone());
    client::pull(
        &cfg,
        &[src.to_string()],
        None,
        local.path(),
        opts(),
        &Progress::default(),
        &AtomicBool::new(false),
    )
    .map(|_| ())
}

fn refused(r: Result<(), XferError>, want: &str) {
    match r {
        Err(e @ XferError::Refused(_)) => assert!(e.to_string().contains(want), "{e}"),
        other => panic!("not refused ({want}): {other:?}"),
    }
}

#[test]
fn read_only_and_write_only_roots_refuse_the_other_direction() {
    let e = env();
    refused(push(&e, &MAIN, "rec/x"), "root \"rec\" is read-only");
    assert!(!e.dirs[1].path().join("x").exists());
    refused(pull(&e, &MAIN, "inbox/in.vdif"), "root \"inbox\" is write-only");
    push(&e, &MAIN, "inbox/x").unwrap();
    assert!(e.dirs[2].path().join("x/a.vdif").is_file());
    pull(&e, &MAIN, "rec/old.vdif").unwrap();
    push(&e, &MAIN, "scratch").unwrap();
    pull(&e, &MAIN, "scratch/a.vdif").unwrap();
    assert_eq!(
        e.daemon
            .counters()
            .refused
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[test]
fn a_scoped_key_uses_its_roots_only() {
    let e = env();
    push(&e, &INBOX_ONLY, "inbox/y").unwrap();
    assert!(e.dirs[2].path().join("y/a.vdif").is_file());
    refused(
        push(&e, &INBOX_ONLY, "scratch/y"),
        "this key may not use root \"scratch\"",
    );
    refused(pull(&e, &INBOX_ONLY, "rec/old.vdif"), "(its roots: inbox)");
    assert!(!e.dirs[3].path().join("y").exists());
    // A key the daemon does not know is still turned away at the handshake.
    refused(push(&e, &Key([4; 32]), "inbox/z"), "key");
}

#[test]
fn a_key_for_a_root_the_daemon_does_not_serve_stops_the_start() {
    let d = tempfile::tempdir().unwrap();
    let roots = Roots::parse(&[format!("data={}", d.path().display())]).unwrap();
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), roots, MAIN);
    cfg.client_keys.push(ClientKey {
        name: "k".into(),
        key: INBOX_ONLY,
        roots: vec!["inbox".into()],
    });
    let err = Daemon::start(cfg).err().unwrap().to_string();
    assert!(err.contains("key k: unknown root \"inbox\""), "{err}");
}

#[test]
fn listing_scans_is_reading_under_the_same_rules() {
    let e = env();
    let ls = |key: &Key, disks: &str| {
        let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), key.clone());
        client::ls(&cfg, &[disks.to_string()], None).map(|_| ())
    };
    ls(&MAIN, "rec").unwrap();
    refused(ls(&MAIN, "inbox"), "root \"inbox\" is write-only");
    refused(ls(&INBOX_ONLY, "rec"), "(its roots: inbox)");
    refused(ls(&INBOX_ONLY, "inbox"), "root \"inbox\" is write-only");
}
