//! `vlbiflow gen`: the simulated backend.

use crate::progress::Progress;
use crate::units::{fmt_bit_rate, fmt_bytes, parse_bit_rate, parse_bytes, parse_hz, parse_seconds};
use crate::usage;
use anyhow::Context;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use vlbiflow_formats::time::{UtcTime, VdifTime};
use vlbiflow_gen::net::{send_streams, NetEvent, NetOptions};
use vlbiflow_gen::{GenPlan, GenRequest, GenSummary, PayloadKind, RateRequest, StartTime, StopAfter};
use vlbiflow_udp::net::ResolveError;

const EXAMPLES: &str = "\
Examples:
  # 4 Gb/s of 8224-byte frames with Mark6/jive5ab packet sequence numbers, for 10 s
  vlbiflow gen --dest 127.0.0.1:4001 --rate 4Gbps --duration 10 --psn

  # SimulateDeviceTX 'Config B': two threads, 1M frames/s, until Ctrl-C
  vlbiflow gen --dest 127.0.0.1:4001 --threads 2 --pps 1000000 --continuous

  # Two streams at once, half of a 10 GbE link each, noise with a 10 MHz tone
  vlbiflow gen --dest 127.0.0.1:4001 --dest 127.0.0.1:4002 --rate-fraction 0.5 --link 10Gbps \\
      --payload tone:10MHz --duration 60

  # 4000 frames of 2-bit noise from two threads to a file
  vlbiflow gen --output /tmp/t.vdif --threads 2 --pps 1000 --count 4000 --station Xx --payload noise

Rates count VDIF frame bytes (header included); --rate-fraction counts what a link carries (frame, PSN and \
66 bytes of Ethernet/IP/UDP per datagram). Frames are stamped from a whole second: with --start now the first \
frame goes out on the next second boundary. Pacing keeps an absolute schedule and sends at most --batch \
datagrams per stream back to back; see docs/gen.md.";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// UDP destination HOST:PORT (repeat for several streams, each with all threads); udps@HOST:PORT
    /// sends with a PSN as --psn does, vdif@HOST:PORT without
    #[arg(long, value_name = "[PROTO@]HOST:PORT", required_unless_present = "output")]
    dest: Vec<String>,
    /// Write the frames to this file (`-`: standard output) instead of sending them (no PSN; as fast as
    /// the file takes them)
    #[arg(long, short, value_name = "FILE", conflicts_with = "dest")]
    output: Option<PathBuf>,
    /// Number of VDIF threads, IDs 0..N-1
    #[arg(long, default_value_t = 1, conflicts_with = "thread_ids")]
    threads: u16,
    /// Explicit VDIF thread IDs, e.g. 0,1
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    thread_ids: Vec<u16>,
    /// Frames per second per stream, all threads together
    #[arg(long, value_name = "N", group = "speed")]
    pps: Option<u64>,
    /// Frame bit rate per stream, e.g. 4Gbps, 512Mbps (rounded to whole frames per second per thread)
    #[arg(long, value_name = "RATE", group = "speed")]
    rate: Option<String>,
    /// Fraction (0..1] of --link to fill, counting PSN and Ethernet/IP/UDP overhead
    #[arg(long, value_name = "F", group = "speed", requires = "link")]
    rate_fraction: Option<f64>,
    /// Link speed for --rate-fraction, e.g. 100Gbps
    #[arg(long, value_name = "RATE")]
    link: Option<String>,
    /// Frames per stream to send, all threads together
    #[arg(long, value_name = "N", group = "stop")]
    count: Option<u64>,
    /// Seconds to send (of stamped time, which is wall time on the network) [default: 10]
    #[arg(long, value_name = "SECONDS", group = "stop")]
    duration: Option<String>,
    /// Send until interrupted
    #[arg(long, group = "stop")]
    continuous: bool,
    /// Frame size in bytes, VDIF header included
    #[arg(long, default_value = "8224", value_name = "BYTES")]
    frame_size: String,
    /// Bits per sample
    #[arg(long, default_value_t = 2)]
    bits: u8,
    /// Channels per frame (a power of two)
    #[arg(long, default_value_t = 1)]
    channels: u32,
    /// Complex samples
    #[arg(long)]
    complex: bool,
    /// Two-character station ID
    #[arg(long, default_value = "Xx")]
    station: String,
    /// Extended data version: 0, 1 or 3 (1 and 3 carry the sample rate)
    #[arg(long, default_value_t = 0)]
    edv: u8,
    /// VDIF version field (DiFX writes 0, baseband 1)
    #[arg(long, default_value_t = 0)]
    vdif_version: u8,
    /// First time stamp: `now` (the next whole second) or an ISO-8601 UTC time such as 2026-03-01T12:00:00Z
    #[arg(long, default_value = "now")]
    start: String,
    /// Prefix every datagram with an 8-byte packet sequence number (Mark6 / jive5ab "udps")
    #[arg(long)]
    psn: bool,
    /// First packet sequence number
    #[arg(long, default_value_t = 0, value_name = "N")]
    first_psn: u64,
    /// Payload: zeros, noise (quantised Gaussian) or tone:FREQ (noise plus a sine, e.g. tone:10MHz)
    #[arg(long, default_value = "zeros")]
    payload: String,
    /// Leave out every Nth frame (PSN and time slot used up, as if the network lost it), to test loss
    /// accounting downstream
    #[arg(long, value_name = "N", default_value_t = 0)]
    drop_every: u64,
    /// Seed of the noise generator
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Datagrams per stream sent back to back in one system call (the largest burst)
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Hand the kernel N frames per send call as one UDP GSO super-datagram; the kernel still puts one
    /// frame per datagram on the wire (needs checksum offload: loopback and most NICs have it)
    #[arg(long, value_name = "N", default_value_t = 0)]
    gso: usize,
    /// Socket send buffer, e.g. 8MiB
    #[arg(long, default_value = "8MiB", value_name = "BYTES")]
    send_buffer: String,
    /// Print the closing summary as JSON on standard output
    #[arg(long)]
    json: bool,
    /// No progress line
    #[arg(long, short)]
    quiet: bool,
}

