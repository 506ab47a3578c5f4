//! End to end over loopback: a real daemon, real files, real sockets.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress, XferError};
use vlbiflow_xfer_proto::RateConfig;

fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn opts(chunk: u64) -> Options {
    Options {
        chunk_size: chunk,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
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
    let daemon = Daemon::start(cfg).unwrap();
    Env {
        src: s.path().to_path_buf(),
        root: r.path().to_path_buf(),
        _dirs: vec![s, r],
        daemon,
        key,
    }
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
    let err = push(&e, &bad, &[f.clone()], "data/x", opts(1 << 20)).unwrap_err();
    assert!(matches!(err, XferError::Refused(_)), "{err}");
    assert!(err.to_string().contains("key"), "{err}");
    let err = push(&e, &e.key, &[f.clone()], "nope/x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains("unknown root \"nope\""), "{err}");
    let err = push(&e, &e.key, &[f.clone()], "data/../x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains(".."), "{err}");
    assert!(tree(&e.root).is_empty(), "{:?}", tree(&e.root));
    // an existing different file is not overwritten unless asked
    std::fs::create_dir_all(e.root.join("x")).unwrap();
    std::fs::write(e.root.join("x/a.vdif"), content(2, 50_000)).unwrap();
    let err = push(&e, &e.key, &[f.clone()], "data/x", opts(1 << 20)).unwrap_err();
    assert!(err.to_string().contains("different content"), "{err}");
    assert_eq!(
        std::fs::read(e.root.join("x/a.vdif")).unwrap(),
        content(2, 50_000)
    );
    let mut o = opts(1 << 20);
    o.overwrite = true;
    push(&e, &e.key, &[f.clone()], "data/x", o).unwrap();
    assert_eq!(
        std::fs::read(e.root.join("x/a.vdif")).unwrap(),
        content(1, 50_000)
    );
    let _ = Duration::ZERO;
}
