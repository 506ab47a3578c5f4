//! End to end over loopback: a real daemon, real files, real sockets.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use vlbiflow_testkit::net::connect_from;

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress, XferError};
use vlbiflow_xfer_proto::RateConfig;

#[path = "common/content.rs"]
mod content;
use content::content;

fn opts(chunk: u64) -> Options {
    Options {
        chunk_size: chunk,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
        partial: false,
        verify_written: false,
    }
}

struct Env {
    _dirs: Vec<tempfile::TempDir>,
    src: PathBuf,
    root: PathBuf,
    daemon: Daemon,
    key: Key,
}

fn env() -> Env {
    let s = tempfile::tempdir().unwrap();
    let r = tempfile::tempdir().unwrap();
    let key = Key([9; 32]);
    let roots = Roots::parse(&[format!("data={}", r.path().display())]).unwrap();
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), roots, key.clone());
    cfg.log = true;
    cfg.relay_to = loopback();
    let daemon = Daemon::start(cfg).unwrap();
    Env {
        src: s.path().to_path_buf(),
        root: r.path().to_path_buf(),
        _dirs: vec![s, r],
        daemon,
        key,
    }
}

/// 127.0.0.0/8: the daemons of these tests may relay to each other.
fn loopback() -> vlbiflow_guard::net::AllowList {
    vlbiflow_guard::net::AllowList(vec!["127.0.0.0/8".parse().unwrap()])
}

fn push(
    e: &Env,
    key: &Key,
    paths: &[PathBuf],
    dest: &str,
    o: Options,
) -> Result<vlbiflow_xfer::send::SendOutcome, XferError> {
    let (set, _) = collect_paths(paths).unwrap();
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), key.clone());
    client::push(
        &cfg,
        set,
        dest,
        o,
        RateConfig::auto(500e6),
        &Progress::default(),
        &AtomicBool::new(false),
    )
}

fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn push_files_and_a_tree_verified_and_committed() {
    let e = env();
    let exp = e.src.join("exp");
    std::fs::create_dir_all(exp.join("sub")).unwrap();
    let sizes = [0usize, 1, 8191, 8192, 100_000, (3 << 20) + 12345];
    for (i, &n) in sizes.iter().enumerate() {
        std::fs::write(exp.join(format!("f{i}.vdif")), content(i as u64, n)).unwrap();
    }
    std::fs::write(exp.join("sub/deep.bin"), content(99, 70_000)).unwrap();
    let single = e.src.join("single.vdif");
    std::fs::write(&single, content(7, 2 << 20)).unwrap();
    let out = push(
        &e,
        &e.key,
        &[exp.clone(), single.clone()],
        "data/in",
        opts(1 << 20),
    )
    .unwrap();
    assert_eq!(out.committed.len(), sizes.len() + 2);
    // the receiver's report against an independent count: every block of the files written exactly once
    // (later copies are duplicates), every datagram it counted was sent, nothing dropped
    let blocks: u64 = sizes
        .iter()
        .chain([&70_000, &(2 << 20)])
        .map(|&n| (n as u64).div_ceil(8192))
        .sum();
    let r = out.receiver;
    assert_eq!(r.datagrams, blocks, "{r:?}");
    assert!(
        r.datagrams + r.duplicates <= out.stats.datagrams,
        "{r:?} {:?}",
        out.stats
    );
    assert_eq!(r.dropped(), 0, "{r:?}");
    for c in &out.committed {
        let got = std::fs::read(e.root.join("in").join(&c.name)).unwrap();
        let want = std::fs::read(e.src.join(&c.name)).unwrap();
        assert!(got == want, "{} differs", c.name);
        assert_eq!(c.blake3, blake3::hash(&want).to_hex().to_string(), "{}", c.name);
        assert!(e.root.join("in").join(format!("{}.blake3.json", c.name)).exists());
    }
    assert!(
        !tree(&e.root).iter().any(|p| p.ends_with(".part")),
        "{:?}",
        tree(&e.root)
    );
    assert_eq!(out.bytes_resumed, 0);
    // the same command again moves nothing: everything is there and verified
    let again = push(&e, &e.key, &[exp, single], "data/in", opts(1 << 20)).unwrap();
    assert_eq!(again.stats.bytes, 0, "nothing moves the second time");
    assert_eq!(
        again.bytes_resumed,
        ((3 << 20) + 12345 + 100_000 + 8192 + 8191 + 1 + 70_000 + (2 << 20)) as u64
    );
}

