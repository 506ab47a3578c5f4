//! A push over loopback with the sender's GSO turned off (`VLBIFLOW_XFER_GSO=0`, one datagram per message):
//! the files arrive identical. Its own test binary, since the variable is read by every sender of the
//! process (the pushes in `loopback.rs` send GSO messages, the default).

use std::sync::atomic::AtomicBool;

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::source::collect_paths;
use vlbiflow_xfer::{Key, Progress};
use vlbiflow_xfer_proto::RateConfig;

#[path = "common/content.rs"]
mod content;
use content::content;

#[test]
fn a_push_without_gso_arrives_identical() {
    std::env::set_var(vlbiflow_xfer::send::GSO_ENV, "0");
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let key = Key([5; 32]);
    let roots = Roots::parse(&[format!("data={}", dst.path().display())]).unwrap();
    let daemon = Daemon::start(ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        roots,
        key.clone(),
    ))
    .unwrap();
    // whole blocks, a short last block, one short file
    let sizes = [(3 << 20) + 12_345, 8191, 100_000];
    let paths: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = src.path().join(format!("g{i}.vdif"));
            std::fs::write(&p, content(40 + i as u64, n)).unwrap();
            p
        })
        .collect();
    let (set, _) = collect_paths(&paths).unwrap();
    let o = Options {
        chunk_size: 1 << 20,
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
        RateConfig::auto(500e6),
        &Progress::default(),
        &AtomicBool::new(false),
    )
    .unwrap();
    assert_eq!(out.committed.len(), sizes.len());
    for p in &paths {
        let name = p.file_name().unwrap();
        let got = std::fs::read(dst.path().join("in").join(name)).unwrap();
        assert!(got == std::fs::read(p).unwrap(), "{name:?} differs");
    }
}
