//! Cross-check against baseband (the Python VLBI format library): frames written here must read back
//! in baseband with the same header fields, time stamps and sample values, and baseband must quantise the
//! same inputs to the same codes. Needs `python3` with `baseband` (`pip install baseband`; scripts/test
//! installs it): without it the test fails and says so.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use vlbiflow_formats::mark5b::{self, Mark5bHeaderRepr};
use vlbiflow_formats::samples::{self, SampleFormat};
use vlbiflow_formats::time::{civil_from_days, UtcTime, MJD_UNIX_EPOCH};
use vlbiflow_formats::vdif::{EdvSampleRate, VdifHeaderRepr};

const CHECKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/baseband_check.py");
/// Longest the Python side may take (importing astropy dominates; a few seconds normally).
const PYTHON_TIMEOUT_S: &str = "120";

fn baseband_available() -> bool {
    Command::new("python3")
        .args(["-c", "import baseband"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Deterministic normal deviates with occasional large excursions, to exercise clipping.
fn gaussian_values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed | 1;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let (u1, u2) = (uniform(), uniform());
            let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (if i % 97 == 0 { g * 6.0 } else { g }) as f32
        })
        .collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

struct VdifCase {
    name: &'static str,
    bits: u8,
    log2_channels: u8,
    complex: bool,
    frame_len: usize,
    frames: u32,
    edv: u8,
    version: u8,
    thread_id: u16,
    station: &'static str,
}

/// Writes `case` as a VDIF file plus the values it encodes; returns its JSON description for the checker.
fn write_vdif_case(dir: &Path, case: &VdifCase, seed: u64) -> String {
    let channels = 1u32 << case.log2_channels;
    let format = SampleFormat::new(case.bits, channels, case.complex).unwrap();
    let mut header = VdifHeaderRepr {
        seconds: 5_227_200,
        epoch: 48,
        version: case.version,
        log2_channels: case.log2_channels,
        frame_len: case.frame_len,
        complex: case.complex,
        bits_per_sample: case.bits,
        thread_id: case.thread_id,
        station_id: VdifHeaderRepr::station_from_str(case.station).unwrap(),
        ..Default::default()
    };
    if case.edv != 0 {
        header = header.with_sample_rate(case.edv, EdvSampleRate::from_hz(64_000_000).unwrap());
    }
    let payload_len = header.payload_len();
    let per_frame = format.values_in(payload_len).unwrap();
    let values = gaussian_values(per_frame * case.frames as usize, seed);
    let mut file = Vec::new();
    let mut headers = Vec::new();
    for f in 0..case.frames {
        let h = VdifHeaderRepr {
            frame_number: f,
            ..header
        };
        let mut frame = vec![0u8; case.frame_len];
        h.emit(&mut frame).unwrap();
        let v = &values[f as usize * per_frame..(f as usize + 1) * per_frame];
        samples::encode(format, v, &mut frame[h.header_len()..]).unwrap();
        // Our own decoder must give back levels that re-encode to the same bytes.
        let mut levels = vec![0f32; per_frame];
        samples::decode(format, &frame[h.header_len()..], &mut levels).unwrap();
        let mut again = vec![0u8; payload_len];
        samples::encode(format, &levels, &mut again).unwrap();
        assert_eq!(
            again,
            frame[h.header_len()..],
            "{}: decode/encode round trip",
            case.name
        );
        file.extend_from_slice(&frame);
        headers.push(format!(
            r#"{{"seconds": 5227200, "ref_epoch": 48, "frame_nr": {f}, "vdif_version": {}, "nchan": {channels},
               "frame_nbytes": {}, "bps": {}, "complex_data": {}, "thread_id": {}, "station": "{}",
               "invalid_data": false, "edv": {}}}"#,
            case.version, case.frame_len, case.bits, case.complex, case.thread_id, case.station, case.edv
        ));
    }
    let file_name = format!("{}.vdif", case.name);
    let values_name = format!("{}.f32", case.name);
    std::fs::write(dir.join(&file_name), &file).unwrap();
    std::fs::write(dir.join(&values_name), f32_bytes(&values)).unwrap();
    format!(
        r#"{{"file": "{file_name}", "values": "{values_name}", "frames": {}, "bits": {}, "nchan": {channels},
            "complex": {}, "scale": 2.174564, "headers": [{}]}}"#,
        case.frames,
        case.bits,
        case.complex,
        headers.join(", ")
    )
}

