//! One exit-status table for every subcommand (README.md, "Exit codes"): 0 done, 1 data problems,
//! 2 usage (including a scan, file or pattern named here that is not there), 3 refused by the peer,
//! 4 busy, 5 I/O (including a daemon that cannot be reached), 130 a finite job interrupted. Each
//! command is run for real on loopback and temporary files; with `--json` a failure still gives one JSON
//! object on standard output.

mod common;
#[path = "common/proc.rs"]
mod proc;

use proc::{free_port, output_within, wait_port, Proc};
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// `vlbiflow ARGS` with its state (xfer keys, archives, history) under `home`.
fn vf(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"));
    c
}

/// Runs `vlbiflow ARGS` to its end.
fn run(home: &Path, args: &[&str]) -> Output {
    output_within(&args.join(" "), vf(home, args))
}

/// Asserts the exit status of `vlbiflow ARGS` and that its error is one line on standard error.
fn expect(home: &Path, args: &[&str], code: i32) -> Output {
    let out = run(home, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "vlbiflow {}: {err}",
        args.join(" ")
    );
    if code != 0 && code != 1 {
        assert!(
            err.contains("error"),
            "vlbiflow {}: no error line: {err}",
            args.join(" ")
        );
    }
    out
}

/// Asserts that standard output is one JSON object naming the error and this exit status.
fn expect_json_error(out: &Output, code: i64) -> serde_json::Value {
    let s = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("not one JSON object on stdout ({e}): {s:?}"));
    assert_eq!(v["exit_code"], code, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    v
}

/// A VDIF file of `count` frames (two threads), `drop_every` leaving some out.
fn vdif(home: &Path, path: &Path, count: &str, extra: &[&str]) {
    let p = path.display().to_string();
    let mut a = vec![
        "gen",
        "--output",
        &p,
        "--threads",
        "2",
        "--pps",
        "1000",
        "--count",
        count,
        "--quiet",
    ];
    a.extend_from_slice(extra);
    expect(home, &a, 0);
}

#[test]
fn check_gather_play_ls_not_found_is_usage_and_json_says_so() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    let disk = home.join("disk0");
    std::fs::create_dir_all(&disk).unwrap();
    let d = disk.display().to_string();
    let nomatch = format!("{}/nothing*", home.display());
    let missing = home.join("missing.vdif").display().to_string();

    // a scan that is not on the disks, a pattern matching nothing, a file that is not there: 2
    for args in [
        vec!["check", "no_such_scan", "--disk", &d],
        vec!["check", "no_such_scan", "--disk", &nomatch],
        vec!["check", &missing],
        vec!["gather", "no_such_scan", "--disk", &d, "-o", "out.vdif"],
        vec!["gather", "no_such_scan", "--disk", &nomatch, "-o", "out.vdif"],
        vec!["gather", &missing, "-o", "out.vdif"],
        vec!["play", "no_such_scan", "--disk", &d, "--dest", "127.0.0.1:9"],
        vec!["play", &missing, "--dest", "127.0.0.1:9"],
        vec!["ls", &nomatch],
        vec!["net", "efficiency", "--from", &missing],
        vec![
            "gen",
            "--output",
            "/nonexistent-vf/x.vdif",
            "--pps",
            "10",
            "--count",
            "1",
        ],
    ] {
        expect(home, &args, 2);
    }
    // with --json, scripts get the error as JSON on standard output
    for args in [
        vec!["check", "no_such_scan", "--disk", &d, "--json"],
        vec!["check", &missing, "--json"],
        vec!["ls", &nomatch, "--json"],
    ] {
        let out = expect(home, &args, 2);
        expect_json_error(&out, 2);
    }

    // good data 0, data problems 1
    let good = home.join("good.vdif");
    vdif(home, &good, "400", &["--payload", "noise"]);
    expect(home, &["check", &good.display().to_string(), "--stats"], 0);
    let lossy = home.join("lossy.vdif");
    vdif(home, &lossy, "400", &["--drop-every", "50"]);
    let out = expect(home, &["check", &lossy.display().to_string(), "--json"], 1);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["missing"].as_u64().unwrap() > 0, "{v}");
    expect(home, &["ls", &d], 0);

    // a file that cannot be written (its "directory" is a file): I/O, 5
    let unwritable = good.join("x.vdif").display().to_string();
    expect(
        home,
        &["gather", &good.display().to_string(), "-o", &unwritable],
        5,
    );
    expect(
        home,
        &[
            "gen",
            "--output",
            &unwritable,
            "--pps",
            "100",
            "--count",
            "10",
            "--quiet",
        ],
        5,
    );
}

