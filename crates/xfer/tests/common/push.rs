//! One push of files made in a given directory to a daemon on loopback, for the tests of how the sender
//! reads its source.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::send::SendOutcome;
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress};
use vlbiflow_xfer_proto::RateConfig;

use super::content::content;

/// Files `d0.vdif`, `d1.vdif`, ... of `sizes` bytes made in a new directory under `parent` and written
/// back to it (no dirty page left in the page cache, which holds them), pushed to a daemon on loopback
/// that writes under `/var/tmp`; checks that each arrives with the BLAKE3 of its source, recomputed from
/// the destination file, and returns the push's outcome.
pub fn push_files(parent: &Path, sizes: &[usize]) -> SendOutcome {
    let src = tempfile::Builder::new()
        .prefix("vf-src")
        .tempdir_in(parent)
        .unwrap();
    let dst = tempfile::Builder::new()
        .prefix("vf-dst")
        .tempdir_in("/var/tmp")
        .unwrap();
    let key = Key([7; 32]);
    let roots = Roots::parse(&[format!("data={}", dst.path().display())]).unwrap();
    let daemon = Daemon::start(ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        roots,
        key.clone(),
    ))
    .unwrap();
    let paths: Vec<PathBuf> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = src.path().join(format!("d{i}.vdif"));
            std::fs::write(&p, content(60 + i as u64, n)).unwrap();
            std::fs::File::open(&p).unwrap().sync_all().unwrap();
            p
        })
        .collect();
    let (set, _) = collect_paths(&paths).unwrap();
    let o = Options {
        chunk_size: 4 << 20,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
        partial: false,
        verify_written: false,
    };
    let cfg = ClientConfig::new(daemon.local_addr().to_string(), key);
    let out = client::push(
        &cfg,
        set,
        "data/in",
        o,
        RateConfig::auto(1e9),
        &Progress::default(),
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(out.committed.len(), sizes.len());
    for (p, c) in paths.iter().zip(&out.committed) {
        let name = p.file_name().unwrap();
        let want = blake3::hash(&std::fs::read(p).unwrap()).to_hex().to_string();
        let got = std::fs::read(dst.path().join("in").join(name)).unwrap();
        assert_eq!(blake3::hash(&got).to_hex().to_string(), want, "{name:?} differs");
        assert_eq!(c.blake3, want, "{name:?}: the receiver's BLAKE3");
    }
    out
}

/// Whether files in `dir` can be read with `O_DIRECT` past a page cache: the file system takes it and
/// is not in memory (tmpfs, ramfs).
#[allow(dead_code)] // not every test binary that includes this file asks
pub fn direct_possible(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    // a file of its own (tests run side by side), removed when dropped
    let probe = tempfile::NamedTempFile::new_in(dir).unwrap();
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(probe.path())
        .is_ok();
    let fs = rustix::fs::fstatfs(probe.as_file()).unwrap();
    // not tmpfs or ramfs (linux/magic.h)
    direct && !matches!(fs.f_type as u32, 0x0102_1994 | 0x8584_58f6)
}
