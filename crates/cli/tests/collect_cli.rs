//! `vlbiflow xfer ls` and `vlbiflow xfer collect` as users run them, with real daemons and real
//! recordings: two stations with two scans each, the second still being recorded while the collect
//! follows it, under one total rate; every scan arrives equal to the station's own `vlbiflow gather`, and
//! a collect run again pulls nothing already verified.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

mod common;
use common::{xfer_serve, XferDaemon};

/// A `vlbiflow record` of scan `scan` onto `disks/0..3` from a free UDP port, listening: the recorder and
/// its port.
fn record(disks: &Path, scan: &str) -> (Child, u16) {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut rec = Command::new(BIN);
    rec.args(["record", "--stream"])
        .arg(format!("a=vdif@127.0.0.1:{port},psn"));
    for i in 0..4 {
        let p = disks.join(format!("{i}"));
        std::fs::create_dir_all(&p).unwrap();
        rec.arg("--disk").arg(p);
    }
    let mut rec = rec
        .args(["--scan", scan, "--block-size", "1MB", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = rec.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    while !rx
        .recv_timeout(Duration::from_secs(20))
        .expect("recorder listening")
        .contains("stream a")
    {}
    (rec, port)
}

fn gen(port: u16, seconds: &str) -> Child {
    Command::new(BIN)
        .args([
            "gen",
            "--dest",
            &format!("127.0.0.1:{port}"),
            "--psn",
            "--rate",
            "100Mbps",
        ])
        .args(["--duration", seconds, "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn interrupt(mut c: Child) {
    assert!(Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap()
        .success());
    // Ctrl-C ends a command that runs until stopped with 130, after its summary
    assert_eq!(c.wait().unwrap().code(), Some(130));
}

/// A station: one scan recorded and complete, a second one being recorded (its recorder and generator).
struct Station {
    daemon: XferDaemon,
    disks: std::path::PathBuf,
    recording: (Child, Child),
}

fn station(d: &Path, state: &Path, name: &str) -> Station {
    let root = d.join(name);
    let disks = root.join("disks");
    let (rec, port) = record(&disks, &format!("t1_{name}_no0001"));
    assert!(gen(port, "1").wait().unwrap().success());
    interrupt(rec);
    let (rec, port) = record(&disks, &format!("t1_{name}_no0002"));
    let g = gen(port, "60");
    let daemon = xfer_serve(state, &root, "127.0.0.1:0", &[]);
    Station {
        daemon,
        disks,
        recording: (rec, g),
    }
}

/// `vlbiflow xfer collect --config EXP --follow --json` started, its standard error echoed and sent
/// line by line.
fn collect_follow(exp: &Path, state: &Path) -> (Child, mpsc::Receiver<String>) {
    let mut c = Command::new(BIN)
        .args(["xfer", "collect", "--config"])
        .arg(exp)
        .args(["--follow", "--json"])
        .env("XDG_STATE_HOME", state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = c.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{l}");
            let _ = tx.send(l);
        }
    });
    (c, rx)
}

/// Waits (bounded) for the collect to end: its exit status and standard output.
fn finished(c: &mut Child) -> (std::process::ExitStatus, String) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "collect did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut json = String::new();
    std::io::Read::read_to_string(&mut c.stdout.take().unwrap(), &mut json).unwrap();
    (status, json)
}

fn gathered(disks: &Path, scan: &str, out: &Path) -> Vec<u8> {
    let glob = format!("{}/*", disks.display());
    let st = Command::new(BIN)
        .args(["gather", scan, "--disk", &glob, "-q", "-o"])
        .arg(out)
        .status()
        .unwrap();
    // 1: gathered, with data problems to report (a recording stopped mid-stream)
    assert!(matches!(st.code(), Some(0 | 1)), "gather {scan}: {st:?}");
    std::fs::read(out).unwrap()
}

#[test]
fn collect_follows_two_stations_under_one_rate_and_a_rerun_pulls_nothing_again() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let mut stations: Vec<(String, Station)> = ["aa", "bb"]
        .iter()
        .map(|n| (n.to_string(), station(d.path(), &state, n)))
        .collect();
    // ls: the complete scan and the one being recorded
    let out = Command::new(BIN)
        .args([
            "xfer",
            "ls",
            &format!("{}/data/disks/*", stations[0].1.daemon.addr),
            "--scan",
            "t1_*",
            "--json",
        ])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["name"], "t1_aa_no0001", "{v}");
    assert_eq!(v[0]["complete"], true, "{v}");
    assert_eq!(v[0]["streams"][0]["name"], "t1_aa_no0001.vdif", "{v}");
    assert_eq!(v[1]["name"], "t1_aa_no0002", "{v}");
    assert_eq!(v[1]["complete"], false, "{v}");

    let dest = d.path().join("corr");
    let mut toml = format!(
        "experiment = \"t1\"\ndest = \"{}\"\ntotal_rate = \"300Mbps\"\nchunk_size = \"1MiB\"\nfollow_min_new = \"1MiB\"\nfollow_timeout = \"30s\"\n",
        dest.display()
    );
    for (n, s) in &stations {
        toml.push_str(&format!(
            "[[station]]\nname = \"{n}\"\ndaemon = \"{}/data/disks/*\"\n",
            s.daemon.addr
        ));
    }
    let exp = d.path().join("t1.toml");
    std::fs::write(&exp, toml).unwrap();
    let (mut c, rx) = collect_follow(&exp, &state);
    // both complete scans verified and both recordings followed, then the recordings end
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while [
        "t1_aa_no0001 verified",
        "t1_bb_no0001 verified",
        "following t1_aa_no0002",
        "following t1_bb_no0002",
    ]
    .iter()
    .any(|w| !seen.iter().any(|l: &String| l.contains(w)))
    {
        assert!(t0.elapsed() < Duration::from_secs(120), "collect: {seen:#?}");
        if let Ok(l) = rx.recv_timeout(Duration::from_secs(1)) {
            seen.push(l);
        }
    }
    for (_, s) in &mut stations {
        let (rec, mut g) = std::mem::replace(
            &mut s.recording,
            (
                Command::new("true").spawn().unwrap(),
                Command::new("true").spawn().unwrap(),
            ),
        );
        let _ = g.kill();
        let _ = g.wait();
        interrupt(rec);
    }
    let (status, json) = finished(&mut c);
    assert!(status.success(), "collect: {json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["scans_verified"], 4, "{v}");
    for st in v["stations"].as_array().unwrap() {
        assert!(st["share_bps"].as_f64().unwrap() <= 300e6, "{st}");
    }
    for (n, s) in &stations {
        for k in ["no0001", "no0002"] {
            let scan = format!("t1_{n}_{k}");
            let want = gathered(&s.disks, &scan, &d.path().join(format!("{scan}.gathered.vdif")));
            let got = std::fs::read(dest.join(format!("t1/{n}/{scan}.vdif"))).unwrap();
            assert!(want.len() > 1 << 20, "{scan}: {} bytes recorded", want.len());
            assert!(
                got == want,
                "{scan}: received {} bytes, gather {}",
                got.len(),
                want.len()
            );
        }
    }
    // the status as --status prints it
    let out = Command::new(BIN)
        .args(["xfer", "collect", "--config"])
        .arg(&exp)
        .args(["--status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["ended"], true);
    // run again: nothing verified is pulled again
    let out = Command::new(BIN)
        .args(["xfer", "collect", "--config"])
        .arg(&exp)
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("not pulled again").count(), 4, "{err}");
    assert!(!err.contains(": pulling "), "{err}");
}

/// Bytes in the files under `dir`.
fn du(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    n
}

/// A scan whose recorder dies mid-scan is never marked complete: the collect follows it until it stops
/// growing for `follow_timeout`, says so, pulls the whole blocks it has from the start, and ends with
/// them equal to the start of the station's own gather.
#[test]
fn a_scan_the_station_never_completes_is_pulled_as_it_is_and_named() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state");
    let root = d.path().join("cc");
    let disks = root.join("disks");
    let (mut rec, port) = record(&disks, "t2_cc_no0001");
    let mut g = gen(port, "60");
    let daemon = xfer_serve(&state, &root, "127.0.0.1:0", &[]);
    let dest = d.path().join("corr");
    let toml = format!(
        "experiment = \"t2\"\ndest = \"{}\"\ntotal_rate = \"300Mbps\"\nchunk_size = \"1MiB\"\nfollow_min_new = \"1MiB\"\nfollow_timeout = \"3s\"\n[[station]]\nname = \"cc\"\ndaemon = \"{}/data/disks/*\"\n",
        dest.display(),
        daemon.addr
    );
    let exp = d.path().join("t2.toml");
    std::fs::write(&exp, toml).unwrap();
    let (mut c, rx) = collect_follow(&exp, &state);
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "collect never followed the scan"
        );
        if rx
            .recv_timeout(Duration::from_secs(1))
            .is_ok_and(|l| l.contains("following t2_cc_no0001"))
        {
            break;
        }
    }
    // once some blocks are on the disks, the recorder dies: the scan is never marked complete
    let t0 = Instant::now();
    while du(&disks) < 4 << 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the recorder wrote nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = g.kill();
    let _ = g.wait();
    rec.kill().unwrap();
    let _ = rec.wait();
    let (status, json) = finished(&mut c);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(status.success(), "collect: {v}");
    assert_eq!(v["scans_verified"], 1, "{v}");
    let errors = v["stations"][0]["scans"][0]["errors"].to_string();
    assert!(errors.contains("never completed at the station"), "{v}");
    let want = gathered(&disks, "t2_cc_no0001", &d.path().join("gathered.vdif"));
    let got = std::fs::read(dest.join("t2/cc/t2_cc_no0001.vdif")).unwrap();
    // what arrives is the run of whole blocks from the start (as `--follow` reads a scan being recorded);
    // gather also takes whole blocks written after the one the recorder was cut off in
    assert!(got.len() > 1 << 20, "{} bytes received", got.len());
    assert!(
        got.len() <= want.len() && got[..] == want[..got.len()],
        "received {} bytes, not a prefix of gather's {}",
        got.len(),
        want.len()
    );
}

#[test]
fn help_has_examples() {
    for verb in ["ls", "collect"] {
        let out = Command::new(BIN).args(["xfer", verb, "--help"]).output().unwrap();
        assert!(out.status.success());
        let h = String::from_utf8_lossy(&out.stdout);
        assert!(
            h.contains("Examples:") && h.contains("Exit status"),
            "{verb}: {h}"
        );
    }
}
