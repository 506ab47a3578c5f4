//! `vlbiflow sink`: a null receiver (recvmmsg, count, discard), the ceiling a recorder is compared with.

use crate::units::{fmt_bit_rate, fmt_bytes, parse_bytes, parse_seconds};
use crate::usage;
use serde::Serialize;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use vlbiflow_sink::{Sink, SinkConfig, SinkError, SinkSecond};

const EXAMPLES: &str = "\
Examples:
  # Count what gen sends, with packet-sequence-number loss accounting, a line per second
  vlbiflow sink --listen 127.0.0.1:4001 --psn

  # Stop 2 s after the stream ends and print JSON for a script
  vlbiflow sink --listen 127.0.0.1:4001 --psn --idle-timeout 2 --json

  # One stream over 2 sockets and threads, runs of 1024 PSNs each (SO_REUSEPORT and a BPF program)
  vlbiflow sink --listen 127.0.0.1:4001 --psn --split 2

Each line is one UTC second (HH:MM:SS; `unix_second` in --json): datagrams, payload rate and, with --psn, \
the change in the count of lost datagrams (negative when late ones fill earlier gaps). The summary's PSN \
counts: lost = sequence numbers never received; out of order = arrived after a later one; duplicate = \
received twice; stray = a number too far from the stream's to belong to it (a replayed or foreign \
datagram), counted and otherwise ignored; restarts = the sender started a new sequence (a run of strays \
that continue each other). Kernel drops: datagrams the kernel dropped on this socket for a full receive \
buffer (SO_RXQ_OVFL).";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:4001", value_name = "HOST:PORT")]
    listen: String,
    /// Datagrams start with an 8-byte packet sequence number: count lost, out-of-order and duplicates
    #[arg(long)]
    psn: bool,
    /// Socket receive buffer
    #[arg(long, default_value = "64MiB", value_name = "BYTES")]
    recv_buffer: String,
    /// Receive GRO super-datagrams (counts their segments)
    #[arg(long)]
    gro: bool,
    /// Stop when nothing arrived for this long after the first datagram (0 = never)
    #[arg(long, default_value = "3", value_name = "SECONDS")]
    idle_timeout: String,
    /// Stop after this long in any case
    #[arg(long, value_name = "SECONDS")]
    duration: Option<String>,
    /// Print per-second lines and the summary as JSON lines on standard output
    #[arg(long)]
    json: bool,
    /// Split the stream over N sockets and threads (1, 2, 4, ... 64) by runs of its PSNs: the kernel
    /// steers each datagram by its PSN (needs --psn); loss is accounted over all of them together
    #[arg(long, default_value_t = 1, value_name = "N", requires = "psn")]
    split: u32,
    /// PSNs per run with --split (a power of two)
    #[arg(long, default_value_t = 1024, value_name = "N")]
    run_len: u64,
}

#[derive(Serialize)]
struct SecondLine {
    unix_second: u64,
    complete: bool,
    datagrams: u64,
    bytes: u64,
    gbps: f64,
    lost: i64,
    out_of_order: u64,
    duplicate: u64,
    kernel_drops: u64,
}

impl From<&SinkSecond> for SecondLine {
    fn from(s: &SinkSecond) -> Self {
        SecondLine {
            unix_second: s.unix_second,
            complete: s.complete,
            datagrams: s.datagrams,
            bytes: s.bytes,
            gbps: s.gbps(),
            lost: s.lost,
            out_of_order: s.out_of_order,
            duplicate: s.duplicate,
            kernel_drops: s.kernel_drops,
        }
    }
}

