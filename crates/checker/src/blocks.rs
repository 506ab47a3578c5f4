//! Checking a Mark6 or FlexBuff scan on several threads: each reader thread (one per file or disk) frames
//! and checks every block it reads itself, with a framer and a range engine of its own, while the piece is
//! still in the processor's cache, and hands on only what it made of the block. The merge in block order
//! is the one-pass reader's (so every block-number finding and every reader finding comes where it came);
//! the blocks are joined in that order on the calling thread as the ranges of a plain file are (see
//! [`crate::parallel`]): exactly, or, where that cannot be shown, by reading the block again and feeding it
//! to the joined framer and engine themselves. Either way the report is the one-pass report.

use crate::engine::Checker;
use crate::parallel::Sink;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use vlbiflow_reader::finding::{FileTable, Finding, FindingKind, FindingLog, Position, Severity};
use vlbiflow_reader::framer::Framer;
use vlbiflow_reader::read::{BlockWork, PieceSpan, ReadEvent, ReadPipeline};

/// One lane of a check (the whole scan, or one recorded stream of it): its framer and engine, and the
/// blocks it was given.
pub(crate) struct Lane {
    pub framer: Framer,
    pub checker: Checker,
    pub blocks: u64,
    /// Whether any block was joined into it (before that, the first block's framer takes its place).
    fed: bool,
}

impl Lane {
    pub fn new(framer: Framer, checker: Checker) -> Lane {
        Lane {
            framer,
            checker,
            blocks: 0,
            fed: false,
        }
    }
}

/// The lane of a block (by its number), None for a block of no lane.
pub(crate) type LaneOf = Arc<dyn Fn(Option<u32>) -> Option<usize> + Send + Sync>;

/// One block framed and checked on its own.
pub(crate) struct BlockRun {
    lane: usize,
    /// Its framer was forked with the frame shape known (did not learn it as a fresh framer does).
    seeded: bool,
    framer: Framer,
    checker: Checker,
    log: Vec<Finding>,
}

/// What a reader thread does with the blocks it reads: frames and checks each on its own, forking the
/// framer from the last block of its lane that learned the frame shape.
pub(crate) struct BlockCheck {
    lane_of: LaneOf,
    /// Per lane: the framer to fork the next block's from, and the engine to make range engines from.
    seeds: Vec<Framer>,
    templates: Vec<Checker>,
    open: Option<BlockRun>,
}

impl BlockCheck {
    /// For the lanes `lanes` (fresh, as the check makes them).
    pub fn new(lanes: &[Lane], lane_of: LaneOf) -> BlockCheck {
        BlockCheck {
            lane_of,
            seeds: lanes.iter().map(|l| l.framer.fork()).collect(),
            templates: lanes.iter().map(|l| l.checker.for_range()).collect(),
            open: None,
        }
    }
}

impl BlockWork for BlockCheck {
    fn open(&mut self, block: Option<u32>) {
        self.open = (self.lane_of)(block)
            .filter(|&l| l < self.seeds.len())
            .map(|lane| BlockRun {
                lane,
                seeded: self.seeds[lane].frame_len().is_some(),
                framer: self.seeds[lane].fork(),
                checker: self.templates[lane].for_range(),
                log: Vec::new(),
            });
    }

    fn piece(&mut self, data: &[u8], pos: Position, segment_start: bool, segment_end: bool) {
        if let Some(run) = self.open.as_mut() {
            let mut sink = Sink {
                checker: &mut run.checker,
                log: &mut run.log,
            };
            run.framer.push(data, pos, segment_start, segment_end, &mut sink);
        }
    }

    fn close(&mut self) -> Box<dyn std::any::Any + Send + Sync> {
        let run = self.open.take();
        if let Some(r) = &run {
            if r.framer.frame_len().is_some() {
                self.seeds[r.lane] = r.framer.fork();
            }
        }
        Box::new(run)
    }
}

