//! `vlbiflow ls`: the scans on a set of disks.

use std::path::PathBuf;
use std::process::ExitCode;
use vlbiflow_reader::ls::list_scans;
use vlbiflow_reader::source::expand_disks;

const EXAMPLES: &str = "\
Examples:
  # Every scan on the disks of Mark6 modules 1..4 (d-plane layout), also those d-plane wrote
  vlbiflow ls '/mnt/disks/[1-4]/*/data'

  # vlbiflow or jive5ab FlexBuff mount points, as JSON
  vlbiflow ls /mnt/disk0 /mnt/disk1 --json

jive5ab opens a Mark6 scan only by its file name, extension included: where that differs from the scan \
name, the listing says so (`jive5ab: scan_set = exp_st_scan1.vdif`); see docs/jive5ab.md.

Scans recorded by vlbiflow are described from their metadata (start, duration, streams, complete or not); \
Mark6 files and FlexBuff chunks of other recorders from their file and frame headers (duration in whole \
seconds, as the frame rate is not in the headers).";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Disk directories or glob patterns (default: the current directory)
    #[arg(value_name = "DISKS")]
    disks: Vec<String>,
    /// Disk directory or glob pattern, as the other commands take it (repeatable; with DISKS, both)
    #[arg(short = 'd', long = "disk", value_name = "DIR")]
    disk: Vec<String>,
    /// Print the list as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut patterns = args.disks;
    patterns.extend(args.disk);
    if patterns.is_empty() {
        patterns.push(".".to_string());
    }
    let disks: Vec<PathBuf> = match expand_disks(&patterns) {
        Ok(d) => d,
        Err(e) => crate::usage!("{e}"),
    };
    let scans = list_scans(&disks);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&scans)?);
        return Ok(ExitCode::SUCCESS);
    }
    if scans.is_empty() {
        outln!("no scans on {} disk(s)", disks.len());
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<28} {:<8} {:>5} {:>12} {:<24} {:>10} {:<10} streams",
        "scan",
        "layout",
        "disks",
        "size",
        "start",
        "duration",
        "state"
    );
    for s in &scans {
        let state = match s.complete {
            Some(true) => "complete",
            Some(false) => "INCOMPLETE",
            None => "foreign",
        };
        outln!(
            "{:<28} {:<8} {:>5} {:>12} {:<24} {:>10} {:<10} {}{}",
            s.name,
            s.layout,
            s.disks,
            crate::units::fmt_bytes(s.bytes),
            s.start_utc.as_deref().unwrap_or("-"),
            s.duration_s.map_or("-".to_string(), |d| format!("{d:.1} s")),
            state,
            s.streams.join("; "),
            s.note.as_ref().map_or(String::new(), |n| format!(" [{n}]"))
        );
        if s.jive5ab_name != s.name {
            outln!("{:<28} jive5ab: scan_set = {}", "", s.jive5ab_name);
        }
    }
    Ok(ExitCode::SUCCESS)
}
