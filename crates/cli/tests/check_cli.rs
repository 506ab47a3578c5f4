//! `vlbiflow check`, `gather` and `ls` run as a user runs them, on scans built byte by byte from the
//! published Mark6 layout; the gathered VDIF is read back by an independent decoder (Python `baseband`).

use std::path::{Path, PathBuf};
use std::process::Command;
use vlbiflow_formats::samples::{decode, SampleFormat, BASEBAND_SCALE};
use vlbiflow_testkit::vdif::Frame;

const FRAME_LEN: usize = 1056;
const RATE: u32 = 100;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
}

fn frame(i: u64) -> Vec<u8> {
    Frame::new(FRAME_LEN)
        .at(i, RATE)
        .version(1)
        .station(b"Xx")
        .build_with(|k| (i as usize * 13 + k * 7) as u8)
}

/// A two-disk Mark6 v2 scan (file header and block headers written field by field), blocks of 10 frames
/// given to the disks out of turn; frame indices in `skip` left out.
fn mark6_scan(root: &Path, scan: &str, n: u64, skip: &[u64]) -> (Vec<PathBuf>, Vec<u8>) {
    let frames: Vec<Vec<u8>> = (0..n).filter(|i| !skip.contains(i)).map(frame).collect();
    let mut files: Vec<Vec<u8>> = (0..2)
        .map(|_| {
            let mut h = Vec::new();
            for v in [
                0xfeed_6666u32 as i32,
                2,
                (8 + 10 * FRAME_LEN) as i32,
                0,
                FRAME_LEN as i32,
            ] {
                h.extend_from_slice(&v.to_le_bytes());
            }
            h
        })
        .collect();
    for (k, chunk) in frames.chunks(10).enumerate() {
        let d = [0, 1, 1, 0, 0][k % 5];
        files[d].extend_from_slice(&(k as i32).to_le_bytes());
        files[d].extend_from_slice(&((8 + chunk.len() * FRAME_LEN) as i32).to_le_bytes());
        for f in chunk {
            files[d].extend_from_slice(f);
        }
    }
    let mut dirs = Vec::new();
    for (d, bytes) in files.iter().enumerate() {
        let dir = root.join(format!("disk{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{scan}.vdif")), bytes).unwrap();
        dirs.push(dir);
    }
    (dirs, frames.concat())
}

/// A two-disk FlexBuff scan (`<disk>/<scan>/<scan>.NNNNNNNN`), chunks of 10 frames alternately on disk0
/// and disk1; returns the frames in order.
fn flexbuff_scan(root: &Path, scan: &str, n: u64) -> Vec<u8> {
    let frames: Vec<Vec<u8>> = (0..n).map(frame).collect();
    for (k, chunk) in frames.chunks(10).enumerate() {
        let dir = root.join(format!("disk{}", k % 2)).join(scan);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{scan}.{k:08}")), chunk.concat()).unwrap();
    }
    frames.concat()
}