#[test]
fn refusals_write_nothing() {
    let e = env();
    let f = e.src.join("a.vdif");
    std::fs::write(&f, content(1, 50_000)).unwrap();
    let bad = Key([8; 32]);
    let err = push(&e, &bad, std::slice::from_ref(&f), "data/x", opts(1 << 20)).unwrap_err();
    assert!(matches!(err, XferError::Refused(_)), "{err}");
    assert!(err.to_string().contains("key"), "{err}");
    let err = push(&e, &e.key, std::slice::from_ref(&f), "nope/x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains("unknown root \"nope\""), "{err}");
    let err = push(&e, &e.key, std::slice::from_ref(&f), "data/../x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains(".."), "{err}");
    assert!(tree(&e.root).is_empty(), "{:?}", tree(&e.root));
    // an existing different file is not overwritten unless asked
    std::fs::create_dir_all(e.root.join("x")).unwrap();
    std::fs::write(e.root.join("x/a.vdif"), content(2, 50_000)).unwrap();
    let err = push(&e, &e.key, std::slice::from_ref(&f), "data/x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains("different content"), "{err}");
    assert_eq!(
        std::fs::read(e.root.join("x/a.vdif")).unwrap(),
        content(2, 50_000)
    );
    let mut o = opts(1 << 20);
    o.overwrite = true;
    push(&e, &e.key, std::slice::from_ref(&f), "data/x", o).unwrap();
    assert_eq!(
        std::fs::read(e.root.join("x/a.vdif")).unwrap(),
        content(1, 50_000)
    );
    let _ = Duration::ZERO;
}

#[test]
fn garbage_datagrams_and_connection_probes_change_only_counters() {
    use std::io::Write;
    use std::net::{TcpStream, UdpSocket};
    let e = env();
    let f = e.src.join("g.vdif");
    let size = 48 << 20;
    std::fs::write(&f, content(5, size)).unwrap();
    let addr = e.daemon.local_addr();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // the attacker: waits for the transfer's data port, then sends 100,000 random datagrams (a third of
    // them with our magic and version, so they reach the tag check) and probes the control port
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<(u16, u32)>();
    let blaster = std::thread::spawn(move || {
        let (port, id) = ready_rx.recv_timeout(Duration::from_secs(30)).expect("data port");
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut buf = vec![0u8; 8256];
        for i in 0..100_000u32 {
            let len = [8256usize, 64, 100, 1500, 9000][i as usize % 5].min(buf.len());
            for b in buf[..len].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if i % 3 == 0 {
                // a well-formed header of this transfer (file 0, offset 0): only the tag is wrong
                buf[0..3].copy_from_slice(&[0x58, 0x46, vlbiflow_xfer_proto::wire::VERSION]);
                buf[3] = 0;
                buf[4..8].copy_from_slice(&id.to_be_bytes());
                buf[16..20].fill(0);
                buf[24..32].fill(0);
                buf[40..48].fill(0);
                buf[20..24].copy_from_slice(&((len.max(64) - 64) as u32).to_be_bytes());
            }
            let _ = s.send_to(&buf[..len], ("127.0.0.1", port));
        }
        // control port: bare connects, garbage, a half handshake
        for i in 0..300 {
            if let Ok(mut c) = TcpStream::connect(addr) {
                if i % 3 == 1 {
                    let _ = c.write_all(b"GET / HTTP/1.0\r\n\r\n");
                } else if i % 3 == 2 {
                    let _ = c.write_all(&[0, 48, 1, 2, 3]);
                }
            }
        }
    });
    let watcher = {
        let d = &e.daemon;
        let t0 = std::time::Instant::now();
        move || loop {
            if let Some(a) = d.active().first() {
                let _ = ready_tx.send((a.data_port, a.id));
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no transfer started");
            std::thread::yield_now();
        }
    };
    let out = std::thread::scope(|s| {
        s.spawn(watcher);
        let (set, _) = collect_paths(std::slice::from_ref(&f)).unwrap();
        let cfg = ClientConfig::new(addr.to_string(), e.key.clone());
        client::push(
            &cfg,
            set,
            "data/g",
            opts(4 << 20),
            RateConfig::fixed(200e6),
            &Progress::default(),
            &stop,
        )
    })
    .unwrap();
    blaster.join().unwrap();
    assert_eq!(
        std::fs::read(e.root.join("g/g.vdif")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    assert_eq!(
        out.committed[0].blake3,
        blake3::hash(&std::fs::read(&f).unwrap()).to_hex().to_string()
    );
    let c = e.daemon.counters();
    let bad = c.datagrams_bad_tag.load(std::sync::atomic::Ordering::Relaxed);
    let malformed = c.datagrams_malformed.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "counters: bad tag {bad}, malformed {malformed}, probes {}, failed logins {}",
        c.probes.load(std::sync::atomic::Ordering::Relaxed),
        c.auth_failures.load(std::sync::atomic::Ordering::Relaxed)
    );
    // what arrived while the transfer ran was counted (the rest hit a closed port), nothing was written
    assert!(bad + malformed > 0);
    assert!(bad > 0, "no forged datagram reached the tag check");
    // the client has the receiver's own count of this transfer (the daemon ran no other)
    assert_eq!(out.receiver.bad_tag, bad, "{:?}", out.receiver);
    assert_eq!(out.receiver.dropped(), bad + malformed, "{:?}", out.receiver);
    assert_eq!(
        out.receiver.datagrams,
        (size as u64).div_ceil(8192),
        "{:?}",
        out.receiver
    );
    assert_eq!(tree(&e.root), ["g/g.vdif", "g/g.vdif.blake3.json"]);
}

#[test]
fn archive_and_metrics() {
    use std::io::{Read, Write};
    let s = tempfile::tempdir().unwrap();
    let r = tempfile::tempdir().unwrap();
    let key = Key([1; 32]);
    let roots = Roots::parse(&[format!("data={}", r.path().display())]).unwrap();
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), roots.clone(), key.clone());
    cfg.metrics = Some("0.0.0.0:0".parse().unwrap());
    assert!(Daemon::start(cfg.clone())
        .err()
        .unwrap()
        .to_string()
        .contains("loopback only"));
    cfg.metrics = Some("127.0.0.1:0".parse().unwrap());
    cfg.archive = Some(s.path().join("a/xfer.sqlite"));
    // the station's policy reads back what the client did not ask to
    cfg.verify_written = true;
    let d = Daemon::start(cfg).unwrap();
    let f = s.path().join("m.vdif");
    std::fs::write(&f, content(3, 300_000)).unwrap();
    let (set, _) = collect_paths(&[f]).unwrap();
    let ccfg = ClientConfig::new(d.local_addr().to_string(), key);
    let out = client::push(
        &ccfg,
        set,
        "data",
        opts(1 << 20),
        RateConfig::auto(100e6),
        &Progress::default(),
        &AtomicBool::new(false),
    )
    .unwrap();
    // the daemon's policy, as its report to the client says: every byte was read back before the commit
    assert_eq!(out.receiver.bytes_read_back, 300_000, "{:?}", out.receiver);
    // the client returns when the commit report arrives; the daemon finishes its books right after
    let t0 = std::time::Instant::now();
    while d
        .counters()
        .transfers_ok
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::yield_now();
    }
    let mut c = std::net::TcpStream::connect(d.metrics_addr().unwrap()).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("vlbiflow_xfer_transfers_ok_total 1"), "{body}");
    assert!(body.contains("vlbiflow_xfer_active_transfers 0"), "{body}");
    assert!(
        body.contains("vlbiflow_xfer_read_back_bytes_total 300000\n"),
        "{body}"
    );
    let direct_line = body
        .lines()
        .find(|l| l.starts_with("vlbiflow_xfer_direct_written_bytes_total "))
        .expect("direct_written_bytes_total");
    drop(d);
    let a = vlbiflow_xfer::archive::Archive::open(&s.path().join("a/xfer.sqlite")).unwrap();
    let l = a.list(10).unwrap();
    assert_eq!(l.len(), 1);
    assert!(
        l[0].ok && l[0].role == "receive" && l[0].bytes == 300_000,
        "{:?}",
        l[0]
    );
    assert_eq!(l[0].detail["files"][0]["name"], "m.vdif");
    assert_eq!(l[0].detail["bytes_read_back"], 300_000);
    assert_eq!(
        format!(
            "vlbiflow_xfer_direct_written_bytes_total {}",
            l[0].detail["bytes_written_direct"]
        ),
        direct_line
    );
}

