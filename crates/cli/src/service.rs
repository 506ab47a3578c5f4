//! What the daemons (`serve`, `xfer serve`, `net agent`, `net hub`) share as services: where their state
//! goes by default, reading their TOML files with errors that name the file and line, `--check-config`,
//! and the systemd readiness notification (sd_notify(3)).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The daemons' state directory: `$STATE_DIRECTORY` when systemd sets it (`StateDirectory=` in the
/// unit; the first one if it names several), else `$XDG_STATE_HOME/vlbiflow/<sub>`, else
/// `~/.local/state/vlbiflow/<sub>`. Always absolute, so that defaults do not depend on the working
/// directory.
pub fn state_dir(sub: &str) -> PathBuf {
    if let Some(d) = std::env::var_os("STATE_DIRECTORY") {
        if let Some(first) = d.to_str().and_then(|s| s.split(':').next()) {
            if Path::new(first).is_absolute() {
                return PathBuf::from(first);
            }
        }
    }
    let base = match std::env::var_os("XDG_STATE_HOME") {
        Some(x) if Path::new(&x).is_absolute() => PathBuf::from(x),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"))
            .join(".local/state"),
    };
    base.join("vlbiflow").join(sub)
}

/// One line for a TOML error: `FILE:LINE: message` (the message names the key, e.g. "unknown field
/// `bogus`, expected one of ...").
pub fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let message = e.message().trim().replace('\n', " ");
    match line {
        Some(l) => format!("{}:{l}: {message}", path.display()),
        None => format!("{}: {message}", path.display()),
    }
}

/// Reads and parses a TOML file into `T` (whose fields deny unknown keys), the error as one line naming
/// the file, the line and the key.
pub fn load_toml<T: DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))
}

/// A duration in the command line's syntax (`10s`, `500ms`, `5m`) in a configuration file, the error
/// naming the key.
pub fn duration(key: &str, v: &str) -> Result<std::time::Duration, String> {
    vlbiflow_units::parse_duration(v).map_err(|e| format!("{key}: {e}"))
}

/// A bit rate in the command line's syntax (`2Gbps`) in a configuration file.
pub fn bit_rate(key: &str, v: &str) -> Result<f64, String> {
    vlbiflow_units::parse_bit_rate(v).map_err(|e| format!("{key}: {e}"))
}

/// The outcome of `--check-config`: the one-line summary on standard output and exit 0, or the error on
/// standard error and exit 2.
pub fn check_result(result: Result<String, String>) -> anyhow::Result<std::process::ExitCode> {
    match result {
        Ok(summary) => {
            outln!("{summary}");
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(e) => crate::usage!("{e}"),
    }
}

/// Tells systemd (`Type=notify` units) that the daemon has bound its ports and serves. Nothing happens
/// outside systemd (no `NOTIFY_SOCKET`).
pub fn notify_ready(status: &str) {
    if let Err(e) = sd_notify::notify(
        false,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(status),
        ],
    ) {
        tracing::warn!(error = %e, "could not notify systemd of readiness");
    }
}

/// The systemd watchdog (`WatchdogSec=` in the unit): [`Watchdog::alive`] sends `WATCHDOG=1`, at most
/// every quarter of the watchdog interval, so the daemon's work loop may call it on every pass. Without
/// a watchdog (outside systemd, or no `WatchdogSec=`) it does nothing.
#[derive(Debug)]
pub struct Watchdog {
    /// A quarter of the interval systemd asked for, in microseconds (sd_watchdog_enabled(3) advises
    /// notifying within half of it); `None`: no watchdog.
    every_us: Option<u64>,
    /// Microseconds since `start` of the last notification.
    last_us: std::sync::atomic::AtomicU64,
    start: std::time::Instant,
}

impl Watchdog {
    /// Reads `WATCHDOG_USEC`/`WATCHDOG_PID` from the environment (as systemd sets them).
    pub fn from_env() -> Self {
        let mut usec = 0;
        let every_us = sd_notify::watchdog_enabled(false, &mut usec).then_some((usec / 4).max(1));
        Watchdog {
            every_us,
            last_us: std::sync::atomic::AtomicU64::new(0),
            start: std::time::Instant::now(),
        }
    }

    /// The work loop made progress: notifies systemd unless it was done less than a quarter of the
    /// interval ago. Call it from the loop whose liveness it proves, or when that loop is seen to have
    /// moved; never from a timer alone.
    pub fn alive(&self) {
        use std::sync::atomic::Ordering;
        let Some(every) = self.every_us else { return };
        let now = self.start.elapsed().as_micros() as u64 + every;
        let last = self.last_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) < every
            || self
                .last_us
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
    }
}

/// Tells systemd the daemon is stopping.
pub fn notify_stopping() {
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        a: Option<u32>,
    }

    #[test]
    fn unknown_keys_are_named_with_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.toml");
        std::fs::write(&p, "a = 1\n\nbogus = 2\n").unwrap();
        let e = load_toml::<T>(&p).unwrap_err();
        assert!(e.starts_with(&format!("{}:3: ", p.display())), "{e}");
        assert!(e.contains("bogus"), "{e}");
    }
}