#[test]
fn unreachable_daemons_are_io_errors() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    // nothing listens on this port (TCP connections are refused)
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    expect(home, &["ctl", "--host", &addr, "--timeout", "5", "record?"], 5);
    expect(home, &["status", "--http", &addr], 5);
    let out = expect(home, &["status", "--http", &addr, "--json"], 5);
    expect_json_error(&out, 5);
    // the net measurements' responder, the mesh hub
    expect(home, &["net", "lat", &addr, "--count", "5", "--no-archive"], 5);
    let hub = format!("http://{addr}");
    expect(home, &["net", "mesh", "status", "--hub", &hub], 5);
    let out = expect(home, &["net", "mesh", "status", "--hub", &hub, "--json"], 5);
    expect_json_error(&out, 5);
    // an xfer daemon (a key is needed first)
    let key = home.join("k.key").display().to_string();
    expect(home, &["xfer", "key", "--create", "--key", &key], 0);
    let file = home.join("f.bin");
    std::fs::write(&file, b"data").unwrap();
    let out = expect(
        home,
        &[
            "xfer",
            "push",
            "--key",
            &key,
            "--json",
            &file.display().to_string(),
            &format!("{addr}/data"),
        ],
        5,
    );
    let v = expect_json_error(&out, 5);
    assert_eq!(v["verified"], false, "{v}");
}

#[test]
fn xfer_not_found_here_is_usage_and_at_the_daemon_refused() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    let root = home.join("root");
    std::fs::create_dir_all(root.join("disk0")).unwrap();
    let state = home.join("state");
    let d = common::xfer_serve(&state, &root, "127.0.0.1:0", &[]);
    let dest = format!("{}/data/in", d.addr);
    let disk = root.join("disk0").display().to_string();
    let nomatch = format!("{}/nothing*", home.display());
    let missing = home.join("missing.vdif").display().to_string();
    // here: the scan, the pattern, the file
    for args in [
        vec!["xfer", "push", "--scan", "no_such_scan", "--disk", &disk, &dest],
        vec![
            "xfer",
            "push",
            "--scan",
            "no_such_scan",
            "--disk",
            &nomatch,
            &dest,
        ],
        vec!["xfer", "push", &missing, &dest],
    ] {
        expect(home, &args, 2);
    }
    // at the daemon: it refuses (it has no such scan or root)
    let from = format!("{}/data/disk0", d.addr);
    let into = home.join("pulled");
    std::fs::create_dir_all(&into).unwrap();
    let into = into.display().to_string();
    let out = expect(
        home,
        &[
            "xfer",
            "pull",
            "--scan",
            "no_such_scan",
            "--disk",
            &from,
            &into,
            "--json",
        ],
        3,
    );
    let v = expect_json_error(&out, 3);
    assert_eq!(v["verified"], false, "{v}");
    let file = home.join("f.bin");
    std::fs::write(&file, b"data").unwrap();
    expect(
        home,
        &[
            "xfer",
            "push",
            &file.display().to_string(),
            &format!("{}/nosuchroot/x", d.addr),
        ],
        3,
    );
    // and a verified push: 0
    expect(home, &["xfer", "push", &file.display().to_string(), &dest], 0);
}

#[test]
fn argument_errors_are_usage_for_every_command() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    for args in [
        vec!["demo", "--duration", "0"],
        vec!["gen", "--dest", "127.0.0.1:4001", "--rate", "fast"],
        vec!["sink", "--listen", "nowhere"],
        vec!["sink", "--psn", "--split", "3"],
        vec!["sink", "--psn", "--split", "2", "--run-len", "1000"],
        vec!["sink", "--split", "2"],
        vec![
            "record",
            "--stream",
            "a=vdif@127.0.0.1:1",
            "--disk",
            "/nonexistent-vf/*",
            "--scan",
            "s",
        ],
        vec!["receive", "--listen", "127.0.0.1:0", "--deadline", "soon"],
        vec!["relay", "--listen", "127.0.0.1:0", "--to", "nowhere"],
        vec!["play", "x.vdif", "--dest", "127.0.0.1:0"],
        vec!["net", "bw", "127.0.0.1:1", "--size", "huge"],
        vec!["net", "lat", "127.0.0.1:1", "--sizes", "0:x"],
        vec!["net", "tcp", "127.0.0.1:1", "--cpu-load", "loud"],
        vec!["net", "capacity", "127.0.0.1:1", "--size", "-3"],
        vec!["pathemu", "--loss", "200%"],
        vec!["pathemu", "--rtt", "-5ms"],
        vec!["ctl", "--timeout", "0", "record?"],
        vec!["xfer", "push", "--rate", "fast", "x", "127.0.0.1:1/data"],
        vec!["serve", "--config", "/nonexistent-vf/config.toml"],
    ] {
        let out = run(home, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "vlbiflow {}: {err}", args.join(" "));
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_port_in_use_is_an_io_error() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let u = udp.local_addr().unwrap().to_string();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tc = tcp.local_addr().unwrap().to_string();
    expect(home, &["sink", "--listen", &u, "--duration", "1"], 5);
    expect(
        home,
        &["receive", "--listen", &u, "--output", "/dev/null", "--count", "1"],
        5,
    );
    expect(
        home,
        &[
            "relay",
            "--listen",
            &u,
            "--to",
            "vdif@127.0.0.1:9",
            "--duration",
            "1",
        ],
        5,
    );
    expect(home, &["net", "responder", "--listen", &tc], 5);
    let key = home.join("k.key").display().to_string();
    expect(home, &["xfer", "key", "--create", "--key", &key], 0);
    let root = format!("data={}", home.display());
    expect(
        home,
        &["xfer", "serve", "--listen", &tc, "--root", &root, "--key", &key],
        5,
    );
}

