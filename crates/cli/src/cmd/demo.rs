//! `vlbiflow demo`: the whole chain on built-in defaults, in one process, over loopback: a simulated
//! backend sends VDIF (two threads, noise with a tone, PSN) to the recorder, which writes a Mark6
//! scatter-gather scan across four disks in a temporary directory; then the scan is checked.

use crate::progress::Progress;
use crate::units::{fmt_bit_rate, parse_bit_rate, parse_seconds};
use crate::usage;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vlbiflow_checker::{check, CheckConfig, StatsConfig};
use vlbiflow_formats::time::{UtcTime, VdifTime};
use vlbiflow_gen::net::{send_streams, NetEvent, NetOptions};
use vlbiflow_gen::{GenPlan, GenRequest, PayloadKind, RateRequest, StartTime, StopAfter};
use vlbiflow_reader::source::locate_scan;
use vlbiflow_recorder::{Recorder, RecorderConfig, StreamSpec};

const EXAMPLES: &str = "\
Examples:
  # The default: 10 s at 1 Gb/s into a temporary directory that is removed afterwards
  vlbiflow demo

  # Faster and longer, keeping the scan (four disk directories in /tmp/demo) to look at later
  vlbiflow demo --rate 4Gbps --duration 30 --keep /tmp/demo
  vlbiflow ls /tmp/demo/disk*
  vlbiflow check demo_xx_001 --disk '/tmp/demo/disk*' --stats --plot /tmp/demo/spectrum.png";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// How long the backend sends
    #[arg(long, default_value = "10", value_name = "SECONDS")]
    duration: String,
    /// Frame bit rate of the simulated backend (131.6 kb/s at least)
    #[arg(long, default_value = "1Gbps", value_name = "RATE")]
    rate: String,
    /// Record into this directory (created; four disk directories inside) and keep it
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Print the outcome as JSON on standard output (the frames sent, the recording's metadata, the
    /// check's report); the running commentary then goes to standard error
    #[arg(long)]
    json: bool,
}

/// A line of the demo's commentary: standard output, or standard error with `--json` (whose object
/// standard output carries).
macro_rules! say {
    ($json:expr, $($t:tt)*) => {
        if $json {
            eprintln!($($t)*)
        } else {
            outln!($($t)*)
        }
    };
}

const SCAN: &str = "demo_xx_001";
/// The tone, where the band is wide enough for it to sit in its lower half.
const TONE_HZ: f64 = 10e6;
/// Backend threads, and the bytes of each frame (header included).
const THREADS: u16 = 2;
const FRAME_BYTES: usize = 8224;

