//! `vlbiflow receive`: the correlator side of real-time e-VLBI (`vlbiflow-evlbi::receive`): reorder a
//! station's udps or VDIF stream within a window and deliver it continuously with fill frames.

use std::path::PathBuf;
use std::process::ExitCode;

use vlbiflow_evlbi::receive::{
    default_frame_len, run_receive, InputProtocol, KeyChoice, ReceiveConfig, ReceiveStatus,
};
use vlbiflow_evlbi::OutputSpec;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::FillMode;

use crate::progress::Progress;
use crate::units::{fmt_bit_rate, parse_bytes, parse_duration};
use crate::usage;

const EXAMPLES: &str = "\
Examples:
  # A station's udps stream (8-byte PSN + 8224-byte VDIF frame) into one VDIF file with fill,
  # holes waited for at most 200 ms:
  vlbiflow receive --listen 0.0.0.0:46227 --output /data/ef_no0001.vdif --deadline 200ms

  # Plain VDIF, two threads at 15625 frames/s each, ordered by time stamp, to a software
  # correlator reading a FIFO (fill frames carry the missing frame's time and thread):
  mkfifo /tmp/ef.fifo
  vlbiflow receive --listen 0.0.0.0:4001 --protocol vdif --key vdif-time --thread-ids 0,1 \\
      --frame-rate 15625 --fill stamped --output /tmp/ef.fifo

  # A transfer of known length (PSN 0 .. 99999): lost first and last frames are filled too,
  # fill positions listed, counters as JSON:
  vlbiflow receive --listen 10.0.0.2:46227 --first-psn 0 --count 100000 --output scan.vdif \\
      --fill-log fills.txt --json

Outputs: a file path (refused if it exists, unless --force), - (standard output), udp:HOST:PORT
(one frame per datagram), udps:HOST:PORT (with a fresh PSN), unix:PATH (a listening Unix stream
socket), fifo:PATH or the path of an existing FIFO, null (count only).

The fill rule is exact: output frame k is the real frame if and only if it arrived before its
deadline (counted from the arrival of the first later frame) and before the window forced it out;
a frame arriving after that is dropped and counted late. Fill frames are what jive5ab writes (VDIF:
invalid bit, 0x11223344 words; Mark5B: fill words throughout) or, with --fill stamped, the same with
the missing frame's time and thread in the header. Details: docs/realtime.md.

Progress line: out (frames written), real, fill; late (arrived after their deadline, dropped),
ooo (out of order, put back in place), dup (duplicates, dropped), stray (far outside the stream,
dropped), bad (malformed, not a frame, or a thread not asked for); kern (datagrams the kernel
dropped at this socket, SO_RXQ_OVFL). The summary splits fill into what the sender's gap notices
declared (lost at the station) and what the path lost.";

/// Correlator side: receive udps or VDIF, reorder, deliver a continuous stream with fill frames
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Address to listen on
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// What the datagrams hold: udps (8-byte PSN + frame) or vdif (a frame alone)
    #[arg(long, value_enum, default_value = "udps")]
    protocol: ProtocolArg,
    /// Frame format
    #[arg(long, value_enum, default_value = "vdif")]
    format: FormatArg,
    /// Bytes per frame, header included, PSN excluded (default 8224 for VDIF, 10016 for Mark5B)
    #[arg(long, value_name = "BYTES")]
    frame_size: Option<usize>,
    /// Order by PSN (udps) or by VDIF time stamp and thread (needs --frame-rate; default for vdif)
    #[arg(long, value_enum)]
    key: Option<KeyArg>,
    /// With --key vdif-time: the threads of the stream, in output order
    #[arg(
        long = "thread-ids",
        alias = "threads",
        value_name = "LIST",
        default_value = "0",
        value_delimiter = ','
    )]
    threads: Vec<u16>,
    /// Frames per second per thread (needed by --key vdif-time; otherwise learned for the latency)
    #[arg(long, value_name = "N")]
    frame_rate: Option<u32>,
    /// Frames held for reordering (all threads together; rounded up to a power of two)
    #[arg(long, value_name = "FRAMES", default_value_t = 4096)]
    window: usize,
    /// How long after a frame is known to be missing it may still arrive
    #[arg(long, value_name = "TIME", default_value = "200ms")]
    deadline: String,
    /// Fill frame layout: jive5ab (all-zero header but the invalid bit and length) or stamped
    #[arg(long, value_enum, default_value = "jive5ab")]
    fill: FillArg,
    /// The PSN (or, with --key vdif-time, the key) the stream starts at: lost first frames are filled
    #[arg(long, value_name = "N")]
    first_psn: Option<u64>,
    /// Stop after this many output frames (with --first-psn, lost last frames are filled)
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Stop after this long
    #[arg(long, value_name = "TIME")]
    duration: Option<String>,
    /// End of stream after this long without a datagram, once it started (0 = never)
    #[arg(
        long = "idle-timeout",
        alias = "idle",
        value_name = "TIME",
        default_value = "0"
    )]
    idle: String,
    /// Where the continuous stream goes (see below)
    #[arg(long, short, value_name = "OUTPUT")]
    output: String,
    /// Overwrite an existing output file
    #[arg(long)]
    force: bool,
    /// Memory between receiving and the output's own thread (a slow disk or reader is absorbed here)
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    output_buffer: String,
    /// How long to wait for a FIFO's or Unix socket's reader
    #[arg(long, value_name = "TIME", default_value = "30s")]
    output_wait: String,
    /// Write the key (PSN) of every fill frame to FILE, one per line
    #[arg(long, value_name = "FILE")]
    fill_log: Option<PathBuf>,
    /// Host clock minus backend clock for the latency (e.g. 0, 1.5ms, -300us); stated in the results
    #[arg(long, value_name = "TIME", default_value = "0", allow_hyphen_values = true)]
    clock_offset: String,
    /// Socket receive buffer (forced past net.core.rmem_max when privileged)
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

