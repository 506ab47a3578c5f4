//! `--stats`: occupancy against the ideal, a dead channel, the strongest tone, and the PNG.

mod common;
use common::*;
use vlbiflow_checker::{check, CheckConfig, StatsConfig};
use vlbiflow_formats::samples::{encode, SampleFormat};
use vlbiflow_formats::vdif::VdifHeaderRepr;
use vlbiflow_reader::finding::FindingKind;
use vlbiflow_reader::locate;

/// Two channels of 2-bit samples: channel 0 Gaussian-like noise plus a tone at 1/8 of the sample rate,
/// channel 1 stuck at the lowest level.
fn frames(n: u64) -> Vec<Vec<u8>> {
    let fmt = SampleFormat::new(2, 2, false).unwrap();
    let samples = (FRAME_LEN - 32) * 4 / 2;
    let mut seed = 0x1234_5678u64;
    let mut noise = move || {
        // Sum of uniforms: close enough to Gaussian for occupancy, deterministic.
        let mut s = 0.0f32;
        for _ in 0..12 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s += (seed >> 40) as f32 / (1u64 << 24) as f32;
        }
        s - 6.0
    };
    let mut out = Vec::new();
    let mut values = vec![0f32; samples * 2];
    for i in 0..n {
        for k in 0..samples {
            let t = (i as usize * samples + k) as f32;
            values[2 * k] = noise() + 0.7 * (2.0 * std::f32::consts::PI * t / 8.0).cos();
            values[2 * k + 1] = -10.0;
        }
        let mut f = vec![0u8; FRAME_LEN];
        VdifHeaderRepr {
            seconds: SECOND0 + (i / u64::from(RATE)) as u32,
            epoch: EPOCH,
            frame_number: (i % u64::from(RATE)) as u32,
            frame_len: FRAME_LEN,
            log2_channels: 1,
            bits_per_sample: 2,
            ..Default::default()
        }
        .emit(&mut f)
        .unwrap();
        encode(fmt, &values, &mut f[32..]).unwrap();
        out.push(f);
    }
    out
}

#[test]
fn occupancy_dead_channel_tone_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tone.vdif");
    std::fs::write(&p, concat(&frames(300))).unwrap();
    let png = dir.path().join("spectra.png");
    let rec = locate(&[s(&p)], &[]).unwrap();
    let config = CheckConfig {
        stats: Some(StatsConfig {
            plot: Some(png.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = check(&rec, config, |_| {});
    let st = r.engine.stats.as_ref().expect("stats");
    let t = &st.threads[0];
    assert_eq!(t.sample_rate_hz, Some(f64::from(RATE) * 2048.0));
    let ch0 = &t.channels[0];
    assert_eq!(ch0.state, "ok", "{:?}", ch0.occupancy);
    for (o, i) in ch0.occupancy.iter().zip(ch0.ideal.as_ref().unwrap()) {
        assert!((o - i).abs() < 0.06, "occupancy {:?}", ch0.occupancy);
    }
    assert!((ch0.tone_fraction - 0.125).abs() < 1e-9, "{}", ch0.tone_fraction);
    assert!((ch0.tone_hz.unwrap() - 25_600.0).abs() < 1e-6);
    assert!(ch0.tone_db_above_median > 10.0);
    assert_eq!(t.channels[1].state, "dead");
    assert!(r
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::Samples && f.message.contains("channel 1: dead")));
    assert_eq!(r.verdict, "error");
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(st.plot.as_deref(), Some(png.to_str().unwrap()));
}
