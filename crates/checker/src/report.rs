//! Running a whole check (readers, framer, engine) and its report: a short human verdict and JSON.

use crate::blocks::{BlockCheck, Lane, LaneOf};
use crate::engine::{CheckConfig, Checker, EngineReport};
use crate::parallel::Sink;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;
use vlbiflow_reader::finding::FileTable;
use vlbiflow_reader::finding::{Finding, FindingKind, FindingLog, Severity};
use vlbiflow_reader::framer::Framer;
use vlbiflow_reader::read::BlockWork;
use vlbiflow_reader::read::{BlockStats, ReadEvent, ReadPipeline};
use vlbiflow_reader::source::{Recording, Sources};
use vlbiflow_units::fmt_fraction;

/// Everything `vlbiflow check` reports.
#[derive(Debug, Serialize)]
pub struct Report {
    pub scan: String,
    /// "mark6", "flexbuff" or "plain".
    pub layout: &'static str,
    pub files: usize,
    /// "ok", "warn" or "error".
    pub verdict: &'static str,
    #[serde(flatten)]
    pub engine: EngineReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockStats>,
    /// Per recorded stream, in scans of several streams whose metadata maps blocks to streams.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamCheck>,
    pub garbage_bytes: u64,
    pub findings: Vec<Finding>,
    pub findings_omitted: Vec<OmittedFindings>,
    pub bytes_read: u64,
    pub elapsed_s: f64,
    pub read_rate_bytes_per_s: f64,
}

/// The check of one recorded stream of a scan of several streams.
#[derive(Debug, Serialize)]
pub struct StreamCheck {
    pub label: String,
    pub frames: u64,
    pub missing: u64,
    pub fill: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub loss_fraction: f64,
    /// Blocks (chunks) of the stream read.
    pub blocks: u64,
}

/// Count of findings of one kind not listed.
#[derive(Debug, Serialize)]
pub struct OmittedFindings {
    pub kind: FindingKind,
    pub severity: Severity,
    pub count: u64,
}

impl Report {
    /// Whether the check found data problems (exit status 1).
    pub fn has_errors(&self) -> bool {
        self.verdict == "error"
    }
}

/// Checks a recording: reads it in block order, frames it and runs the engine. `progress` is called with
/// the bytes read so far every few hundred MB.
pub fn check(rec: &Recording, config: CheckConfig, progress: impl FnMut(u64)) -> Report {
    check_split(rec, config, progress, crate::parallel::Split::Cores)
}

