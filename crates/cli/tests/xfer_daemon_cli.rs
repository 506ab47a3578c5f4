//! The xfer daemon with more than one transfer, as a user runs it: one writer per destination file (a
//! second push into a file being received is turned away as busy, exit 4, and the first one's file is the
//! first one's data), a file that exists with other content refused with exit 3, and `--total-rate` shared
//! again among the transfers running as they start and end.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

mod common;
use common::{content, xfer_serve, XferDaemon};

fn serve(state: &Path, root: &Path, extra: &[&str]) -> XferDaemon {
    xfer_serve(state, root, "127.0.0.1:0", extra)
}

fn xfer(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("xfer").args(args).env("XDG_STATE_HOME", state);
    c
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A file `name` of `len` bytes from `seed` in a new directory `dir`.
fn source(dir: &Path, name: &str, seed: u64, len: usize) -> (PathBuf, Vec<u8>) {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    let data = content(seed, len);
    std::fs::write(&p, &data).unwrap();
    (p, data)
}

#[test]
fn a_second_push_into_a_file_being_received_is_busy_and_the_file_is_the_firsts() {
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let (a, a_data) = source(&d.path().join("a"), "c.bin", 1, 4_000_000);
    let (b, _) = source(&d.path().join("b"), "c.bin", 2, 4_000_000);
    let s = serve(&state, &root, &[]);
    let dest = format!("{}/data/conc", s.addr);
    // the first at 8 Mb/s takes about 4 s: the second asks while it runs
    let first = xfer(&state, &["push", "-q", "--rate", "8Mbps", path_str(&a), &dest])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.wait_line(": receiving 1 files");
    let out = xfer(&state, &["push", "-q", path_str(&b), &dest])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "busy: {err}");
    assert!(err.contains("conc/c.bin is being received by transfer"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::read(root.join("conc/c.bin")).unwrap() == a_data,
        "the first push's data"
    );
    let manifest = std::fs::read_to_string(root.join("conc/c.bin.blake3.json")).unwrap();
    assert!(manifest.contains(&blake3::hash(&a_data).to_hex().to_string()));
}

#[test]
fn a_second_daemon_on_the_same_root_cannot_write_a_file_being_received() {
    // two daemons on one root: the first one's lock on the .part keeps the second one's transfer out
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let (a, a_data) = source(&d.path().join("a"), "c.bin", 3, 4_000_000);
    let (b, _) = source(&d.path().join("b"), "c.bin", 4, 4_000_000);
    let s1 = serve(&state, &root, &[]);
    let s2 = serve(&state, &root, &[]);
    let first = xfer(
        &state,
        &[
            "push",
            "-q",
            "--rate",
            "8Mbps",
            path_str(&a),
            &format!("{}/data/two", s1.addr),
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // the .part is made (and locked) when the first datagrams of the file arrive; its bytes are written
    // chunk by chunk, so it stays empty for a while
    let part = root.join("two/c.bin.part");
    let until = Instant::now() + Duration::from_secs(30);
    while !part.exists() {
        assert!(Instant::now() < until, "no .part within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = xfer(
        &state,
        &["push", "-q", path_str(&b), &format!("{}/data/two", s2.addr)],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "busy: {err}");
    assert!(
        err.contains("c.bin.part is being written by another transfer"),
        "{err}"
    );
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::read(root.join("two/c.bin")).unwrap() == a_data,
        "the first push's data"
    );
}

#[test]
fn a_file_that_exists_with_other_content_is_refused_with_exit_3_both_ways() {
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let (a, a_data) = source(&d.path().join("a"), "e.bin", 5, 300_000);
    let (b, b_data) = source(&d.path().join("b"), "e.bin", 6, 300_000);
    let s = serve(&state, &root, &[]);
    let dest = format!("{}/data/ex", s.addr);
    let out = xfer(&state, &["push", "-q", path_str(&a), &dest])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // push: the daemon holds other content of the same size
    let out = xfer(&state, &["push", "-q", path_str(&b), &dest])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("exists at the destination with different content"),
        "{err}"
    );
    assert!(err.contains("--overwrite"), "{err}");
    assert!(
        std::fs::read(root.join("ex/e.bin")).unwrap() == a_data,
        "untouched"
    );
    // pull: the local directory holds other content of the same size
    let into = d.path().join("b");
    let out = xfer(
        &state,
        &[
            "pull",
            "-q",
            &format!("{}/data/ex/e.bin", s.addr),
            path_str(&into),
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("different content"), "{err}");
    assert!(std::fs::read(into.join("e.bin")).unwrap() == b_data, "untouched");
}

/// The daemon's metrics text.
fn scrape(metrics: &str) -> String {
    let mut s = TcpStream::connect(metrics).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The value of the sample `name` (without labels) in a metrics text.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing from {body}"))
        .parse()
        .unwrap()
}

/// Each running transfer's rate ceiling in bits/s from the daemon's metrics (which say bytes/s).
fn caps(metrics: &str) -> Vec<u64> {
    scrape(metrics)
        .lines()
        .filter(|l| l.starts_with("vlbiflow_xfer_transfer_rate_cap_bytes_per_second{"))
        .map(|l| (l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() * 8.0).round() as u64)
        .collect()
}

/// Polls the metrics until the running transfers' ceilings are `want` (in any order), at most 30 s.
fn wait_caps(metrics: &str, want: &[u64]) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = caps(metrics);
        c.sort_unstable();
        if c == want {
            return;
        }
        assert!(Instant::now() < until, "ceilings {c:?}, expected {want:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_total_rate_is_shared_again_as_transfers_start_and_end() {
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let (a, a_data) = source(&d.path().join("a"), "a.bin", 7, 6_000_000);
    let (b, b_data) = source(&d.path().join("b"), "b.bin", 8, 3_000_000);
    let s = serve(
        &state,
        &root,
        &["--total-rate", "24Mbps", "--metrics", "127.0.0.1:0"],
    );
    let m = s.metrics.clone().unwrap();
    let dest = format!("{}/data/share", s.addr);
    let first = xfer(&state, &["push", "-q", path_str(&a), &dest])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_caps(&m, &[24_000_000]);
    // The daemon-wide byte counter moves while the transfer runs, not only when it ends.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let body = scrape(&m);
        assert_eq!(sample(&body, "vlbiflow_xfer_transfers_ok_total"), 0.0, "{body}");
        if sample(&body, "vlbiflow_xfer_received_bytes_total") > 0.0 {
            break;
        }
        assert!(Instant::now() < until, "{body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = xfer(&state, &["push", "-q", path_str(&b), &dest])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_caps(&m, &[12_000_000, 12_000_000]);
    let out = second.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // the first runs on alone (6 MB at 24 Mb/s and less take at least 2 s) with the whole total again
    wait_caps(&m, &[24_000_000]);
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(root.join("share/a.bin")).unwrap() == a_data);
    assert!(std::fs::read(root.join("share/b.bin")).unwrap() == b_data);
    wait_caps(&m, &[]);
}

#[test]
fn the_command_a_wrong_key_error_suggests_exists() {
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let (a, _) = source(&d.path().join("a"), "k.bin", 9, 1000);
    let s = serve(&state, &root, &[]);
    let other = d.path().join("other.key");
    let out = xfer(&state, &["key", "--create", "--key", path_str(&other)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = xfer(
        &state,
        &[
            "push",
            "--key",
            path_str(&other),
            path_str(&a),
            &format!("{}/data/k", s.addr),
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let cmd = err
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("a command in backquotes: {err}"));
    let words: Vec<&str> = cmd.split_whitespace().collect();
    assert_eq!(words[..2], ["vlbiflow", "xfer"], "{cmd}");
    let out = xfer(&state, &words[2..]).output().unwrap();
    assert!(
        out.status.success(),
        "`{cmd}`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn version_names_the_xfer_protocol() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let v = String::from_utf8(out.stdout).unwrap();
    let want = format!("(xfer protocol {})", vlbiflow_xfer_proto::wire::VERSION);
    assert!(v.trim().ends_with(&want), "{v}");
}
