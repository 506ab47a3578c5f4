//! `vlbiflow record`: record UDP streams of VDIF/Mark5B frames into one Mark6 scatter-gather or FlexBuff
//! scan across disks, in the foreground, until the duration is reached, Ctrl-C or SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vlbiflow_recorder::{Recorder, RecorderConfig, RecorderEvent, RecorderStatus, ScanSummary, StreamSpec};
use vlbiflow_scan::ScanFormat;

use crate::progress::{Line, Progress};
use crate::units::{fmt_bit_rate, fmt_bytes, parse_bytes, parse_seconds};
use crate::usage;

const EXAMPLES: &str = "\
Examples:
  # One VDIF stream with packet sequence numbers onto four disks, 12 seconds:
  vlbiflow record --stream a=vdif@127.0.0.1:4001,psn \\
      --disk /tmp/d/0 --disk /tmp/d/1 --disk /tmp/d/2 --disk /tmp/d/3 --scan t_xx_001 --duration 12

  # Two VDIF threads of an R2DBE on a Mark6's modules (disks by glob), until Ctrl-C:
  vlbiflow record --stream r2dbe=vdif@0.0.0.0:4001,threads=0,1,psn,frame-size=8224 \\
      --disk '/mnt/disks/*/*/data' --scan e25a01_Xx_No0001

  # A Mark5B stream recorded as FlexBuff (jive5ab vbs) chunks of 256 MB:
  vlbiflow record --stream m=m5b@10.0.0.2:46227 --disk '/mnt/disk*' --format flexbuff \\
      --block-size 256MB --scan ek051_ef_no0001

  # Capture only (nothing written): can one capture thread take these streams, apart from the disks?
  vlbiflow record --stream a=vdif@127.0.0.1:4001,psn --stream b=vdif@127.0.0.1:4002,psn \\
      --discard --duration 20

  # One fast stream over four capture threads (one core each), in PSN order on the disks:
  vlbiflow record --stream a=vdif@0.0.0.0:4001,psn,split=4 --disk '/mnt/disk*' --scan t_xx_002

Stream options (comma separated after the address):
  threads=0,1     record only these VDIF threads (others are counted as filtered)
  from=ADDR[/PREFIX]  accept datagrams from this source only (repeat; others are counted as wrong
                  source); recommended on networks others can send to
  psn             datagrams start with an 8-byte packet sequence number (Mark6 / jive5ab udps)
  frame-size=N    bytes per frame, header included (default 8224 for VDIF, 10016 for Mark5B)
  frame-rate=N    frames per second per thread (default: learned from the time stamps)
  split=N         receive the stream on N sockets and capture threads (2, 4, ... 64; needs psn):
                  the kernel steers runs of PSNs round them (the largest power of two that fits a
                  block with 64 frames to spare: 1024 at the default 10MB and 8224-byte frames) and
                  the blocks are numbered in PSN order, so the scan reads back as one stream

  # Record and forward in real time to the correlator as udps, paced to 2.1 Gb/s (e-VLBI):
  vlbiflow record --stream a=vdif@0.0.0.0:4001,psn --disk '/mnt/disk*' --scan ek051_ef_no0001 \\
      --forward udps@jive.example.org:46227,rate=2.1Gbps

Forwarding (--forward, repeatable): [LABEL=]PROTO@HOST:PORT[,threads=0,1][,rate=RATE][,burst=SIZE] \
[,queue=FRAMES][,stream=LABEL][,psn=N|input][,notices=off], PROTO udps (PSN + frame), vdif (frame alone) \
or tcp. Every recorded frame is copied to each destination's queue; a destination that cannot keep up \
loses frames (counted per destination), never the recording. A frame's PSN is its position in the \
stream (the input PSN, or its VDIF time and thread), so a frame lost before or inside the station is a \
hole at its own place, declared to udps destinations in gap notices. Details: docs/realtime.md.

The recording stops on --duration, Ctrl-C or SIGTERM, always leaving a flushed, consistent scan with \
metadata (<disk>/<scan>.vlbiflow.json) on every disk. A second Ctrl-C exits at once (scan marked incomplete).

