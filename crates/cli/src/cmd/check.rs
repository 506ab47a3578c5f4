//! `vlbiflow check`: verify a recorded scan or frame files.

use crate::progress::Progress;
use crate::usage;
use std::path::PathBuf;
use std::process::ExitCode;
use vlbiflow_checker::{check, CheckConfig, StatsConfig};
use vlbiflow_reader::{locate, LocateError};

const EXAMPLES: &str = "\
Examples:
  # A scan recorded across the disks of two Mark6 modules (globs are expanded by vlbiflow)
  vlbiflow check exp_st_no0001 --disk '/mnt/disks/[12]/*/data'

  # Explicit files: Mark6 scatter-gather files (all of one scan), FlexBuff chunks, VDIF, Mark5B
  vlbiflow check /mnt/disks/1/*/data/exp_st_no0001.vdif
  vlbiflow check gathered.vdif --frame-rate 125000

  # For scripts: JSON on stdout, exit status 0 = OK or warnings only, 1 = data problems, 2 = usage
  vlbiflow check exp_st_no0001 --disk /mnt/disk0 --disk /mnt/disk1 --json | jq .loss_fraction

  # Sample statistics and spectra, plotted to a PNG
  vlbiflow check scan.vdif --stats --plot spectra.png

Loss fraction = missing / (present + missing) frames, as in Haystack's recording test tables. The frame rate \
comes from --frame-rate, the scan metadata, EDV 1/3 sample rates, or the highest frame number + 1 (raised \
by one when that makes the sample rate a round number of MHz or kHz: the last frame of each second was lost).

In the summary lines: missing = frames absent from a thread's sequence (fill = those the recorder wrote \
as fill frames, counted in missing); loss fraction 0 when nothing is missing; dup = duplicated (a frame \
seen again); ooo = out of order (a frame that arrived after a later one: late, not lost); invalid = \
frames whose header has the invalid-data flag set.";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Scan name (with --disk), or the files to read
    #[arg(value_name = "SCAN|FILES", required = true)]
    scan: Vec<String>,
    /// Directory holding the scan's files; repeat, or use a glob pattern
    #[arg(long, short, value_name = "DIR")]
    disk: Vec<String>,
    /// Frames per second per thread, if the headers do not say (VDIF EDV 0)
    #[arg(long, value_name = "N")]
    frame_rate: Option<u32>,
    /// Print the report as JSON on standard output
    #[arg(long)]
    json: bool,
    /// Sample-state statistics and a spectrum per channel
    #[arg(long)]
    stats: bool,
    /// Draw the spectra into this PNG (implies --stats)
    #[arg(long, value_name = "PNG")]
    plot: Option<PathBuf>,
    /// Frames per second of each thread used for statistics
    #[arg(long, value_name = "N", default_value_t = 8)]
    stats_frames: u32,
    /// Validation threads for plain files (default: one per core); 1 checks in one pass. Mark6 and
    /// FlexBuff scans are validated by their readers (one per file or disk) unless this is 1; --stats is
    /// checked in one pass
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// No progress on standard error
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.frame_rate == Some(0) {
        usage!("--frame-rate must be positive");
    }
    if args.threads == Some(0) {
        usage!("--threads must be positive");
    }
    let rec = match locate(&args.scan, &args.disk) {
        Ok(r) => r,
        Err(LocateError::Usage(m)) => usage!("{m}"),
        Err(e) => return Err(e.into()),
    };
    let stats = (args.stats || args.plot.is_some()).then(|| StatsConfig {
        frames_per_second: args.stats_frames.max(1),
        plot: args.plot.clone(),
        ..Default::default()
    });
    let config = CheckConfig {
        frame_rate: args.frame_rate,
        stats,
        threads: args.threads,
        ..Default::default()
    };
    let total = rec.total_bytes();
    let display = Progress::stderr(!args.quiet && total > (1 << 30));
    let bar = display.bar("checked");
    bar.set_length(total);
    let drawn = display.is_drawn();
    let report = check(&rec, config, |done| {
        if drawn {
            bar.set_position(done);
            bar.set_message(format!(
                "{:.1} of {:.1} GB",
                done as f64 / 1e9,
                total as f64 / 1e9
            ));
        }
    });
    drop(display);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.human());
    }
    Ok(ExitCode::from(status(&report)))
}

/// The exit status of a check: 5 (I/O) when a file could not be opened or read, whatever else was found
/// (the data could not all be looked at), else 1 for data problems, else 0.
fn status(report: &vlbiflow_checker::Report) -> u8 {
    use vlbiflow_reader::finding::{FindingKind, Severity};
    let unreadable = report
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::Io && f.severity == Severity::Error);
    if unreadable {
        super::exit::IO
    } else if report.has_errors() {
        super::exit::PROBLEMS
    } else {
        super::exit::OK
    }
}
