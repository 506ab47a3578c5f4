//! What an operator reads, checked on the real binary over loopback: the words and units of output
//! lines, the legends in `--help`, errors said once, and exit statuses of measurements with a failed part.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of a child's standard error, as they come.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line containing `needle` (at most `timeout` to wait: a bound on hanging, not a measurement).
fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no {needle:?} line within {timeout:?}: {e}"),
        }
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run vlbiflow")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The OS's words for EADDRINUSE, as Rust prints an OS error ("Address already in use (os error 98)").
fn addr_in_use() -> String {
    std::io::Error::from_raw_os_error(libc::EADDRINUSE).to_string()
}

/// A `vlbiflow net responder` on an ephemeral loopback port, and its address.
fn responder() -> (Proc, String) {
    let mut child = Command::new(BIN)
        .args(["net", "responder", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let l = wait_line(&lines, "listening on", Duration::from_secs(20));
    let addr = l
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    // keep reading its log so it never blocks on a full pipe
    thread::spawn(move || for _ in lines {});
    (Proc(child), addr)
}

/// The same for the responder's control port (TCP).
#[test]
fn responder_on_a_port_in_use_gives_the_os_error_once() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let out = run(&["net", "responder", "--listen", &format!("127.0.0.1:{port}")]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    assert_eq!(err.matches(&addr_in_use()).count(), 1, "{err}");
}

/// `check` on a file shorter than a frame header counts its bytes right and gives its size in bytes.
#[test]
fn check_on_an_8_byte_file_counts_8_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.vdif");
    std::fs::write(&path, [0x42u8; 8]).unwrap();
    let out = run(&["check", path.to_str().unwrap(), "--quiet"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("8 bytes of garbage"), "{stdout}");
    assert!(!stdout.contains("0 bytes of garbage"), "{stdout}");
    assert!(stdout.contains("read 8 B in "), "{stdout}");
    assert!(!stdout.contains("8.000 B"), "{stdout}");
}
