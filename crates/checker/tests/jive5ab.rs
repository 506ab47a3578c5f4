//! Scans written by jive5ab 3.1.0 itself (fixtures recorded by scripts/jive5ab-fixtures.sh, ground truth in
//! fixtures/jive5ab/EXPECTED.json): `check` counts exactly the frames jive5ab filled as missing, with no
//! out-of-order or duplicate frames, no extra thread, the true start, and an error verdict when data is
//! missing; fill after the last data frame (an aborted recording's padding) is reported, not counted.

use std::path::PathBuf;
use vlbiflow_checker::{check, CheckConfig};
use vlbiflow_reader::locate;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jive5ab")
}

#[test]
fn jive5ab_scans_check_exactly_as_their_ground_truth() {
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("EXPECTED.json")).unwrap()).unwrap();
    let list = truth["fixtures"].as_array().unwrap();
    assert!(list.len() >= 9, "all fixtures listed");
    for fx in list {
        let name = fx["name"].as_str().unwrap();
        let scan = fx["scan"].as_str().unwrap();
        let disks: Vec<String> = (0..fx["disks"].as_u64().unwrap())
            .map(|d| {
                fixtures()
                    .join(name)
                    .join(format!("disk{d}"))
                    .display()
                    .to_string()
            })
            .collect();
        let rec = locate(&[scan.to_string()], &disks).unwrap_or_else(|e| panic!("{name}: {e}"));
        let config = CheckConfig {
            // Three fixtures hold under a second of data: the rate cannot be learned from them.
            frame_rate: Some(fx["frame_rate_per_thread"].as_u64().unwrap() as u32),
            ..CheckConfig::default()
        };
        let r = check(&rec, config, |_| {});
        let e = &r.engine;
        let human = r.human();
        let missing = fx["missing_frames"].as_u64().unwrap();
        let fill_in_data = fx["fill_frames"].as_u64().unwrap() - fx["tail_fill_frames"].as_u64().unwrap();
        assert_eq!(e.missing, missing, "{name}: missing\n{human}");
        assert_eq!(e.fill, fill_in_data, "{name}: fill between data frames\n{human}");
        assert_eq!(
            e.tail_fill,
            fx["tail_fill_frames"].as_u64().unwrap(),
            "{name}: tail fill\n{human}"
        );
        assert_eq!(
            e.frames,
            fx["real_frames"].as_u64().unwrap(),
            "{name}: data frames\n{human}"
        );
        assert_eq!(
            (e.duplicates, e.out_of_order),
            (0, 0),
            "{name}: no duplicate, no late frame\n{human}"
        );
        let threads: Vec<u16> = e.threads.iter().map(|t| t.thread).collect();
        let want: Vec<u16> = fx["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u16)
            .collect();
        assert_eq!(threads, want, "{name}: no thread invented by fill\n{human}");
        assert_eq!(
            e.start_utc.as_deref(),
            fx["first_frame"]["iso"].as_str(),
            "{name}: true start\n{human}"
        );
        assert!(
            e.threads
                .iter()
                .all(|t| t.station == "Xx" && t.header_changes == 0),
            "{name}: headers\n{human}"
        );
        let loss = fx["loss_fraction"].as_f64().unwrap();
        assert!(
            (e.loss_fraction - loss).abs() < 1e-4,
            "{name}: loss {} vs {loss}",
            e.loss_fraction
        );
        // The same verdict as vlbiflow's own recording of the same loss: missing data is an error.
        assert_eq!(
            r.has_errors(),
            missing > 0,
            "{name}: verdict {}\n{human}",
            r.verdict
        );
    }
}

#[test]
fn frame_rate_is_learned_through_a_fill_frame_at_the_end_of_a_second() {
    // In j5_mk6_loss the last frame of the first second (frame 249) is a fill frame: the highest data frame
    // number is 248, but the fill frame's place says the second held 250 frames.
    let disks: Vec<String> = (0..4)
        .map(|d| {
            fixtures()
                .join("j5_mk6_loss")
                .join(format!("disk{d}"))
                .display()
                .to_string()
        })
        .collect();
    let r = check(
        &locate(&["j5_mk6_loss".into()], &disks).unwrap(),
        CheckConfig::default(),
        |_| {},
    );
    assert_eq!(r.engine.frame_rate, Some(250), "{}", r.human());
    assert_eq!(r.engine.missing, 5, "{}", r.human());
}

#[test]
fn ls_passes_over_fill_for_start_and_duration() {
    // The aborted scans end in 29 fill frames (time 0 in their headers; j5_fb_abort's last chunk is one
    // fill frame): the listing still shows the true start, and the seconds the data touch (the frame rate
    // is not in the headers): 1 for the aborted scans' 0.4 s, 2 for 1.024 s from a whole second.
    for (name, layout, seconds) in [
        ("j5_mk6_abort", "mark6", 1.0),
        ("j5_mk6_t5_loss", "mark6", 2.0),
        ("j5_fb_loss", "flexbuff", 2.0),
        ("j5_fb_abort", "flexbuff", 1.0),
        ("j5_fb_t5_loss_abort", "flexbuff", 1.0),
    ] {
        let disks: Vec<PathBuf> = std::fs::read_dir(fixtures().join(name))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        let l = vlbiflow_reader::ls::list_scans(&disks);
        let l = l
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(l.layout, layout);
        assert_eq!(l.start_utc.as_deref(), Some("2026-03-01T12:00:00Z"), "{name}");
        assert_eq!(l.duration_s, Some(seconds), "{name}: duration");
        assert!(l.streams[0].contains("station Xx"), "{name}: {:?}", l.streams);
    }
}