/// A Unix second as the UTC time of day, `HH:MM:SS`.
fn utc_hms(unix_second: u64) -> String {
    chrono::DateTime::from_timestamp(unix_second as i64, 0)
        .map_or_else(|| unix_second.to_string(), |t| t.format("%H:%M:%S").to_string())
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr = match a.listen.parse() {
        Ok(addr) => addr,
        Err(_) => usage!("--listen {:?}: expected IP:PORT, e.g. 127.0.0.1:4001", a.listen),
    };
    let recv_buffer = match parse_bytes(&a.recv_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--recv-buffer {e}"),
    };
    let idle = match parse_seconds(&a.idle_timeout) {
        Ok(0.0) => None,
        Ok(s) => Some(Duration::from_secs_f64(s)),
        Err(e) => usage!("--idle-timeout {e}"),
    };
    let max = match a.duration.as_deref().map(parse_seconds) {
        None => None,
        Some(Ok(s)) => Some(Duration::from_secs_f64(s)),
        Some(Err(e)) => usage!("--duration {e}"),
    };
    use vlbiflow_seq::split::{Runs, RunsError, MAX_PARTS, MAX_RUN_LEN};
    match Runs::new(a.split, a.run_len) {
        Ok(_) => {}
        Err(RunsError::Parts(n)) => usage!("--split {n}: expected a power of two from 1 to {MAX_PARTS}"),
        Err(RunsError::RunLen(n)) => {
            usage!("--run-len {n}: expected a power of two from 1 to {MAX_RUN_LEN}")
        }
    }
    let mut config = SinkConfig::new(listen);
    config.udp.recv_buffer = Some(recv_buffer);
    config.udp.gro = a.gro;
    config.psn = a.psn;
    config.idle_timeout = idle;
    config.max_duration = max;
    config.split = a.split;
    config.run_len = a.run_len;
    if a.gro {
        config.buffer_size = 65_536;
    }

    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    // Said only once the socket is bound: a port in use is an error, not a listening sink.
    let sink = Sink::open(config).map_err(SinkError::from)?;
    let bound = sink.local_addr();
    if !a.json {
        eprintln!(
            "sink: listening on {bound}{}{}",
            if a.psn { " (PSN accounting)" } else { "" },
            if a.split > 1 {
                format!(", split over {} sockets by runs of {} PSNs", a.split, a.run_len)
            } else {
                String::new()
            }
        );
    }
    let json = a.json;
    let psn = a.psn;
    let received = sink.run(&stop, |s| {
        if s.datagrams == 0 && !s.complete {
            return;
        }
        if json {
            outln!(
                "{}",
                serde_json::to_string(&SecondLine::from(s)).expect("plain struct")
            );
        } else {
            outln!(
                "sink: {} {:>9} datagrams {:>12}{}{}",
                utc_hms(s.unix_second),
                s.datagrams,
                fmt_bit_rate(s.bytes as f64 * 8.0),
                if psn {
                    format!("  lost {:>6}", s.lost)
                } else {
                    String::new()
                },
                if s.complete { "" } else { "  (partial second)" }
            );
        }
    });
    let report = received.map_err(|source| SinkError::Recv { addr: bound, source })?;
    for w in report.socket.warnings() {
        eprintln!("sink: warning: {w}");
    }
    if json {
        let mut v = serde_json::json!({
            "summary": true,
            "datagrams": report.datagrams,
            "bytes": report.bytes,
            "active_s": report.active.as_secs_f64(),
            "gbps": report.gbps(),
            "truncated": report.truncated,
            "kernel_drops": report.kernel_drops,
        });
        if report.parts > 1 {
            v["split"] = report.parts.into();
            v["handed_on"] = report.handed_on.into();
            v["handoff_full"] = report.handoff_full.into();
        }
        if let Some(p) = report.psn {
            v["lost"] = p.lost.into();
            v["out_of_order"] = p.out_of_order.into();
            v["duplicate"] = p.duplicates.into();
            v["stray"] = p.stray.into();
            v["restarts"] = p.restarts.into();
        }
        outln!("{v}");
    } else {
        outln!(
            "sink: {} datagrams, {} in {:.3} s = {}; kernel drops {}",
            report.datagrams,
            fmt_bytes(report.bytes),
            report.active.as_secs_f64(),
            fmt_bit_rate(report.gbps() * 1e9),
            report.kernel_drops
        );
        if let Some(p) = report.psn {
            outln!(
                "sink: PSN lost {}, out of order {}, duplicate {}, stray {}, restarts {}",
                p.lost,
                p.out_of_order,
                p.duplicates,
                p.stray,
                p.restarts
            );
        }
        if report.parts > 1 {
            outln!(
                "sink: split over {} sockets; {} datagrams arrived at the socket of the run before theirs \
                 and were accounted by their own{}",
                report.parts,
                report.handed_on,
                if report.handoff_full > 0 {
                    format!(
                        " ({} could not be handed on and count as lost)",
                        report.handoff_full
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seconds_are_shown_as_utc_time_of_day() {
        // 2026-11-28 21:15:03 UTC
        assert_eq!(super::utc_hms(1_795_900_503), "21:15:03");
        assert_eq!(super::utc_hms(0), "00:00:00");
    }
}
