//! `collect` against real daemons on loopback, with Mark6 scans on their disks: every scan arrives equal
//! to the station's own gather, a daemon stopped and started again mid-pull does not keep the collect
//! from finishing, and a collect run again pulls nothing already verified.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use vlbiflow_collect::run::{run, RunOptions};
use vlbiflow_collect::CollectConfig;
use vlbiflow_reader::gather::gather;
use vlbiflow_reader::locate;
use vlbiflow_testkit::vdif::Frame;
use vlbiflow_xfer::daemon::{Daemon, ServeConfig};
use vlbiflow_xfer::dest::Roots;
use vlbiflow_xfer::Key;

const FRAME: usize = 8032;

fn frame(i: u64, seed: u64) -> Vec<u8> {
    Frame::new(FRAME)
        .seconds(1000)
        .epoch(48)
        .at(i, 1000)
        .version(1)
        .station(b"Xx")
        .build_with(|k| (i as usize * 31 + k * 7 + seed as usize) as u8)
}

/// A Mark6 v2 scan: `n` frames in blocks of `per` frames over four disks `root/d0..d3`.
fn mark6(root: &Path, scan: &str, n: u64, per: usize, seed: u64) {
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
    let frames: Vec<Vec<u8>> = (0..n).map(|i| frame(i, seed)).collect();
    for (k, c) in frames.chunks(per).enumerate() {
        let d = (k * 3 + k / 5) % 4;
        let payload: usize = c.iter().map(|f| f.len()).sum();
        files[d].extend_from_slice(&(k as i32).to_le_bytes());
        files[d].extend_from_slice(&((payload + 8) as i32).to_le_bytes());
        for f in c {
            files[d].extend_from_slice(f);
        }
    }
    for (d, f) in files.iter().enumerate() {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{scan}.vdif")), f).unwrap();
    }
}

fn gathered(scan: &str, disks: &Path) -> Vec<u8> {
    let rec = locate(&[scan.to_string()], &[format!("{}/d*", disks.display())]).unwrap();
    let mut out = Vec::new();
    gather(&rec, &mut out, |_, _| {}).unwrap();
    out
}

struct StationSite {
    dir: tempfile::TempDir,
    daemon: Daemon,
}

fn station(key: &Key, scans: &[(&str, u64)], listen: &str) -> StationSite {
    let dir = tempfile::tempdir().unwrap();
    for (i, (s, n)) in scans.iter().enumerate() {
        mark6(&dir.path().join("disks"), s, *n, 50, i as u64 + 1);
    }
    let daemon = serve(key, dir.path(), listen);
    StationSite { dir, daemon }
}

fn serve(key: &Key, root: &Path, listen: &str) -> Daemon {
    Daemon::start(ServeConfig::new(
        listen.parse().unwrap(),
        Roots::parse(&[format!("data={}", root.display())]).unwrap(),
        key.clone(),
    ))
    .unwrap()
}

fn config(dest: &Path, stations: &[(&str, String)], total: &str, extra: &str) -> CollectConfig {
    let mut t = format!(
        "experiment = \"t1\"\ndest = \"{}\"\ntotal_rate = \"{total}\"\nchunk_size = \"1MiB\"\nbackoff_max = \"2s\"\n{extra}\n",
        dest.display()
    );
    for (name, addr) in stations {
        t.push_str(&format!(
            "[[station]]\nname = \"{name}\"\ndaemon = \"{addr}/data/disks/d*\"\n"
        ));
    }
    CollectConfig::parse(&t, Path::new("/")).unwrap()
}

fn opts(log: Arc<Mutex<Vec<String>>>) -> RunOptions {
    RunOptions {
        status_file: None,
        metrics: None,
        log: Box::new(move |l| {
            eprintln!("collect: {l}");
            log.lock().unwrap().push(l.to_string());
        }),
    }
}

fn file(dest: &Path, st: &str, scan: &str) -> PathBuf {
    dest.join("t1").join(st).join(format!("{scan}.vdif"))
}

