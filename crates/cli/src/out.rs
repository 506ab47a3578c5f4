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

/// Set once a command has written its own JSON object for a failure (xfer's transfer verbs), so the
/// generic one of `--json` is not written twice.
pub static JSON_ERROR_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// With `--json`, a failure still gives scripts one JSON object on standard output: the error and the
/// exit status (`{"error": "...", "exit_code": 2}`), unless the command wrote its own.
pub fn json_error(e: &anyhow::Error, code: u8) {
    if JSON_ERROR_WRITTEN.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let v = serde_json::json!({ "error": format!("{e:#}"), "exit_code": code });
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
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let stdout = io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::OUT)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}