/// Whether files under `dir` can be written with `O_DIRECT` (not on tmpfs, for one).
fn direct_writes_possible(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(".direct-probe");
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&p)
        .is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// The receiver gathers each chunk in memory and writes it with `O_DIRECT` once it is verified (only a
/// file's unaligned tail goes through the page cache): what arrives is identical, whatever the sizes, and
/// exactly the aligned bytes went direct: authenticated or encrypted (chunk hashes merged from block
/// digests) and with 512-byte blocks (too small to be BLAKE3 subtrees: chunks hashed from the buffer
/// written).
#[test]
fn received_chunks_are_written_direct_and_arrive_identical() {
    let e = env();
    let dir = e.root.join("exp");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        8192 + 17,
        (1 << 20) + 4096,
        (5 << 20) + 777,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        std::fs::write(dir.join(format!("f{i}")), content(40 + i as u64, n)).unwrap();
    }
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), e.key.clone());
    let total: u64 = sizes.iter().map(|&n| n as u64).sum();
    let aligned: u64 = sizes.iter().map(|&n| (n - n % 4096) as u64).sum();
    // the last: --verify-written, every byte read back from the disk and checked before the commit
    for (encrypt, block_size, verify_written) in [
        (false, 8192, false),
        (true, 8192, false),
        (false, 512, false),
        (false, 8192, true),
    ] {
        let case = format!("encrypt {encrypt}, blocks of {block_size}, verify_written {verify_written}");
        let local = tempfile::tempdir().unwrap();
        let out = client::pull(
            &cfg,
            &["data/exp".to_string()],
            None,
            local.path(),
            Options {
                encrypt,
                block_size,
                verify_written,
                ..opts(1 << 20)
            },
            &Progress::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(out.committed.len(), sizes.len());
        // datagrams that overtake `hello` or their file's announce wait for it rather than being dropped
        // and sent again
        assert_eq!(
            (out.stats.wrong_transfer, out.stats.unknown_file),
            (0, 0),
            "{case}"
        );
        for i in 0..sizes.len() {
            let n = format!("exp/f{i}");
            assert!(
                std::fs::read(local.path().join(&n)).unwrap() == std::fs::read(e.root.join(&n)).unwrap(),
                "{n} ({case})"
            );
        }
        let direct = if direct_writes_possible(local.path()) {
            aligned
        } else {
            0
        };
        assert_eq!(out.bytes_written_direct, direct, "{case}");
        assert_eq!(
            out.bytes_read_back,
            if verify_written { total } else { 0 },
            "{case}"
        );
    }
}

