//! Scans sent in place: a Mark6 scan on four disks (blocks spread out of order, as a recorder's free disk
//! takes the next block) gathered into one VDIF file at the destination, byte-identical to `vlbiflow
//! gather`; the same scan as FlexBuff chunks and in its own layout, each readable by the checker there.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use vlbiflow_reader::gather::gather;
use vlbiflow_reader::locate;
use vlbiflow_testkit::vdif::Frame;
use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::scan::{scan_source, Layout};
use vlbiflow_xfer::session::Options;
use vlbiflow_xfer::{Key, Progress};
use vlbiflow_xfer_proto::RateConfig;

const FRAME: usize = 8032;

fn frame(i: u64) -> Vec<u8> {
    Frame::new(FRAME)
        .seconds(1000)
        .epoch(48)
        .at(i, 1000)
        .version(1)
        .station(b"Xx")
        .build_with(|k| (i as usize * 31 + k * 7) as u8)
}

/// A Mark6 v2 scan: `n` frames in blocks of `per` frames over four disks, block k on disk (k * 3 + k / 5) % 4.
fn mark6(root: &Path, scan: &str, n: u64, per: usize) -> Vec<PathBuf> {
    let block_size = 8 + per * FRAME;
    let mut files: Vec<Vec<u8>> = (0..4)
        .map(|_| {
            let mut h = Vec::new();
            for v in [0xfeed_6666u32 as i32, 2, block_size as i32, 0, FRAME as i32] {
                h.extend_from_slice(&v.to_le_bytes());
            }
            h
        })
        .collect();
    let frames: Vec<Vec<u8>> = (0..n).map(frame).collect();
    for (k, c) in frames.chunks(per).enumerate() {
        let d = (k * 3 + k / 5) % 4;
        let payload: usize = c.iter().map(|f| f.len()).sum();
        files[d].extend_from_slice(&(k as i32).to_le_bytes());
        files[d].extend_from_slice(&((payload + 8) as i32).to_le_bytes());
        for f in c {
            files[d].extend_from_slice(f);
        }
    }
    (0..4)
        .map(|d| {
            let dir = root.join(format!("d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{scan}.vdif")), &files[d]).unwrap();
            dir
        })
        .collect()
}

fn gathered(scan: &str, disks: &[String]) -> Vec<u8> {
    let rec = locate(&[scan.to_string()], disks).unwrap();
    let mut out = Vec::new();
    let s = gather(&rec, &mut out, |_, _| {}).unwrap();
    assert!(
        s.findings
            .iter()
            .all(|f| f.severity == vlbiflow_reader::Severity::Info),
        "{:?}",
        s.findings
    );
    out
}