/// [`check`] with the frame stream of a plain recording split as `split` says.
pub(crate) fn check_split(
    rec: &Recording,
    mut config: CheckConfig,
    mut progress: impl FnMut(u64),
    split: crate::parallel::Split,
) -> Report {
    let started = Instant::now();
    let mut log = FindingLog::default();
    for f in &rec.findings {
        log.push(f.clone());
    }
    if config.metadata_frame_rate.is_none() {
        config.metadata_frame_rate = rec.frame_rate_hint();
    }
    let plot_path = config.stats.as_ref().and_then(|s| s.plot.clone());
    if let Some(plan) = crate::parallel::plan(rec, &config, &split) {
        let run = crate::parallel::run(&plan, config, &mut log, &mut progress);
        let outcome = Outcome {
            files: plan.files.clone(),
            log,
            engine: run.checker.finish(),
            streams: Vec::new(),
            blocks: None,
            garbage_bytes: run.garbage_bytes,
            read: run.read,
        };
        return conclude(rec, outcome, plot_path, started);
    }
    // A scan of several streams whose metadata says which block holds which stream's frames is checked
    // stream by stream (one framer and engine each), then reported per stream and in total.
    let routes = rec
        .metadata
        .as_ref()
        .filter(|m| m.streams.len() > 1 && m.streams.iter().any(|s| !s.blocks.is_empty()));
    let lanes_n = routes.map_or(1, |m| m.streams.len());
    let make_lanes = |files: &Arc<FileTable>| -> Vec<Lane> {
        (0..lanes_n)
            .map(|i| {
                let mut cfg = config.clone();
                if let Some(m) = routes {
                    cfg.metadata_frame_rate = m.streams[i].frame_rate.or(cfg.metadata_frame_rate);
                    if i > 0 {
                        // Sample statistics and their plot for the first stream only.
                        cfg.stats = None;
                    }
                }
                let framer = Framer::new(rec.frame_format(), rec.frame_len_hint(), files.clone());
                Lane::new(framer, Checker::new(rec.frame_format(), cfg, files.clone()))
            })
            .collect()
    };
    let meta = routes.cloned().map(Arc::new);
    let lane_of: LaneOf = Arc::new(move |block: Option<u32>| match (&meta, block) {
        (Some(m), Some(b)) => m.stream_of_block(u64::from(b)),
        _ => Some(0),
    });
    let threads = config
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let numbered = matches!(rec.sources, Sources::Mark6(_) | Sources::Flexbuff(_));
    let on_readers = numbered && config.stats.is_none() && threads > 1;
    let mut pipe = if on_readers {
        // Every reader frames and checks the blocks it reads; the blocks are joined in order here.
        let make = |files: &Arc<FileTable>| -> Box<dyn BlockWork> {
            Box::new(BlockCheck::new(&make_lanes(files), lane_of.clone()))
        };
        ReadPipeline::start_with_work(rec, &make)
    } else {
        ReadPipeline::start(rec)
    };
    let files = pipe.files();
    let mut lanes = make_lanes(&files);
    let (unassigned, read) = if on_readers {
        crate::blocks::run(&mut pipe, &mut lanes, &lane_of, &mut log, &mut progress)
    } else {
        one_pass(&mut pipe, &mut lanes, &*lane_of, &mut log, &mut progress)
    };
    for lane in &mut lanes {
        lane.framer.finish_segment(&mut Sink {
            checker: &mut lane.checker,
            log: &mut log,
        });
    }
    if unassigned > 0 {
        log.push(Finding::new(
            Severity::Warn,
            FindingKind::Note,
            format!("{unassigned} blocks belong to no stream of the scan metadata: not checked"),
        ));
    }
    let garbage_bytes = lanes.iter().map(|l| l.framer.garbage_bytes).sum();
    let blocks = pipe.numbered().then(|| pipe.block_stats());
    drop(pipe);
    let mut streams = Vec::new();
    let mut parts = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let blocks = lane.blocks;
        let e = lane.checker.finish();
        if let Some(m) = routes {
            let label = m.streams[i].label.clone();
            streams.push(StreamCheck {
                label: label.clone(),
                frames: e.frames,
                missing: e.missing,
                fill: e.fill,
                duplicates: e.duplicates,
                out_of_order: e.out_of_order,
                loss_fraction: e.loss_fraction,
                blocks,
            });
            parts.push((label, e));
        } else {
            parts.push((String::new(), e));
        }
    }
    let engine = if routes.is_some() {
        EngineReport::merge(parts).expect("at least one stream")
    } else {
        parts.pop().expect("one lane").1
    };
    let outcome = Outcome {
        files,
        log,
        engine,
        streams,
        blocks,
        garbage_bytes,
        read,
    };
    conclude(rec, outcome, plot_path, started)
}

/// Reads `pipe` to its end, framing and checking every piece on this thread in the lane `lane_of` gives
/// its block (None: skipped). Returns the blocks skipped and the bytes read.
fn one_pass(
    pipe: &mut ReadPipeline,
    lanes: &mut [Lane],
    lane_of: &dyn Fn(Option<u32>) -> Option<usize>,
    log: &mut FindingLog,
    progress: &mut dyn FnMut(u64),
) -> (u64, u64) {
    let (mut unassigned, mut read) = (0u64, 0u64);
    let mut next_progress = 256u64 << 20;
    while let Some(ev) = pipe.next_event() {
        match ev {
            ReadEvent::Finding(f) => log.push(f),
            ReadEvent::Piece(p) => {
                read += p.data().len() as u64;
                let Some(lane) = lane_of(p.block) else {
                    unassigned += u64::from(p.segment_start);
                    continue;
                };
                let lane = &mut lanes[lane];
                lane.blocks += u64::from(p.segment_start);
                let mut sink = Sink {
                    checker: &mut lane.checker,
                    log: &mut *log,
                };
                lane.framer
                    .push(p.data(), p.pos, p.segment_start, p.segment_end, &mut sink);
                if read >= next_progress {
                    progress(read);
                    next_progress = read + (256 << 20);
                }
            }
        }
    }
    (unassigned, read)
}

/// What reading and the engine found, for [`conclude`].
struct Outcome {
    files: std::sync::Arc<vlbiflow_reader::finding::FileTable>,
    log: FindingLog,
    engine: EngineReport,
    streams: Vec<StreamCheck>,
    blocks: Option<BlockStats>,
    garbage_bytes: u64,
    read: u64,
}

