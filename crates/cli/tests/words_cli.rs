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

/// Runs `args` with `{port}` replaced by a UDP port held by this test: the command must fail with one
/// line that gives the OS's words once. Returns that line.
fn one_line_on_a_busy_udp_port(args: &[&str]) -> String {
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = format!("127.0.0.1:{}", held.local_addr().unwrap().port());
    let args: Vec<String> = args.iter().map(|a| a.replace("{addr}", &addr)).collect();
    let out = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{args:?}: {err}");
    assert_eq!(err.matches(&addr_in_use()).count(), 1, "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

/// A port in use: `sink` says so once, with the OS's words once, and never says it is listening.
#[test]
fn sink_on_a_port_in_use_says_so_once_and_never_that_it_listens() {
    let err = one_line_on_a_busy_udp_port(&["sink", "--listen", "{addr}", "--duration", "5"]);
    assert!(!err.contains("listening on"), "{err}");
}

/// `receive` and `relay` on a port in use: one error line, nothing said about where they would listen,
/// deliver or forward.
#[test]
fn receive_and_relay_on_a_port_in_use_say_so_in_one_line() {
    let err = one_line_on_a_busy_udp_port(&[
        "receive",
        "--listen",
        "{addr}",
        "--output",
        "null",
        "--duration",
        "5s",
    ]);
    assert!(!err.contains("ready on") && !err.contains("ordered by"), "{err}");
    let err = one_line_on_a_busy_udp_port(&[
        "relay",
        "--listen",
        "{addr}",
        "--to",
        "udps@127.0.0.1:9",
        "--duration",
        "5s",
    ]);
    assert!(!err.contains("ready on") && !err.contains(" to "), "{err}");
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

/// `sink`'s lines start with the UTC time of day of their second, not a raw Unix second; it says where
/// it listens (the real port when asked for port 0) once it is bound.
#[test]
fn sink_lines_start_with_the_utc_time_of_day() {
    let mut child = Command::new(BIN)
        .args(["sink", "--listen", "127.0.0.1:0", "--psn", "--idle-timeout", "1"])
        .args(["--duration", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let l = wait_line(&lines, "sink: listening on 127.0.0.1:", Duration::from_secs(20));
    let port: u16 = l
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(port, 0, "{l}");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0u64..200 {
        let mut d = vec![0u8; 1000];
        d[..8].copy_from_slice(&seq.to_le_bytes());
        sock.send_to(&d, ("127.0.0.1", port)).unwrap();
    }
    // the sink ends 1 s after the last datagram (--idle-timeout)
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let seconds: Vec<&str> = stdout.lines().filter(|l| l.contains(" datagrams ")).collect();
    assert!(!seconds.is_empty(), "{stdout}");
    for l in &seconds {
        let stamp = l
            .strip_prefix("sink: ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("{l}"));
        let parts: Vec<u32> = stamp.split(':').map(|p| p.parse().expect(l)).collect();
        assert!(
            stamp.len() == 8 && parts.len() == 3 && parts[0] < 24 && parts[1] < 60 && parts[2] < 61,
            "not HH:MM:SS: {l}"
        );
    }
    let total: u64 = seconds
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 200, "{stdout}");
}

/// A measurement with a failed part exits 1: here TCP cannot be sent (a congestion control the host does
/// not have) while UDP is measured. A transport the responder refuses for the setup is not a failure.
#[test]
fn efficiency_exits_1_when_one_transport_failed() {
    let (_responder, addr) = responder();
    let eff = |extra: &[&str]| {
        let mut args = vec!["net", "efficiency", &addr, "--repeats", "1", "--duration", "0.3"];
        args.extend_from_slice(extra);
        let out = run(&args);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, stdout, err) = eff(&["--transports", "udp,tcp", "--tcp-congestion", "no-such-cc"]);
    assert!(err.contains("FAILED") && err.contains("no-such-cc"), "{err}");
    assert!(
        stdout.lines().any(|l| l.starts_with("udp ")),
        "UDP measured: {stdout}"
    );
    assert_eq!(code, Some(1), "{stdout}{err}");
    assert!(
        err.contains("vlbiflow: 1 test failed; the summary leaves it out"),
        "{err}"
    );
    // The responder refuses UDP with a 1 GiB receive buffer per flow (more memory than it allows one
    // test): said, listed as unavailable, not a failure.
    let (code, stdout, err) = eff(&["--transports", "udp,tcp", "--recv-buffer", "1GiB"]);
    assert!(
        err.contains("refused, left out:") && !err.contains("FAILED"),
        "{err}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("tcp ")),
        "TCP measured: {stdout}"
    );
    assert_eq!(code, Some(0), "{stdout}{err}");
}

/// Every abbreviation a command prints has its legend in `--help`.
#[test]
fn help_explains_the_abbreviations_printed() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["check", "--help"],
            &["dup = duplicated", "ooo = out of order", "fill ="],
        ),
        (
            &["sink", "--help"],
            &["stray =", "restarts =", "Kernel drops", "HH:MM:SS"],
        ),
        (
            &["net", "bw", "--help"],
            &["ooo (out of order", "load (the competitor"],
        ),
        (&["net", "lat", "--help"], &["p50", "p99"]),
        (
            &["record", "--help"],
            &[
                "rej (datagrams rejected",
                "kern (datagrams the kernel",
                "drop (frames",
            ],
        ),
        (
            &["receive", "--help"],
            &["ooo (out of order", "stray (far outside", "kern (datagrams"],
        ),
        (
            &["net", "tcp", "--help"],
            &[
                "s_cpu/GB and r_cpu/GB",
                "test threads only",
                "s_sirq%",
                "cwnd",
                "retrans",
            ],
        ),
        (
            &["net", "efficiency", "--help"],
            &["recv±%", "host_sirq", "eff_recv", "J/GB", "Exit status 1"],
        ),
    ];
    for (args, words) in cases {
        let out = run(args);
        assert!(out.status.success(), "{args:?}");
        // Words as a reader sees them, wherever the help wraps its lines.
        let help = text(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        for w in *words {
            assert!(help.contains(w), "{args:?} --help lacks {w:?}:\n{help}");
        }
    }
}

/// docs/mesh.md says how to make the token file, and what its command makes is a token the binary takes.
#[test]
fn the_mesh_docs_token_command_makes_a_token_the_binary_accepts() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/mesh.md")).unwrap();
    let make = doc
        .lines()
        .find(|l| l.contains("/dev/urandom") && l.contains("> mesh.token"))
        .expect("docs/mesh.md gives a command that writes mesh.token");
    let make = make.split(" #").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("sh")
        .args(["-c", &format!("umask 077 && {make}")])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "{make}");
    let token = dir.path().join("mesh.token");
    let t = std::fs::read_to_string(&token).unwrap();
    assert!(t.trim().len() >= 16, "{t:?}");
    // A hub nobody listens on: the token is read and accepted first, then the connection fails.
    let hub = "http://127.0.0.1:9";
    let out = run(&[
        "net",
        "mesh",
        "status",
        "--hub",
        hub,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(!err.contains("token"), "the documented token was refused: {err}");
    // ... where a short one is refused, naming the token
    std::fs::write(&token, "short\n").unwrap();
    let out = run(&[
        "net",
        "mesh",
        "status",
        "--hub",
        hub,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert!(text(&out.stderr).contains("token"), "{}", text(&out.stderr));
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
