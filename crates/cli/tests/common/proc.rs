//! Background processes for the CLI's integration tests: started with their standard error (and
//! output) read line by line, waited for by a line or a bound port, every wait with a limit; killed when
//! dropped. Included with `#[path = "common/proc.rs"] mod proc;`.
#![allow(dead_code, unused_imports)] // not every test file uses every helper

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long anything may take before a test calls it a hang (not a performance figure).
pub const PATIENCE: Duration = Duration::from_secs(90);

/// A child process whose standard error and output lines arrive on a channel; killed on drop.
pub struct Proc {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    /// Everything it printed so far, in arrival order (for failure messages).
    seen: Vec<String>,
    pub name: String,
}

impl Proc {
    /// Starts `cmd` (its standard input closed), reading what it prints.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        for (tag, r) in [
            ("out", Box::new(out) as Box<dyn std::io::Read + Send>),
            ("err", Box::new(err)),
        ] {
            let tx = tx.clone();
            let name = name.to_string();
            thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    eprintln!("[{name} {tag}] {l}");
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            child: Some(child),
            lines,
            seen: Vec::new(),
            name: name.to_string(),
        }
    }

    /// Waits (at most [`PATIENCE`]) for a line containing `needle` on its standard output or error.
    pub fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "{}: no line with {needle:?} ({e}); it printed {:?}",
                    self.name, self.seen
                ),
            }
        }
    }

    /// Sends signal `sig` to it.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on the pid of our own child process, not yet waited for.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }

    /// Waits (at most [`PATIENCE`]) for it to end; returns its exit status (None: killed by a signal).
    pub fn finish(mut self) -> Option<i32> {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(st) = child.try_wait().expect("wait") {
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not end within {PATIENCE:?}; it printed {:?}",
                    self.name, self.seen
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGINT and waits for it to end; returns its exit status.
    pub fn interrupt(self) -> Option<i32> {
        self.signal(libc::SIGINT);
        self.finish()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `cmd` to its end (at most [`PATIENCE`], then it is killed and the test fails).
pub fn output_within(name: &str, mut cmd: Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(o) => o.expect("output"),
        Err(_) => {
            // SAFETY: kill(2) on our own child, not yet reaped (its waiter thread still waits).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{name} did not end within {PATIENCE:?}");
        }
    }
}

/// A loopback port nothing listens on right now, for TCP and UDP alike.
pub use vlbiflow_testkit::net::free_port;

/// Whether a UDP socket (`udp`) or a listening TCP socket (`!udp`) is bound to local `port`, from
/// /proc/net/{udp,tcp} (IPv4 and IPv6).
pub fn port_bound(port: u16, udp: bool) -> bool {
    let files: &[&str] = if udp {
        &["/proc/net/udp", "/proc/net/udp6"]
    } else {
        &["/proc/net/tcp", "/proc/net/tcp6"]
    };
    let hex = format!(":{port:04X}");
    files.iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                // TCP: state 0A is LISTEN; UDP sockets show 07
                local.ends_with(&hex) && (udp || state == "0A")
            })
    })
}

/// Waits (at most [`PATIENCE`]) until `port` is bound (see [`port_bound`]), checking that `p` still runs.
pub fn wait_port(p: &mut Proc, port: u16, udp: bool) {
    let deadline = Instant::now() + PATIENCE;
    while !port_bound(port, udp) {
        if let Some(c) = p.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                panic!(
                    "{} ended ({st}) before binding port {port}; it printed {:?}",
                    p.name, p.seen
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: port {port} not bound within {PATIENCE:?}",
            p.name
        );
        thread::sleep(Duration::from_millis(20));
    }
}
