//! What the real-time e-VLBI side takes from outside: datagrams at the correlator (`vlbiflow receive`,
//! `relay --reorder`) and destination / output specifications. The Reorderer never panics on any
//! sequence of datagrams (PSN keys and VDIF-time keys of two threads, arrival times moving forward by
//! fuzzed steps, polls in between, a flush at the end), keeps its counter identity, and outputs only
//! frames of the configured length; the specification parsers never panic. Every datagram is also read
//! as a gap notice (into the receiver's `DeclaredGaps`, asked at every fill in order) and placed by a
//! station-side `Positioner` learning its rate and threads from whatever arrives: neither panics.
#![no_main]
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use vlbiflow_evlbi::{DestSpec, OutputSpec};
use vlbiflow_formats::notice::GapNotice;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::position::{DeclaredGaps, FirstPsn, Positioner, SourceKey};
use vlbiflow_realtime::reorder::{KeyMode, OutputKind, ReorderConfig, Reorderer};

const LEN: usize = 64;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = DestSpec::parse(s);
        let _ = OutputSpec::parse(s);
    }
    let Some((&ctl, mut rest)) = data.split_first() else { return };
    let key = if ctl & 1 == 0 {
        KeyMode::Psn
    } else {
        KeyMode::VdifTime { frame_rate: 100, threads: vec![0, 3] }
    };
    let mut cfg = ReorderConfig::new(FrameKind::Vdif, LEN, key, 1 + usize::from(ctl >> 4), Duration::from_millis(5));
    cfg.max_gap = 1000;
    let mut r = Reorderer::new(cfg).expect("valid configuration");
    let t0 = Instant::now();
    let mut now = t0;
    let mut declared = DeclaredGaps::new(8);
    let mut positions = Positioner::new(
        SourceKey::VdifTime { frame_rate: None, threads: None },
        FirstPsn::At(u64::from(ctl)),
    )
    .expect("valid configuration");
    // Each datagram: 1 byte of time step (x 100 us), 1 byte of length selector, then its bytes.
    while rest.len() >= 2 {
        now += Duration::from_micros(100 * u64::from(rest[0]));
        let len = match rest[1] % 4 {
            0 => LEN + 8,
            1 => LEN,
            2 => usize::from(rest[1]),
            _ => 4,
        };
        rest = &rest[2..];
        let n = len.min(rest.len());
        let (d, tail) = rest.split_at(n);
        rest = tail;
        if let Ok(n) = GapNotice::new_checked(d) {
            declared.add_notice(&n);
        }
        if let Ok(k) = positions.key(None, d) {
            let _ = positions.place(k);
        }
        let pushed = if ctl & 1 == 0 { r.push_udps(now, d) } else { r.push_vdif(now, d) };
        while let Some(o) = r.poll_output(now) {
            assert_eq!(o.frame.len(), LEN);
            if o.kind == OutputKind::Fill {
                let _ = declared.take(o.key);
            }
        }
        assert!(pushed.is_ok(), "drained after every push: never busy");
    }
    r.flush();
    while let Some(o) = r.poll_output(now) {
        assert_eq!(o.frame.len(), LEN);
    }
    let c = r.counters();
    assert_eq!(
        c.received,
        c.delivered + c.late + c.duplicate + c.stray + c.malformed + c.unknown_thread + r.held()
    );
});
