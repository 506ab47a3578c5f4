//! What `vlbiflow xfer` shows: progress lines while a transfer runs, and the summary (or the `--json`
//! object) when it ends.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vlbiflow_units::{fmt_bit_rate, fmt_bytes};
use vlbiflow_xfer::send::SendOutcome;
use vlbiflow_xfer::session::ReceiverReport;
use vlbiflow_xfer::Progress;

/// A failed transfer as `--json` prints it.
#[derive(serde::Serialize)]
pub(super) struct JsonFailure {
    pub(super) verified: bool,
    pub(super) error: String,
    pub(super) exit_code: u8,
}

/// Prints a summary as `--json` does: pretty, its keys (and those of every object in it) in alphabetical
/// order, through a [`serde_json::Value`] (whose maps keep their keys sorted).
pub(super) fn print_json(v: &impl serde::Serialize) {
    let v = serde_json::to_value(v).expect("json");
    outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
}

/// With --json, a failed transfer still gives one JSON object on standard output (`verified` false, the
/// error, the exit status); the error goes on to be reported on standard error and sets the exit status
/// as without --json.
pub(super) fn json_on_failure(json: bool, r: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    if let (true, Err(e)) = (json, &r) {
        print_json(&JsonFailure {
            verified: false,
            error: crate::out::error_line(e),
            exit_code: crate::cmd::exit_code(e),
        });
        crate::out::JSON_ERROR_WRITTEN.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    r
}

/// A time left for a progress line: "1h02m", "3m05s", "12s", or "--" when it cannot be told yet.
pub(super) fn fmt_eta(d: Option<Duration>) -> String {
    match d.map(|d| d.as_secs()) {
        None => "--".into(),
        Some(s) if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        Some(s) if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        Some(s) => format!("{s}s"),
    }
}

/// The whole transfer's progress line after its bar: sizes in the decimal units of the summary (kB, MB,
/// GB), as every size vlbiflow prints.
pub(super) fn total_progress(m: &vlbiflow_xfer::progress::Snapshot) -> String {
    format!(
        "{} / {} verified, {}, ETA {}, lost {:.2}%, retransmitted {:.2}%, files {}/{}, {} ({:.0} s)",
        fmt_bytes(m.bytes_verified),
        fmt_bytes(m.bytes_total),
        fmt_bit_rate(m.rate_bps),
        fmt_eta(m.eta),
        m.loss_pct,
        m.retransmit_pct,
        m.files_done,
        m.files_total,
        m.phase,
        m.elapsed.as_secs_f64(),
    )
}

/// The progress line of the first file not yet verified, after its bar.
pub(super) fn file_progress(m: &vlbiflow_xfer::progress::Snapshot) -> String {
    format!(
        "{} / {} verified, {}, ETA {}, ({}/{}) {}",
        fmt_bytes(m.file_bytes_verified),
        fmt_bytes(m.file_bytes_total),
        fmt_bit_rate(m.file_rate_bps),
        fmt_eta(m.file_eta),
        (m.file_index + 1).min(m.files_total),
        m.files_total,
        m.file_name
    )
}

/// Runs `work` while drawing a progress bar from `progress` (unless quiet or not a terminal).
pub(super) fn with_progress<T: Send>(
    progress: &Arc<Progress>,
    quiet: bool,
    work: impl FnOnce() -> T + Send,
) -> T {
    let display = crate::progress::Progress::stderr(!quiet);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // named, as the daemon's threads are, for `top -H` and bench/xfer-wakeups.sh
        let h = std::thread::Builder::new()
            .name("xfer-client".into())
            .spawn_scoped(s, || {
                let r = work();
                done.store(true, Ordering::SeqCst);
                r
            })
            .expect("spawn the transfer thread");
        if display.is_drawn() {
            // two lines: the whole transfer, and the first file not yet verified (files are pipelined);
            // rates and times left over the last seconds (vlbiflow_xfer::progress::Meter)
            let bar = display.bar("total");
            let file_bar = display.bar("file ");
            let mut meter = vlbiflow_xfer::progress::Meter::new(Instant::now());
            while !done.load(Ordering::SeqCst) {
                let m = meter.read(Instant::now(), progress);
                bar.set_length(m.bytes_total);
                bar.set_position(m.bytes_verified);
                bar.set_message(total_progress(&m));
                file_bar.set_length(m.file_bytes_total);
                file_bar.set_position(m.file_bytes_verified);
                file_bar.set_message(file_progress(&m));
                std::thread::sleep(Duration::from_millis(200));
            }
            file_bar.finish_and_clear();
            bar.finish_and_clear();
        }
        h.join().expect("transfer thread")
    })
}