/// Resolves HOST:PORT strings; any failure is a usage error naming the destination.
/// Whether the destinations ask for a PSN (`udps@`); `udps@` and `vdif@` in one run is a usage error (the
/// frames are the same for every destination).
fn dest_psn(dests: &[String]) -> anyhow::Result<bool> {
    let mut said = None;
    for d in dests {
        if let (Some(p), _) = super::udp_dest("--dest", d)? {
            if said.is_some_and(|s| s != p) {
                usage!("--dest: udps@ and vdif@ in one run; every destination gets the same datagrams");
            }
            said = Some(p);
        }
    }
    Ok(said == Some(true))
}

fn resolve(dests: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::with_capacity(dests.len());
    for d in dests {
        let d = super::udp_dest("--dest", d)?.1;
        let Some((host, port)) = d.rsplit_once(':') else {
            usage!("--dest {d:?}: expected HOST:PORT, e.g. 127.0.0.1:4001");
        };
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            usage!("--dest {d:?}: expected HOST:PORT with a port in 1..=65535");
        }
        match vlbiflow_udp::net::resolve(d) {
            Ok(a) => out.push(a),
            Err(ResolveError::NoAddress { .. }) => usage!("--dest {d:?}: the host has no address"),
            Err(ResolveError::Lookup { source, .. }) => {
                usage!("--dest {d:?}: cannot resolve host {host:?}: {source}")
            }
        }
    }
    Ok(out)
}

fn parse_start(s: &str) -> anyhow::Result<StartTime> {
    if s.eq_ignore_ascii_case("now") {
        return Ok(StartTime::Now);
    }
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").map(|t| t.and_utc()));
    match t {
        Ok(t) if t.timestamp_subsec_nanos() == 0 => Ok(StartTime::At(t.timestamp())),
        Ok(_) => usage!("--start {s:?}: frames are stamped from a whole second; drop the fraction"),
        Err(_) => {
            usage!("--start {s:?}: expected `now` or an ISO-8601 UTC time such as 2026-03-01T12:00:00Z")
        }
    }
}

