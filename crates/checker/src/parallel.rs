//! Checking a plain recording on several threads: its frame stream is cut into contiguous ranges, each
//! read (positioned reads on a reader thread of its own, so that several reads are in flight at different
//! places of the disk), framed and checked by its own framer and range engine, all at once; then the
//! ranges are joined in order. A range joins exactly (the framer took up at the range's first byte where
//! the one before left off, and the engine decided every frame as the one-pass engine would: see
//! `engine::merge`), or, where it cannot be shown so, is read again and fed to the joined framer and engine
//! themselves. Either way the report is the one-pass report.
//!
//! Split: plain VDIF and Mark5B files (one or several, read one after the other), without sample
//! statistics, when more than one thread is allowed and each range gets at least [`MIN_RANGE`] bytes.
//! Not split (one pass): Mark6 and FlexBuff scans (their readers, one per file or disk, validate the
//! blocks they read: see `crate::blocks`), `--stats`, a file that cannot be opened, a file that does not
//! start with a frame header.

use crate::engine::{CheckConfig, Checker};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_reader::finding::{FileTable, Finding, FindingLog, Position};
use vlbiflow_reader::framer::{FrameSink, Framer, MAX_LEARNED_FRAME};
use vlbiflow_reader::read::{FileRange, ReadEvent, ReadPipeline};
use vlbiflow_reader::source::{FrameKind, Recording, Sources};

/// Fewest bytes a range is given: below this, fewer ranges.
pub const MIN_RANGE: u64 = 64 << 20;
/// Bytes of one read of a range (rounded to whole frames): see `ReadPipeline::start_ranges`.
const READ_SIZE: usize = 1 << 20;

/// How to cut the frame stream.
#[derive(Debug, Clone)]
pub(crate) enum Split {
    /// As many ranges as `CheckConfig::threads` (default: the cores), each at least [`MIN_RANGE`] bytes,
    /// cut on the frame grid of the file the cut falls in.
    Cores,
    /// At these offsets of the files' bytes taken one after the other, wherever they fall (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    At(Vec<u64>),
}

/// The ranges of a split recording.
pub(crate) struct Plan {
    pub files: Arc<FileTable>,
    ranges: Vec<Vec<FileRange>>,
    kind: FrameKind,
    hint: Option<usize>,
    /// Frame length of the first file, if its first header says (the reads' unit).
    frame_len: usize,
}

/// The frame length of a plain file from its first frame's header.
fn first_frame_len(path: &std::path::Path, kind: FrameKind) -> Option<u64> {
    if let Some(l) = kind.fixed_frame_len() {
        return Some(l as u64);
    }
    let mut head = [0u8; 32];
    File::open(path).ok()?.read_exact_at(&mut head, 0).ok()?;
    let len = VdifHeader::new_checked(&head[..]).ok()?.frame_len();
    (len > 0 && len <= MAX_LEARNED_FRAME).then_some(len as u64)
}