#[test]
fn pull_a_tree_then_resume_and_refuse_escapes() {
    let e = env();
    let tree_dir = e.root.join("exp");
    std::fs::create_dir_all(tree_dir.join("s")).unwrap();
    std::fs::write(tree_dir.join("a.vdif"), content(11, 3 << 20)).unwrap();
    std::fs::write(tree_dir.join("s/b.vdif"), content(12, 123_457)).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), e.root.join("link")).unwrap();
    let local = tempfile::tempdir().unwrap();
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), e.key.clone());
    let pull = |srcs: &[&str]| {
        let s: Vec<String> = srcs.iter().map(|x| x.to_string()).collect();
        client::pull(
            &cfg,
            &s,
            None,
            local.path(),
            opts(1 << 20),
            &Progress::default(),
            &AtomicBool::new(false),
        )
    };
    let out = pull(&["data/exp"]).unwrap();
    assert_eq!(out.committed.len(), 2);
    for n in ["exp/a.vdif", "exp/s/b.vdif"] {
        assert!(
            std::fs::read(local.path().join(n)).unwrap() == std::fs::read(e.root.join(n)).unwrap(),
            "{n}"
        );
    }
    // again: everything is there, nothing moves
    let again = pull(&["data/exp"]).unwrap();
    assert_eq!(again.stats.delivered, 0);
    assert_eq!(again.bytes_resumed, (3 << 20) + 123_457);
    // a link out of the root, '..', an unknown root
    for (src, want) in [
        ("data/link/secret", "outside root"),
        ("data/../x", "'..'"),
        ("x/y", "unknown root"),
    ] {
        let err = pull(&[src]).unwrap_err();
        assert!(
            matches!(err, XferError::Refused(_)) && err.to_string().contains(want),
            "{src}: {err}"
        );
    }
}