fn parse_payload(s: &str) -> anyhow::Result<PayloadKind> {
    Ok(match s {
        "zeros" | "zero" => PayloadKind::Zeros,
        "noise" => PayloadKind::Noise,
        _ => match s.strip_prefix("tone:") {
            Some(f) => match parse_hz(f) {
                Ok(hz) => PayloadKind::Tone { hz },
                Err(e) => usage!("--payload {s:?}: {e}"),
            },
            None => usage!("--payload {s:?}: expected zeros, noise or tone:FREQ (e.g. tone:10MHz)"),
        },
    })
}

/// Builds the checked plan from the arguments; every problem is a usage error.
fn plan(a: &Args) -> anyhow::Result<GenPlan> {
    let thread_ids = if a.thread_ids.is_empty() {
        if a.threads == 0 || a.threads > 1024 {
            usage!("--threads {}: must be 1..=1024", a.threads);
        }
        (0..a.threads).collect()
    } else {
        a.thread_ids.clone()
    };
    let rate = match (&a.pps, &a.rate, &a.rate_fraction) {
        (Some(n), _, _) => RateRequest::FramesPerSecond(*n),
        (_, Some(r), _) => match parse_bit_rate(r) {
            Ok(bps) => RateRequest::BitsPerSecond(bps),
            Err(e) => usage!("--rate {e}"),
        },
        (_, _, Some(f)) => {
            let link = a.link.as_deref().unwrap_or_default();
            match parse_bit_rate(link) {
                Ok(link_bps) => RateRequest::LinkFraction {
                    fraction: *f,
                    link_bps,
                },
                Err(e) => usage!("--link {e}"),
            }
        }
        _ => usage!("say how fast: --pps N, --rate RATE (e.g. 4Gbps) or --rate-fraction F --link RATE"),
    };
    let stop = match (&a.count, &a.duration, a.continuous) {
        (Some(n), _, _) => StopAfter::Count(*n),
        (_, Some(d), _) => match parse_seconds(d) {
            Ok(s) => StopAfter::Seconds(s),
            Err(e) => usage!("--duration {e}"),
        },
        (_, _, true) => StopAfter::Continuous,
        _ => StopAfter::Seconds(10.0),
    };
    let frame_size = match parse_bytes(&a.frame_size) {
        Ok(n) => n as usize,
        Err(e) => usage!("--frame-size {e}"),
    };
    let request = GenRequest {
        thread_ids,
        rate,
        stop,
        frame_size,
        bits: a.bits,
        channels: a.channels,
        complex: a.complex,
        station: a.station.clone(),
        edv: a.edv,
        version: a.vdif_version,
        start: parse_start(&a.start)?,
        psn: a.psn || dest_psn(&a.dest)?,
        payload: parse_payload(&a.payload)?,
        batch: a.batch,
        gso_segments: a.gso,
        seed: a.seed,
        drop_every: a.drop_every,
    };
    match GenPlan::new(request) {
        Ok(p) => Ok(p),
        Err(e) => usage!("{e}"),
    }
}