/// Reads `pipe` (started with [`ReadPipeline::start_with_work`] and [`BlockCheck`]) to its end, joining
/// its blocks into `lanes` in order; reader findings go to `log` where one pass puts them. Returns the
/// blocks of no lane (skipped) and the bytes read.
pub(crate) fn run(
    pipe: &mut ReadPipeline,
    lanes: &mut [Lane],
    lane_of: &LaneOf,
    log: &mut FindingLog,
    progress: &mut dyn FnMut(u64),
) -> (u64, u64) {
    let files = pipe.files();
    let (mut unassigned, mut read) = (0u64, 0u64);
    let mut next_progress = 256u64 << 20;
    while let Some(ev) = pipe.next_event() {
        let mut p = match ev {
            ReadEvent::Finding(f) => {
                log.push(f);
                continue;
            }
            ReadEvent::Piece(p) => p,
        };
        read += p.payload_len();
        if read >= next_progress {
            progress(read);
            next_progress = read + (256 << 20);
        }
        let Some(lane) = lane_of(p.block).filter(|&l| l < lanes.len()) else {
            unassigned += u64::from(p.segment_start);
            continue;
        };
        let lane = &mut lanes[lane];
        lane.blocks += u64::from(p.segment_start);
        match p.done.take() {
            Some(d) => {
                let run = d.work.downcast::<Option<BlockRun>>().ok().and_then(|r| *r);
                join(lane, &d.pieces, run, &files, log);
            }
            None => {
                // Not worked on by its reader: framed here, as one pass does.
                lane.fed = true;
                let mut sink = Sink {
                    checker: &mut lane.checker,
                    log: &mut *log,
                };
                lane.framer
                    .push(p.data(), p.pos, p.segment_start, p.segment_end, &mut sink);
            }
        }
    }
    (unassigned, read)
}

