//! `vlbiflow demo` at rates other than its default: the tone of its payload sits inside the band the rate
//! gives, and a rate below what the demo can send is refused with the minimum.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// The frequency after `prefix` in `text` ("... {prefix}499.712 kHz ..."), in Hz.
fn freq_after(text: &str, prefix: &str) -> f64 {
    let rest = &text[text
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {text}"))
        + prefix.len()..];
    let mut w = rest.split_whitespace();
    let v: f64 = w.next().unwrap().parse().unwrap();
    match w.next().unwrap() {
        "MHz" => v * 1e6,
        "kHz" => v * 1e3,
        u => panic!("unit {u}"),
    }
}

#[test]
fn demo_at_16_mbps_records_and_finds_its_tone_in_the_band() {
    let out = Command::new(BIN)
        .args(["demo", "--rate", "16Mbps", "--duration", "2"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains("recorded and checked: no loss"), "{stdout}");
    // 122 frames/s per thread of 32768 2-bit samples: a band up to 1.998848 MHz
    let tone = freq_after(&stdout, "2-bit noise with a ");
    assert!(tone > 0.0 && tone < 1_998_848.0, "{tone} Hz");
    // the check of the recorded scan sees it in both threads
    let found = stdout.matches("strongest tone ").count();
    assert_eq!(found, 2, "{stdout}");
    let seen = freq_after(&stdout, "strongest tone ");
    assert!(
        (seen - tone).abs() < 1e3,
        "sent {tone} Hz, the check found {seen} Hz"
    );
}

#[test]
fn demo_below_one_frame_per_second_per_thread_says_the_minimum() {
    let out = Command::new(BIN)
        .args(["demo", "--rate", "100kbps", "--duration", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--rate 100kbps") && err.contains("at least 131.6 kb/s"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing started");
}