#[test]
fn two_stations_two_scans_each_arrive_equal_to_their_gather_and_a_rerun_moves_nothing() {
    let key = Key([9; 32]);
    let a = station(
        &key,
        &[("t1_aa_no0001", 300), ("t1_aa_no0002", 200), ("t2_aa_no0001", 50)],
        "127.0.0.1:0",
    );
    let b = station(
        &key,
        &[("t1_bb_no0001", 250), ("t1_bb_no0002", 100)],
        "127.0.0.1:0",
    );
    let dest = tempfile::tempdir().unwrap();
    let cfg = config(
        dest.path(),
        &[
            ("aa", a.daemon.local_addr().to_string()),
            ("bb", b.daemon.local_addr().to_string()),
        ],
        "400Mbps",
        "",
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let st = run(&cfg, key.clone(), opts(log.clone()), &AtomicBool::new(false)).unwrap();
    assert!(st.complete, "{st:#?}");
    assert_eq!(
        (st.scans_expected, st.scans_verified),
        (4, 4),
        "t2_* is another experiment"
    );
    for (site, stn, scans) in [
        (&a, "aa", ["t1_aa_no0001", "t1_aa_no0002"]),
        (&b, "bb", ["t1_bb_no0001", "t1_bb_no0002"]),
    ] {
        for s in scans {
            let want = gathered(s, &site.dir.path().join("disks"));
            assert!(std::fs::read(file(dest.path(), stn, s)).unwrap() == want, "{s}");
        }
    }
    assert!(!file(dest.path(), "aa", "t2_aa_no0001").exists());
    // the status file says the same
    let on_disk =
        vlbiflow_collect::status::Status::read(&dest.path().join("t1/collect-status.json")).unwrap();
    assert!(on_disk.complete && on_disk.ended);
    // a rerun pulls nothing already verified
    let pulls = |d: &Daemon| d.counters().transfers_ok.load(Relaxed);
    // a daemon counts a pull when its side of the session has ended, which may be just after the client
    // has verified the last chunk and returned: wait for the count (bounded)
    let t0 = std::time::Instant::now();
    while (pulls(&a.daemon), pulls(&b.daemon)) != (2, 2) && t0.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before = (pulls(&a.daemon), pulls(&b.daemon));
    assert_eq!(before, (2, 2));
    let log2 = Arc::new(Mutex::new(Vec::new()));
    let st = run(&cfg, key, opts(log2.clone()), &AtomicBool::new(false)).unwrap();
    assert!(st.complete);
    assert_eq!(
        (pulls(&a.daemon), pulls(&b.daemon)),
        before,
        "nothing pulled again"
    );
    assert_eq!(
        log2.lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("not pulled again"))
            .count(),
        4
    );
}

#[test]
fn a_station_daemon_stopped_mid_pull_and_started_again_does_not_stop_the_collect() {
    let key = Key([7; 32]);
    let a = station(&key, &[("t1_aa_no0001", 1500)], "127.0.0.1:0");
    let addr = a.daemon.local_addr();
    let dest = tempfile::tempdir().unwrap();
    let cfg = config(dest.path(), &[("aa", addr.to_string())], "60Mbps", "");
    let StationSite { dir, daemon } = a;
    let cfg2 = cfg.clone();
    let k2 = key.clone();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let collect = std::thread::spawn(move || run(&cfg2, k2, opts(log2), &AtomicBool::new(false)));
    // wait until part of the scan is verified here (the status file says), then stop the daemon
    let status = dest.path().join("t1/collect-status.json");
    let verified = || {
        vlbiflow_collect::status::Status::read(&status)
            .ok()
            .and_then(|s| s.stations[0].scans.first().map(|c| c.bytes_verified))
            .unwrap_or(0)
    };
    let t0 = std::time::Instant::now();
    while verified() < 2 << 20 {
        assert!(t0.elapsed().as_secs() < 60, "no data arrived");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    daemon.shutdown();
    // the collect sees the failure and backs off; the daemon comes back on the same port
    let t0 = std::time::Instant::now();
    while !log.lock().unwrap().iter().any(|l| l.contains("retrying in")) {
        assert!(t0.elapsed().as_secs() < 60, "the failure was not reported");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let daemon = serve(&key, dir.path(), &addr.to_string());
    let st = collect.join().unwrap().unwrap();
    assert!(st.complete, "{st:#?}");
    assert!(
        !st.stations[0].scans[0].errors.is_empty(),
        "the failed attempt is in the status: {st:#?}"
    );
    let want = gathered("t1_aa_no0001", &dir.path().join("disks"));
    assert!(std::fs::read(file(dest.path(), "aa", "t1_aa_no0001")).unwrap() == want);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("back, moving again")),
        "reported back"
    );
    drop(daemon);
}

#[test]
fn what_cannot_be_had_is_listed_per_station_and_scan() {
    let key = Key([3; 32]);
    let a = station(&key, &[("t1_aa_no0001", 100)], "127.0.0.1:0");
    let dest = tempfile::tempdir().unwrap();
    let cfg = config(
        dest.path(),
        &[("aa", a.daemon.local_addr().to_string())],
        "1Gbps",
        "scans = [\"no0001\", \"no0009\"]",
    );
    let st = run(
        &cfg,
        key,
        opts(Arc::new(Mutex::new(Vec::new()))),
        &AtomicBool::new(false),
    )
    .unwrap();
    assert!(!st.complete);
    let missing = vlbiflow_collect::run::not_arrived(&st);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].starts_with("aa no0009: not on the station"),
        "{missing:?}"
    );
    assert!(file(dest.path(), "aa", "t1_aa_no0001").exists());
}