/// Where the demo puts its tone for a real-sampled band of `sample_rate_hz`: at 10 MHz when that is in
/// the lower half of the band (up to the Nyquist frequency), otherwise at a quarter of the band, in whole
/// Hz, so that every rate has its tone well inside the band.
fn tone_hz(sample_rate_hz: u64) -> f64 {
    let nyquist = sample_rate_hz as f64 / 2.0;
    if TONE_HZ < nyquist / 2.0 {
        TONE_HZ
    } else {
        (nyquist / 4.0).floor()
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let seconds = match parse_seconds(&a.duration) {
        Ok(s) if s > 0.0 && s <= 3600.0 => s,
        Ok(_) => usage!("--duration must be in (0, 3600] seconds"),
        Err(e) => usage!("--duration {e}"),
    };
    let bps = match parse_bit_rate(&a.rate) {
        Ok(b) => b,
        Err(e) => usage!("--rate {e}"),
    };
    // one frame per second from each thread at least
    let min_bps = f64::from(THREADS) * FRAME_BYTES as f64 * 8.0;
    if bps.is_nan() || bps < min_bps {
        usage!(
            "--rate {}: the demo needs at least {} (one {FRAME_BYTES}-byte frame per second from each of its {THREADS} threads)",
            a.rate,
            fmt_bit_rate(min_bps)
        );
    }
    let request = GenRequest {
        thread_ids: (0..THREADS).collect(),
        rate: RateRequest::BitsPerSecond(bps),
        stop: StopAfter::Seconds(seconds),
        frame_size: FRAME_BYTES,
        payload: PayloadKind::Noise,
        psn: true,
        start: StartTime::Now,
        ..Default::default()
    };
    // the rate sets the sample rate, and that where the tone goes
    let tone = match GenPlan::new(request.clone()) {
        Ok(p) => tone_hz(p.sample_rate_hz),
        Err(e) => usage!("{e}"),
    };
    let plan = match GenPlan::new(GenRequest {
        payload: PayloadKind::Tone { hz: tone },
        ..request
    }) {
        Ok(p) => p,
        Err(e) => usage!("{e}"),
    };

    // Where the disks live: a temporary directory unless the user wants to keep the scan.
    let tmp;
    let root = match &a.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("vlbiflow-demo-")
                .tempdir()
                .context("creating a temporary directory")?;
            tmp.path().to_owned()
        }
    };
    let disks: Vec<PathBuf> = (0..4).map(|i| root.join(format!("disk{i}"))).collect();
    for d in &disks {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }

    say!(
        a.json,
        "vlbiflow demo: simulated backend -> recorder -> check, over loopback"
    );
    say!(
        a.json,
        "  disks: {}/disk0..3 ({})",
        root.display(),
        if a.keep.is_some() {
            "kept"
        } else {
            "removed at the end"
        }
    );
    say!(a.json,
        "  backend: {THREADS} VDIF threads, {} frames/s each of {FRAME_BYTES} bytes, 2-bit noise with a {} tone, {} for {seconds} s",
        plan.frame_rate,
        if tone >= 1e6 {
            format!("{} MHz", tone / 1e6)
        } else {
            format!("{} kHz", tone / 1e3)
        },
        fmt_bit_rate(plan.frame_bits_per_second())
    );

    // 1. The recorder, on a free loopback port.
    let spec = StreamSpec::parse("demo=vdif@127.0.0.1:0,psn").expect("built-in stream spec");
    let mut config = RecorderConfig::new(vec![spec], disks.clone(), SCAN);
    config.experiment = Some("demo".into());
    config.station = Some("Xx".into());
    let recorder = Recorder::start(config)
        .map_err(anyhow::Error::new)
        .context("starting the recorder")?;
    let dest = recorder.local_addrs()[0];
    let events = recorder.events();
    say!(
        a.json,
        "  recorder: scan {SCAN}, Mark6 scatter-gather, listening on {dest}"
    );

    // 2. The backend, on its own thread, paced on the wall clock.
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let start = VdifTime::from_unix_second(UtcTime::now().unix_seconds + 1)?;
    let sender = {
        let plan = plan.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("demo-gen".into())
            .spawn(move || {
                send_streams(&plan, start, &[dest], &NetOptions::default(), &stop, &mut |e| {
                    if let NetEvent::Warning(w) = e {
                        eprintln!("gen: warning: {w}");
                    }
                })
            })?
    };

    // 3. Progress until the backend is done: what the recorder has, once a second.
    let display = if a.json {
        Progress::stderr(true)
    } else {
        Progress::stdout(true)
    };
    let status = display.line();
    let began = Instant::now();
    while !sender.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        for e in events.try_iter() {
            display.say(&format!("  recorder: {e}"));
        }
        let st = recorder.status();
        let t = st.totals();
        let line = format!(
            "  {:5.1} s  recorded {:>9} frames  {:>12}  lost {}  blocks {}",
            began.elapsed().as_secs_f64(),
            t.packets,
            fmt_bit_rate(st.streams.first().map_or(0.0, |s| s.rate_bps())),
            t.lost,
            st.blocks
        );
        status.set(line, false);
    }
    drop(display);
    let gen = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the generator thread panicked"))??;
    // Let the last datagrams land before stopping.
    std::thread::sleep(Duration::from_millis(300));
    recorder.stop();
    let summary = recorder.wait().context("the recorder ended without a summary")?;
    for e in events.try_iter() {
        say!(a.json, "  recorder: {e}");
    }
    say!(
        a.json,
        "  gen: sent {} frames at {} (worst 1 s window {:+.3}%)",
        gen.frames,
        fmt_bit_rate(gen.achieved_bps),
        gen.worst_window_error * 100.0
    );
    let received = recorder.receive_counts();
    let mut commentary: Box<dyn std::io::Write> = if a.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    super::record::print_summary(&mut commentary, &summary, &received, summary.status.elapsed);

    // 4. Check the scan as a station would after a recording.
    let recording = locate_scan(SCAN, &disks).context("finding the scan on the disks")?;
    let report = check(
        &recording,
        CheckConfig {
            stats: Some(StatsConfig::default()),
            ..Default::default()
        },
        |_| {},
    );
    say!(a.json, "\nvlbiflow check {SCAN}:");
    if a.json {
        eprint!("{}", report.human());
    } else {
        out!("{}", report.human());
    }

    let stored = summary.metadata.totals().packets;
    let ok = !report.has_errors() && stored == gen.frames && summary.error.is_none();
    say!(
        a.json,
        "\ndemo: {} of {} frames sent were recorded and checked: {}",
        stored,
        gen.frames,
        if ok {
            "no loss"
        } else {
            "SOMETHING WAS LOST (see above)"
        }
    );
    if a.json {
        let v = serde_json::json!({
            "ok": ok,
            "interrupted": stop.load(Ordering::SeqCst),
            "scan": SCAN,
            "directory": a.keep.as_ref().map(|_| root.display().to_string()),
            "sent_frames": gen.frames,
            "sent_bps": gen.achieved_bps,
            "recorded_frames": stored,
            "recording": summary.metadata,
            "check": report,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(if stop.load(Ordering::SeqCst) {
        ExitCode::from(crate::cmd::exit::INTERRUPTED)
    } else if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tone_stays_at_10_mhz_where_it_fits_and_moves_into_narrow_bands() {
        // the default, 1 Gb/s: 7600 frames/s per thread of 32768 samples
        assert_eq!(tone_hz(7600 * 32768), 10e6);
        // 16 Mb/s: 122 frames/s per thread, a band of 1.998848 MHz
        assert_eq!(tone_hz(122 * 32768), 499_712.0);
        // the least the demo sends, one frame per second per thread
        assert_eq!(tone_hz(32768), 4096.0);
    }
}
