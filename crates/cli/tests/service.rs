//! Running as a service: every example configuration in deploy/config is accepted by its daemon's
//! `--check-config`, a key the daemon does not know is refused naming it, and every systemd unit in
//! deploy/systemd passes `systemd-analyze verify` without a warning.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn vlbiflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args(args)
        .output()
        .expect("run vlbiflow")
}

/// The daemon command that reads each example, by file name.
fn daemon_of(file: &str) -> &'static [&'static str] {
    match file {
        "serve.toml" => &["serve"],
        "xfer.toml" => &["xfer", "serve"],
        "agent.toml" => &["net", "agent"],
        "hub.toml" => &["net", "hub"],
        other => panic!("deploy/config/{other}: which daemon reads it? (add it here)"),
    }
}

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 4, "one example per daemon: {v:?}");
    v
}

#[test]
fn check_config_accepts_every_example() {
    for p in examples() {
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let mut args = daemon_of(&name).to_vec();
        let path = p.to_str().unwrap();
        args.extend(["--check-config", path]);
        let out = vlbiflow(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stdout.lines().count(), 1, "{args:?}: one line: {stdout}");
        assert!(stdout.starts_with(path), "{args:?}: {stdout}");
        // the examples use the current syntax only: no deprecation warning
        assert!(!stderr.contains("WARN"), "{args:?}: {stderr}");
    }
}

#[test]
fn check_config_refuses_an_unknown_key_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for p in examples() {
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        // the key on line 1, before any table, so that it is at the top level
        let text = format!("no_such_key = 1\n{}", std::fs::read_to_string(&p).unwrap());
        let bad = dir.path().join(&name);
        std::fs::write(&bad, text).unwrap();
        let mut args = daemon_of(&name).to_vec();
        let path = bad.to_str().unwrap();
        args.extend(["--check-config", path]);
        let out = vlbiflow(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains("no_such_key"), "{args:?}: {stderr}");
        assert!(stderr.contains(path), "{args:?}: {stderr}");
        assert!(
            stderr.contains("line 1") || stderr.contains(&format!("{path}:1:")),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn systemd_units_verify_without_warnings() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("systemd-analyze is not installed: units not verified");
        return;
    }
    // The units name /usr/bin/vlbiflow, where the package installs it; verify checks that ExecStart is
    // executable, so a copy names the binary just built.
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for e in std::fs::read_dir(repo().join("deploy/systemd")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".service") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("ExecStart=/usr/bin/vlbiflow "), "{name}");
        let text = text.replace("/usr/bin/vlbiflow", env!("CARGO_BIN_EXE_vlbiflow"));
        let copy = dir.path().join(&name);
        std::fs::write(&copy, text).unwrap();
        units.push(copy);
    }
    units.sort();
    let names: Vec<String> = units
        .iter()
        .map(|u| u.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "vlbiflow-serve.service",
        "vlbiflow-xfer.service",
        "vlbiflow-agent.service",
        "vlbiflow-hub.service",
        "vlbiflow-record@.service",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&units)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stderr.trim().is_empty() && stdout.trim().is_empty(),
        "systemd-analyze verify: {stdout}{stderr}"
    );
}
