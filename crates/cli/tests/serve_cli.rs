//! `vlbiflow serve`, `ctl` and `status` as processes: the README session on a temporary configuration.

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

use vlbiflow_formats::time::{UtcTime, VdifTime};
use vlbiflow_formats::vdif::VdifHeaderRepr;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

fn ctl(host: &str, cmds: &str) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["ctl", "--host", host, cmds])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn send_frames(port: u16, count: u64) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let start = VdifTime::from_unix_second(UtcTime::now().unix_seconds).unwrap();
    let mut d = vec![0u8; 8 + 1032];
    for n in 0..count {
        d[..8].copy_from_slice(&n.to_ne_bytes());
        VdifHeaderRepr {
            seconds: start.seconds + (n / 100) as u32,
            epoch: start.epoch,
            frame_number: (n % 100) as u32,
            frame_len: 1032,
            bits_per_sample: 2,
            ..Default::default()
        }
        .emit(&mut d[8..])
        .unwrap();
        sock.send_to(&d, ("127.0.0.1", port)).unwrap();
        if n % 64 == 63 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

#[test]
fn serve_ctl_status_session() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..2 {
        std::fs::create_dir(dir.path().join(format!("disk{i}"))).unwrap();
    }
    let cfg = dir.path().join("vlbiflow.toml");
    std::fs::write(
        &cfg,
        format!(
            "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nopen_group = \"main\"\n[groups]\n\
             main = [\"{}/disk*\"]\n[recorder]\nblock_size = 100000\nrecv_buffer = 4194304\npool_blocks = 16\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let (mut serve, control, http) = start_serve(&cfg);
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let (ok, out) = ctl(
        &control,
        &format!("input_stream=add:RDBE1:vdif:1032:50:42:lo:127.0.0.1:{port}:0; input_stream=commit; record=on:30:scan1:exp:st; record?"),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out,
        "!input_stream = 0 : added : RDBE1 ;\n!input_stream = 0 : committed : 1 ;\n\
         !record = 0 : recording : exp_st_scan1 ;\n!record? 0 : recording : main : 1 : exp_st_scan1 ;\n"
    );
    send_frames(port, 300);

    let st = Command::new(BIN)
        .args(["status", "--http", &http])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    for want in [
        "status: recording",
        "scan #1 exp_st_scan1",
        "stream: RDBE1",
        "rx packets: ",
        "disk0",
        "disk1",
    ] {
        assert!(text.contains(want), "{want} not in\n{text}");
    }

    // From standard input, as da-client scripts do.
    let mut c = Command::new(BIN)
        .args(["ctl", "--host", &control])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(b"record=off;\n").unwrap();
    let out = c.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "!record = 0 : flushing : exp_st_scan1 ;\n"
    );
    // As the README does it: right after record=off, scan_check? waits while the scan is flushing.
    let out = Command::new(BIN)
        .args([
            "ctl",
            "--host",
            &control,
            "--wait-busy",
            "60",
            "record?; scan_check?",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("!record? 0 : "), "{text}");
    assert!(
        lines[1].starts_with("!scan_check? 0 : 1 : exp_st_scan1 : complete : RDBE1 : OK : vdif : "),
        "{text}"
    );
    let state = ctl(&control, "record?").1;
    assert_eq!(state, "!record? 0 : off : main : 1 : exp_st_scan1 ;\n");
    assert!(dir.path().join("disk0/exp_st_scan1.vdif").is_file());

    // A failing reply makes ctl exit non-zero.
    let (ok, out) = ctl(&control, "record=on:30:../x:exp:st");
    assert!(!ok);
    assert!(out.starts_with("!record = 8 : scan name \"../x\""), "{out}");

    // SIGTERM: a clean stop.
    let kill = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = serve.wait().unwrap();
    assert!(status.success(), "serve exited with {status}");
}

#[test]
fn ctl_without_a_daemon_names_the_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(BIN)
        .args(["ctl", "--host", &format!("127.0.0.1:{port}"), "record?"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("vlbiflow serve"),
        "{err}"
    );
}

#[test]
fn serve_refuses_a_bad_config_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "control = \"0.0.0.0:14242\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token") && err.contains("bad.toml"), "{err}");
}