#[test]
fn daemon_to_daemon_started_by_a_third_party_retries_until_the_peer_is_up() {
    // A holds the data; B does not run yet when the third party asks A to push to it
    let a = env();
    let b_root = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let b_addr = format!("127.0.0.1:{port}");
    std::fs::create_dir_all(a.root.join("exp")).unwrap();
    std::fs::write(a.root.join("exp/s.vdif"), content(21, (2 << 20) + 77)).unwrap();
    let cfg = ClientConfig::new(a.daemon.local_addr().to_string(), a.key.clone());
    let b: std::sync::Mutex<Option<Daemon>> = std::sync::Mutex::new(None);
    let retried = std::sync::atomic::AtomicU32::new(0);
    let on_retry = |attempt: u32, err: &str, _wait: f64| {
        retried.store(attempt, std::sync::atomic::Ordering::SeqCst);
        assert!(err.contains("cannot reach"), "{err}");
        let roots = Roots::parse(&[format!("in={}", b_root.path().display())]).unwrap();
        let mut g = b.lock().unwrap();
        if g.is_none() {
            *g =
                Some(Daemon::start(ServeConfig::new(b_addr.parse().unwrap(), roots, a.key.clone())).unwrap());
        }
    };
    let sources = ["data/exp".to_string()];
    // data/exp of the daemon `cfg` reaches, relayed to B's `dest`
    let relay = |cfg: &ClientConfig, dest: &str, on_retry: &dyn Fn(u32, &str, f64)| {
        let req = client::RelayRequest {
            sources: &sources,
            scan: None,
            to: &b_addr,
            dest,
            options: opts(1 << 20),
            retries: 3,
        };
        client::relay(cfg, req, &Progress::default(), on_retry)
    };
    let out = relay(&cfg, "in/copy", &on_retry).unwrap();
    assert_eq!(retried.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(out.attempts, 2);
    assert_eq!(out.files.len(), 1);
    assert!(std::fs::read(b_root.path().join("copy/exp/s.vdif")).unwrap() == content(21, (2 << 20) + 77));
    // a refusal at the far end is reported as one
    let err = relay(&cfg, "nope/x", &|_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, XferError::Refused(_)) && err.to_string().contains("unknown root"),
        "{err}"
    );
    // a daemon that was given no relay targets refuses to connect anywhere for a client
    let r = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(r.path().join("exp")).unwrap();
    std::fs::write(r.path().join("exp/s.vdif"), b"x").unwrap();
    let roots = Roots::parse(&[format!("data={}", r.path().display())]).unwrap();
    let closed = Daemon::start(ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        roots,
        a.key.clone(),
    ))
    .unwrap();
    let closed_cfg = ClientConfig::new(closed.local_addr().to_string(), a.key.clone());
    let err = relay(&closed_cfg, "in/copy2", &|_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, XferError::Refused(_)) && err.to_string().contains("relays to no address"),
        "{err}"
    );
    assert!(!b_root.path().join("copy2").exists());
}

