//! The daemons' log: `tracing` events written to standard error by one `tracing-subscriber` set up once
//! here, in one of three shapes:
//!
//! - text (default): `2026-01-02T03:04:05.678901Z  INFO vlbiflow::xfer: message key=value`, timestamps in
//!   RFC 3339 UTC;
//! - JSON lines (`--log-format json`): one object per event with `timestamp`, `level`, `target`, the message
//!   and the event's fields;
//! - under systemd (`JOURNAL_STREAM` set, standard error going to the journal): text without a timestamp
//!   (journald adds its own) and each line prefixed with its syslog priority `<N>` as sd-daemon(3)
//!   describes, so that `journalctl -p warning` selects by level.
//!
//! The level filter is `--log-level` if given, else `RUST_LOG`, else `info`. Interactive commands' human
//! output (progress, summaries) does not go through here.

use std::fmt;

use tracing::{Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines (RFC 3339 UTC timestamps; syslog priority prefixes under systemd)
    #[default]
    Text,
    /// One JSON object per line
    Json,
}

/// Timestamps as RFC 3339 in UTC with microseconds: `2026-01-02T03:04:05.678901Z`.
struct Rfc3339Utc;

impl FormatTime for Rfc3339Utc {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(w, "{}", chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ"))
    }
}

/// The syslog priority of a level (RFC 5424 severities; sd-daemon(3) `SD_ERR` .. `SD_DEBUG`).
pub fn syslog_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Text lines for the journal: `<N>` priority prefix, no timestamp, no colours.
struct Journal {
    inner: format::Format<format::Full, ()>,
}

impl<S, N> FormatEvent<S, N> for Journal
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        write!(w, "<{}>", syslog_priority(event.metadata().level()))?;
        self.inner.format_event(ctx, w, event)
    }
}

/// Whether standard error is connected to the journal: systemd sets `JOURNAL_STREAM` to the
/// `DEVICE:INODE` of the stream it connected, which standard error must still be (sd-daemon(3),
/// systemd.exec(5)).
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    match rustix::fs::fstat(std::io::stderr()) {
        Ok(st) => dev.parse::<u64>().ok() == Some(st.st_dev) && ino.parse::<u64>().ok() == Some(st.st_ino),
        Err(_) => false,
    }
}

/// What precedes the process's last words on standard error (`vlbiflow: error: ...`, written without the
/// log): the journal's error priority `<3>` when standard error is the journal, else nothing.
pub fn error_prefix() -> &'static str {
    if stderr_is_journal() {
        "<3>"
    } else {
        ""
    }
}

/// Sets up the process's log once: format, level filter, journal detection. A filter that does not parse
/// is a usage error.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).map_err(|e| format!("--log-level {l:?}: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => EnvFilter::try_new(&v).map_err(|e| format!("RUST_LOG={v:?}: {e}"))?,
            _ => EnvFilter::new("info"),
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_timer(Rfc3339Utc)
            .try_init(),
        LogFormat::Text if stderr_is_journal() => builder
            .event_format(Journal {
                inner: format::format().without_time().with_ansi(false),
            })
            .try_init(),
        LogFormat::Text => builder.with_timer(Rfc3339Utc).try_init(),
    };
    result.map_err(|e| format!("log: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(syslog_priority(&Level::ERROR), 3);
        assert_eq!(syslog_priority(&Level::WARN), 4);
        assert_eq!(syslog_priority(&Level::INFO), 6);
        assert_eq!(syslog_priority(&Level::DEBUG), 7);
    }
}