/// The verdict and report from what a check found.
fn conclude(
    rec: &Recording,
    outcome: Outcome,
    plot_path: Option<std::path::PathBuf>,
    started: Instant,
) -> Report {
    let Outcome {
        files,
        mut log,
        mut engine,
        streams,
        blocks,
        garbage_bytes,
        read,
    } = outcome;
    for f in std::mem::take(&mut engine.findings) {
        log.push(f);
    }
    // Summary findings from the counts, so that the verdict lines say what is wrong.
    for t in &engine.threads {
        if t.missing > 0 {
            log.push(Finding::new(
                Severity::Error,
                FindingKind::FrameGap,
                format!(
                    "{}: {} frames missing in {} gap(s), loss fraction {}",
                    t.name(),
                    t.missing,
                    t.jumps_total,
                    fmt_fraction(t.loss_fraction, 3)
                ),
            ));
        }
        if t.duplicates > 0 {
            log.push(Finding::new(
                Severity::Warn,
                FindingKind::DuplicateFrame,
                format!("{}: {} duplicated frames", t.name(), t.duplicates),
            ));
        }
        if t.out_of_order > 0 {
            log.push(Finding::new(
                Severity::Warn,
                FindingKind::OutOfOrder,
                format!("{}: {} frames out of order", t.name(), t.out_of_order),
            ));
        }
        if t.invalid > 0 {
            log.push(Finding::new(
                Severity::Warn,
                FindingKind::InvalidFrames,
                format!("{}: {} data frames marked invalid", t.name(), t.invalid),
            ));
        }
    }
    if engine.fill > 0 {
        log.push(Finding::new(
            Severity::Info,
            FindingKind::InvalidFrames,
            format!(
                "{} of the missing frames are fill frames the recorder wrote in their place (invalid bit and \
                 0x11223344 pattern; of all {} fill frames, {} have no header)",
                engine.fill,
                engine.fill + engine.tail_fill + engine.leading_fill,
                engine.headerless_fill
            ),
        ));
    }
    if engine.tail_fill > 0 || engine.leading_fill > 0 {
        log.push(Finding::new(
            Severity::Info,
            FindingKind::InvalidFrames,
            format!(
                "{} fill frames after the last data frame and {} before the first: the recorder's padding of \
                 its last (first) block, as jive5ab writes when a recording is aborted; not counted as missing",
                engine.tail_fill, engine.leading_fill
            ),
        ));
    }
    if engine.frames == 0 {
        log.push(Finding::new(
            Severity::Error,
            FindingKind::Note,
            "no valid frame found",
        ));
    }
    if let Some(s) = engine.stats.as_mut() {
        for f in std::mem::take(&mut s.findings) {
            log.push(f);
        }
        if let Some(p) = &plot_path {
            match crate::plot::plot_spectra(s, p) {
                Ok(()) => s.plot = Some(p.display().to_string()),
                Err(e) => log.push(Finding::new(
                    Severity::Warn,
                    FindingKind::Note,
                    format!("no plot: {e}"),
                )),
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let verdict = match log.worst() {
        Some(Severity::Error) => "error",
        Some(Severity::Warn) => "warn",
        _ => "ok",
    };
    let omitted = log
        .omitted()
        .into_iter()
        .map(|(kind, count, severity)| OmittedFindings {
            kind,
            severity,
            count,
        })
        .collect();
    Report {
        scan: rec.name.clone(),
        layout: match rec.sources {
            Sources::Mark6(_) => "mark6",
            Sources::Flexbuff(_) => "flexbuff",
            Sources::Plain(..) => "plain",
        },
        files: files.paths().len(),
        verdict,
        engine,
        blocks,
        streams,
        garbage_bytes,
        findings: log.list,
        findings_omitted: omitted,
        bytes_read: read,
        elapsed_s: elapsed,
        read_rate_bytes_per_s: if elapsed > 0.0 { read as f64 / elapsed } else { 0.0 },
    }
}

fn si(v: f64, unit: &str) -> String {
    vlbiflow_units::fmt_si(v, unit, 3)
}

impl Report {
    /// The human report: verdict, findings as OK/WARN/ERROR lines, then one summary per thread.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let e = &self.engine;
        let _ = writeln!(
            s,
            "{}: {} ({} layout, {} file(s), {:?})",
            self.scan,
            self.verdict.to_uppercase(),
            self.layout,
            self.files,
            e.format
        );
        let mut shown = 0;
        for f in self.findings.iter().filter(|f| f.severity >= Severity::Warn) {
            let _ = writeln!(s, "{f}");
            shown += 1;
        }
        for o in &self.findings_omitted {
            if o.severity >= Severity::Warn {
                let _ = writeln!(
                    s,
                    "{:<5} ... and {} more {:?} findings (see --json)",
                    o.severity, o.count, o.kind
                );
            }
        }
        for f in self.findings.iter().filter(|f| f.severity == Severity::Info) {
            let _ = writeln!(s, "{f}");
        }
        if shown == 0 {
            let _ = writeln!(
                s,
                "OK    no gaps, duplicates, invalid frames or structural problems"
            );
        }
        let _ = writeln!(
            s,
            "frames {}  missing {} (fill {})  loss fraction {}  duplicated {}  out-of-order {}  invalid {}",
            e.frames,
            e.missing,
            e.fill,
            fmt_fraction(e.loss_fraction, 3),
            e.duplicates,
            e.out_of_order,
            e.invalid
        );
        if let (Some(a), Some(b), Some(d)) = (&e.start_utc, &e.end_utc, e.duration_s) {
            let _ = writeln!(s, "time {a} .. {b}  duration {d:.6} s");
        }
        let _ = writeln!(
            s,
            "frame rate {} per thread ({})  data rate {}",
            e.frame_rate.map_or("?".to_string(), |r| r.to_string()),
            e.frame_rate_source,
            e.data_rate_bps.map_or("?".to_string(), |r| si(r, "b/s"))
        );
        if let Some(b) = &self.blocks {
            let _ = writeln!(
                s,
                "blocks {} (numbers {}..{})  missing {}  duplicated {}",
                b.blocks,
                b.first_block.map_or("-".into(), |x| x.to_string()),
                b.last_block.map_or("-".into(), |x| x.to_string()),
                b.missing_blocks,
                b.duplicate_blocks
            );
        }
        for st in &self.streams {
            let _ = writeln!(
                s,
                "stream {}: frames {} missing {} (fill {}) loss fraction {} dup {} ooo {} in {} blocks",
                st.label,
                st.frames,
                st.missing,
                st.fill,
                fmt_fraction(st.loss_fraction, 3),
                st.duplicates,
                st.out_of_order,
                st.blocks
            );
        }
        for t in &e.threads {
            if let Some(l) = &t.stream {
                let _ = write!(s, "[{l}] ");
            }
            let _ = writeln!(
                s,
                "thread {:>4} {} {}B {}-bit {}ch{}: frames {} missing {} ({}) dup {} ooo {} invalid {} | {} .. {} | {} gap(s)",
                t.thread,
                t.station,
                t.frame_len,
                t.bits_per_sample,
                t.channels,
                if t.complex { " complex" } else { "" },
                t.frames,
                t.missing,
                fmt_fraction(t.loss_fraction, 3),
                t.duplicates,
                t.out_of_order,
                t.invalid,
                t.first,
                t.last,
                t.jumps_total
            );
            for j in t.jumps.iter().take(10) {
                let _ = writeln!(
                    s,
                    "    gap at {}@{}: expected {} found {} ({} frames)",
                    j.file, j.offset, j.expected, j.found, j.frames_missing
                );
            }
            if t.jumps_total > 10 {
                let _ = writeln!(s, "    ... {} more gaps (see --json)", t.jumps_total - 10);
            }
        }
        if let Some(st) = &e.stats {
            for t in &st.threads {
                for c in &t.channels {
                    let occ: Vec<String> = c.occupancy.iter().map(|o| format!("{:.3}", o)).collect();
                    let ideal = c
                        .ideal
                        .as_ref()
                        .map(|i| {
                            format!(
                                " (ideal {})",
                                i.iter()
                                    .map(|o| format!("{:.3}", o))
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            )
                        })
                        .unwrap_or_default();
                    let tone = match c.tone_hz {
                        Some(hz) => si(hz, "Hz"),
                        None => format!("{:.4} x sample rate", c.tone_fraction),
                    };
                    let _ = writeln!(
                        s,
                        "stats thread {} ch {}: levels {}{} {}; strongest tone {} ({:.1} dB above median)",
                        t.thread,
                        c.channel,
                        occ.join(" "),
                        ideal,
                        c.state,
                        tone,
                        c.tone_db_above_median
                    );
                }
            }
            if let Some(p) = &st.plot {
                let _ = writeln!(s, "spectra plotted to {p}");
            }
        }
        let _ = writeln!(
            s,
            "read {} in {:.2} s ({})",
            vlbiflow_units::fmt_bytes(self.bytes_read),
            self.elapsed_s,
            si(self.read_rate_bytes_per_s, "B/s")
        );
        s
    }
}