/// The first frame's time stamp.
fn start_time(plan: &GenPlan) -> anyhow::Result<VdifTime> {
    let second = match plan.request.start {
        StartTime::Now => UtcTime::now().unix_seconds + 1,
        StartTime::At(s) => s,
    };
    match VdifTime::from_unix_second(second) {
        Ok(t) => Ok(t),
        Err(e) => usage!("--start: {e}"),
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let plan = plan(&a)?;
    let dests = resolve(&a.dest)?;
    let send_buffer = match parse_bytes(&a.send_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--send-buffer {e}"),
    };
    let to_stdout = a.output.as_deref() == Some(std::path::Path::new("-"));
    if to_stdout && a.json {
        usage!("--json: standard output is taken by the frames (--output -); leave out one of them");
    }
    if let Some(path) = a.output.as_ref().filter(|_| !to_stdout) {
        if path.is_dir() {
            usage!("--output {}: is a directory", path.display());
        }
    }
    let start = start_time(&plan)?;
    // A second Ctrl-C while stopping exits at once, as users expect of a stuck process.
    let stop = crate::stop::on_interrupt(crate::stop::Second::Exit)?;
    let display = Progress::stderr(!a.quiet);
    let status = display.line();
    let quiet = a.quiet;
    let describe = format!(
        "{} stream(s) x {} thread(s), {} frames/s per thread of {} bytes = {} per stream{}",
        dests.len().max(1),
        plan.request.thread_ids.len(),
        plan.frame_rate,
        plan.request.frame_size,
        fmt_bit_rate(plan.frame_bits_per_second()),
        if plan.request.psn { ", with PSN" } else { "" }
    );
    if !quiet {
        eprintln!(
            "gen: {describe}; first stamp {}",
            start.to_utc(plan.frame_rate)?.to_iso8601()
        );
    }
    let mut progress = |s: &GenSummary| {
        if quiet {
            return;
        }
        let line = format!(
            "gen: {:>12}  frames {:>12}  elapsed {:>7.1} s  worst 1 s window {:+.4}%",
            fmt_bit_rate(s.achieved_bps),
            s.frames,
            s.elapsed_s,
            s.worst_window_error * 100.0
        );
        status.set(line, s.elapsed_s.round() as u64 % 10 == 0);
    };
    let summary = if to_stdout {
        let mut out = std::io::BufWriter::with_capacity(4 << 20, std::io::stdout().lock());
        let s = vlbiflow_gen::file::write_frames(&plan, start, &mut out, &stop, &mut progress)
            .context("writing the frames to standard output")?;
        out.flush().context("writing the frames to standard output")?;
        s
    } else if let Some(path) = &a.output {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(4 << 20, file);
        vlbiflow_gen::file::write_frames(&plan, start, &mut out, &stop, &mut progress)
            .with_context(|| format!("writing {}", path.display()))?
    } else {
        let options = NetOptions {
            send_buffer,
            first_psn: a.first_psn,
        };
        let mut warned_behind = false;
        send_streams(&plan, start, &dests, &options, &stop, &mut |event| match event {
            NetEvent::Warning(w) => eprintln!("gen: warning: {w}"),
            NetEvent::Progress(s) => {
                if s.cannot_keep_up && !warned_behind {
                    warned_behind = true;
                    display.say(&format!(
                        "\ngen: warning: this machine cannot keep up with {}: sending {} (try fewer streams, a larger --batch, or a lower rate)",
                        fmt_bit_rate(s.requested_bps),
                        fmt_bit_rate(s.achieved_bps)
                    ));
                }
                progress(&s)
            }
        })?
    };
    drop(display);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary, a.output.is_some(), to_stdout);
    }
    Ok(if summary.interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// The closing summary, on standard output (on standard error when the frames went there).
fn print_summary(s: &GenSummary, to_file: bool, on_stderr: bool) {
    let say = |line: String| {
        if on_stderr {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
    };
    say(format!(
        "gen: {} frames ({}) in {:.3} s{}",
        s.frames,
        fmt_bytes(s.bytes),
        s.elapsed_s,
        if s.interrupted { " (interrupted)" } else { "" }
    ));
    if s.dropped > 0 {
        say(format!(
            "gen: {} frames left out on purpose (--drop-every)",
            s.dropped
        ));
    }
    if to_file {
        say(format!("gen: written at {}", fmt_bit_rate(s.achieved_bps)));
        return;
    }
    say(format!(
        "gen: requested {}, achieved {}",
        fmt_bit_rate(s.requested_bps),
        fmt_bit_rate(s.achieved_bps)
    ));
    if s.windows > 0 {
        say(format!(
            "gen: worst error over {} whole 1 s windows: {:+.4}%{}",
            s.windows,
            s.worst_window_error * 100.0,
            if s.worst_window_error.abs() > 0.001 {
                "  (outside 0.1%)"
            } else {
                ""
            }
        ));
    }
    if s.send_retries > 0 {
        say(format!(
            "gen: {} sends waited for room in the socket or device queue",
            s.send_retries
        ));
    }
}