/// How `rec` is checked on several threads, or None for one pass.
pub(crate) fn plan(rec: &Recording, config: &CheckConfig, split: &Split) -> Option<Plan> {
    let Sources::Plain(paths, kind) = &rec.sources else {
        return None;
    };
    if config.stats.is_some() {
        return None;
    }
    let mut table = FileTable::default();
    let mut files = Vec::new();
    for p in paths {
        let f = File::open(p).ok()?;
        let m = f.metadata().ok()?;
        if !m.is_file() {
            return None;
        }
        files.push((p.clone(), table.add(p.clone()), m.len()));
    }
    let total: u64 = files.iter().map(|f| f.2).sum();
    let frame = files
        .iter()
        .find(|f| f.2 > 0)
        .and_then(|f| first_frame_len(&f.0, *kind));
    // A file that does not start with a frame header (garbage, or a fill frame without one, at its start)
    // is framed from the end of the file before it: one pass. (A range that began there was framed
    // without that state and did not always join to the one-pass report.)
    if files
        .iter()
        .any(|f| f.2 > 0 && first_frame_len(&f.0, *kind).is_none())
    {
        return None;
    }
    // Cuts as (file index, offset), increasing, none at the very start.
    let cuts: Vec<(usize, u64)> = match split {
        Split::Cores => {
            let threads = config
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let n = (threads as u64).min(total / MIN_RANGE);
            if n < 2 {
                return None;
            }
            let frame = frame?;
            (1..n)
                .map(|k| {
                    let (i, o) = locate(&files, total / n * k);
                    (i, o / frame * frame)
                })
                .collect()
        }
        Split::At(at) => at.iter().map(|&b| locate(&files, b)).collect(),
    };
    let mut cuts: Vec<(usize, u64)> = cuts
        .into_iter()
        .filter(|c| *c != (0, 0) && c.0 < files.len())
        .collect();
    cuts.dedup();
    if cuts.is_empty() || cuts.windows(2).any(|w| w[0] >= w[1]) {
        return None;
    }
    let mut ranges: Vec<Vec<FileRange>> = vec![Vec::new()];
    for (i, (path, id, len)) in files.iter().enumerate() {
        let piece = |offset: u64, end: u64| FileRange {
            path: path.clone(),
            file: *id,
            offset,
            len: end - offset,
            file_len: *len,
        };
        let mut at = 0u64;
        for &(_, c) in cuts.iter().filter(|c| c.0 == i) {
            if c > 0 {
                ranges.last_mut().expect("one").push(piece(at, c));
                at = c;
            }
            ranges.push(Vec::new());
        }
        ranges.last_mut().expect("one").push(piece(at, *len));
    }
    Some(Plan {
        files: Arc::new(table),
        ranges,
        kind: *kind,
        hint: rec.frame_len_hint(),
        frame_len: frame.unwrap_or(1) as usize,
    })
}

/// (file index, offset) of byte `b` of the files taken one after the other.
fn locate(files: &[(std::path::PathBuf, u32, u64)], b: u64) -> (usize, u64) {
    let mut left = b;
    for (i, f) in files.iter().enumerate() {
        if left < f.2 {
            return (i, left);
        }
        left -= f.2;
    }
    (files.len(), 0)
}

/// Frames to an engine, findings to a list (the one-pass check uses it too).
pub(crate) struct Sink<'a, L> {
    pub(crate) checker: &'a mut Checker,
    pub(crate) log: &'a mut L,
}

pub(crate) trait Log {
    fn add(&mut self, f: Finding);
}
impl Log for Vec<Finding> {
    fn add(&mut self, f: Finding) {
        self.push(f)
    }
}
impl Log for FindingLog {
    fn add(&mut self, f: Finding) {
        self.push(f)
    }
}

impl<L: Log> FrameSink for Sink<'_, L> {
    #[inline]
    fn frame(&mut self, frame: &[u8], pos: Position) {
        self.checker.frame(frame, pos)
    }
    fn fill(&mut self, frame: &[u8], pos: Position) {
        self.checker.fill(frame, pos)
    }
    fn finding(&mut self, finding: Finding) {
        self.log.add(finding)
    }
}

/// Reads `ranges` and feeds them to `framer` and `checker`; findings to `log`. Returns the bytes read and
/// whether a read failed (the one-pass reader stops there).
fn feed<L: Log>(
    plan: &Plan,
    ranges: &[FileRange],
    framer: &mut Framer,
    checker: &mut Checker,
    log: &mut L,
    read: &AtomicU64,
) -> (u64, bool) {
    let mut pipe = ReadPipeline::start_ranges(plan.files.clone(), ranges.to_vec(), READ_SIZE, plan.frame_len);
    let (mut bytes, mut failed) = (0u64, false);
    while let Some(ev) = pipe.next_event() {
        match ev {
            ReadEvent::Finding(f) => {
                failed = true;
                log.add(f);
            }
            ReadEvent::Piece(p) => {
                let n = p.data().len() as u64;
                bytes += n;
                read.fetch_add(n, Ordering::Relaxed);
                let mut sink = Sink { checker, log };
                framer.push(p.data(), p.pos, p.segment_start, p.segment_end, &mut sink);
            }
        }
    }
    (bytes, failed)
}

