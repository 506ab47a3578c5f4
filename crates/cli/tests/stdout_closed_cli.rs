//! A reader of standard output that leaves early (`vlbiflow xfer history | head -1`): the command ends
//! quietly, with the status a shell shows for SIGPIPE (141), never a panic (101).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use vlbiflow_xfer::archive::{Archive, Entry};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// An archive of `n` transfers whose table rows are about 2 kB each (more than any pipe holds).
fn big_archive(path: &Path, n: usize) {
    let a = Archive::open(path).unwrap();
    let long = "exp1/".repeat(400);
    for i in 0..n {
        a.insert(&Entry {
            id: 0,
            started: "2026-01-01T00:00:00Z".into(),
            ended: "2026-01-01T00:00:01Z".into(),
            role: "send".into(),
            peer: "127.0.0.1:46230".into(),
            path: format!("data/{long}{i}"),
            transfer_id: String::new(),
            files: 1,
            bytes: 1000,
            bytes_resumed: 0,
            bytes_moved: 1000,
            seconds: 1.0,
            ok: true,
            error: None,
            detail: serde_json::Value::Null,
        })
        .unwrap();
    }
}

/// Runs `cmd` with standard output a pipe whose reading end is closed before it starts.
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    cmd.stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn assert_quiet(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(!err.contains("error"), "{what}: {err}");
    assert_eq!(out.status.code(), Some(141), "{what}: {err}");
}

#[test]
fn every_kind_of_output_to_a_closed_pipe_ends_quietly() {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("xfer.sqlite");
    big_archive(&archive, 3);
    let key = d.path().join("k.key");
    let vdif = d.path().join("t.vdif");
    let made = Command::new(BIN)
        .args(["gen", "--pps", "1000", "--count", "100", "--quiet", "--output"])
        .arg(&vdif)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let (archive, key, vdif, dir) = (
        archive.to_str().unwrap(),
        key.to_str().unwrap(),
        vdif.to_str().unwrap(),
        d.path().to_str().unwrap(),
    );
    let cases: &[&[&str]] = &[
        // a table, JSON, one line, a report, frames written to standard output
        &["xfer", "history", "--archive", archive],
        &["xfer", "history", "--archive", archive, "--json"],
        &["xfer", "key", "--create", "--key", key],
        &["ls", dir],
        &["check", vdif],
        &["check", vdif, "--json"],
        // generated references: a completion script, the man page, the pages written, docs/cli.md
        &["completions", "fish"],
        &["completions", "bash"],
        &["man"],
        &["man", "--out", dir],
        &["cli-reference"],
        &[
            "gen",
            "--pps",
            "1000",
            "--count",
            "100",
            "--quiet",
            "--output",
            "/dev/stdout",
        ],
    ];
    for args in cases {
        let out = with_closed_stdout(Command::new(BIN).args(*args));
        assert_quiet(&args.join(" "), &out);
    }
}

/// `vlbiflow xfer history | head -1` on an archive whose listing is larger than the pipe holds: the
/// command is still writing when the reader goes.
#[test]
fn history_into_head_1_ends_quietly() {
    let d = tempfile::tempdir().unwrap();
    let archive = d.path().join("xfer.sqlite");
    big_archive(&archive, 1000);
    let mut child = Command::new(BIN)
        .args(["xfer", "history", "--limit", "1000000", "--archive"])
        .arg(&archive)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("started (UTC)"), "{first}");
    // the reader leaves here (dropped above), as head does after one line
    let out = child.wait_with_output().unwrap();
    assert_quiet("xfer history | head -1", &out);
}