fn out(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _) = mark6_scan(dir.path(), "good", 300, &[]);
    let (_, _) = mark6_scan(&dir.path().join("lossy"), "lossy", 300, &[40, 41, 250]);
    let glob = format!("{}/disk*", dir.path().display());
    let (code, stdout, _) = out(bin().args(["check", "good", "--disk", &glob]));
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("good: OK"), "{stdout}");

    let lossy = format!("{}/lossy/disk*", dir.path().display());
    let (code, stdout, _) = out(bin().args(["check", "lossy", "--disk", &lossy]));
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("ERROR"), "{stdout}");
    assert!(stdout.contains("3 frames missing in 2 gap(s)"), "{stdout}");

    let (code, stdout, _) = out(bin().args(["check", "lossy", "--disk", &lossy, "--json"]));
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["missing"], 3);
    assert_eq!(v["frames"], 297);
    assert!((v["loss_fraction"].as_f64().unwrap() - 0.01).abs() < 1e-12);
    assert_eq!(v["threads"][0]["jumps"][0]["frames_missing"], 2);
    assert_eq!(v["threads"][0]["jumps"][0]["expected"], "2024-03-01T12:00:00.4Z");

    let (code, _, stderr) = out(bin().args(["check", "nosuchscan"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--disk"), "{stderr}");
}

#[test]
fn a_scan_name_with_disks_means_every_disk_even_from_inside_one() {
    // Standing on one disk (a FlexBuff mount point, a Mark6 data directory written by jive5ab, whose files
    // carry the bare scan name), the current directory holds that disk's part of the scan under the scan's
    // name. With --disk the name still means the whole scan, not a path to one disk's chunks or blocks.
    let dir = tempfile::tempdir().unwrap();
    let expected = flexbuff_scan(dir.path(), "fb", 300);
    let glob = format!("{}/disk*", dir.path().display());
    let disk0 = dir.path().join("disk0");
    let (code, stdout, stderr) = out(bin()
        .current_dir(&disk0)
        .args(["check", "fb", "--disk", &glob, "--json", "-q"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["frames"].as_u64(), v["missing"].as_u64()),
        (Some(300), Some(0)),
        "{stdout}"
    );
    let o = bin()
        .current_dir(&disk0)
        .args(["gather", "fb", "--disk", &glob, "-o", "-", "-q"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, expected);

    let root = dir.path().join("m6");
    let (disks, _) = mark6_scan(&root, "m6", 300, &[]);
    for d in &disks {
        std::fs::rename(d.join("m6.vdif"), d.join("m6")).unwrap();
    }
    let glob = format!("{}/disk*", root.display());
    let (code, stdout, stderr) = out(bin()
        .current_dir(&disks[0])
        .args(["check", "m6", "--disk", &glob, "--json", "-q"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["frames"].as_u64(), v["files"].as_u64()),
        (Some(300), Some(2)),
        "{stdout}"
    );

    // A name that is not a scan on the disks given is still read as the path it names (here one of the
    // two Mark6 files: blocks are missing, exit 1).
    let elsewhere = dir.path().join("disk1").display().to_string();
    let (code, stdout, stderr) = out(bin()
        .current_dir(&disks[0])
        .args(["check", "m6", "--disk", &elsewhere, "--json", "-q"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["files"].as_u64(), Some(1), "{stdout}");
}

#[test]
fn help_has_examples() {
    for sub in ["check", "gather", "ls"] {
        let (code, stdout, _) = out(bin().args([sub, "--help"]));
        assert_eq!(code, 0);
        assert!(stdout.contains("Examples:"), "{sub}: {stdout}");
        assert!(stdout.contains(&format!("vlbiflow {sub}")), "{sub}: {stdout}");
    }
}

#[test]
fn ls_lists_foreign_mark6_files_from_their_headers() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _) = mark6_scan(dir.path(), "exp_xx_0001", 250, &[]);
    let glob = format!("{}/disk*", dir.path().display());
    let (code, stdout, _) = out(bin().args(["ls", &glob, "--json"]));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v[0]["name"], "exp_xx_0001.vdif");
    assert_eq!(v[0]["disks"], 2);
    assert_eq!(v[0]["start_utc"], "2024-03-01T12:00:00Z");
    assert_eq!(v[0]["duration_s"], 3.0);
    assert_eq!(v[0]["described_by"], "file headers");
    let (code, stdout, _) = out(bin().args(["ls", &glob]));
    assert_eq!(code, 0);
    assert!(
        stdout.contains("exp_xx_0001.vdif") && stdout.contains("foreign"),
        "{stdout}"
    );
    assert_eq!(v[0]["jive5ab_name"], "exp_xx_0001.vdif");
}

#[test]
fn ls_names_a_vlbiflow_mark6_scan_as_jive5ab_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let (disks, _) = mark6_scan(dir.path(), "exp_xx_0002", 250, &[]);
    let stream = serde_json::json!({"label": "a", "kind": "vdif", "address": "127.0.0.1:4001", "psn": true,
        "frame_size": FRAME_LEN, "frame_rate": 250, "threads": [], "first_frame_utc": null,
        "last_frame_utc": null, "counters": {"packets": 250, "bytes": 0, "lost": 0, "out_of_order": 0,
        "duplicates": 0, "invalid_frames": 0, "rejected": 0, "filtered": 0, "dropped_no_buffer": 0,
        "kernel_drops": 0}});
    let meta = serde_json::json!({"metadata_version": 1, "writer": "test", "scan": "exp_xx_0002",
        "experiment": null, "station": null, "format": "mark6", "block_size": 8 + 10 * FRAME_LEN,
        "start_utc": "2024-03-01T12:00:00Z", "end_utc": null, "blocks": 25, "complete": true,
        "streams": [stream], "disks": []});
    for d in &disks {
        std::fs::write(d.join("exp_xx_0002.vlbiflow.json"), meta.to_string()).unwrap();
    }
    let glob = format!("{}/disk*", dir.path().display());
    let (code, stdout, stderr) = out(bin().args(["ls", &glob]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("jive5ab: scan_set = exp_xx_0002.vdif"),
        "{stdout}"
    );
    // the stream as the metadata gives it, its frame size in bytes (B, not "b")
    assert!(stdout.contains("a (vdif 1056 B)"), "{stdout}");
}

#[test]
fn gather_matches_frames_and_decodes_in_baseband() {
    let dir = tempfile::tempdir().unwrap();
    let (dirs, expected) = mark6_scan(dir.path(), "bb", 300, &[]);
    let files: Vec<String> = dirs
        .iter()
        .map(|d| d.join("bb.vdif").display().to_string())
        .collect();
    let gathered = dir.path().join("bb_gathered.vdif");
    let (code, _, stderr) = out(bin().arg("gather").args(&files).arg("-o").arg(&gathered));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read(&gathered).unwrap(), expected);

    // To standard output as well.
    let o = bin()
        .args([
            "gather",
            "bb",
            "--disk",
            &format!("{}/disk*", dir.path().display()),
            "-o",
            "-",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(o.stdout, expected);

    let probe = Command::new("python3").args(["-c", "import baseband"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => panic!("the Python package baseband is needed for this test: pip install baseband (scripts/test installs it)"),
    }
    let script = r#"
import sys
from baseband import vdif
with vdif.open(sys.argv[1], 'rs') as fh:
    print(fh.start_time.isot)
    print(fh.stop_time.isot)
    print(float(fh.sample_rate.to_value('Hz')))
    print(fh.shape[0])
    d = fh.read(8)
    print(' '.join('%.6f' % x for x in d.ravel()))
"#;
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&gathered)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "baseband failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "2024-03-01T12:00:00.000000000");
    assert_eq!(lines[1], "2024-03-01T12:00:03.000000000");
    assert!((lines[2].parse::<f64>().unwrap() - f64::from(RATE) * 4096.0).abs() < 1e-6);
    assert_eq!(lines[3].parse::<u64>().unwrap(), 300 * 4096);
    let mut values = vec![0f32; 4096];
    decode(
        SampleFormat::new(2, 1, false).unwrap(),
        &frame(0)[32..],
        &mut values,
    )
    .unwrap();
    let got: Vec<f32> = lines[4].split(' ').map(|x| x.parse().unwrap()).collect();
    for (g, v) in got.iter().zip(&values[..8]) {
        assert!(
            (g - v * BASEBAND_SCALE).abs() < 1e-4,
            "baseband {got:?} vs {:?}",
            &values[..8]
        );
    }
}