/// Joins one block into its lane: exactly where that can be shown, else by feeding its bytes (read
/// again) to the lane's framer and engine. Returns whether it was fed again.
fn join(
    lane: &mut Lane,
    pieces: &[PieceSpan],
    run: Option<BlockRun>,
    files: &FileTable,
    log: &mut FindingLog,
) -> bool {
    if let Some(run) = run {
        let at = pieces.first().map(|p| p.pos);
        let framed_alike = match (lane.fed, at) {
            // The lane's framer is fresh: so must the block's have been.
            (false, _) => !run.seeded,
            (true, Some(at)) => lane.framer.continues_into(&run.framer, at),
            (true, None) => false,
        };
        // A block cut short by a read error joins as well: the framer then holds the partial frame the
        // one-pass framer would hold, and the next block (which cannot continue it) is fed again.
        if framed_alike && (!lane.fed || lane.checker.can_absorb(&run.checker)) {
            // An unfed lane's framer is fresh: joining takes the block's framer whole.
            lane.framer.join(run.framer);
            lane.checker.absorb(run.checker);
            lane.fed = true;
            for f in run.log {
                log.push(f);
            }
            return false;
        }
    }
    lane.fed = true;
    let mut buf = Vec::new();
    for p in pieces {
        buf.resize(p.len, 0);
        let path = files.path(p.pos.file);
        let got = File::open(path).and_then(|f| f.read_exact_at(&mut buf, p.pos.offset));
        if let Err(e) = got {
            log.push(Finding::at(
                Severity::Error,
                FindingKind::Io,
                path,
                p.pos.offset,
                format!(
                    "read again of {} bytes failed (the file changed during the check?): {e}",
                    p.len
                ),
            ));
            break;
        }
        let mut sink = Sink {
            checker: &mut lane.checker,
            log: &mut *log,
        };
        lane.framer
            .push(&buf, p.pos, p.segment_start, p.segment_end, &mut sink);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CheckConfig;
    use std::sync::Arc;
    use vlbiflow_reader::source::FrameKind;
    use vlbiflow_testkit::vdif::Frame;

    const LEN: usize = 1056;

    fn frame(i: u64, station: &[u8; 2]) -> Vec<u8> {
        Frame::new(LEN)
            .seconds(5_227_200)
            .epoch(48)
            .at(i, 100)
            .version(1)
            .station(station)
            .build_with(|k| (k + i as usize) as u8)
    }

    fn result(lane: Lane, log: FindingLog) -> String {
        let mut lane = lane;
        let mut log = log;
        lane.framer.finish_segment(&mut Sink {
            checker: &mut lane.checker,
            log: &mut log,
        });
        let e = lane.checker.finish();
        let json = serde_json::to_string(&(&e, &e.findings, &log.list)).expect("serialise");
        format!("{json} garbage {}", lane.framer.garbage_bytes)
    }

    /// Blocks written one after the other to a file, and the lane's fresh framer and engine.
    struct Case {
        _dir: tempfile::TempDir,
        files: Arc<FileTable>,
        blocks: Vec<(Position, Vec<u8>)>,
    }

    impl Case {
        fn new(blocks: Vec<Vec<u8>>) -> Case {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("scan.vdif");
            std::fs::write(&path, blocks.concat()).unwrap();
            let mut table = FileTable::default();
            let id = table.add(path);
            let mut at = 0u64;
            let blocks = blocks
                .into_iter()
                .map(|b| {
                    let pos = Position { file: id, offset: at };
                    at += b.len() as u64;
                    (pos, b)
                })
                .collect();
            Case {
                _dir: dir,
                files: Arc::new(table),
                blocks,
            }
        }

        fn fresh(&self) -> Lane {
            Lane::new(
                Framer::new(FrameKind::Vdif, Some(LEN), self.files.clone()),
                Checker::new(FrameKind::Vdif, CheckConfig::default(), self.files.clone()),
            )
        }

        /// The one-pass result: every block fed to the lane's framer and engine.
        fn one_pass(&self) -> String {
            let mut one = self.fresh();
            let mut log = FindingLog::default();
            for (pos, bytes) in &self.blocks {
                let mut sink = Sink {
                    checker: &mut one.checker,
                    log: &mut log,
                };
                one.framer.push(bytes, *pos, true, true, &mut sink);
            }
            result(one, log)
        }

        /// Each block framed by the framer `framer` gives for it (and whether it is seeded), then joined in
        /// order: which blocks were fed again, and the result.
        fn joined(&self, framer: impl Fn(&Lane, usize) -> (Framer, bool)) -> (Vec<bool>, String) {
            let mut lane = self.fresh();
            let runs: Vec<_> = self
                .blocks
                .iter()
                .enumerate()
                .map(|(k, (pos, bytes))| {
                    let (framer, seeded) = framer(&lane, k);
                    let mut run = BlockRun {
                        lane: 0,
                        seeded,
                        framer,
                        checker: lane.checker.for_range(),
                        log: Vec::new(),
                    };
                    let mut sink = Sink {
                        checker: &mut run.checker,
                        log: &mut run.log,
                    };
                    run.framer.push(bytes, *pos, true, true, &mut sink);
                    (*pos, bytes.len(), run)
                })
                .collect();
            let mut log = FindingLog::default();
            let mut fed_again = Vec::new();
            for (pos, len, run) in runs {
                let span = PieceSpan {
                    pos,
                    len,
                    segment_start: true,
                    segment_end: true,
                };
                fed_again.push(join(&mut lane, &[span], Some(run), &self.files, &mut log));
            }
            (fed_again, result(lane, log))
        }
    }

    /// Frames of station Xx, then a block of 100 bytes of garbage and frames of station Yy.
    fn two_stations() -> Vec<Vec<u8>> {
        let a: Vec<u8> = (0..3).flat_map(|i| frame(i, b"Xx")).collect();
        let mut b = vec![0x5a; 100];
        b.extend((3..6).flat_map(|i| frame(i, b"Yy")));
        vec![a, b]
    }

    /// Block B was framed on its own before block A was joined (so its framer learned the shape itself):
    /// after the garbage it took the frames of station Yy as the stream, where the lane's framer, knowing
    /// station Xx, skips the whole block as garbage. The join sees the framers differ and feeds B again;
    /// the result is the one-pass result.
    #[test]
    fn a_block_framed_differently_is_fed_again() {
        let c = Case::new(two_stations());
        let want = c.one_pass();
        assert!(want.contains("garbage"), "{want}");
        let (fed_again, got) = c.joined(|lane, _| (lane.framer.fork(), false));
        assert_eq!(fed_again, [false, true], "block B fed again");
        assert_eq!(got, want);
    }

    /// The first block of a lane (garbage, then frames of station Yy) framed by a framer forked with a
    /// shape (station Xx's, from a block its reader read before) where the one-pass framer is fresh and
    /// learns Yy's: fed again, the one-pass result.
    #[test]
    fn a_seeded_first_block_is_fed_again() {
        let [b, a] = <[Vec<u8>; 2]>::try_from(two_stations()).unwrap();
        let c = Case::new(vec![a, b]);
        let seed = {
            let mut f = c.fresh().framer;
            let xx: Vec<u8> = (0..2).flat_map(|i| frame(i, b"Xx")).collect();
            let mut sink = Sink {
                checker: &mut c.fresh().checker,
                log: &mut Vec::new(),
            };
            f.push(&xx, Position::default(), true, true, &mut sink);
            f
        };
        let want = c.one_pass();
        let (fed_again, got) = c.joined(|lane, k| match k {
            0 => (seed.fork(), true),
            _ => (lane.framer.fork(), lane.framer.frame_len().is_some()),
        });
        assert!(fed_again[0], "the first block fed again");
        assert_eq!(got, want);
    }
}
