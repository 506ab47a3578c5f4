//! Standard output that ends the process quietly when its reader has gone (`vlbiflow ... | head -1`).
//!
//! The binary keeps SIGPIPE ignored, as every Rust program starts: daemons, forwarders and clients in it
//! write to TCP connections whose peers may leave, and those writes must fail with an error that is
//! reported, not kill the process. So a closed standard output shows up as a `BrokenPipe` error, which
//! `println!` would turn into a panic; `outln!` and `out!` end the process quietly instead, with the
//! status a shell shows for a program killed by SIGPIPE.

use std::io::{self, Write};

/// Exit status when the reader of standard output has gone: 128 + SIGPIPE, as a shell reports a program
/// that SIGPIPE killed.
pub const CLOSED: u8 = 141;

/// `println!` to standard output: quiet exit when its reader has gone, one error line on other failures.
macro_rules! outln {
    () => { $crate::out::write(format_args!(""), true) };
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*), true) };
}

/// `print!` to standard output: quiet exit when its reader has gone, one error line on other failures.
macro_rules! out {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*), false) };
}

/// Writes `args` (and a newline) to standard output, or ends the process: see [`failed`].
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut o = io::stdout().lock();
    let r = o
        .write_fmt(args)
        .and_then(|()| if newline { o.write_all(b"\n") } else { Ok(()) });
    if let Err(e) = r {
        failed(&e)
    }
}

/// Ends the process after a failed write to standard output: quietly with [`CLOSED`] when its reader
/// has gone, otherwise (a full disk behind a redirection, say) with one error line and status 5 (I/O).
pub fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(CLOSED.into());
    }
    eprintln!("vlbiflow: error: writing to standard output: {e}");
    std::process::exit(crate::cmd::exit::IO.into())
}

/// Standard output as an [`io::Write`] for code that takes a writer and panics or fails on a write error
/// (clap_complete, clap_mangen, long reports): a failed write ends the process as [`failed`] says, so a
/// closed pipe (`vlbiflow completions fish | head -1`) ends it quietly.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match io::stdout().lock().write(buf) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => failed(&e),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match io::stdout().lock().flush() {
            Ok(()) => Ok(()),
            Err(e) => failed(&e),
        }
    }
}

/// Set once a command has written its own JSON object for a failure (xfer's transfer verbs), so the
/// generic one of `--json` is not written twice.
pub static JSON_ERROR_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// With `--json`, a failure still gives scripts one JSON object on standard output: the error and the
/// exit status (`{"error": "...", "exit_code": 2}`), unless the command wrote its own.
pub fn json_error(e: &anyhow::Error, code: u8) {
    if JSON_ERROR_WRITTEN.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let v = serde_json::json!({ "error": error_line(e), "exit_code": code });
    let mut o = io::stdout().lock();
    // best effort: the error itself goes to standard error in any case
    let _ = writeln!(o, "{}", serde_json::to_string_pretty(&v).unwrap_or_default());
}

/// Whether `e` is a write to standard output that failed because its reader has gone (frames written to
/// `-`, a JSON summary): the error is a broken pipe and standard output is a pipe or socket whose other
/// end is closed. A broken pipe of anything else (a TCP peer that left) is a real error.
pub fn is_closed_stdout(e: &anyhow::Error) -> bool {
    let broken = e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|x| x.kind() == io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|x| x.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    });
    broken && stdout_closed()
}

/// Whether standard output is a pipe or socket with nobody left to read it (poll reports an error or a
/// hang-up on it).
fn stdout_closed() -> bool {
    use vlbiflow_udp::poll::{wait, PollFlags};
    wait(io::stdout(), PollFlags::OUT, std::time::Duration::ZERO)
        .is_ok_and(|ready| ready.intersects(PollFlags::ERR | PollFlags::HUP))
}

/// An error and its causes on one line, `outer: cause: root cause`, each said once: a cause whose text
/// the messages before it already contain (an error that prints its source, as many `thiserror` types do,
/// wrapped in context) is not repeated, so an OS error such as "Address already in use (os error 98)"
/// appears once.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[test]
    fn causes_already_in_the_message_are_said_once() {
        let os = std::io::Error::from_raw_os_error(98);
        #[derive(Debug)]
        struct Bind(std::io::Error);
        impl std::fmt::Display for Bind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "UDP socket 127.0.0.1:4001: bind failed: {}", self.0)
            }
        }
        impl std::error::Error for Bind {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let text = os.to_string();
        let e = anyhow::Error::new(Bind(os)).context("recording");
        let line = error_line(&e);
        assert_eq!(line.matches(&text).count(), 1, "{line}");
        assert_eq!(
            line,
            format!("recording: UDP socket 127.0.0.1:4001: bind failed: {text}")
        );
        // causes not in the message are kept, in order
        let e = anyhow::anyhow!("disk full")
            .context("writing block 3")
            .context("disk /d/0");
        assert_eq!(error_line(&e), "disk /d/0: writing block 3: disk full");
    }
}
