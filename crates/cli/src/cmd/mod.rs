//! Subcommands. Each module: `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod check;
pub mod ctl;
pub mod demo;
pub mod efficiency;
pub mod gather;
pub mod gen;
pub mod ls;
pub mod mesh;
pub mod net;
pub mod pathemu;
pub mod play;
pub mod receive;
pub mod record;
pub mod relay;
pub mod serve;
pub mod sink;
pub mod status;
pub mod token;
pub mod xfer;

/// The exit statuses of every subcommand: one table, written out in README.md ("Exit codes").
///
/// A scan, file or glob pattern named on the command line that does not exist or matches nothing on this
/// host is a usage error (2); a peer or daemon that answers "no" (authentication, unknown root or scan
/// there, existing file) refused (3); a peer that cannot be reached, a socket that cannot be bound, a
/// file that cannot be read or written is an I/O error (5).
pub mod exit {
    /// Done, nothing wrong.
    pub const OK: u8 = 0;
    /// The data has problems (missing frames, loss, bad headers), or a transfer ended unverified.
    pub const PROBLEMS: u8 = 1;
    /// Bad arguments or configuration, or a named scan, file or pattern that is not there.
    pub const USAGE: u8 = 2;
    /// The peer or daemon refused (authentication, token, policy, what it has).
    pub const REFUSED: u8 = 3;
    /// Not now: the daemon or the file is busy; retry later.
    pub const BUSY: u8 = 4;
    /// Reading, writing, binding or reaching a peer failed.
    pub const IO: u8 = 5;
    /// A command with a finite job stopped by a signal (SIGINT, SIGTERM, SIGHUP) before its end, or one
    /// that runs until stopped (record, sink, receive, relay and the daemons) stopped by Ctrl-C (SIGINT)
    /// or SIGHUP, after its summary. SIGTERM is the requested stop of the latter: 0 (`crate::stop`).
    pub const INTERRUPTED: u8 = 130;

    /// The table as users read it (README.md "Exit codes" and docs/cli.md, both checked against it).
    pub const TABLE: &[(u8, &str)] = &[
        (OK, "done, nothing wrong"),
        (PROBLEMS, "data problems: missing or bad frames, loss, a transfer that ended unverified (rerun it to resume); for `ctl`, a statement the daemon answered with an error return code (busy included)"),
        (USAGE, "usage: bad arguments or configuration, or a scan, file, directory or glob pattern named on the command line that does not exist or matches nothing on this host"),
        (REFUSED, "refused: the peer or daemon said no (key or token, unknown root or scan there, path outside its roots, existing file)"),
        (BUSY, "busy: the daemon is at its limit or the file is being written by another transfer; retry later"),
        (IO, "I/O error: a file or disk could not be read or written (for `check`, a file of the scan that could not be read, whatever else it found), a port could not be bound, a peer or daemon could not be reached (nothing listening, no route)"),
        (INTERRUPTED, "interrupted: a command with a finite job (`gen`, `play`, `check`, `gather`, `ls`, `status`, `ctl`, `demo`, `xfer push`/`pull`/`copy`, the `net` measurements) stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP before its end; a command that runs until stopped (`record`, `sink`, `receive`, `relay`, `pathemu`, `serve`, `xfer serve`, `net responder`/`hub`/`agent`) stopped by Ctrl-C or SIGHUP, after its summary. SIGTERM (`systemctl stop`, `kill`) is the requested stop of the latter: a clean stop, the summary, then 0"),
    ];
}

/// An error in what the user asked for (arguments, configuration, a named scan or file that is not
/// there): reported in one line, exit code 2, before anything is sent or written.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A failure with its own exit status from [`exit`] (other than 1, and 2 which is [`UsageError`]'s):
/// reported in one line like every error, the process then exits with `code`.
#[derive(Debug)]
pub struct ExitError {
    pub code: u8,
    pub message: String,
}

impl ExitError {
    /// An error with exit status `code` as an `anyhow::Error`.
    pub fn error(code: u8, message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(ExitError {
            code,
            message: message.into(),
        })
    }
}

impl std::fmt::Display for ExitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}