pub(super) fn print_summary(out: &SendOutcome, total: u64, json: bool) {
    let moved = out.stats.bytes;
    let goodput = out.goodput_bps(total);
    if json {
        print_json(&out.summary(total));
        return;
    }
    outln!(
        "verified: {} files, {} ({} already there, re-verified), {} sent in {:.1} s: {} goodput, {} datagrams, {} retransmitted ({:.2}%)",
        out.committed.len(),
        fmt_bytes(total),
        fmt_bytes(out.bytes_resumed),
        fmt_bytes(moved),
        out.seconds,
        fmt_bit_rate(goodput),
        out.stats.datagrams,
        out.stats.retransmits,
        out.stats.retransmits as f64 / out.stats.datagrams.max(1) as f64 * 100.0
    );
    outln!("{}", receiver_line(&out.receiver));
    for c in out.committed.iter().take(20) {
        outln!("  {}  {}  {}", c.blake3, fmt_bytes(c.size), c.name);
    }
    if out.committed.len() > 20 {
        outln!(
            "  ... and {} more (BLAKE3 of each in its manifest NAME.blake3.json)",
            out.committed.len() - 20
        );
    }
}

/// One line of what the receiving side counted (push, pull and relay summaries).
pub(super) fn receiver_line(r: &ReceiverReport) -> String {
    let mut l = format!(
        "receiver: {} datagrams written, {} duplicate, {} reported lost",
        r.datagrams, r.duplicates, r.reported_lost
    );
    if r.dropped() == 0 {
        l.push_str(", none dropped");
    } else {
        l.push_str(&format!(
            ", {} dropped ({} bad tag, {} malformed, {} of another transfer or before hello, {} for a file not announced)",
            r.dropped(),
            r.bad_tag,
            r.malformed,
            r.wrong_transfer,
            r.unknown_file
        ));
    }
    if r.chunk_mismatches > 0 {
        l.push_str(&format!(
            ", {} chunks failed verification and came again",
            r.chunk_mismatches
        ));
    }
    if r.bytes_read_back > 0 {
        l.push_str(&format!(
            ", {} read back from its disk and matched",
            fmt_bytes(r.bytes_read_back)
        ));
    }
    l
}

#[cfg(test)]
mod tests {
    use super::{file_progress, total_progress};
    use std::time::Duration;

    /// The progress lines give sizes in the decimal units of the summary line (MB, GB), not MiB.
    #[test]
    fn progress_sizes_are_in_the_summarys_units() {
        let m = vlbiflow_xfer::progress::Snapshot {
            elapsed: Duration::from_secs(12),
            bytes_total: 3_000_000_000,
            bytes_verified: 1_500_000_000,
            files_done: 1,
            files_total: 2,
            rate_bps: 2e9,
            eta: Some(Duration::from_secs(6)),
            loss_pct: 0.0,
            retransmit_pct: 0.0,
            file_index: 1,
            file_name: "b.vdif".into(),
            file_bytes_total: 1_500_000_000,
            file_bytes_verified: 8_224_000,
            file_rate_bps: 2e9,
            file_eta: Some(Duration::from_secs(6)),
            phase: "sending".into(),
        };
        let total = total_progress(&m);
        assert!(
            total.starts_with("1.50 GB / 3.00 GB verified, 2.000 Gb/s, ETA 6s"),
            "{total}"
        );
        let file = file_progress(&m);
        assert!(file.starts_with("8.22 MB / 1.50 GB verified"), "{file}");
        assert!(!total.contains("iB") && !file.contains("iB"), "{total} {file}");
    }
}
