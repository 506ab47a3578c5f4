//! `vlbiflow xfer` as a user runs it: help, refusals with exit code 3 and nothing written, and kill -9 of the
//! receiving daemon half way through, then the same command again moving only the rest.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

mod common;
use common::{content, xfer_serve, xfer_serve_after, xfer_serve_limited, XferDaemon};

fn serve(state: &Path, root: &Path, listen: &str) -> XferDaemon {
    xfer_serve(state, root, listen, &[])
}

/// Under `dir`: the client's state directory, an existing empty root `root`, and a file `a.vdif` holding
/// `bytes`.
fn state_root_and_file(dir: &Path, bytes: Vec<u8>) -> (PathBuf, PathBuf, PathBuf) {
    let (state, root, src) = (dir.join("state"), dir.join("root"), dir.join("a.vdif"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(&src, bytes).unwrap();
    (state, root, src)
}

fn push(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["xfer", "push"]).args(args).env("XDG_STATE_HOME", state);
    c
}

#[test]
fn help_has_examples_and_exit_codes() {
    for sub in [
        &["xfer", "--help"][..],
        &["xfer", "push", "--help"],
        &["xfer", "serve", "--help"],
    ] {
        let out = Command::new(BIN).args(sub).output().unwrap();
        assert!(out.status.success());
        let h = String::from_utf8(out.stdout).unwrap();
        assert!(h.contains("Examples:"), "{sub:?}");
    }
    let h = String::from_utf8(
        Command::new(BIN)
            .args(["xfer", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(h.contains("Exit status: 0 only when every file is verified"));
}

#[test]
fn wrong_key_unknown_root_and_dotdot_each_get_one_error_and_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (state, root, src) = state_root_and_file(d.path(), content(1, 100_000));
    let s = serve(&state, &root, "127.0.0.1:0");
    let key = state.join("vlbiflow/xfer/xfer.key");
    assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
    // a client with another key
    let other = d.path().join("other.key");
    let out = Command::new(BIN)
        .args(["xfer", "key", "--create", "--key"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(out.status.success());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--key".into(),
                other.display().to_string(),
                src.display().to_string(),
                format!("{}/data/x", s.addr),
            ],
            "rejected our key",
        ),
        (
            vec![src.display().to_string(), format!("{}/nope/x", s.addr)],
            "unknown root \"nope\"",
        ),
        (
            vec![src.display().to_string(), format!("{}/data/../x", s.addr)],
            "'..'",
        ),
    ];
    for (args, want) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = push(&state, &a).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "nothing written");
    }
}

/// With --json a failed push, pull or copy still prints one JSON object (not verified, the error, the exit
/// status), and standard error and the exit status stay what they are without --json.
#[test]
fn json_of_a_failed_transfer_says_why() {
    let d = tempfile::tempdir().unwrap();
    let (state, root, src, here) = (
        d.path().join("state"),
        d.path().join("root"),
        d.path().join("a.vdif"),
        d.path().join("here"),
    );
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&here).unwrap();
    std::fs::write(&src, content(2, 10_000)).unwrap();
    let s = serve(&state, &root, "127.0.0.1:0");
    let (src, here) = (src.to_str().unwrap(), here.to_str().unwrap());
    let (nope, data) = (format!("{}/nope/x", s.addr), format!("{}/data/x", s.addr));
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["push", src, &nope], 3, "unknown root"),
        (vec!["pull", &nope, here], 3, "unknown root"),
        (vec!["copy", &nope, &data], 3, "unknown root"),
        // nothing listens at port 9: the daemon cannot be reached, an I/O error
        (vec!["push", src, "127.0.0.1:9/data"], 5, "127.0.0.1:9"),
        (
            vec!["push", src, &data, "--chunk-size", "1000"],
            2,
            "--chunk-size",
        ),
    ];
    for (args, code, want) in cases {
        let run = |json: bool| {
            let mut c = Command::new(BIN);
            c.arg("xfer").args(&args).env("XDG_STATE_HOME", &state);
            if json {
                c.arg("--json");
            }
            let out = c.output().unwrap();
            let err = String::from_utf8(out.stderr).unwrap();
            (out.status.code(), String::from_utf8(out.stdout).unwrap(), err)
        };
        let (plain_code, plain_out, plain_err) = run(false);
        let (json_code, out, err) = run(true);
        assert_eq!(plain_code, Some(code), "{args:?}: {plain_err}");
        assert_eq!(json_code, Some(code), "{args:?} --json: {err}");
        assert_eq!(plain_out, "", "{args:?}");
        assert_eq!(err, plain_err, "{args:?}: the same message on standard error");
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"));
        assert_eq!(v["verified"], false, "{v}");
        assert_eq!(v["exit_code"], code, "{v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{v}");
    }
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "nothing written");
}

