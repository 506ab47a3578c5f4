//! `vlbiflow play`: replay a recording to the network (jive5ab's disk2net / file2net), paced at its
//! original rate from the frames' time stamps or at a set rate (`vlbiflow-evlbi::play`).

use std::process::ExitCode;

use vlbiflow_evlbi::play::{run_play, PlayConfig, PlayRate, PlayStatus};
use vlbiflow_formats::time::UtcTime;
use vlbiflow_reader::{locate, LocateError};

use crate::cmd::receive::parse_addr;
use crate::progress::Progress;
use crate::units::{fmt_bit_rate, fmt_bytes, parse_bit_rate};
use crate::usage;

const EXAMPLES: &str = "\
Examples:
  # A Mark6 scan on four disks to a correlator at its original rate, as udps (PSN + frame):
  vlbiflow play ek051_ef_no0001 --disk '/mnt/disks/1/*/data' --dest 10.0.0.2:46227

  # A FlexBuff scan from 12:30:10 UTC of its data on, as plain VDIF datagrams:
  vlbiflow play ek051_ef_no0001 --disk '/mnt/disk*' --dest 10.0.0.2:4001 --protocol vdif \\
      --start 2026-03-01T12:30:10

  # A plain VDIF file at a fixed 1 Gb/s, counters as JSON:
  vlbiflow play /data/scan.vdif --dest 127.0.0.1:4001 --rate 1Gbps --json

At the original rate a frame stamped t goes out at t0 + (t - t_first): gaps in the recording stay
gaps, frames of all threads with one time stamp go together, and every one-second window carries
the recording's rate (the summary gives the worst window's error against it). The frame rate comes
from --frame-rate, the scan metadata, or the first second of data. --start also takes VEX time
(2026y060d12h30m10s) or Unix seconds.";

/// Replay a recording (Mark6, FlexBuff or plain file) to a UDP destination at its original or a set rate
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Scan name (with --disk), or the files to read
    #[arg(value_name = "SCAN|FILES", required = true)]
    scan: Vec<String>,
    /// Directory holding the scan's files; repeat, or use a glob pattern
    #[arg(long, short, value_name = "DIR")]
    disk: Vec<String>,
    /// Where to send: HOST:PORT, or udps@HOST:PORT / vdif@HOST:PORT (the protocol then as --protocol)
    #[arg(long, value_name = "[PROTO@]HOST:PORT")]
    dest: String,
    /// udps (8-byte PSN + frame) or vdif (the frame alone)
    #[arg(long, value_enum, default_value = "udps")]
    protocol: ProtocolArg,
    /// First packet sequence number
    #[arg(long, value_name = "N", default_value_t = 0)]
    first_psn: u64,
    /// Send at this bit rate of frames instead of the recording's own
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Frames per second per thread (default: scan metadata, else learned from the first second)
    #[arg(long, value_name = "N")]
    frame_rate: Option<u32>,
    /// Begin at the first frame stamped at or after this time (ISO 8601 UTC, VEX or Unix seconds)
    #[arg(long, value_name = "TIME")]
    start: Option<String>,
    /// Send at most this many frames
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Most frames per sendmmsg (a batch leaves when its first frame is due)
    #[arg(long, value_name = "N", default_value_t = 32)]
    batch: usize,
    /// Memory read ahead of the schedule (a slow disk is absorbed here)
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    read_ahead: String,
    /// Print the counters as JSON on standard output
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProtocolArg {
    Udps,
    Vdif,
}

/// A time as Unix seconds: ISO 8601, VEX (2026y060d12h30m10s) or a number.
fn parse_time(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    if let Some(t) = UtcTime::parse_iso8601(s) {
        return Some(t);
    }
    // ISO 8601 without a zone (2026-03-01T12:30:10, as the docs write it): UTC, as VDIF times are
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f") {
        let t = t.and_utc();
        return Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) * 1e-9);
    }
    vlbiflow_formats::vex_time::parse(s).map(|t| t as f64)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let (psn, addr) = super::udp_dest("--dest", &a.dest)?;
    let dest = parse_addr("--dest", addr)?;
    if dest.port() == 0 {
        usage!("--dest: port 0 is not a destination");
    }
    let mut config = PlayConfig::new(dest);
    config.psn = psn.unwrap_or(matches!(a.protocol, ProtocolArg::Udps));
    config.first_psn = a.first_psn;
    if let Some(r) = &a.rate {
        config.rate = match parse_bit_rate(r) {
            Ok(b) if b >= 8.0 => PlayRate::Bits(b),
            Ok(_) => usage!("--rate must be at least 8 bit/s"),
            Err(e) => usage!("--rate: {e}"),
        };
    }
    if a.frame_rate == Some(0) {
        usage!("--frame-rate must be positive");
    }
    config.frame_rate = a.frame_rate;
    if let Some(s) = &a.start {
        match parse_time(s) {
            Some(t) => config.start = Some(t),
            None => usage!("--start {s:?}: expected ISO 8601 (2026-03-01T12:30:10), VEX (2026y060d12h30m10s) or Unix seconds"),
        }
    }
    if a.count == Some(0) {
        usage!("--count must be at least 1");
    }
    config.count = a.count;
    config.batch = a.batch.max(1);
    config.read_ahead = match crate::units::parse_bytes(&a.read_ahead) {
        Ok(b) => b as usize,
        Err(e) => usage!("--read-ahead: {e}"),
    };
    let rec = match locate(&a.scan, &a.disk) {
        Ok(r) => r,
        Err(LocateError::Usage(m)) => usage!("{m}"),
        Err(e) => return Err(e.into()),
    };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    eprintln!(
        "play: {} ({}) to {} as {}, {}",
        rec.name,
        fmt_bytes(rec.total_bytes()),
        dest,
        if config.psn { "udps" } else { "vdif" },
        match config.rate {
            PlayRate::Original => "at its original rate".to_string(),
            PlayRate::Bits(b) => format!("at {}", fmt_bit_rate(b)),
        }
    );
    let progress = Progress::stderr(true);
    let status = progress.line();
    let st = run_play(&rec, &config, &stop, &mut |s| {
        let line = format!(
            "{:>6.1}s {} frames {} | worst 1 s window {:+.3}% over {} | late max {:.1} ms",
            s.elapsed_s,
            s.frames,
            fmt_bit_rate(s.achieved_bps),
            s.worst_window_error * 100.0,
            s.windows,
            s.max_late_s * 1e3
        );
        status.set(line, (s.elapsed_s as u64) % 5 == 0);
    })?;
    drop(progress);
    print_summary(&st);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&st)?);
    }
    Ok(if st.interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_summary(s: &PlayStatus) {
    eprintln!(
        "play: {} frames ({}{}) of {} in {:.2} s: {} (target {}), worst whole 1 s window {:+.4}% over {} windows, \
         latest batch {:.2} ms late{}",
        s.frames,
        fmt_bytes(s.bytes),
        if s.fill_frames > 0 {
            format!(", {} fill", s.fill_frames)
        } else {
            String::new()
        },
        s.scan,
        s.elapsed_s,
        fmt_bit_rate(s.achieved_bps),
        fmt_bit_rate(s.target_bps),
        s.worst_window_error * 100.0,
        s.windows,
        s.max_late_s * 1e3,
        if s.skipped > 0 {
            format!("; {} frames before --start skipped", s.skipped)
        } else {
            String::new()
        }
    );
    if let Some(r) = s.frame_rate {
        eprintln!(
            "  {} thread(s) at {r} frames/s, {}-byte frames",
            s.threads, s.frame_len
        );
    }
    for f in &s.findings {
        eprintln!("  recording: {f}");
    }
}
