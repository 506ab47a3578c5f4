//! `vlbiflow relay`: net2net for a station's edge host or a correlator's front end
//! (`vlbiflow-evlbi::relay`): receive a stream, optionally reorder it, fan it out restamped and paced.

use std::process::ExitCode;

use vlbiflow_evlbi::dest::DestSpec;
use vlbiflow_evlbi::forward::DestStatus;
use vlbiflow_evlbi::receive::default_frame_len;
use vlbiflow_evlbi::relay::{run_relay, RelayConfig, RelayReorder, RelayStatus};

use crate::cmd::receive::{key_choice, parse_addr, FormatArg, KeyArg, ProtocolArg};
use crate::progress::Progress;
use crate::units::{fmt_bit_rate, fmt_bytes, parse_bytes, parse_duration};
use crate::usage;

const EXAMPLES: &str = "\
Examples:
  # A station's udps stream on to the correlator, paced to 2.1 Gb/s, and a copy of thread 0 to a
  # monitoring host as plain VDIF:
  vlbiflow relay --listen 0.0.0.0:46227 --to udps@jive.example.org:46227,rate=2.1Gbps \\
      --to vdif@10.1.2.3:4001,threads=0

  # At the correlator's front end: reorder within 100 ms, then fan out; frames that did not make it
  # leave a gap in the PSN (the next receiver fills them):
  vlbiflow relay --listen 0.0.0.0:46227 --reorder --deadline 100ms --to udps@10.0.0.5:46227

Destinations: [LABEL=]PROTO@HOST:PORT[,threads=0,1][,rate=RATE][,burst=SIZE][,queue=FRAMES]
[,psn=N|input][,notices=off] with PROTO udps (8-byte PSN + frame), vdif (frame alone) or tcp (frames
back to back; reconnected when the connection breaks). A frame's PSN is its position in the stream
(the input PSN, or its VDIF time and thread) from psn=N (default 0), so a frame lost upstream is a
hole at its own place; a destination that cannot keep up loses frames (counted), it never slows the
others.";

/// Relay a stream (net2net): receive udps or VDIF, optionally reorder, fan out with restamped PSN and pacing
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Address to listen on
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// Destination (see below); repeat to fan out
    #[arg(long = "to", value_name = "DEST", required = true)]
    to: Vec<String>,
    /// What arrives: udps (8-byte PSN + frame) or vdif (a frame alone)
    #[arg(long, value_enum, default_value = "udps")]
    protocol: ProtocolArg,
    /// Frame format
    #[arg(long, value_enum, default_value = "vdif")]
    format: FormatArg,
    /// Bytes per frame, PSN excluded (default 8224 for VDIF, 10016 for Mark5B)
    #[arg(long, value_name = "BYTES")]
    frame_size: Option<usize>,
    /// Put frames back in order within a window before forwarding
    #[arg(long)]
    reorder: bool,
    /// Order by PSN (udps) or VDIF time (needs --frame-rate)
    #[arg(long, value_enum, requires = "reorder")]
    key: Option<KeyArg>,
    /// With --key vdif-time: the stream's threads in order
    #[arg(
        long = "thread-ids",
        alias = "threads",
        value_name = "LIST",
        default_value = "0",
        value_delimiter = ','
    )]
    threads: Vec<u16>,
    /// Frames per second per thread (for --key vdif-time)
    #[arg(long, value_name = "N")]
    frame_rate: Option<u32>,
    /// Reorder window in frames
    #[arg(long, value_name = "FRAMES", default_value_t = 4096)]
    window: usize,
    /// How long a missing frame is waited for
    #[arg(long, value_name = "TIME", default_value = "200ms")]
    deadline: String,
    /// Forward fill frames where frames are missing (default: leave a gap in the PSN)
    #[arg(long, requires = "reorder")]
    send_fill: bool,
    /// Stop after this long
    #[arg(long, value_name = "TIME")]
    duration: Option<String>,
    /// Stop after this long without a datagram, once the stream started (0 = never)
    #[arg(
        long = "idle-timeout",
        alias = "idle",
        value_name = "TIME",
        default_value = "0"
    )]
    idle: String,
    /// Socket receive buffer
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    recv_buffer: String,
    /// Accept datagrams from this source only (repeat); others are dropped and counted as wrong
    /// source. Recommended where others can reach the port
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    from: Vec<vlbiflow_guard::net::Prefix>,
    /// Print the final counters as JSON on standard output
    #[arg(long)]
    json: bool,
}