/// What arrives (receive and relay).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum ProtocolArg {
    Udps,
    Vdif,
}

impl From<ProtocolArg> for InputProtocol {
    fn from(p: ProtocolArg) -> InputProtocol {
        match p {
            ProtocolArg::Udps => InputProtocol::Udps,
            ProtocolArg::Vdif => InputProtocol::Vdif,
        }
    }
}

/// Frame format (receive and relay).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum FormatArg {
    Vdif,
    M5b,
}

impl From<FormatArg> for FrameKind {
    fn from(f: FormatArg) -> FrameKind {
        match f {
            FormatArg::Vdif => FrameKind::Vdif,
            FormatArg::M5b => FrameKind::M5b,
        }
    }
}

/// Order of the reorder window (receive and relay).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum KeyArg {
    Psn,
    VdifTime,
}

/// The order asked for, or the protocol's default.
pub(crate) fn key_choice(key: Option<KeyArg>, protocol: ProtocolArg) -> KeyChoice {
    match key {
        Some(KeyArg::Psn) => KeyChoice::Psn,
        Some(KeyArg::VdifTime) => KeyChoice::VdifTime,
        None => KeyChoice::default_for(protocol.into()),
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FillArg {
    Jive5ab,
    Stamped,
}

/// `-1.5ms` as signed nanoseconds.
pub(crate) fn parse_signed_ns(s: &str) -> Result<i64, String> {
    let (neg, rest) = match s.trim().strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.trim()),
    };
    let secs = crate::units::parse_seconds(rest)?;
    let ns = (secs * 1e9).round() as i64;
    Ok(if neg { -ns } else { ns })
}

pub(crate) fn parse_addr(what: &str, s: &str) -> anyhow::Result<std::net::SocketAddr> {
    match vlbiflow_udp::net::resolve(s) {
        Ok(a) => Ok(a),
        Err(e) => usage!("{what}: {e}"),
    }
}

fn build(a: &Args) -> anyhow::Result<ReceiveConfig> {
    let listen = parse_addr("--listen", &a.listen)?;
    let output = match OutputSpec::parse(&a.output) {
        Ok(o) => o,
        Err(e) => usage!("--output: {e}"),
    };
    if a.json && output == OutputSpec::Stdout {
        usage!("--json and --output - both want standard output");
    }
    let mut c = ReceiveConfig::new(listen, output);
    c.protocol = a.protocol.into();
    c.kind = a.format.into();
    c.frame_len = a.frame_size.unwrap_or(default_frame_len(c.kind));
    c.key = key_choice(a.key, a.protocol);
    c.threads = a.threads.clone();
    c.frame_rate = a.frame_rate;
    c.window = a.window;
    c.deadline = match parse_duration(&a.deadline) {
        Ok(d) => d,
        Err(e) => usage!("--deadline: {e}"),
    };
    c.fill = match a.fill {
        FillArg::Jive5ab => FillMode::Jive5ab,
        FillArg::Stamped => FillMode::Stamped,
    };
    c.first_key = a.first_psn;
    c.count = a.count;
    if a.count == Some(0) {
        usage!("--count must be at least 1");
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
    c.output_wait = match parse_duration(&a.output_wait) {
        Ok(d) => d,
        Err(e) => usage!("--output-wait: {e}"),
    };
    c.overwrite = a.force;
    c.output_buffer = match parse_bytes(&a.output_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--output-buffer: {e}"),
    };
    c.fill_log = a.fill_log.clone();
    c.clock_offset_ns = match parse_signed_ns(&a.clock_offset) {
        Ok(n) => n,
        Err(e) => usage!("--clock-offset: {e}"),
    };
    c.recv_buffer = match parse_bytes(&a.recv_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--recv-buffer: {e}"),
    };
    c.from = vlbiflow_guard::net::AllowList(a.from.clone());
    Ok(c)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let config = build(&a)?;
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    // Said once the socket is bound (a port in use is one error line, nothing before it).
    let settings = format!(
        "{}, ordered by {}, window {} frames, deadline {:?}, to {}",
        match config.protocol {
            InputProtocol::Udps => "udps",
            InputProtocol::Vdif => "vdif",
        },
        match config.key {
            KeyChoice::Psn => "PSN",
            KeyChoice::VdifTime => "VDIF time",
        },
        config.window,
        config.deadline,
        config.output.describe()
    );
    let progress = Progress::stderr(true);
    let status = progress.line();
    let mut last = (0u64, 0.0f64);
    let st = run_receive(&config, &stop, &mut |s| {
        if s.elapsed_s == 0.0 {
            progress.say(&format!("receive: ready on {} ({settings})", s.listen));
            return;
        }
        let rate = (s.output_bytes - last.0) as f64 * 8.0 / (s.elapsed_s - last.1).max(1e-3);
        last = (s.output_bytes, s.elapsed_s);
        let line = progress_line(s, rate);
        status.set(line, (s.elapsed_s as u64) % 5 == 0);
    })?;
    drop(progress);
    print_summary(&st);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&st)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e6))
}