/// `vlbiflow ARGS` as a user with no allowance for the real-time class: as root, user nobody (changing
/// the user drops every capability); otherwise this user with its `RLIMIT_RTPRIO` lowered to 0.
fn without_realtime_allowance(args: &[&str]) -> Command {
    // SAFETY: geteuid has no preconditions.
    let mut c = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c
    } else {
        let mut c = Command::new("prlimit");
        c.args(["--rtprio=0", "--"]);
        c
    };
    c.arg(BIN).args(args);
    c
}

#[test]
fn realtime_that_is_not_permitted_is_refused_before_anything_starts() {
    let d = tempfile::tempdir().unwrap();
    // the unprivileged user works in here
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (root, key, src) = (
        d.path().join("root"),
        d.path().join("k.key"),
        d.path().join("a.vdif"),
    );
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(&src, content(3, 10_000)).unwrap();
    std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let state = d.path().join("state");
    let (rootarg, keyarg) = (format!("data={}", root.display()), key.display().to_string());
    // exit code and standard error of `vlbiflow ARGS` run without the allowance
    let refused = |args: &[&str]| {
        let o = without_realtime_allowance(args)
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = refused(&[
        "xfer",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--root",
        &rootarg,
        "--key",
        &keyarg,
        "--realtime",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--realtime") && err.contains("CAP_SYS_NICE"),
        "{err}"
    );
    assert!(!err.contains("serving on"), "{err}");
    // the client, with the key the daemon created: refused before it connects (nothing listens at port 9)
    let (code, err) = refused(&[
        "xfer",
        "push",
        "--realtime",
        "--key",
        &keyarg,
        &src.display().to_string(),
        "127.0.0.1:9/data",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--realtime") && err.contains("ulimit -r"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "nothing written");
}

/// A directory of 3,000 small files into a daemon allowed 4,096 open files (soft and hard, as a service
/// manager may set): every file arrives, synced, with its manifest. The receiver used to keep each
/// file's descriptors (the `.part`, its `O_DIRECT` twin, its directory) until the whole transfer
/// ended, and failed with "Too many open files" past about 1,400 files here (6,249 of 10,000 at a limit
/// of 20,000).
#[test]
fn thousands_of_small_files_fit_in_the_daemons_open_file_limit() {
    let d = tempfile::tempdir().unwrap();
    let (state, root, src) = (
        d.path().join("state"),
        d.path().join("root"),
        d.path().join("tree"),
    );
    std::fs::create_dir_all(&root).unwrap();
    let n = 3000;
    for i in 0..n {
        let dir = src.join(format!("d{}", i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:05}")), content(i as u64, 1000 + i % 97)).unwrap();
    }
    let s = xfer_serve_limited(&state, &root, "127.0.0.1:0", &[], Some(4096));
    let dest = format!("{}/data/in", s.addr);
    let out = push(&state, &[src.to_str().unwrap(), &dest, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..n {
        let rel = format!("tree/d{}/f{i:05}", i % 3);
        let got = std::fs::read(root.join("in").join(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(got == content(i as u64, 1000 + i % 97), "{rel} differs");
        assert!(
            root.join("in").join(format!("{rel}.blake3.json")).is_file(),
            "{rel}: no manifest"
        );
    }
    let leftovers: Vec<_> = walk(&root.join("in"))
        .into_iter()
        .filter(|p| p.ends_with(".part") || p.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Files and directories a transfer creates take their mode from the daemon's umask (as `cp` does), so an
/// operator who wants group-writable data sets `UMask=0002`: under umask 002 they are 0664 and 0775, under
/// 077 0600 and 0700.
#[test]
fn created_files_and_directories_follow_the_daemons_umask() {
    for (umask, file, dir) in [("002", 0o664, 0o775), ("077", 0o600, 0o700)] {
        let d = tempfile::tempdir().unwrap();
        let (state, root, src) = state_root_and_file(d.path(), content(7, 50_000));
        let s = xfer_serve_after(&state, &root, "127.0.0.1:0", &[], Some(format!("umask {umask}")));
        let dest = format!("{}/data/x/y", s.addr);
        let out = push(&state, &[src.to_str().unwrap(), &dest]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(
            std::fs::read(root.join("x/y/a.vdif")).unwrap(),
            content(7, 50_000)
        );
        assert_eq!(mode(&root.join("x/y/a.vdif")), file, "umask {umask}: file");
        assert_eq!(
            mode(&root.join("x/y/a.vdif.blake3.json")),
            file,
            "umask {umask}: manifest"
        );
        assert_eq!(mode(&root.join("x")), dir, "umask {umask}: directory");
        assert_eq!(mode(&root.join("x/y")), dir, "umask {umask}: directory");
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

#[test]
fn kill_9_of_the_receiver_then_the_same_command_moves_only_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let (state, root, src) = (
        d.path().join("state"),
        d.path().join("root"),
        d.path().join("scan.vdif"),
    );
    std::fs::create_dir_all(&root).unwrap();
    let size = 64usize << 20;
    let chunk = 4u64 << 20;
    std::fs::write(&src, content(3, size)).unwrap();
    let mut s = serve(&state, &root, "127.0.0.1:0");
    let addr = s.addr.clone();
    let dest = format!("{addr}/data/in");
    let args = [
        src.to_str().unwrap(),
        &dest,
        "--rate",
        "200Mbps",
        "--chunk-size",
        "4MiB",
        "--json",
    ];
    let client = push(&state, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // kill -9 the daemon once half the data is on its disk (allocated blocks of the sparse .part)
    let part = root.join("in/scan.vdif.part");
    let t0 = Instant::now();
    let observed = loop {
        let on_disk = std::fs::metadata(&part).map(|m| m.blocks() * 512).unwrap_or(0);
        if on_disk >= size as u64 / 2 {
            break on_disk;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no progress: {on_disk} bytes"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // SAFETY: kill(2) on the pid of our own child process.
    assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGKILL) }, 0);
    let _ = s.child.wait();
    let out = client.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the interrupted push fails: {err}");
    assert!(err.contains("resume"), "{err}");
    assert!(!root.join("in/scan.vdif").exists());
    // the same daemon command again, the same push command again
    let _s2 = serve(&state, &root, &addr);
    let out = push(&state, &args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = v["bytes_sent"].as_u64().unwrap();
    let retx = v["retransmits"].as_u64().unwrap();
    let already = v["bytes_already_there"].as_u64().unwrap();
    let new_data = sent - retx.min(sent / 8192) * 8192;
    eprintln!("at kill {observed} bytes on disk; rerun: {already} already there, {sent} sent ({retx} retransmissions)");
    assert!(already > 0 && already >= observed.saturating_sub(2 * chunk));
    assert!(
        new_data <= size as u64 - observed + chunk,
        "moved {new_data} new bytes, the remainder was {} plus one chunk",
        size as u64 - observed
    );
    assert!(std::fs::read(root.join("in/scan.vdif")).unwrap() == std::fs::read(&src).unwrap());
    assert_eq!(
        v["files"][0]["blake3"].as_str().unwrap(),
        blake3::hash(&std::fs::read(&src).unwrap()).to_hex().as_str()
    );
    // the archive holds the failed push, the verified push and the daemon's verified receive
    let out = Command::new(BIN)
        .args(["xfer", "history", "--json"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        rows.iter().any(|r| r["role"] == "send" && r["ok"] == false),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r["role"] == "send" && r["ok"] == true),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r["role"] == "receive" && r["ok"] == true),
        "{rows:?}"
    );
    let table = Command::new(BIN)
        .args(["xfer", "history"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("FAILED"));
}

/// `vlbiflow xfer history ARGS` with the archive of `state`: exit code, standard output, standard error.
fn history(state: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(["xfer", "history"])
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn history_of_a_new_user_is_an_empty_list() {
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = history(d.path(), &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "", "no table without transfers");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no transfers"), "{err}");
    let (code, out, err) = history(d.path(), &["--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, serde_json::json!([]));
    // looking did not create the archive
    assert!(!d.path().join("vlbiflow/xfer/xfer.sqlite").exists());
}

/// `pull` and `copy` (one daemon to another, started from a third host) are archived on the host that runs
/// them, verified or failed, beside `push`.
#[test]
fn pull_and_copy_are_archived_where_they_run() {
    let d = tempfile::tempdir().unwrap();
    let (state_a, state_b, client) = (d.path().join("a"), d.path().join("b"), d.path().join("client"));
    let (root_a, root_b, here) = (d.path().join("ra"), d.path().join("rb"), d.path().join("here"));
    for p in [&root_a, &root_b, &here] {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(root_a.join("f.vdif"), content(5, 300_000)).unwrap();
    let a = xfer_serve(&state_a, &root_a, "127.0.0.1:0", &["--relay-to", "127.0.0.0/8"]);
    // daemon b and the client hold daemon a's key
    let key = std::fs::read(state_a.join("vlbiflow/xfer/xfer.key")).unwrap();
    for s in [&state_b, &client] {
        let k = s.join("vlbiflow/xfer/xfer.key");
        std::fs::create_dir_all(k.parent().unwrap()).unwrap();
        std::fs::write(&k, &key).unwrap();
        std::fs::set_permissions(&k, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let b = serve(&state_b, &root_b, "127.0.0.1:0");
    let xfer = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("xfer")
            .args(args)
            .env("XDG_STATE_HOME", &client)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let here_s = here.to_str().unwrap();
    let (code, err) = xfer(&["pull", &format!("{}/data/f.vdif", a.addr), here_s, "-q"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = xfer(&[
        "copy",
        &format!("{}/data/f.vdif", a.addr),
        &format!("{}/data/in", b.addr),
        "-q",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::read(root_b.join("in/f.vdif")).unwrap() == content(5, 300_000));
    let (code, err) = xfer(&["pull", &format!("{}/nope/f.vdif", a.addr), here_s, "-q"]);
    assert_eq!(code, Some(3), "{err}");
    let (code, out, err) = history(&client, &["--json"]);
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let pulled = format!("data/f.vdif -> {here_s}");
    let copied = format!("data/f.vdif -> {}/data/in", b.addr);
    let row = |role: &str, path: &str, ok: bool| {
        rows.iter()
            .any(|r| r["role"] == role && r["path"] == path && r["ok"] == ok && r["peer"] == a.addr.as_str())
    };
    assert!(row("receive", &pulled, true), "{rows:#?}");
    assert!(row("copy", &copied, true), "{rows:#?}");
    assert!(
        row("receive", &format!("nope/f.vdif -> {here_s}"), false),
        "{rows:#?}"
    );
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let verified = rows.iter().find(|r| r["role"] == "copy").unwrap();
    assert_eq!(verified["bytes"], 300_000, "{verified}");
    // the table too
    let (_, table, _) = history(&client, &[]);
    assert!(table.contains(" copy ") && table.contains("FAILED"), "{table}");
}

/// A path emulator between two namespaces made for this test (names and subnet from the pid); stopped
/// with SIGTERM on drop, which removes the namespaces.
struct Path2 {
    emu: Child,
    ns_a: String,
    ns_b: String,
    addr_b: String,
}

impl Path2 {
    fn start(tag: &str, args: &[&str]) -> Path2 {
        let pid = std::process::id();
        let (ns_a, ns_b) = (format!("vf-xf-{pid}-{tag}a"), format!("vf-xf-{pid}-{tag}b"));
        let net = format!("10.{}.{}", 120 + (pid % 100), (pid / 100) % 250);
        let (addr_a, addr_b) = (format!("{net}.1"), format!("{net}.2"));
        let mut emu = Command::new(BIN)
            .args([
                "pathemu", "--ns-a", &ns_a, "--ns-b", &ns_b, "--addr-a", &addr_a, "--addr-b", &addr_b,
            ])
            .args(["--mtu", "9000", "--duration", "120"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let err = emu.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("pathemu: {l}");
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l.starts_with("pathemu: ready") => break,
                Ok(_) => {}
                Err(e) => {
                    let _ = emu.kill();
                    panic!("pathemu not ready: {e}");
                }
            }
        }
        Path2 {
            emu,
            ns_a,
            ns_b,
            addr_b,
        }
    }
}

impl Drop for Path2 {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe { libc::kill(self.emu.id() as i32, libc::SIGTERM) };
        let _ = self.emu.wait();
    }
}

#[test]
#[ignore = "needs root: network namespaces and TUN devices (vlbiflow pathemu)"]
fn push_through_an_emulated_lossy_path_between_namespaces() {
    let d = tempfile::tempdir().unwrap();
    let (state, root) = (d.path().join("state"), d.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let src = d.path().join("obs.vdif");
    std::fs::write(&src, content(8, 24 << 20)).unwrap();
    // out of the page cache, as a recording made hours before: the sender reads it from the disk past
    // the cache, and sends retransmissions from the windows it keeps
    let f = std::fs::File::open(&src).unwrap();
    f.sync_all().unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    // 20 ms round trip, 400 Mb/s bottleneck, 1% random loss both ways, jumbo MTU
    let p = Path2::start("p", &["--rtt", "20ms", "--rate", "400Mbps", "--loss", "1%"]);
    let listen = format!("{}:46230", p.addr_b);
    let mut daemon = Command::new("ip")
        .args([
            "netns",
            "exec",
            &p.ns_b,
            BIN,
            "xfer",
            "serve",
            "--listen",
            &listen,
            "--realtime",
            "--root",
        ])
        .arg(format!("data={}", root.display()))
        .env("XDG_STATE_HOME", &state)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = daemon.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("daemon: {l}");
            let _ = tx.send(l);
        }
    });
    loop {
        let l = rx.recv_timeout(Duration::from_secs(20)).expect("daemon serving");
        if l.contains("xfer: serving on") {
            break;
        }
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &p.ns_a, BIN, "xfer", "push"])
        .arg(&src)
        .arg(format!("{listen}/data/in"))
        // the pacing thread in the real-time class (root may)
        .args(["--chunk-size", "4MiB", "--json", "--realtime"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!(
        "through 400 Mb/s, 20 ms, 1% loss: {:.0} Mb/s goodput, {} retransmissions of {} datagrams",
        v["goodput_bps"].as_f64().unwrap() / 1e6,
        v["retransmits"],
        v["datagrams"]
    );
    assert!(v["retransmits"].as_u64().unwrap() > 0, "1% loss must show");
    assert_eq!(v["realtime"], true, "{v}");
    // the feedback came back as datagrams through the same lossy path
    assert!(v["feedback_datagrams"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["feedback_rejected"].as_u64(), Some(0), "{v}");
    // the time the data thread waited for its disk: at least the first window's read
    assert!(v["read_wait_ms"].as_f64().is_some_and(|w| w > 0.0), "{v}");
    assert!(std::fs::read(root.join("in/obs.vdif")).unwrap() == std::fs::read(&src).unwrap());
    if direct_reads_expected(&f) {
        assert!(v["bytes_read_direct"].as_u64().unwrap() >= 24 << 20, "{v}");
    }
    drop(p);
}

/// Whether a sender reads a file the page cache does not hold with `O_DIRECT`: the kernel says what the
/// cache holds (`cachestat`, Linux 6.5 on) and the file is on a disk (on tmpfs its pages are the cache).
fn direct_reads_expected(f: &std::fs::File) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    let on_disk = rustix::fs::fstatfs(f).is_ok_and(|s| s.f_type as u64 != TMPFS_MAGIC);
    (major, minor) >= (6, 5) && on_disk
}

/// `push --follow` while `vlbiflow record` records: rounds go out while the scan grows (the test waits for
/// the push to report one), the recorder is then stopped and marks the scan complete, the push finishes,
/// and the file at the destination is byte-identical to a `vlbiflow gather` of the finished scan.
#[test]
fn push_follow_of_a_scan_being_recorded_equals_a_gather_after_the_recording() {
    let d = tempfile::tempdir().unwrap();
    let (state, root, disks) = (
        d.path().join("state"),
        d.path().join("root"),
        d.path().join("disks"),
    );
    std::fs::create_dir_all(&root).unwrap();
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
        .args(["--scan", "fol_xx_0001", "--block-size", "1MB", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the recorder prints its streams once it listens
    let (tx, rx) = mpsc::channel();
    let err = rec.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    while !rx
        .recv_timeout(Duration::from_secs(20))
        .expect("recorder listening")
        .contains("stream a")
    {}
    let mut gen = Command::new(BIN)
        .args([
            "gen",
            "--dest",
            &format!("127.0.0.1:{port}"),
            "--psn",
            "--rate",
            "300Mbps",
        ])
        .args(["--duration", "30", "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let s = serve(&state, &root, "127.0.0.1:0");
    let glob = format!("{}/*", disks.display());
    let mut p = push(
        &state,
        &[
            "--scan",
            "fol_xx_0001",
            "--disk",
            &glob,
            "--follow",
            "--chunk-size",
            "1MiB",
            "--json",
        ],
    )
    .arg(format!("{}/data/f", s.addr))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let perr = p.stderr.take().unwrap();
    let (ptx, prx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(perr).lines().map_while(Result::ok) {
            eprintln!("push: {l}");
            let _ = ptx.send(l);
        }
    });
    // two rounds while recording (the second resumes the first's .part), then the recording ends
    let mut rounds = 0;
    while rounds < 2 {
        let l = prx
            .recv_timeout(Duration::from_secs(30))
            .expect("a round while recording");
        if l.contains("still recording: sending up to") {
            rounds += 1;
        }
    }
    let _ = gen.kill();
    let _ = gen.wait();
    assert!(Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let out = loop {
        if let Some(st) = p.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "push --follow did not finish"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Ctrl-C ends the recorder with 130, after its summary
    assert_eq!(rec.wait().unwrap().code(), Some(130));
    let mut json = String::new();
    std::io::Read::read_to_string(&mut p.stdout.take().unwrap(), &mut json).unwrap();
    assert!(out.success(), "push --follow: {json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["rounds_while_recording"].as_u64().unwrap() >= 2, "{v}");
    // the reference: a gather of the finished scan
    let gathered = d.path().join("gathered.vdif");
    let g = Command::new(BIN)
        .args(["gather", "fol_xx_0001", "--disk", &glob, "-q", "-o"])
        .arg(&gathered)
        .status()
        .unwrap();
    assert!(g.success());
    let want = std::fs::read(&gathered).unwrap();
    let got = std::fs::read(root.join("f/fol_xx_0001.vdif")).unwrap();
    assert!(want.len() > 3 << 20, "{} bytes recorded", want.len());
    assert!(
        got == want,
        "received {} bytes, gather {} bytes",
        got.len(),
        want.len()
    );
    assert!(!root.join("f/fol_xx_0001.vdif.part").exists());
}