`ready: receiving LABEL on ADDRESS` is printed once every socket is bound and receiving: start the senders \
after it. Exit status 1: a data problem (a stream received datagrams but stored none of them, or every disk \
failed).

Progress line: pkts (frames stored) and their bytes; lost (frames missing from the sequence, by PSN or \
VDIF time, including those below), rej (datagrams rejected: wrong size, not a frame), drop (frames \
dropped for want of a buffer: the disks fell behind), kern (datagrams the kernel dropped at the socket, \
SO_RXQ_OVFL); per disk its share; the pool's free blocks; input and write rates over the window.";

/// Record VDIF/Mark5B UDP streams to Mark6 scatter-gather or FlexBuff scans across disks.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Stream to record: LABEL=vdif@HOST:PORT[,threads=0,1][,psn][,frame-size=8224][,frame-rate=N]
    /// [,split=N] (or LABEL=m5b@HOST:PORT); repeat for several streams
    #[arg(long = "stream", value_name = "SPEC", required = true)]
    streams: Vec<String>,
    /// Accept datagrams from this source only, on every stream without its own from= (repeat);
    /// others are dropped and counted as wrong source. Recommended where others can reach the ports
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    from: Vec<vlbiflow_guard::net::Prefix>,
    /// Directory (mount point) to record to; repeat, or use a glob such as '/mnt/disks/*/*/data'
    #[arg(
        short = 'd',
        long = "disk",
        value_name = "DIR",
        required_unless_present = "discard"
    )]
    disks: Vec<String>,
    /// Scan name, e.g. EXP_STN_SCAN (file stem on every disk)
    #[arg(long, value_name = "NAME", required_unless_present = "discard")]
    scan: Option<String>,
    /// Capture only: receive, validate and account every datagram exactly as a recording, but write
    /// nothing (blocks go back to the pool); measures capture capacity apart from the disks
    #[arg(long)]
    discard: bool,
    /// Stop after this long (seconds, or e.g. 90s, 5m); default: until Ctrl-C or SIGTERM
    #[arg(long, value_name = "TIME")]
    duration: Option<String>,
    /// Nominal block (Mark6) or chunk (FlexBuff) size; holds a whole number of frames
    #[arg(long, value_name = "SIZE", default_value = "10MB")]
    block_size: String,
    /// On-disk layout
    #[arg(long, value_enum, default_value = "mark6")]
    format: FormatArg,
    /// Socket receive buffer per stream (forced past net.core.rmem_max when privileged)
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    recv_buffer: String,
    /// Fixed number of block buffers (default: start with one per stream plus ~1 GB of writer queue and
    /// grow while the disks are behind, up to --pool-memory)
    #[arg(long, value_name = "N")]
    pool_blocks: Option<usize>,
    /// Memory the block pool may grow to while the disks are behind (default: half of MemAvailable at the
    /// start, at most 64 GiB; never below the starting pool)
    #[arg(long, value_name = "SIZE", conflicts_with = "pool_blocks")]
    pool_memory: Option<String>,
    /// Capture threads (streams are spread over them; a stream with split=N has N threads of its own)
    #[arg(long, value_name = "N", default_value_t = 1)]
    capture_threads: usize,
    /// Experiment name for the metadata
    #[arg(long)]
    experiment: Option<String>,
    /// Station name for the metadata
    #[arg(long)]
    station: Option<String>,
    /// Do not try O_DIRECT
    #[arg(long)]
    buffered: bool,
    /// Do not enable UDP GRO (receive one datagram per message even from GSO senders)
    #[arg(long)]
    no_gro: bool,
    /// Print the final scan metadata as JSON on standard output (with --forward: plus a "forward" list)
    #[arg(long)]
    json: bool,
    /// Forward every recorded frame in real time to this destination (see below); repeat for several
    #[arg(long = "forward", value_name = "DEST")]
    forward: Vec<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FormatArg {
    Mark6,
    Flexbuff,
}

/// Expands `--disk` arguments (globs sorted, plain paths that must be directories); a bad one is a usage error.
fn expand_disks(args: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    match vlbiflow_scan::expand_disks(args) {
        Ok(d) => Ok(d),
        Err(e) => usage!("--{e}"),
    }
}

