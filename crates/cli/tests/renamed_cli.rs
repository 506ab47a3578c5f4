//! Spellings of the command line that changed keep working for one release: the old flag is read as the
//! new one (its value reaches the same check, whose error names the new flag), a warning names the new
//! spelling, and `--help` shows only the new one. Durations that took bare seconds accept units and warn
//! on a bare number.

#[path = "common/proc.rs"]
mod proc;

use proc::{free_port, output_within};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

fn run(args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    output_within(&args.join(" "), c)
}

/// Runs `args`, expects exit status `code`, and returns standard error.
fn expect(args: &[&str], code: i32) -> String {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "vlbiflow {}: {err}",
        args.join(" ")
    );
    err
}

/// Standard error warns that `old` is now `new`.
fn warns(err: &str, old: &str, new: &str) -> bool {
    err.lines()
        .any(|l| l.contains("WARN") && l.contains(old) && l.contains(&format!("`{new}`")))
}

#[test]
fn old_flag_spellings_work_and_warn() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let file = file.to_str().unwrap();
    // receive and relay: --threads (a list) is --thread-ids, --idle is --idle-timeout; the bad --idle
    // value is reported under the new name, so both old spellings were read
    let err = expect(
        &[
            "receive",
            "--listen",
            "127.0.0.1:0",
            "--output",
            "null",
            "--threads",
            "0,1",
            "--idle",
            "soon",
        ],
        2,
    );
    assert!(warns(&err, "receive --threads", "--thread-ids"), "{err}");
    assert!(warns(&err, "receive --idle", "--idle-timeout"), "{err}");
    assert!(err.contains("--idle-timeout: "), "{err}");
    let err = expect(
        &[
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "udps@127.0.0.1:9",
            "--threads=0",
            "--idle=soon",
        ],
        2,
    );
    assert!(warns(&err, "relay --threads", "--thread-ids"), "{err}");
    assert!(warns(&err, "relay --idle", "--idle-timeout"), "{err}");
    assert!(err.contains("--idle-timeout: "), "{err}");
    // xfer: the datagram payload is --payload-size (record's --block-size is the Mark6 block)
    let err = expect(&["xfer", "push", "--block-size", "0", file, "127.0.0.1:9/r/d"], 2);
    assert!(warns(&err, "xfer push --block-size", "--payload-size"), "{err}");
    assert!(err.contains("--payload-size 0"), "{err}");
    // net bw: a list of sizes is --sizes
    let err = expect(
        &["net", "bw", "127.0.0.1:9", "--no-archive", "--size", "70000"],
        2,
    );
    assert!(warns(&err, "net bw --size", "--sizes"), "{err}");
    assert!(err.contains("--sizes: 70000"), "{err}");
    // the new spellings do not warn
    let err = expect(
        &["xfer", "push", "--payload-size", "0", file, "127.0.0.1:9/r/d"],
        2,
    );
    assert!(!err.contains("WARN"), "{err}");
}

#[test]
fn help_shows_only_the_new_spellings() {
    for (cmd, old, new) in [
        (&["receive"][..], "--threads", "--thread-ids"),
        (&["receive"][..], "--idle ", "--idle-timeout"),
        (&["relay"][..], "--threads", "--thread-ids"),
        (&["xfer", "push"][..], "--block-size", "--payload-size"),
        (&["net", "bw"][..], "--size ", "--sizes"),
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = run(&args);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains(new), "{cmd:?}: {help}");
        assert!(!help.contains(old), "{cmd:?} --help shows {old}: {help}");
    }
}

#[test]
fn durations_take_units_and_bare_seconds_warn() {
    // nothing listens there: the daemon cannot be reached (5), after the options were read
    let addr = format!("127.0.0.1:{}", free_port());
    let err = expect(&["ctl", "--host", &addr, "--timeout", "2s", "record?"], 5);
    assert!(!err.contains("WARN"), "{err}");
    let err = expect(&["ctl", "--host", &addr, "--timeout", "2", "record?"], 5);
    assert!(
        err.lines()
            .any(|l| l.contains("WARN") && l.contains("(2)") && l.contains("2s")),
        "{err}"
    );
    let err = expect(&["ctl", "--host", &addr, "--wait-busy", "500ms", "record?"], 5);
    assert!(!err.contains("WARN"), "{err}");
    // out of range, in a unit
    expect(&["ctl", "--host", &addr, "--timeout", "0s", "record?"], 2);
    expect(&["net", "capacity", &addr, "--timeout", "soon"], 2);
    expect(&["net", "agent", "--name", "x", "--sync-every", "soon"], 2);
}