#[test]
fn encrypted_push_arrives_identical() {
    let e = env();
    let f = e.src.join("enc.vdif");
    std::fs::write(&f, content(31, (5 << 20) + 999)).unwrap();
    let mut o = opts(1 << 20);
    o.encrypt = true;
    let out = push(&e, &e.key, std::slice::from_ref(&f), "data/enc", o).unwrap();
    assert_eq!(
        out.committed[0].blake3,
        blake3::hash(&std::fs::read(&f).unwrap()).to_hex().as_str()
    );
    assert!(std::fs::read(e.root.join("enc/enc.vdif")).unwrap() == std::fs::read(&f).unwrap());
}

#[test]
fn failed_logins_are_rate_limited_and_transfers_run_side_by_side() {
    use std::sync::atomic::Ordering::SeqCst;
    let e = env();
    let f = e.src.join("c.vdif");
    std::fs::write(&f, content(41, 3 << 20)).unwrap();
    // five wrong keys: then this address's connections are held back before their handshake (a tarpit),
    // but the right key from the same address (a station behind the same NAT) still gets in
    for _ in 0..5 {
        let err = push(
            &e,
            &Key([66; 32]),
            std::slice::from_ref(&f),
            "data/x",
            opts(1 << 20),
        )
        .unwrap_err();
        assert!(err.to_string().contains("rejected our key"), "{err}");
    }
    let c = e.daemon.counters();
    // the fifth came after four strikes: it was delayed already
    assert_eq!(c.tarpitted.load(SeqCst), 1);
    push(&e, &e.key, std::slice::from_ref(&f), "data/x", opts(1 << 20)).unwrap();
    assert_eq!(c.tarpitted.load(SeqCst), 2, "the right key waited its turn");
    assert_eq!(c.auth_failures.load(SeqCst), 5);
    assert_eq!(tree(&e.root), ["x/c.vdif", "x/c.vdif.blake3.json"]);
    // its success cleared the strikes: the next one goes straight in
    push(&e, &e.key, std::slice::from_ref(&f), "data/y", opts(1 << 20)).unwrap();
    assert_eq!(c.tarpitted.load(SeqCst), 2);

    // another daemon: three pushes at once, each verified
    let e = env();
    let files: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = e.src.join(format!("p{i}.vdif"));
            std::fs::write(&p, content(50 + i, (4 << 20) + i as usize)).unwrap();
            p
        })
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let e = &e;
                s.spawn(move || {
                    push(
                        e,
                        &e.key,
                        std::slice::from_ref(p),
                        &format!("data/c{i}"),
                        opts(1 << 20),
                    )
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
    });
    for (i, p) in files.iter().enumerate() {
        let got = std::fs::read(e.root.join(format!("c{i}/p{i}.vdif"))).unwrap();
        assert!(got == std::fs::read(p).unwrap(), "p{i}");
    }
}

/// A transfer that cannot fit under the root is refused before anything moves (not ENOSPC half way).
#[test]
fn a_file_larger_than_the_free_space_is_refused_up_front() {
    let e = env();
    let big = e.src.join("big.vdif");
    // sparse: 4 TiB that take no room at the source
    std::fs::File::create(&big).unwrap().set_len(1 << 42).unwrap();
    let err = push(
        &e,
        &e.key.clone(),
        std::slice::from_ref(&big),
        "data/big",
        opts(32 << 20),
    )
    .unwrap_err();
    assert!(matches!(err, XferError::Refused(_)), "{err}");
    assert!(
        err.to_string().contains("not enough space under the root"),
        "{err}"
    );
    assert!(tree(&e.root).is_empty(), "{:?}", tree(&e.root));
}