pub(crate) fn parse_dests(specs: &[String], flag: &str) -> anyhow::Result<Vec<DestSpec>> {
    let mut dests = Vec::new();
    for s in specs {
        match DestSpec::parse(s) {
            Ok(d) => {
                if dests.iter().any(|o: &DestSpec| o.label == d.label) {
                    usage!(
                        "{flag} {s:?}: label {:?} is used twice (name them LABEL=...)",
                        d.label
                    );
                }
                dests.push(d)
            }
            Err(e) => usage!("{flag}: {e}"),
        }
    }
    Ok(dests)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let listen = parse_addr("--listen", &a.listen)?;
    let dests = parse_dests(&a.to, "--to")?;
    let mut c = RelayConfig::new(listen, dests);
    c.protocol = a.protocol.into();
    c.kind = a.format.into();
    c.frame_len = a.frame_size.unwrap_or(default_frame_len(c.kind));
    if a.reorder {
        c.reorder = Some(RelayReorder {
            key: key_choice(a.key, a.protocol),
            window: a.window,
            deadline: match parse_duration(&a.deadline) {
                Ok(d) => d,
                Err(e) => usage!("--deadline: {e}"),
            },
            threads: a.threads.clone(),
            frame_rate: a.frame_rate,
            send_fill: a.send_fill,
        });
    }
    if let Some(d) = &a.duration {
        c.duration = match parse_duration(d) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => usage!("--duration must be positive"),
            Err(e) => usage!("--duration: {e}"),
        };
    }
    c.idle = match parse_duration(&a.idle) {
        Ok(d) if d.is_zero() => None,
        Ok(d) => Some(d),
        Err(e) => usage!("--idle-timeout: {e}"),
    };
    c.recv_buffer = match parse_bytes(&a.recv_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--recv-buffer: {e}"),
    };
    c.from = vlbiflow_guard::net::AllowList(a.from.clone());
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    // Said once the socket is bound and the destinations are open (an error is one line, nothing before).
    let settings = format!(
        "{}to {}",
        if c.reorder.is_some() { "reordering, " } else { "" },
        c.dests
            .iter()
            .map(|d| format!("{} ({}@{})", d.label, d.protocol.name(), d.address))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let progress = Progress::stderr(true);
    let status = progress.line();
    let st = run_relay(&c, &stop, &mut |s| {
        if s.elapsed_s == 0.0 {
            progress.say(&format!("relay: ready on {} ({settings})", s.listen));
            return;
        }
        let line = format!(
            "{:>6.1}s in {} forwarded {} rejected {} | {}",
            s.elapsed_s,
            s.datagrams,
            s.frames,
            s.rejected,
            dest_line(&s.destinations)
        );
        status.set(line, (s.elapsed_s as u64) % 5 == 0);
    })?;
    drop(progress);
    print_summary(&st);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&st)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// One destination per item: sent and dropped.
pub(crate) fn dest_line(d: &[DestStatus]) -> String {
    d.iter()
        .map(|d| format!("{}: sent {} dropped {}", d.label, d.sent, d.dropped()))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The closing lines about each destination.
pub(crate) fn print_dests(d: &[DestStatus]) {
    for d in d {
        eprintln!(
            "  -> {} ({}@{}{}{}): offered {}, sent {} ({}), dropped {} (queue full {}, send errors {}, \
             disconnected {}, at stop {}){}{}",
            d.label,
            d.protocol,
            d.address,
            if d.threads.is_empty() {
                String::new()
            } else {
                format!(", threads {:?}", d.threads)
            },
            d.rate_bps
                .map(|r| format!(", paced {}", fmt_bit_rate(r)))
                .unwrap_or_default(),
            d.offered,
            d.sent,
            fmt_bytes(d.sent_bytes),
            d.dropped(),
            d.dropped_queue_full,
            d.dropped_send_error,
            d.dropped_disconnected,
            d.dropped_at_stop,
            if d.filtered > 0 {
                format!(", {} of other threads", d.filtered)
            } else {
                String::new()
            },
            d.last_error
                .as_ref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default(),
        );
        // Every position of the stream this destination did not get, by cause: its receiver fills them.
        eprintln!(
            "     positions skipped {}: lost before capture {}, no buffer {}, dropped here {}; next PSN {}{}{}",
            d.positions_missing(),
            d.skipped_captured_lost,
            d.skipped_no_buffer,
            d.dropped(),
            d.next_psn,
            if d.not_placed > 0 {
                format!(
                    "; not forwarded: {} duplicate, {} stray, {} of threads unknown at the start, {} without PSN or time",
                    d.positions.duplicates, d.positions.stray, d.positions.unknown_thread, d.positions.no_position
                )
            } else {
                String::new()
            },
            if d.protocol == "udps" {
                format!("; gap notices {}", d.notices_sent)
            } else {
                String::new()
            },
        );
    }
}

fn print_summary(s: &RelayStatus) {
    eprintln!(
        "relay: {} ({:.1} s): {} datagrams in, {} frames forwarded, {} rejected, {} from other sources, kernel drops {}",
        s.stopped.as_deref().unwrap_or("stopped"),
        s.elapsed_s,
        s.datagrams,
        s.frames,
        s.rejected,
        s.wrong_source,
        s.kernel_drops
    );
    if let Some(r) = &s.reorder {
        eprintln!(
            "  reorder: delivered {}, filled {} (gaps passed on), late {}, duplicate {}, out of order {}, stray {}",
            r.delivered, r.filled, r.late, r.duplicate, r.out_of_order, r.stray
        );
    }
    print_dests(&s.destinations);
}