fn progress_line(s: &ReceiveStatus, rate: f64) -> String {
    let r = &s.reorder;
    format!(
        "{:>6.1}s {} | out {} real {} fill {} | late {} ooo {} dup {} stray {} bad {} | kern {} | latency p50 {} p99 {} ms",
        s.elapsed_s,
        fmt_bit_rate(rate),
        s.output_frames,
        r.delivered,
        r.filled,
        r.late,
        r.out_of_order,
        r.duplicate,
        r.stray,
        r.malformed + r.unknown_thread + s.rejected,
        s.kernel_drops,
        ms(s.latency.p50_ns),
        ms(s.latency.p99_ns),
    )
}

fn print_summary(s: &ReceiveStatus) {
    let r = &s.reorder;
    eprintln!(
        "receive: {} ({:.1} s): {} frames out ({} real + {} fill) to {}, {}",
        s.stopped.as_deref().unwrap_or("stopped"),
        s.elapsed_s,
        s.output_frames,
        r.delivered,
        r.filled,
        s.output,
        fmt_bit_rate(s.output_bps)
    );
    if let (Some(first), Some(next)) = (s.first_key, s.next_key) {
        eprintln!("  keys {first} .. {}", next.wrapping_sub(1));
    }
    let f = &s.forwarder;
    if f.notices > 0 {
        eprintln!(
            "  fill {}: declared by the forwarder {} (its totals: lost before capture {}, no buffer {}, queue full {}), \
             lost on the path {}; gap notices {} ({} missing)",
            r.filled,
            s.fill_declared,
            f.captured_lost,
            f.no_buffer,
            f.queue_full,
            s.fill_path,
            f.notices,
            f.notices_missing
        );
    } else if s.key == "psn" && r.filled > 0 {
        eprintln!(
            "  fill {}: no gap notices came from the sender, so none is known to be the station's",
            r.filled
        );
    }
    if s.output_stalls > 0 {
        eprintln!(
            "  the output was slower than the stream: {} frames waited for it (the socket buffer took the slack; \
             see kernel drops)",
            s.output_stalls
        );
    }
    eprintln!(
        "  datagrams {}: received {}, late {}, duplicate {}, out of order {} (delivered), stray {}, restarts {}, \
         malformed {}, unknown thread {}, not frames {}, from other sources {}; kernel drops {}",
        s.datagrams,
        r.received,
        r.late,
        r.duplicate,
        r.out_of_order,
        r.stray,
        r.restarts,
        r.malformed,
        r.unknown_thread,
        s.rejected,
        s.wrong_source,
        s.kernel_drops
    );
    let l = &s.latency;
    if l.count > 0 {
        eprintln!(
            "  latency (VDIF time stamp to arrival, clock offset {} ns stated): min {} p50 {} p90 {} p99 {} max {} ms over {} frames{}",
            l.clock_offset_ns,
            ms(l.min_ns),
            ms(l.p50_ns),
            ms(l.p90_ns),
            ms(l.p99_ns),
            ms(l.max_ns),
            l.count,
            if l.negative > 0 {
                format!(
                    "; {} frames seemed to arrive before their time stamp (by up to {:.1} ms): check --clock-offset",
                    l.negative,
                    -l.most_negative_ns as f64 / 1e6
                )
            } else {
                String::new()
            }
        );
    }
    let bins: Vec<String> = s
        .latency_bins
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| format!("<{} {}", ms(Some(b.upper_ns)), b.count))
        .collect();
    if !bins.is_empty() {
        eprintln!("  latency histogram (ms: frames): {}", bins.join(", "));
    }
}