/// A peer of another release hears why it was turned away: a request this daemon cannot read is refused
/// with the reason, and a `hello` of another protocol version ends the transfer with an `abort` that says
/// so (before, both ends only saw the connection close). Nothing is written.
#[test]
fn a_peer_of_another_protocol_version_is_told_why() {
    use vlbiflow_xfer::link::{Inbound, Link};
    use vlbiflow_xfer::session::{FileSpec, Session};
    use vlbiflow_xfer_proto::ControlMsg;
    let e = env();
    let cfg = ClientConfig::new(e.daemon.local_addr().to_string(), e.key.clone());
    let next = |link: &Link| link.rx.recv_timeout(Duration::from_secs(20)).expect("an answer");

    // a request with a field this release does not know
    let link = Link::start(client::connect(&cfg).unwrap(), Duration::from_secs(20));
    let push = Session::Push {
        dest: "data/v".into(),
        files: vec![FileSpec {
            name: "a.bin".into(),
            size: 10_000,
        }],
        options: opts(1 << 20),
    }
    .to_line();
    link.send(format!(
        "{},\"from_the_future\":1}}",
        push.strip_suffix('}').unwrap()
    ));
    match next(&link) {
        Inbound::Sess(Session::Refuse { error, .. }) => {
            assert!(error.contains("from_the_future"), "{error}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    link.close();
    let refused = || {
        e.daemon
            .counters()
            .refused
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    assert_eq!(refused(), 1, "the refusal is counted");

    // a hello of the protocol version before this one
    let link = Link::start(client::connect(&cfg).unwrap(), Duration::from_secs(20));
    link.send(push);
    let transfer_id = match next(&link) {
        Inbound::Sess(Session::Accept { transfer_id, .. }) => transfer_id,
        other => panic!("expected an accept, got {other:?}"),
    };
    let v = vlbiflow_xfer_proto::wire::VERSION;
    let hello = ControlMsg::Hello {
        version: v,
        transfer_id,
        block_size: 8192,
    }
    .to_line()
    .replace(&format!("\"version\":{v}"), &format!("\"version\":{}", v - 1));
    link.send(hello);
    let reason = loop {
        match next(&link) {
            Inbound::Ctl(ControlMsg::Abort { reason, .. }) => break reason,
            Inbound::Ctl(_) => continue, // what the receiver sends before it reads the hello
            other => panic!("expected an abort, got {other:?}"),
        }
    };
    assert!(
        reason.contains(&format!("hello.version: {}, this side speaks {v}", v - 1)),
        "{reason}"
    );
    link.close();
    assert!(
        tree(&e.root).iter().all(|p| p.ends_with(".part")),
        "{:?}",
        tree(&e.root)
    );
}

#[test]
fn a_flood_of_idle_connections_does_not_lock_out_the_key() {
    use std::io::Read;
    use std::sync::atomic::Ordering::SeqCst;
    let e = env();
    let f = e.src.join("k.vdif");
    std::fs::write(&f, content(77, 2 << 20)).unwrap();
    let addr = e.daemon.local_addr();
    // 40 connections that never start the handshake, from another address
    let mut idle: Vec<_> = (0..40).map(|_| connect_from("127.0.0.2", addr)).collect();
    // meanwhile a client with the key pushes (from 127.0.0.1)
    push(&e, &e.key, std::slice::from_ref(&f), "data/k", opts(1 << 20)).unwrap();
    assert_eq!(
        std::fs::read(e.root.join("k/k.vdif")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    // every idle connection is closed by the daemon: at once beyond the per-address limit, the others at
    // the handshake deadline
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut b = [0u8; 16];
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    }
    let c = e.daemon.counters();
    let t0 = std::time::Instant::now();
    while c.probes.load(SeqCst) + c.auth_blocked.load(SeqCst) < 40 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "closed connections not counted"
        );
        std::thread::yield_now();
    }
    assert_eq!(c.probes.load(SeqCst) + c.auth_blocked.load(SeqCst), 40);
    assert!(c.auth_blocked.load(SeqCst) >= 32 - 8, "{c:?}");
    assert_eq!(c.auth_failures.load(SeqCst), 0);
}