/// The exit status of a failed subcommand, by the class its error carries: [`UsageError`] 2, an
/// [`ExitError`]'s own, the libraries' typed errors by their kind (a scan or file not found: 2; reading
/// or writing: 5; the transfer layer's own classes; a socket of the real-time paths that cannot be opened:
/// 5; the mesh hub's API), an I/O error in the chain 5 (2 when a path is not there), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    use vlbiflow_evlbi::forward::ForwardError;
    use vlbiflow_evlbi::{play::PlayError, receive::ReceiveError, relay::RelayError};
    use vlbiflow_reader::LocateError;
    if e.downcast_ref::<UsageError>().is_some() {
        return exit::USAGE;
    }
    if let Some(x) = e.downcast_ref::<ExitError>() {
        return x.code;
    }
    for cause in e.chain() {
        if let Some(l) = cause.downcast_ref::<LocateError>() {
            return match l {
                LocateError::Usage(_) | LocateError::NotFound(_) => exit::USAGE,
                LocateError::Io { .. } => exit::IO,
            };
        }
        if let Some(x) = cause.downcast_ref::<vlbiflow_xfer::XferError>() {
            return x.exit_code();
        }
        if let Some(x) = cause.downcast_ref::<ReceiveError>() {
            return match x {
                ReceiveError::Config(_) => exit::USAGE,
                _ => exit::IO,
            };
        }
        if let Some(x) = cause.downcast_ref::<RelayError>() {
            return match x {
                RelayError::Config(_) | RelayError::Forward(ForwardError::Config { .. }) => exit::USAGE,
                _ => exit::IO,
            };
        }
        if let Some(x) = cause.downcast_ref::<ForwardError>() {
            return match x {
                ForwardError::Config { .. } => exit::USAGE,
                _ => exit::IO,
            };
        }
        if let Some(x) = cause.downcast_ref::<PlayError>() {
            return match x {
                PlayError::Config(_) => exit::USAGE,
                _ => exit::IO,
            };
        }
        if let Some(x) = cause.downcast_ref::<vlbiflow_mesh::api::ApiError>() {
            use vlbiflow_mesh::api::ApiError;
            return match x {
                ApiError::Unreachable(_) => exit::IO,
                ApiError::Refused(_) => exit::REFUSED,
                ApiError::Answer(_) => exit::PROBLEMS,
            };
        }
        if let Some(x) = cause.downcast_ref::<std::io::Error>() {
            // a path named on the command line that is not there (to read, or the directory to write
            // into) is the user's to correct, like a scan that is not on the disks
            return match x.kind() {
                std::io::ErrorKind::NotFound => exit::USAGE,
                _ => exit::IO,
            };
        }
    }
    exit::PROBLEMS
}

/// A UDP destination as the senders take it: `HOST:PORT`, or in the grammar of streams and forwarding
/// destinations `PROTO@HOST:PORT` with `udps` (each datagram an 8-byte PSN and a frame) or `vdif` (the
/// frame alone). Returns whether a PSN is asked for (`None`: not said) and the `HOST:PORT`.
pub fn udp_dest<'a>(flag: &str, dest: &'a str) -> anyhow::Result<(Option<bool>, &'a str)> {
    match dest.split_once('@') {
        None => Ok((None, dest)),
        Some((p, rest)) => match p.trim() {
            "udps" => Ok((Some(true), rest.trim())),
            "vdif" => Ok((Some(false), rest.trim())),
            other => crate::usage!(
                "{flag} {dest:?}: unknown protocol {other:?} (udps@HOST:PORT or vdif@HOST:PORT)"
            ),
        },
    }
}

/// Returns early with a [`UsageError`].
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => { return Err(anyhow::Error::new($crate::cmd::UsageError(format!($($t)*)))) };
}

/// The read-only metrics token from `--metrics-token-file` (surrounding white space dropped), if given.
pub fn read_metrics_token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    let Some(f) = file else { return Ok(None) };
    let text =
        std::fs::read_to_string(f).map_err(|e| format!("--metrics-token-file {}: {e}", f.display()))?;
    let t = text.trim();
    if t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--metrics-token-file {}: the token must be at least 16 characters, without white space",
            f.display()
        ));
    }
    Ok(Some(t.to_string()))
}
