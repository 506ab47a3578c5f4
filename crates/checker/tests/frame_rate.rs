//! A plain VDIF file (EDV 0: no sample rate in the headers) whose last frame of every second is missing:
//! the rate learned from frame numbers is one short; the checker corrects it from the sample rate it
//! implies, reports the loss and says how it got the rate.

use vlbiflow_checker::{check, CheckConfig};
use vlbiflow_formats::vdif::VdifHeaderRepr;
use vlbiflow_reader::locate;

const LEN: usize = 1032; // 1000-byte payload of 2-bit samples: 4000 samples per frame
const RATE: u32 = 250; // 1 MHz

fn frame(second: u32, n: u32) -> Vec<u8> {
    let mut f = vec![0u8; LEN];
    VdifHeaderRepr {
        seconds: 5_227_200 + second,
        epoch: 48,
        frame_number: n,
        frame_len: LEN,
        bits_per_sample: 2,
        station_id: VdifHeaderRepr::station_from_str("Xx").unwrap(),
        ..Default::default()
    }
    .emit(&mut f)
    .unwrap();
    f
}

#[test]
fn last_frame_of_every_second_lost_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.vdif");
    let mut bytes = Vec::new();
    for s in 0..4 {
        for n in 0..RATE - 1 {
            bytes.extend_from_slice(&frame(s, n));
        }
    }
    std::fs::write(&p, bytes).unwrap();
    let r = check(
        &locate(&[p.display().to_string()], &[]).unwrap(),
        CheckConfig::default(),
        |_| {},
    );
    assert_eq!(r.engine.frame_rate, Some(RATE), "{}", r.human());
    assert!(
        r.engine.frame_rate_source.starts_with("learned and corrected"),
        "{}",
        r.engine.frame_rate_source
    );
    // The lost last frames of seconds 0, 1 and 2 (the one of second 3 has no successor to show it).
    assert_eq!(r.engine.missing, 3, "{}", r.human());
    assert_eq!(r.verdict, "error");
}

#[test]
fn a_complete_file_keeps_its_learned_rate() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.vdif");
    let mut bytes = Vec::new();
    for s in 0..3 {
        for n in 0..RATE {
            bytes.extend_from_slice(&frame(s, n));
        }
    }
    std::fs::write(&p, bytes).unwrap();
    let r = check(
        &locate(&[p.display().to_string()], &[]).unwrap(),
        CheckConfig::default(),
        |_| {},
    );
    assert_eq!(
        (r.engine.frame_rate, r.engine.missing, r.verdict),
        (Some(RATE), 0, "ok"),
        "{}",
        r.human()
    );
    assert!(r.engine.frame_rate_source.starts_with("learned (highest"));
}