/// astropy's `isot` with 9 decimals, as baseband prints Mark5B times.
fn isot(t: UtcTime) -> String {
    let days = t.unix_seconds.div_euclid(86_400);
    let sod = t.unix_seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        t.nanos
    )
}

/// Writes Mark5B frames (fill-pattern payloads) at 12800 frames/s; returns the JSON description.
fn write_mark5b_case(dir: &Path) -> String {
    let rate = 12_800;
    let unix = 1_704_067_200 + 86_400 * 45 + 3_661; // 2024-02-15T01:01:01
    let reference_mjd = unix / 86_400 + MJD_UNIX_EPOCH;
    let mut file = Vec::new();
    let mut headers = Vec::new();
    for (second, frame) in [(0, 0u16), (0, 1), (0, 5), (0, 64), (0, 12_799), (1, 0)] {
        let r = Mark5bHeaderRepr::for_frame(unix + second, frame, rate, 0xbead).unwrap();
        let mut bytes = vec![0u8; mark5b::FRAME_LEN];
        r.emit(&mut bytes).unwrap();
        for w in bytes[mark5b::HEADER_LEN..].chunks_exact_mut(4) {
            w.copy_from_slice(&vlbiflow_formats::fill::FILL_BYTES);
        }
        file.extend_from_slice(&bytes);
        let t = r.to_utc(reference_mjd, rate).unwrap();
        headers.push(format!(
            r#"{{"user": {}, "frame_nr": {}, "jday": {}, "seconds": {}, "time": "{}"}}"#,
            r.user,
            r.frame_number,
            r.mjd_mod_1000,
            r.seconds_of_day,
            isot(t)
        ));
    }
    std::fs::write(dir.join("frames.m5b"), &file).unwrap();
    let kday = reference_mjd - reference_mjd % 1000;
    format!(
        r#"{{"file": "frames.m5b", "frame_rate": {rate}, "kday": {kday}, "headers": [{}]}}"#,
        headers.join(", ")
    )
}

#[test]
fn baseband_reads_what_we_write() {
    assert!(
        baseband_available(),
        "this test needs python3 with the baseband package: pip install baseband \
         (scripts/test installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        VdifCase {
            name: "r2dbe_2bit",
            bits: 2,
            log2_channels: 0,
            complex: false,
            frame_len: 8224,
            frames: 3,
            edv: 0,
            version: 1,
            thread_id: 0,
            station: "Xx",
        },
        VdifCase {
            name: "one_bit_4ch",
            bits: 1,
            log2_channels: 2,
            complex: false,
            frame_len: 1056,
            frames: 2,
            edv: 0,
            version: 0,
            thread_id: 3,
            station: "Ef",
        },
        VdifCase {
            name: "four_bit_2ch_complex",
            bits: 4,
            log2_channels: 1,
            complex: true,
            frame_len: 1056,
            frames: 2,
            edv: 0,
            version: 1,
            thread_id: 1023,
            station: "Wb",
        },
        VdifCase {
            name: "eight_bit_complex",
            bits: 8,
            log2_channels: 0,
            complex: true,
            frame_len: 2080,
            frames: 2,
            edv: 1,
            version: 1,
            thread_id: 7,
            station: "On",
        },
        VdifCase {
            name: "rdbe_edv3_8ch",
            bits: 2,
            log2_channels: 3,
            complex: false,
            frame_len: 5032,
            frames: 2,
            edv: 3,
            version: 0,
            thread_id: 0,
            station: "LA",
        },
    ];
    let mut json = String::from(r#"{"vdif": ["#);
    for (i, case) in cases.iter().enumerate() {
        if i > 0 {
            json.push_str(", ");
        }
        json.push_str(&write_vdif_case(dir.path(), case, 0x5eed + i as u64));
    }
    write!(json, r#"], "mark5b": {}}}"#, write_mark5b_case(dir.path())).unwrap();
    std::fs::write(dir.path().join("cases.json"), json).unwrap();

    let out = Command::new("timeout")
        .args([PYTHON_TIMEOUT_S, "python3", CHECKER])
        .arg(dir.path())
        .output()
        .expect("run timeout/python3");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "baseband cross-check failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