fn build_config(args: &Args) -> anyhow::Result<RecorderConfig> {
    let mut streams = Vec::new();
    for s in &args.streams {
        match StreamSpec::parse(s) {
            Ok(mut spec) => {
                if spec.from.is_empty() {
                    spec.from.0.clone_from(&args.from);
                }
                streams.push(spec)
            }
            Err(e) => usage!("--stream: {e}"),
        }
    }
    let disks = expand_disks(&args.disks)?;
    let scan = args.scan.clone().unwrap_or_else(|| "capture".into());
    let mut c = RecorderConfig::new(streams, disks, scan);
    c.discard = args.discard;
    c.format = match args.format {
        FormatArg::Mark6 => ScanFormat::Mark6,
        FormatArg::Flexbuff => ScanFormat::Flexbuff,
    };
    c.block_size = match parse_bytes(&args.block_size) {
        Ok(b) => b,
        Err(e) => usage!("--block-size: {e}"),
    };
    c.recv_buffer = match parse_bytes(&args.recv_buffer) {
        Ok(b) => b as usize,
        Err(e) => usage!("--recv-buffer: {e}"),
    };
    if let Some(d) = &args.duration {
        match parse_seconds(d) {
            Ok(s) if s > 0.0 => c.duration = Some(Duration::from_secs_f64(s)),
            Ok(_) => usage!("--duration must be positive"),
            Err(e) => usage!("--duration: {e}"),
        }
    }
    c.pool_blocks = args.pool_blocks;
    if let Some(m) = &args.pool_memory {
        c.pool_memory = match parse_bytes(m) {
            Ok(b) => Some(b),
            Err(e) => usage!("--pool-memory: {e}"),
        };
    }
    c.capture_threads = args.capture_threads;
    c.experiment = args.experiment.clone();
    c.station = args.station.clone();
    c.direct_io = !args.buffered;
    c.gro = !args.no_gro;
    if let Err(e) = c.validate() {
        usage!("{e}");
    }
    Ok(c)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = build_config(&args)?;
    // Signals first, so a Ctrl-C during start-up is not lost. First: graceful stop; second: exit now.
    let interrupted = crate::stop::on_interrupt(crate::stop::Second::ExitSaying(
        "vlbiflow record: second interrupt, exiting without flushing (scan stays incomplete)",
    ))?;
    let (forwarders, taps) = start_forwarding(&args, &config)?;
    let handle = Recorder::start_with_taps(config, taps).map_err(anyhow::Error::new)?;
    let events = handle.events();
    let cfg = handle.config().clone();
    eprintln!(
        "vlbiflow record: scan {} ({}) on {}, {} stream(s){}; Ctrl-C to stop",
        cfg.scan,
        match (cfg.discard, cfg.format) {
            (true, _) => "capture only",
            (false, ScanFormat::Mark6) => "Mark6 scatter-gather",
            (false, ScanFormat::Flexbuff) => "FlexBuff",
        },
        if cfg.discard {
            "no disk: nothing is written".to_owned()
        } else {
            format!("{} disk(s)", cfg.disks.len())
        },
        cfg.streams.len(),
        cfg.duration
            .map(|d| format!(", {:.1} s", d.as_secs_f64()))
            .unwrap_or_default(),
    );
    for ((s, a), runs) in cfg
        .streams
        .iter()
        .zip(handle.local_addrs())
        .zip(handle.split_runs())
    {
        eprintln!(
            "  stream {}: {:?} on {a}{}{}",
            s.label,
            s.kind,
            if s.psn { " with PSN" } else { "" },
            runs.map(|r| format!(
                ", split over {} sockets and capture threads by runs of {} PSNs",
                r.parts(),
                r.run_len()
            ))
            .unwrap_or_default()
        );
    }
    // Every socket is bound and its capture thread runs: a sender started from here on loses nothing.
    let receiving: Vec<String> = cfg
        .streams
        .iter()
        .zip(handle.local_addrs())
        .map(|(s, a)| format!("{} on {a}", s.label))
        .collect();
    eprintln!("vlbiflow record: ready: receiving {}", receiving.join(", "));

    let mut progress = Live::new();
    let stopped_at = loop {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(200)) {
            progress.event(&e);
        }
        if interrupted.load(Ordering::SeqCst) && !handle.is_stopping() {
            progress
                .display
                .say("vlbiflow record: stopping (flushing to disk) ...");
            handle.stop();
        }
        let status = handle.status();
        if handle.is_stopping() {
            // Stopped by --duration, capture stopped on it (this look may come up to a poll later).
            break cfg.duration.map_or(status.elapsed, |d| status.elapsed.min(d));
        }
        progress.tick(&status);
        if !forwarders.is_empty() {
            progress.forward(&forwarders);
        }
    };
    let summary = handle.wait().expect("first wait");
    let received = handle.receive_counts();
    for e in events.try_iter() {
        progress.event(&e);
    }
    progress.display.clear();
    print_summary(&mut std::io::stderr(), &summary, &received, stopped_at);
    let nothing = accepted_nothing(&summary, &progress.rejected);
    for line in &nothing {
        eprintln!("vlbiflow record: {line}");
    }
    // Capture has stopped (the taps are gone): the senders get a moment to empty their queues.
    let forward: Vec<_> = forwarders
        .into_iter()
        .flat_map(|f| f.finish(Duration::from_secs(2)))
        .collect();
    crate::cmd::relay::print_dests(&forward);
    if args.json {
        let mut out = std::io::stdout().lock();
        let mut v = serde_json::to_value(&summary.metadata)?;
        label_kernel_drops(&mut v, &received);
        if !forward.is_empty() {
            if let Some(o) = v.as_object_mut() {
                o.insert("forward".into(), serde_json::to_value(&forward)?);
            }
        }
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    }
    Ok(if summary.error.is_some() || !nothing.is_empty() {
        // 1: the recording has a data problem (a stream recorded nothing of what came, or disks failed).
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One loud line per stream that received datagrams but stored none of them, saying why (from its
/// counters and the first rejection the recorder reported) and what to change.
fn accepted_nothing(sum: &ScanSummary, rejected: &[(String, usize, usize)]) -> Vec<String> {
    sum.status
        .streams
        .iter()
        .filter(|s| s.counters.packets == 0 && s.counters.rejected + s.counters.filtered > 0)
        .map(|s| {
            let c = &s.counters;
            let why = match rejected.iter().find(|(label, _, _)| *label == s.label) {
                Some((_, got, expected)) if c.rejected > 0 && got != expected => format!(
                    "{} rejected as the wrong size (got {got} B, expected {expected} B): {}",
                    c.rejected,
                    vlbiflow_recorder::size_hint(*got, *expected)
                ),
                _ if c.rejected > 0 => format!(
                    "{} rejected (not frames of this stream's format; check frame-size=, frame-rate= and psn)",
                    c.rejected
                ),
                _ => String::new(),
            };
            let filtered = if c.filtered > 0 {
                format!(
                    "{}{} filtered (VDIF threads not in threads=)",
                    if why.is_empty() { "" } else { "; " },
                    c.filtered
                )
            } else {
                String::new()
            };
            format!(
                "STREAM {} RECORDED NOTHING: {} datagram(s) received, none accepted: {why}{filtered}",
                s.label,
                c.rejected + c.filtered
            )
        })
        .collect()
}

/// Starts a forwarder per stream that has `--forward` destinations; returns them and the recorder taps.
#[allow(clippy::type_complexity)]
fn start_forwarding(
    args: &Args,
    config: &RecorderConfig,
) -> anyhow::Result<(
    Vec<vlbiflow_evlbi::Forwarder>,
    Vec<Option<Box<dyn vlbiflow_recorder::FrameTap>>>,
)> {
    let dests = crate::cmd::relay::parse_dests(&args.forward, "--forward")?;
    let mut per_stream: Vec<Vec<vlbiflow_evlbi::DestSpec>> =
        config.streams.iter().map(|_| Vec::new()).collect();
    for d in dests {
        let i = match &d.stream {
            Some(label) => match config.streams.iter().position(|s| &s.label == label) {
                Some(i) => i,
                None => usage!("--forward {}: no stream {label:?} is recorded", d.label),
            },
            None if config.streams.len() == 1 => 0,
            None => usage!(
                "--forward {}: {} streams are recorded; say which with stream=LABEL",
                d.label,
                config.streams.len()
            ),
        };
        per_stream[i].push(d);
    }
    let mut forwarders = Vec::new();
    let mut taps = Vec::new();
    for (spec, dests) in config.streams.iter().zip(per_stream) {
        if dests.is_empty() {
            taps.push(None);
            continue;
        }
        for d in &dests {
            eprintln!(
                "vlbiflow record: stream {} forwarded to {} ({}@{}{})",
                spec.label,
                d.label,
                d.protocol.name(),
                d.address,
                d.rate_bps
                    .map(|r| format!(", paced to {}", fmt_bit_rate(r)))
                    .unwrap_or_default()
            );
        }
        let frame_len = spec.frame_size as usize;
        let source = vlbiflow_evlbi::ForwardSource::for_stream(spec);
        let (f, tap) = vlbiflow_evlbi::Forwarder::start(dests, frame_len, &source)?;
        forwarders.push(f);
        taps.push(Some(tap.into_recorder_tap(frame_len)));
    }
    Ok((forwarders, taps))
}

/// Live progress on stderr: one line rewritten in place on a terminal, a plain line every few seconds
/// otherwise (logs, pipes).
struct Live {
    display: Progress,
    status: Line,
    tty: bool,
    /// The recording's part of the status line, as last shown.
    line: String,
    last_print: Instant,
    last_bytes: u64,
    last_elapsed: Duration,
    /// The progress line the forwarding counters were last added to.
    forward_shown: Option<Instant>,
    /// Per stream, the first rejection reported: (label, datagram length, expected length).
    rejected: Vec<(String, usize, usize)>,
}

impl Live {
    fn new() -> Self {
        let display = Progress::stderr(true);
        Live {
            status: display.line(),
            tty: display.is_drawn(),
            display,
            line: String::new(),
            last_print: Instant::now(),
            last_bytes: 0,
            last_elapsed: Duration::ZERO,
            forward_shown: None,
            rejected: Vec::new(),
        }
    }

    /// Forwarding, on the line after the recording's (at the same pace).
    fn forward(&mut self, forwarders: &[vlbiflow_evlbi::Forwarder]) {
        if self.forward_shown == Some(self.last_print) {
            return;
        }
        self.forward_shown = Some(self.last_print);
        let all: Vec<_> = forwarders.iter().flat_map(|f| f.status()).collect();
        let line = format!("  forward | {}", crate::cmd::relay::dest_line(&all));
        if self.tty {
            let both = format!("{} | {}", self.line, line.trim_start_matches("  forward | "));
            self.status.set(both, false);
        } else {
            eprintln!("{line}");
        }
    }

    fn event(&mut self, e: &RecorderEvent) {
        if let RecorderEvent::Rejecting {
            stream,
            datagram_len,
            expected,
            ..
        } = e
        {
            if !self.rejected.iter().any(|(l, _, _)| l == stream) {
                self.rejected.push((stream.clone(), *datagram_len, *expected));
            }
        }
        self.display.say(&format!("vlbiflow record: {e}"));
    }

    fn tick(&mut self, s: &RecorderStatus) {
        let every = if self.tty {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(5)
        };
        if self.last_print.elapsed() < every {
            return;
        }
        self.last_print = Instant::now();
        let t = s.totals();
        let dt = (s.elapsed - self.last_elapsed).as_secs_f64().max(1e-3);
        let rate = (t.bytes - self.last_bytes) as f64 * 8.0 / dt;
        self.last_bytes = t.bytes;
        self.last_elapsed = s.elapsed;
        let ok = s.disks.iter().filter(|d| d.failed.is_none()).count();
        let disks: Vec<String> = s
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if d.failed.is_some() {
                    format!("d{i}:FAILED")
                } else {
                    format!("d{i}:{}", d.blocks)
                }
            })
            .collect();
        let disks = if s.disks.is_empty() {
            format!("capture only, {} blocks discarded", s.blocks)
        } else {
            format!("disks {ok}/{} blocks {}", s.disks.len(), disks.join(" "))
        };
        let f = &s.flow;
        // The disks-behind alarm (and when the pool runs dry) early in the line, where a terminal keeps it.
        let behind = match (f.disks_behind(), f.time_to_full) {
            (true, Some(t)) => format!(" | DISKS BEHIND: pool full in {t:.0}s"),
            (true, None) => " | DISKS BEHIND".into(),
            _ => String::new(),
        };
        let mut line = format!(
            "{:>6.1}s {} | {} pkts {} | lost {} rej {} drop {} kern {}{behind} | {disks} | pool {}",
            s.elapsed.as_secs_f64(),
            fmt_bit_rate(rate),
            t.packets,
            fmt_bytes(t.bytes),
            t.lost,
            t.rejected,
            t.dropped_no_buffer,
            t.kernel_drops,
            vlbiflow_recorder::status::pool_text(s.pool.free, s.pool.total, f.pool_limit, s.pool.block_bytes),
        );
        // Input against writes over the rate window.
        line.push_str(&format!(
            " | in {} write {} ({:.0} s average)",
            fmt_bit_rate(f.input_rate * 8.0),
            fmt_bit_rate(f.write_rate * 8.0),
            vlbiflow_recorder::flow::RATE_WINDOW.as_secs_f64()
        ));
        if self.tty {
            line.truncate(240);
            self.line.clone_from(&line);
        }
        self.status.set(line, true);
    }
}

/// Beside each stream's counters in `record --json`: what `kernel_drops` counts (`kernel_drops_unit`:
/// "datagrams", or "socket buffers" once GRO coalesced datagrams, since SO_RXQ_OVFL counts socket
/// buffers), with GRO the datagrams they held estimated at the mean per message received
/// (`kernel_drops_datagrams_estimate`), and the socket's `receive` counts.
fn label_kernel_drops(v: &mut serde_json::Value, received: &[vlbiflow_recorder::ReceiveCounts]) {
    let Some(streams) = v.get_mut("streams").and_then(|s| s.as_array_mut()) else {
        return;
    };
    for (s, r) in streams.iter_mut().zip(received) {
        let drops = s["counters"]["kernel_drops"].as_u64().unwrap_or(0);
        let (unit, estimate) = r.kernel_drops_meaning(drops);
        if let Some(o) = s.as_object_mut() {
            o.insert("kernel_drops_unit".into(), unit.into());
            if let Some(e) = estimate {
                o.insert("kernel_drops_datagrams_estimate".into(), e.into());
            }
            o.insert(
                "receive".into(),
                serde_json::json!({
                    "messages": r.messages,
                    "datagrams": r.datagrams,
                    "coalesced": r.coalesced,
                    "parts": r.parts,
                    "handed_on": r.handed_on,
                    "handoff_full": r.handoff_full,
                    "cut_copied": r.cut_copied,
                }),
            );
        }
    }
}

/// The closing summary of a scan (stderr for `record`, whose stdout carries `--json`; stdout for `demo`).
/// `received`: per stream what its socket delivered (saying what the kernel drop count counts), or empty.
pub(crate) fn print_summary(
    out: &mut dyn std::io::Write,
    sum: &ScanSummary,
    received: &[vlbiflow_recorder::ReceiveCounts],
    recording: Duration,
) {
    let m = &sum.metadata;
    let secs = recording.as_secs_f64().max(1e-3);
    if m.disks.is_empty() {
        let _ = writeln!(
            out,
            "capture only: recorded for {:.1} s (wall clock, start to stop), {} block(s) filled and discarded, \
             nothing written",
            secs, sum.status.blocks
        );
    } else {
        let _ = writeln!(
            out,
            "scan {}: {}, recorded for {:.1} s (wall clock, start to stop), {} block(s) on {} disk(s)",
            m.scan,
            if m.complete { "complete" } else { "INCOMPLETE" },
            secs,
            m.blocks,
            m.disks.len()
        );
    }
    for (i, s) in sum.status.streams.iter().enumerate() {
        let c = &s.counters;
        // The data rate over the data's own time span when the time stamps give it (as scan_check? says).
        let rate = match s.data_span() {
            Some(span) => c.bytes as f64 * 8.0 / span,
            None => s.rate_bps(),
        };
        let _ = writeln!(
            out,
            "  stream {}: {} packets, {}, lost {} (loss {}), rate {}",
            s.label,
            c.packets,
            fmt_bytes(c.bytes),
            c.lost,
            vlbiflow_units::fmt_fraction(c.loss_fraction(), 2),
            fmt_bit_rate(rate)
        );
        if c.packets > 0 {
            let mut data = Vec::new();
            if let Some(span) = s.data_span() {
                data.push(format!(
                    "data span {span:.3} s (first to last frame time stamp, plus one frame)"
                ));
            }
            if let Some(t) = m.streams.get(i).and_then(|x| x.first_frame_utc.as_deref()) {
                data.push(format!("first frame time {t}"));
            }
            if let Some(p) = s.first_psn {
                data.push(format!(
                    "first PSN {p} (frames numbered before it are not counted)"
                ));
            }
            if !data.is_empty() {
                let _ = writeln!(out, "    {}", data.join("; "));
            }
        }
        let extra: Vec<String> = [
            ("out of order", c.out_of_order),
            ("duplicates", c.duplicates),
            ("invalid frames", c.invalid_frames),
            ("rejected", c.rejected),
            ("filtered", c.filtered),
            ("wrong source", c.wrong_source),
            ("dropped (no buffer)", c.dropped_no_buffer),
            ("restarts", s.restarts),
        ]
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .chain((c.kernel_drops > 0).then(|| kernel_drops_text(c.kernel_drops, received.get(i))))
        .collect();
        if !extra.is_empty() {
            let _ = writeln!(out, "    {}", extra.join(", "));
        }
        if let Some(r) = received.get(i).filter(|r| r.parts > 1) {
            let _ = writeln!(
                out,
                "    split over {} sockets and capture threads: {} datagram(s) arrived at another run's \
                 socket and were accounted by their own{}; {} frame(s) copied where a batch brought a later run",
                r.parts,
                r.handed_on,
                if r.handoff_full > 0 {
                    format!(" ({} could not be handed on and count as lost)", r.handoff_full)
                } else {
                    String::new()
                },
                r.cut_copied
            );
        }
    }
    for d in &sum.status.disks {
        let state = match &d.failed {
            Some(why) => format!(" FAILED: {why}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  disk {}: {} in {} block(s), write rate {}/s{}{}",
            d.path.display(),
            fmt_bytes(d.bytes),
            d.blocks,
            fmt_bytes(d.write_rate() as u64),
            if d.direct { " (O_DIRECT)" } else { "" },
            state
        );
    }
    let dropped = sum.status.totals().dropped_no_buffer;
    let p = &sum.status.pool;
    if dropped > 0 {
        let bytes: u64 = sum
            .status
            .streams
            .iter()
            .zip(&m.streams)
            .map(|(s, meta)| s.counters.dropped_no_buffer * u64::from(meta.frame_size))
            .sum();
        let _ = writeln!(
            out,
            "  DROPPED {dropped} frame(s) ({}) for lack of buffer memory: the disks fell behind and the pool \
             ({} blocks of {}, {} at most) was full; add disks, or allow more memory (--pool-memory)",
            fmt_bytes(bytes),
            p.total,
            fmt_bytes(p.block_bytes as u64),
            fmt_bytes((sum.status.flow.pool_limit * p.block_bytes) as u64),
        );
    }
    if let Some(e) = &sum.error {
        let _ = writeln!(out, "vlbiflow record: error: {e}");
    }
}

/// "kernel drops N datagrams", or with GRO "kernel drops N socket buffers (~M datagrams ...)": the
/// kernel counts socket buffers, and a GRO super-datagram is one buffer of several frames.
fn kernel_drops_text(drops: u64, received: Option<&vlbiflow_recorder::ReceiveCounts>) -> String {
    match received.map(|r| r.kernel_drops_meaning(drops)) {
        Some((unit, None)) => format!("kernel drops {drops} {unit}"),
        Some((unit, Some(e))) => format!(
            "kernel drops {drops} {unit} (GRO super-datagrams: ~{e} datagrams at the mean per message; \
             frames missing are counted in lost)"
        ),
        None => format!("kernel drops {drops} socket buffers (datagrams, or GRO super-datagrams)"),
    }
}
