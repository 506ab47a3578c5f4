//! The framer and the check engine driven directly (sans-IO): pieces of any size, duplicates, late frames,
//! frame-rate learning, and gaps across second boundaries.

mod common;
use common::*;
use std::sync::Arc;
use vlbiflow_checker::{CheckConfig, Checker};
use vlbiflow_reader::finding::{FileTable, Position};
use vlbiflow_reader::framer::Framer;
use vlbiflow_reader::source::FrameKind;

fn feed(bytes: &[u8], piece: usize, config: CheckConfig) -> vlbiflow_checker::EngineReport {
    let mut files = FileTable::default();
    let id = files.add("mem.vdif".into());
    let files = Arc::new(files);
    let mut framer = Framer::new(FrameKind::Vdif, None, files.clone());
    let mut checker = Checker::new(FrameKind::Vdif, config, files);
    let n = bytes.len().div_ceil(piece);
    for (k, p) in bytes.chunks(piece).enumerate() {
        let pos = Position {
            file: id,
            offset: (k * piece) as u64,
        };
        framer.push(p, pos, k == 0, k + 1 == n, &mut checker);
    }
    checker.finish()
}

#[test]
fn pieces_of_any_size_give_the_same_result() {
    let frames = stream(2, 250, &[99, 100, 180]);
    let mut bytes = concat(&frames);
    // Garbage in the middle as well.
    let at = 37 * FRAME_LEN;
    bytes.splice(at..at, (0..123u8).map(|i| i.wrapping_mul(91)));
    for piece in [7, 1000, FRAME_LEN, FRAME_LEN + 1, 65536, bytes.len()] {
        let r = feed(&bytes, piece, CheckConfig::default());
        assert_eq!(r.frames, 494, "piece {piece}");
        assert_eq!(r.missing, 6, "piece {piece}");
        assert_eq!(r.frame_rate, Some(RATE));
        let t0 = &r.threads[0];
        assert_eq!(t0.jumps_total, 2, "piece {piece}: {:?}", t0.jumps);
        // Frames 99 and 100 straddle the second boundary: one jump of 2 frames.
        assert_eq!(t0.jumps[0].expected, "2024-03-01T12:00:00.99Z");
        assert_eq!(t0.jumps[0].found, "2024-03-01T12:00:01.01Z");
        assert_eq!(t0.jumps[0].frames_missing, 2);
        assert!(
            r.findings
                .iter()
                .any(|f| f.message.contains("123 bytes of garbage")),
            "piece {piece}"
        );
    }
}

#[test]
fn duplicates_and_late_frames() {
    let mut frames = stream(1, 150, &[]);
    // Frame 20 repeated right away, frame 30 arriving after 32 (so 30 is late, not lost).
    frames.insert(21, frame(0, 20, false));
    let f30 = frames.remove(31);
    frames.insert(33, f30);
    let r = feed(&concat(&frames), 1 << 20, CheckConfig::default());
    let t = &r.threads[0];
    assert_eq!(t.duplicates, 1);
    assert_eq!(t.out_of_order, 1);
    assert_eq!(t.missing, 0);
    assert_eq!(t.frames, 150);
}

#[test]
fn last_frames_of_a_second_lost_need_the_rate() {
    // Frames 95..=99 of the first second lost: only a given (or learned) rate tells this from a wrap.
    let skip: Vec<u64> = (95..100).collect();
    let frames = stream(1, 300, &skip);
    let r = feed(&concat(&frames), 1 << 20, CheckConfig::default());
    assert_eq!(r.frame_rate, Some(RATE), "learned from later seconds");
    assert_eq!(r.missing, 5);
    let given = CheckConfig {
        frame_rate: Some(RATE),
        ..Default::default()
    };
    let r = feed(&concat(&frames), 1 << 20, given);
    assert_eq!(r.missing, 5);
    assert_eq!(r.threads[0].jumps[0].frames_missing, 5);
    // Under a second of data and no rate: said so, not guessed.
    let short = stream(1, 50, &[]);
    let r = feed(&concat(&short), 1 << 20, CheckConfig::default());
    assert_eq!(r.frame_rate, None);
    assert!(r.frame_rate_source.contains("--frame-rate"));
}
