//! Helpers shared by the CLI's integration tests (each test file includes this with `mod common;`).
#![allow(dead_code)] // not every test file uses every helper

use std::process::{Command, Output};

/// Runs `args[0]` with the rest as its arguments and returns what it printed.
pub fn run(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().expect("run")
}

/// Runs a command that must succeed (setting up namespaces, links, shapers); fails the test with its
/// standard error otherwise.
pub fn sh(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[path = "../../../xfer/tests/common/content.rs"]
mod generated;
#[allow(unused_imports)] // not every test file writes test content
pub use generated::content;

/// A `vlbiflow xfer serve` on loopback serving `root` as `data`, and what it logs, line by line (echoed
/// to the test's standard error); killed when dropped.
pub struct XferDaemon {
    pub child: std::process::Child,
    /// Its control address.
    pub addr: String,
    /// Its metrics address, when started with `--metrics`.
    pub metrics: Option<String>,
    lines: std::sync::mpsc::Receiver<String>,
}

/// Starts `vlbiflow xfer serve --listen LISTEN --root data=ROOT EXTRA...` with its state (key, archive)
/// under `state`, and waits (at most 20 s) until it says where it serves (and its metrics, if asked).
pub fn xfer_serve(
    state: &std::path::Path,
    root: &std::path::Path,
    listen: &str,
    extra: &[&str],
) -> XferDaemon {
    xfer_serve_limited(state, root, listen, extra, None)
}

/// [`xfer_serve`] with its limit on open files (soft and hard) set to `nofile` first (`ulimit -n`), if given.
#[allow(dead_code)]
pub fn xfer_serve_limited(
    state: &std::path::Path,
    root: &std::path::Path,
    listen: &str,
    extra: &[&str],
    nofile: Option<u64>,
) -> XferDaemon {
    xfer_serve_after(
        state,
        root,
        listen,
        extra,
        nofile.map(|n| format!("ulimit -n {n}")),
    )
}

/// [`xfer_serve`] started by `sh -c` after a shell command (`ulimit -n 64`, `umask 002`), if given.
#[allow(dead_code)]
pub fn xfer_serve_after(
    state: &std::path::Path,
    root: &std::path::Path,
    listen: &str,
    extra: &[&str],
    preamble: Option<String>,
) -> XferDaemon {
    use std::io::BufRead;
    let bin = env!("CARGO_BIN_EXE_vlbiflow");
    let mut cmd = match preamble {
        Some(p) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("{p} && exec \"$0\" \"$@\""), bin]);
            c
        }
        None => Command::new(bin),
    };
    let mut child = cmd
        .args(["xfer", "serve", "--listen", listen, "--root"])
        .arg(format!("data={}", root.display()))
        .args(extra)
        .env("XDG_STATE_HOME", state)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start vlbiflow xfer serve");
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().expect("its standard error");
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("daemon: {l}");
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut d = XferDaemon {
        child,
        addr: String::new(),
        metrics: None,
        lines: rx,
    };
    let want_metrics = extra.contains(&"--metrics");
    while d.addr.is_empty() || (want_metrics && d.metrics.is_none()) {
        let l = d
            .lines
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the daemon's start lines within 20 s");
        // log lines: `TIME LEVEL vlbiflow::xfer: serving on ADDR field=...`, `... metrics at http://ADDR/metrics`
        if let Some((_, rest)) = l.split_once("xfer: serving on ") {
            d.addr = rest.split_whitespace().next().expect("an address").to_string();
        }
        if let Some((_, rest)) = l.split_once("xfer: metrics at http://") {
            let url = rest.split_whitespace().next().expect("a URL");
            d.metrics = Some(url.trim_end_matches("/metrics").to_string());
        }
    }
    d
}

impl XferDaemon {
    /// Waits (at most 30 s) for a line it logs that contains `what`.
    pub fn wait_line(&self, what: &str) -> String {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let l = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line with {what:?} from the daemon within 30 s"));
            if l.contains(what) {
                return l;
            }
        }
    }
}

impl Drop for XferDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