#[test]
fn mark6_scan_gathered_flexbuff_and_same_layout() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let scan = "exp_st_no0001";
    mark6(src.path(), scan, 3000, 130);
    let disks = vec![format!("{}/d*", src.path().display())];
    let want = gathered(scan, &disks);
    assert_eq!(want.len(), 3000 * FRAME);

    let key = Key([4; 32]);
    let roots = Roots::parse(&[format!("data={}", dst.path().display())]).unwrap();
    let d = Daemon::start(ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        roots,
        key.clone(),
    ))
    .unwrap();
    let cfg = ClientConfig::new(d.local_addr().to_string(), key);
    let o = Options {
        chunk_size: 1 << 20,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
        partial: false,
        verify_written: false,
    };
    for (layout, dir) in [
        (Layout::Gather, "g"),
        (Layout::Flexbuff, "fb"),
        (Layout::Same, "same"),
    ] {
        let (set, info) = scan_source(scan, &disks, layout).unwrap();
        assert_eq!(info.blocks, 3000usize.div_ceil(130));
        let out = client::push(
            &cfg,
            set,
            &format!("data/{dir}"),
            o.clone(),
            RateConfig::auto(500e6),
            &Progress::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        let got = match layout {
            Layout::Gather => {
                let f = dst.path().join(format!("g/{scan}.vdif"));
                assert_eq!(out.committed[0].blake3, blake3::hash(&want).to_hex().as_str());
                std::fs::read(f).unwrap()
            }
            Layout::Flexbuff => gathered(scan, &[dst.path().join("fb").display().to_string()]),
            Layout::Same => gathered(scan, &[format!("{}/same/disk*", dst.path().display())]),
        };
        assert!(
            got == want,
            "{layout:?}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
}

/// `pull --scan` and `copy --scan`: a scan on a daemon's disks by name, read in place there; the disks are
/// given under a root (globs allowed) and confined like paths.
#[test]
fn pull_and_copy_of_a_scan_by_name_confined_to_the_roots() {
    use vlbiflow_xfer::session::ScanRequest;
    use vlbiflow_xfer::XferError;
    let src = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let b_root = tempfile::tempdir().unwrap();
    let scan = "exp_st_no0002";
    mark6(&src.path().join("disks"), scan, 700, 50);
    let want = gathered(scan, &[format!("{}/disks/d*", src.path().display())]);
    let key = Key([5; 32]);
    let mut a_cfg = ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        Roots::parse(&[format!("data={}", src.path().display())]).unwrap(),
        key.clone(),
    );
    a_cfg.relay_to = vlbiflow_guard::net::AllowList(vec!["127.0.0.1".parse().unwrap()]);
    let a = Daemon::start(a_cfg).unwrap();
    let b = Daemon::start(ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        Roots::parse(&[format!("in={}", b_root.path().display())]).unwrap(),
        key.clone(),
    ))
    .unwrap();
    let cfg = ClientConfig::new(a.local_addr().to_string(), key);
    let o = Options {
        chunk_size: 1 << 20,
        block_size: 8192,
        overwrite: false,
        encrypt: false,
        rate_bps: None,
        partial: false,
        verify_written: false,
    };
    let req = |name: &str, disks: &[&str]| ScanRequest {
        name: name.into(),
        disks: disks.iter().map(|d| d.to_string()).collect(),
        layout: "gather".into(),
    };
    let stop = AtomicBool::new(false);
    // pull
    let r = req(scan, &["data/disks/d*"]);
    let out = client::pull(
        &cfg,
        &[],
        Some(&r),
        local.path(),
        o.clone(),
        &Progress::default(),
        &stop,
    )
    .unwrap();
    assert_eq!(out.committed.len(), 1);
    assert!(std::fs::read(local.path().join(format!("{scan}.vdif"))).unwrap() == want);
    // copy, daemon to daemon
    let out = client::relay(
        &cfg,
        client::RelayRequest {
            sources: &[],
            scan: Some(&r),
            to: &b.local_addr().to_string(),
            dest: "in/c",
            options: o.clone(),
            retries: 0,
        },
        &Progress::default(),
        &|_, _, _| {},
    )
    .unwrap();
    assert_eq!(out.files.len(), 1);
    assert!(std::fs::read(b_root.path().join(format!("c/{scan}.vdif"))).unwrap() == want);
    // confinement: `..`, a name with a path, an unknown root, a link out of the root: refused, nothing written
    mark6(outside.path(), scan, 100, 50);
    std::os::unix::fs::symlink(outside.path().join("d0"), src.path().join("escape")).unwrap();
    let empty = tempfile::tempdir().unwrap();
    for (r, what) in [
        (req(scan, &["data/../x"]), ".."),
        (req("../exp_st_no0002", &["data/disks/d*"]), "scan name"),
        (req(scan, &["nope/disks/d*"]), "unknown root"),
        (req(scan, &["data/escape"]), "outside the roots"),
    ] {
        let e = client::pull(
            &cfg,
            &[],
            Some(&r),
            empty.path(),
            o.clone(),
            &Progress::default(),
            &stop,
        )
        .unwrap_err();
        assert!(matches!(e, XferError::Refused(_)), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}