/// One range checked on its own.
struct RangeRun {
    framer: Framer,
    checker: Checker,
    log: Vec<Finding>,
    read: u64,
    failed: bool,
}

fn run_range(plan: &Plan, k: usize, template: &Checker, read: &AtomicU64) -> RangeRun {
    let mut framer = Framer::new(plan.kind, plan.hint, plan.files.clone());
    let mut checker = template.for_range();
    let mut log = Vec::new();
    let (bytes, failed) = feed(plan, &plan.ranges[k], &mut framer, &mut checker, &mut log, read);
    RangeRun {
        framer,
        checker,
        log,
        read: bytes,
        failed,
    }
}

/// The joined result.
pub(crate) struct Joined {
    pub checker: Checker,
    pub garbage_bytes: u64,
    pub read: u64,
    /// Ranges read again because they could not be joined (tests look).
    #[cfg_attr(not(test), allow(dead_code))]
    pub reread: usize,
}

/// Checks the ranges of `plan` on a thread each and joins them; findings go to `log` in stream order.
pub(crate) fn run(
    plan: &Plan,
    config: CheckConfig,
    log: &mut FindingLog,
    progress: &mut impl FnMut(u64),
) -> Joined {
    let mut checker = Checker::new(plan.kind, config, plan.files.clone());
    let read = AtomicU64::new(0);
    let runs: Vec<RangeRun> = std::thread::scope(|s| {
        let template = &checker;
        let read = &read;
        let handles: Vec<_> = (1..plan.ranges.len())
            .map(|k| {
                std::thread::Builder::new()
                    .name(format!("check {k}"))
                    .spawn_scoped(s, move || run_range(plan, k, template, read))
                    .expect("spawn check thread")
            })
            .collect();
        let first = run_range(plan, 0, template, read);
        progress(read.load(Ordering::Relaxed));
        let mut runs = vec![first];
        for h in handles {
            runs.push(h.join().expect("check thread"));
            progress(read.load(Ordering::Relaxed));
        }
        runs
    });
    let mut framer: Option<Framer> = None;
    let (mut total, mut reread) = (0u64, 0usize);
    for (k, run) in runs.into_iter().enumerate() {
        let start = plan.ranges[k].iter().find(|r| r.len > 0).map(|r| Position {
            file: r.file,
            offset: r.offset,
        });
        let failed = match framer.as_mut() {
            None => {
                framer = Some(run.framer);
                checker.absorb(run.checker);
                run.log.into_iter().for_each(|x| log.push(x));
                total += run.read;
                run.failed
            }
            Some(f)
                if start.is_some_and(|at| f.continues_into(&run.framer, at))
                    && checker.can_absorb(&run.checker) =>
            {
                f.join(run.framer);
                checker.absorb(run.checker);
                run.log.into_iter().for_each(|x| log.push(x));
                total += run.read;
                run.failed
            }
            Some(f) => {
                reread += 1;
                let (bytes, failed) = feed(plan, &plan.ranges[k], f, &mut checker, log, &read);
                total += bytes;
                failed
            }
        };
        if failed {
            break;
        }
    }
    let mut framer = framer.expect("at least one range");
    framer.finish_segment(&mut Sink {
        checker: &mut checker,
        log,
    });
    Joined {
        checker,
        garbage_bytes: framer.garbage_bytes,
        read: total,
        reread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineReport;
    use proptest::prelude::*;
    use vlbiflow_testkit::damage::{self, Item, Op};

    const LEN: usize = 96;
    const RATE: u32 = 50;

    /// This test's frames: `LEN` bytes at `RATE` frames a second; fill frames are the fill pattern
    /// throughout, header included.
    const FRAMES: damage::VdifFrames = damage::VdifFrames {
        len: LEN,
        rate: RATE,
        fill: damage::FillStyle::Bare,
    };

    fn op() -> impl Strategy<Value = (u16, Op)> {
        damage::op(200)
    }

    fn build(threads: u16, ops: &[(u16, Op)]) -> Vec<Item> {
        damage::build(threads, ops, &FRAMES)
    }

    /// The frames and fill of a stream (what the engine-level tests feed; garbage is skipped).
    fn frames_of(items: &[Item]) -> Vec<(usize, &Vec<u8>)> {
        items
            .iter()
            .filter_map(|x| match x {
                Item::Frame(f) | Item::Fill(f) => Some(f),
                Item::Garbage(_) => None,
            })
            .enumerate()
            .collect()
    }

    fn config(rate: u8) -> CheckConfig {
        match rate {
            0 => CheckConfig::default(),
            1 => CheckConfig {
                frame_rate: Some(RATE),
                ..Default::default()
            },
            2 => CheckConfig {
                metadata_frame_rate: Some(RATE - 7),
                ..Default::default()
            },
            _ => CheckConfig {
                metadata_frame_rate: Some(RATE),
                ..Default::default()
            },
        }
    }

    fn feed_frames(c: &mut Checker, frames: &[(usize, &Vec<u8>)]) {
        for (i, f) in frames {
            let pos = Position {
                file: 0,
                offset: (*i * LEN) as u64,
            };
            if vlbiflow_formats::fill::is_fill_words(f) {
                c.fill(f, pos);
            } else {
                c.frame(f, pos);
            }
        }
    }

    fn json(r: EngineReport) -> String {
        serde_json::to_string(&(&r, &r.findings)).expect("serialise")
    }

    fn files() -> Arc<FileTable> {
        let mut t = FileTable::default();
        t.add("mem.vdif".into());
        Arc::new(t)
    }

    /// The engine fed every frame, and the engines of the ranges joined (or the range fed to the joined
    /// engine where it cannot be joined); returns both reports and how many ranges were joined.
    fn one_pass_and_split(frames: &[(usize, &Vec<u8>)], cuts: &[usize], rate: u8) -> (String, String, usize) {
        let mut one = Checker::new(FrameKind::Vdif, config(rate), files());
        feed_frames(&mut one, frames);
        let mut joined = Checker::new(FrameKind::Vdif, config(rate), files());
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (frames.len() + 1)).collect();
        bounds.push(0);
        bounds.push(frames.len());
        bounds.sort_unstable();
        bounds.dedup();
        let mut absorbed = 0;
        for w in bounds.windows(2) {
            let part = &frames[w[0]..w[1]];
            let mut r = joined.for_range();
            feed_frames(&mut r, part);
            if joined.can_absorb(&r) {
                joined.absorb(r);
                absorbed += 1;
            } else {
                feed_frames(&mut joined, part);
            }
        }
        (json(one.finish()), json(joined.finish()), absorbed)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Engines of random ranges joined give the one-pass engine's report, byte for byte as JSON.
        #[test]
        fn joined_ranges_equal_one_pass(
            threads in 1u16..4,
            ops in proptest::collection::vec(op(), 1..700),
            cuts in proptest::collection::vec(0usize..800, 0..6),
            rate in 0u8..4,
        ) {
            let items = build(threads, &ops);
            let frames = frames_of(&items);
            let (one, split, _) = one_pass_and_split(&frames, &cuts, rate);
            prop_assert_eq!(one, split);
        }
    }

    #[test]
    fn continuous_ranges_join_without_reading_again() {
        let ops: Vec<(u16, Op)> = (0..3000).map(|i| ((i % 2) as u16, Op::Next)).collect();
        let items = build(2, &ops);
        let frames = frames_of(&items);
        assert_eq!(frames.len(), items.len());
        // Cuts inside seconds and on second boundaries, with a gap across one.
        for rate in 0..4 {
            let (one, split, absorbed) = one_pass_and_split(&frames, &[777, 1000, 1001, 2345], rate);
            assert_eq!(one, split);
            assert_eq!(absorbed, 5, "rate mode {rate}");
        }
    }

    fn write_stream(items: &[Item], dir: &std::path::Path, parts: usize) -> Vec<String> {
        let bytes: Vec<u8> = items.iter().flat_map(|x| x.bytes().iter().copied()).collect();
        let per = bytes.len().div_ceil(parts.max(1)).max(1);
        if bytes.is_empty() {
            // A stream of no bytes (only header changes) is still one file to check.
            let p = dir.join("part0.vdif");
            std::fs::write(&p, []).unwrap();
            return vec![p.display().to_string()];
        }
        bytes
            .chunks(per)
            .enumerate()
            .map(|(i, c)| {
                let p = dir.join(format!("part{i}.vdif"));
                std::fs::write(&p, c).unwrap();
                p.display().to_string()
            })
            .collect()
    }

    fn report_json(files: &[String], split: Split, rate: u8) -> String {
        let rec = vlbiflow_reader::locate(files, &[]).expect("locate");
        let mut r = crate::report::check_split(&rec, config(rate), |_| {}, split);
        r.elapsed_s = 0.0;
        r.read_rate_bytes_per_s = 0.0;
        serde_json::to_string(&r).expect("serialise")
    }

    /// Ranges of two frames or more: each confirms the frame shape it learns by the next header inside
    /// it (a range of one frame cannot, and is read again).
    #[test]
    fn a_clean_file_cut_on_the_frame_grid_is_read_once() {
        let ops: Vec<(u16, Op)> = (0..4000).map(|i| ((i % 2) as u16, Op::Next)).collect();
        let items = build(2, &ops);
        let dir = tempfile::tempdir().unwrap();
        let files = write_stream(&items, dir.path(), 2);
        let rec = vlbiflow_reader::locate(&files, &[]).expect("locate");
        let at: Vec<u64> = [1000, 2000, 2002, 3333]
            .iter()
            .map(|f| (f * LEN) as u64)
            .collect();
        let plan = plan(&rec, &CheckConfig::default(), &Split::At(at.clone())).expect("split");
        assert_eq!(plan.ranges.len(), 5);
        let mut log = FindingLog::default();
        let joined = run(&plan, CheckConfig::default(), &mut log, &mut |_| {});
        assert_eq!(joined.reread, 0);
        assert_eq!(joined.checker.finish().frames, 4000);
        assert_eq!(
            report_json(&files, Split::At(Vec::new()), 0),
            report_json(&files, Split::At(at), 0)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Files cut anywhere (on the frame grid or not, garbage and fill included) and checked range by
        /// range give the one-pass report.
        #[test]
        fn split_files_equal_one_pass(
            threads in 1u16..3,
            ops in proptest::collection::vec(op(), 1..400),
            cuts in proptest::collection::vec((0usize..500, any::<bool>(), 0usize..LEN), 1..5),
            parts in 1usize..3,
            rate in 0u8..4,
        ) {
            let items = build(threads, &ops);
            let dir = tempfile::tempdir().unwrap();
            let files = write_stream(&items, dir.path(), parts);
            let at: Vec<u64> = cuts
                .iter()
                .map(|&(f, aligned, off)| (f * LEN + if aligned { 0 } else { off }) as u64)
                .collect();
            let one = report_json(&files, Split::At(Vec::new()), rate);
            let split = report_json(&files, Split::At(at), rate);
            prop_assert_eq!(one, split);
        }
    }
}