/// How a command that runs until stopped shows it is ready: a bound port (UDP or TCP) or a line.
enum Ready<'a> {
    Udp(u16),
    Tcp(u16),
    Line(&'a str),
}

/// A command that runs until stopped, started, waited for until it is ready, then sent `sig`: it
/// prints its summary (a line containing `summary`); returns its exit status.
fn stopped_by(home: &Path, args: &[&str], ready: Ready, sig: libc::c_int, summary: &str) -> Option<i32> {
    let mut p = Proc::spawn(&args.join(" "), vf(home, args));
    match ready {
        Ready::Udp(port) => wait_port(&mut p, port, true),
        Ready::Tcp(port) => wait_port(&mut p, port, false),
        Ready::Line(l) => {
            p.wait_line(l);
        }
    }
    p.signal(sig);
    p.wait_line(summary);
    p.finish()
}

/// Ctrl-C (SIGINT) on a command that runs until stopped: its summary, then 130 (interrupted); SIGTERM
/// (`systemctl stop`, `kill`): a clean stop, its summary, then 0.
#[test]
fn ctrl_c_ends_daemons_with_130_and_sigterm_with_0() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    let key = home.join("k.key").display().to_string();
    expect(home, &["xfer", "key", "--create", "--key", &key], 0);
    let root = format!("data={}", home.display());
    for (sig, want) in [(libc::SIGINT, 130), (libc::SIGTERM, 0)] {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let code = stopped_by(
            home,
            &["sink", "--listen", &listen],
            Ready::Udp(port),
            sig,
            "sink: ",
        );
        assert_eq!(code, Some(want), "sink, signal {sig}");

        let disk = home.join(format!("disk{sig}"));
        std::fs::create_dir(&disk).unwrap();
        let (disk, stream) = (
            disk.display().to_string(),
            format!("a=vdif@127.0.0.1:{}", free_port()),
        );
        let args = [
            "record",
            "--stream",
            &stream,
            "--disk",
            &disk,
            "--scan",
            "sig_st_0001",
        ];
        let code = stopped_by(home, &args, Ready::Line("ready: receiving"), sig, "recorded for");
        assert_eq!(code, Some(want), "record, signal {sig}");

        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let args = [
            "xfer", "serve", "--listen", &listen, "--root", &root, "--key", &key,
        ];
        let code = stopped_by(home, &args, Ready::Tcp(port), sig, "stopping");
        assert_eq!(code, Some(want), "xfer serve, signal {sig}");
    }
}

/// Ctrl-C: a finite job stopped before its end exits 130; a command that runs until stopped ends
/// with 130 too, after its summary.
#[test]
fn ctrl_c_interrupts_finite_jobs_with_130() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path();
    let port = free_port();
    // a sink (runs until stopped) counting what gen sends
    let mut sink = Proc::spawn(
        "sink",
        vf(home, &["sink", "--listen", &format!("127.0.0.1:{port}")]),
    );
    wait_port(&mut sink, port, true);
    let mut gen = Proc::spawn(
        "gen",
        vf(
            home,
            &[
                "gen",
                "--dest",
                &format!("127.0.0.1:{port}"),
                "--rate",
                "20Mbps",
                "--duration",
                "600",
            ],
        ),
    );
    // its first line comes after its Ctrl-C handler is in place (any wording)
    gen.wait_line("");
    assert_eq!(gen.interrupt(), Some(130), "gen");
    assert_eq!(sink.interrupt(), Some(130), "sink");

    // status --watch against no daemon: retries until stopped
    let none = format!("127.0.0.1:{}", free_port());
    let mut st = Proc::spawn("status", vf(home, &["status", "--watch", "--http", &none]));
    st.wait_line("");
    assert_eq!(st.interrupt(), Some(130), "status --watch");

    // play at a slow rate, stopped part way
    let file = home.join("p.vdif");
    vdif(home, &file, "2000", &[]);
    let mut play = Proc::spawn(
        "play",
        vf(
            home,
            &[
                "play",
                &file.display().to_string(),
                "--dest",
                &format!("127.0.0.1:{port}"),
                "--protocol",
                "vdif",
                "--rate",
                "2Mbps",
            ],
        ),
    );
    // its first line comes after its Ctrl-C handler is in place
    play.wait_line("");
    assert_eq!(play.interrupt(), Some(130), "play");
}
