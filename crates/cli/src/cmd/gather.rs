//! `vlbiflow gather`: a scan reassembled into one frame file or standard output.

use crate::progress::Progress;
use crate::usage;
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use vlbiflow_reader::gather::{gather_stream, stream_labels};
use vlbiflow_reader::{locate, LocateError, Severity};

const EXAMPLES: &str = "\
Examples:
  # A Mark6 scan from all disks of modules 1 and 2 into one VDIF file
  vlbiflow gather exp_st_no0001 --disk '/mnt/disks/[12]/*/data' -o exp_st_no0001.vdif

  # FlexBuff chunks from two mount points, to standard output
  vlbiflow gather exp_st_no0001 --disk /mnt/disk0 --disk /mnt/disk1 -o - | other_tool

  # Explicit scatter-gather files (all files of one scan)
  vlbiflow gather /data/*/exp_st_no0001.vdif -o out.vdif

  # A scan vlbiflow recorded from several streams: one file per stream (out.a.vdif,
  # out.b.vdif, ...), or only stream b
  vlbiflow gather exp_st_no0002 --disk '/data/*' -o out.vdif
  vlbiflow gather exp_st_no0002 --disk '/data/*' -o out_b.vdif --stream b

Blocks are written in block-number order with their block headers stripped, like Haystack's gather and DiFX's \
mk6gather; garbage and partial frames are left out and reported on standard error. Exit status 1 if problems \
were found (the output then holds every frame that could be read), 2 on usage errors.";

#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Scan name (with --disk), or the files to read
    #[arg(value_name = "SCAN|FILES", required = true)]
    scan: Vec<String>,
    /// Directory holding the scan's files; repeat, or use a glob pattern
    #[arg(long, short, value_name = "DIR")]
    disk: Vec<String>,
    /// Output file, or - for standard output. For a scan of several streams (from its vlbiflow metadata)
    /// each stream goes to its own file, the stream's label inserted before the extension
    #[arg(long, short, value_name = "FILE|-")]
    output: String,
    /// Only the blocks of this recorded stream (scans of several streams)
    #[arg(long, value_name = "LABEL")]
    stream: Option<String>,
    /// Overwrite an existing output file
    #[arg(long)]
    force: bool,
    /// No progress or findings on standard error
    #[arg(long, short)]
    quiet: bool,
    /// Print the summary as JSON on standard output: per output file its stream, frames, fill frames,
    /// bytes written and read, and the findings (not with -o -)
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rec = match locate(&args.scan, &args.disk) {
        Ok(r) => r,
        Err(LocateError::Usage(m)) => usage!("{m}"),
        Err(e) => return Err(e.into()),
    };
    let total = rec.total_bytes();
    let display = Progress::stderr(!args.quiet && total > (1 << 30));
    let bar = display.bar("gathered");
    let drawn = display.is_drawn();
    let progress = |done: u64, total: u64| {
        if drawn {
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(format!(
                "{:.1} of {:.1} GB",
                done as f64 / 1e9,
                total as f64 / 1e9
            ));
        }
    };
    // Which streams go where: the whole scan, one stream, or each stream of a scan of several to its file.
    let labels = stream_labels(&rec);
    let jobs: Vec<(Option<usize>, String)> = match (&args.stream, labels.is_empty()) {
        (Some(l), false) => match labels.iter().position(|x| x == l) {
            Some(i) => vec![(Some(i), args.output.clone())],
            None => usage!("--stream {l}: the scan's streams are {}", labels.join(", ")),
        },
        (Some(l), true) => {
            usage!("--stream {l}: the scan has one stream (no per-stream blocks in its metadata)")
        }
        (None, true) => vec![(None, args.output.clone())],
        (None, false) if args.output == "-" => usage!(
            "the scan has {} streams ({}): choose one with --stream to write to standard output",
            labels.len(),
            labels.join(", ")
        ),
        (None, false) => labels
            .iter()
            .enumerate()
            .map(|(i, l)| (Some(i), per_stream_path(&args.output, l)))
            .collect(),
    };
    for (_, out) in &jobs {
        if out != "-" && PathBuf::from(out).exists() && !args.force {
            usage!("{out} exists; use --force to overwrite");
        }
    }
    if args.json && jobs.iter().any(|(_, o)| o == "-") {
        usage!("--json writes to standard output: give -o a file");
    }
    let mut errors = false;
    let mut outputs = Vec::new();
    for (stream, out) in jobs {
        let summary = if out == "-" {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            let s = gather_stream(&rec, stream, &mut lock, progress).context("writing to standard output")?;
            lock.flush().context("writing to standard output")?;
            s
        } else {
            let path = PathBuf::from(&out);
            let mut f =
                std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            let s = gather_stream(&rec, stream, &mut f, progress)
                .with_context(|| format!("writing {}", path.display()))?;
            f.sync_all()
                .with_context(|| format!("writing {}", path.display()))?;
            s
        };
        display.clear();
        if args.json {
            outputs.push(serde_json::json!({
                "output": out,
                "stream": stream.map(|i| labels[i].clone()),
                "frames": summary.frames,
                "fill_frames": summary.fill,
                "bytes_written": summary.bytes_written,
                "bytes_read": summary.bytes_read,
                "findings": summary.findings,
            }));
        }
        for f in &summary.findings {
            errors |= f.severity == Severity::Error;
            if !args.quiet && f.severity >= Severity::Warn {
                eprintln!("{f}");
            }
        }
        if !args.quiet {
            eprintln!(
                "gathered {} frames{} ({} bytes) from {} bytes read{}",
                summary.frames,
                if summary.fill > 0 {
                    format!(" and {} fill frames", summary.fill)
                } else {
                    String::new()
                },
                summary.bytes_written,
                summary.bytes_read,
                if out == "-" {
                    String::new()
                } else {
                    format!(" into {out}")
                }
            );
        }
    }
    if args.json {
        let v = serde_json::json!({ "ok": !errors, "outputs": outputs });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(if errors {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `out.vdif` with stream `a` -> `out.a.vdif` (no extension: `out.a`).
fn per_stream_path(output: &str, label: &str) -> String {
    let p = std::path::Path::new(output);
    match (p.file_stem(), p.extension()) {
        (Some(stem), Some(ext)) => p
            .with_file_name(format!(
                "{}.{label}.{}",
                stem.to_string_lossy(),
                ext.to_string_lossy()
            ))
            .display()
            .to_string(),
        _ => format!("{output}.{label}"),
    }
}