/// Starts `vlbiflow serve` on `cfg` and returns it with its control and HTTP addresses.
fn start_serve(cfg: &std::path::Path) -> (std::process::Child, String, String) {
    let mut serve = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut parts = line.split_whitespace().skip(1);
    let control = parts
        .next()
        .unwrap()
        .strip_prefix("control=")
        .unwrap()
        .to_string();
    let http = parts.next().unwrap().strip_prefix("http=").unwrap().to_string();
    (serve, control, http)
}

#[test]
fn a_daemon_killed_while_recording_leaves_a_readable_incomplete_scan_that_a_restart_lists() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..2 {
        std::fs::create_dir(dir.path().join(format!("disk{i}"))).unwrap();
    }
    let cfg = dir.path().join("vlbiflow.toml");
    std::fs::write(
        &cfg,
        format!(
            "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nopen_group = \"main\"\n[groups]\n\
             main = [\"{}/disk*\"]\n[recorder]\nblock_size = 100000\nrecv_buffer = 4194304\npool_blocks = 16\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let (mut serve, control, _) = start_serve(&cfg);
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (ok, out) = ctl(
        &control,
        &format!("input_stream=add:RDBE1:vdif:1032:50:42:lo:127.0.0.1:{port}:0; input_stream=commit; record=on:60:scan1:exp:st"),
    );
    assert!(ok, "{out}");
    send_frames(port, 3000);
    // Wait until the daemon has counted every frame, then kill it without warning.
    let mut counted = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        counted = ctl(&control, "evlbi?").1;
        if counted.contains("total : 3000 ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(counted.contains("total : 3000 "), "{counted}");
    serve.kill().unwrap();
    serve.wait().unwrap();

    // The metadata on every disk says incomplete; the data parses as whole blocks.
    for i in 0..2 {
        let meta = dir.path().join(format!("disk{i}/exp_st_scan1.vlbiflow.json"));
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
        assert_eq!(m["complete"], false, "{}", meta.display());
    }
    let check = Command::new(BIN)
        .args([
            "check",
            "exp_st_scan1",
            "--disk",
            &format!("{}/disk*", dir.path().display()),
            "--json",
        ])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&check.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&check.stderr)));
    // Nearly everything made it to disk: the blocks being written at the kill may be torn (the tail of an
    // O_DIRECT write not yet out, the partly filled block never sealed), and check says where.
    let frames = report["frames"].as_u64().unwrap();
    assert!(frames >= 2500, "{frames} frames: {report}");
    for f in report["findings"].as_array().unwrap() {
        if f["kind"] == "truncated" {
            assert!(
                f["file"].as_str().is_some() && f["offset"].as_u64().is_some(),
                "{f}"
            );
        }
    }
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "metadata"),
        "check says the scan is incomplete: {report}"
    );

    // A restarted daemon rebuilds its scan list from the disks and says what happened.
    let (mut serve, control, _) = start_serve(&cfg);
    let (_, out) = ctl(&control, "record?; scan_check?");
    assert!(
        out.starts_with("!record? 0 : off : main : 1 : exp_st_scan1 ;\n"),
        "{out}"
    );
    assert!(
        out.contains("!scan_check? 0 : 1 : exp_st_scan1 : incomplete : RDBE1"),
        "{out}"
    );
    serve.kill().unwrap();
    serve.wait().unwrap();
}

#[test]
fn tokens_come_from_a_file_or_the_environment_never_the_command_line() {
    // on the command line: refused, naming the ways that work
    for args in [
        &["serve", "--token", "sesame-0123"][..],
        &["ctl", "--token", "sesame-0123", "record?"],
        &["status", "--token", "sesame-0123"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--token-file") && err.contains("VLBIFLOW_TOKEN"),
            "{err}"
        );
    }
    // a daemon that requires the token on loopback, given in a file; ctl from the file and the variable
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "sesame-0123\n").unwrap();
    let cfg = dir.path().join("vlbiflow.toml");
    std::fs::write(&cfg, "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n").unwrap();
    let mut serve = Command::new(BIN)
        .args(["serve", "--require-token", "--token-file"])
        .arg(&token)
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let control = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("control="))
        .unwrap()
        .to_string();
    let (ok, out) = ctl(&control, "record?");
    assert!(!ok && out.contains("authentication required"), "{out}");
    let out = Command::new(BIN)
        .args(["ctl", "--host", &control, "--token-file"])
        .arg(&token)
        .arg("record?")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let out = Command::new(BIN)
        .args(["ctl", "--host", &control, "record?"])
        .env("VLBIFLOW_TOKEN", "sesame-0123")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    serve.kill().unwrap();
    serve.wait().unwrap();
}
