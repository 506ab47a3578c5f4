//! Series of tests (sweeps, zero-loss search, stopping, archiving) against a real responder on
//! 127.0.0.1, as the CLI runs them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use vlbiflow_net::sweep::{self, Series, SeriesReport, ZeroLossPlan};
use vlbiflow_net::{
    BwParams, BwSweep, Client, Responder, ResponderConfig, Spacing, SweepEvent, SweepOptions,
};

/// A responder on an ephemeral port, stopped and joined on drop.
struct Running {
    client: Option<Client>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.client.take();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

fn responder() -> Running {
    let mut cfg = ResponderConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.idle_timeout = Duration::from_secs(5);
    let r = Responder::bind(cfg).unwrap();
    let addr = r.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = thread::spawn(move || r.run(s, &|_| {}).unwrap());
    Running {
        client: Some(Client::connect(addr, Duration::from_secs(3)).unwrap()),
        stop,
        handle: Some(handle),
    }
}

fn bw(sizes: Vec<usize>, spacing: Spacing, count: u64) -> Series {
    Series::Bw(BwSweep {
        sizes,
        spacing,
        base: BwParams::new(0, count, 0.0),
    })
}

#[cfg(feature = "archive")]
#[test]
fn stop_flag_set_after_the_second_test_ends_the_sweep_with_both_results_archived() {
    let mut r = responder();
    let dir = tempfile::tempdir().unwrap();
    let store =
        vlbiflow_net::archive::ArchiveStore::open(Some(&dir.path().join("a.sqlite")), "here").unwrap();
    let stop = AtomicBool::new(false);
    let opts = SweepOptions {
        loads: vec![None],
        stop: &stop,
        store: Some(&store as &dyn vlbiflow_net::sweep::Store),
    };
    let series = bw(vec![100, 200], Spacing::Waits(vec![0.0, 5.0, 10.0]), 200);
    let mut finished = 0;
    let mut progress = Vec::new();
    let report = sweep::run(r.client.as_mut().unwrap(), &series, &opts, &mut |e| match e {
        SweepEvent::Bw(row) => {
            assert_eq!(row.result.received + row.result.lost, 200);
            finished += 1;
            if finished == 2 {
                stop.store(true, Ordering::Relaxed);
            }
        }
        SweepEvent::Progress(m) => progress.push(m),
        _ => {}
    })
    .unwrap();
    let SeriesReport::Bw(b) = &report else {
        panic!("{report:?}")
    };
    assert!(report.interrupted());
    assert_eq!(b.results.len(), 2);
    assert_eq!(
        b.results.iter().map(|r| r.result.wait_us).collect::<Vec<_>>(),
        vec![0.0, 5.0]
    );
    assert_eq!(
        progress,
        vec!["[1/6] 100 B, wait 0.00 µs", "[2/6] 100 B, wait 5.00 µs"]
    );
    let stored = store.archive.list(&Default::default()).unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored
        .iter()
        .all(|s| s.record.kind == "bw" && s.record.remote == "here"));
    let json = report.to_json(r.client.as_ref().unwrap());
    assert_eq!(json["results"].as_array().unwrap().len(), 2);
}

#[test]
fn rate_spacing_and_a_zero_loss_search_below_what_loopback_carries() {
    let mut r = responder();
    let stop = AtomicBool::new(false);
    let opts = SweepOptions {
        loads: vec![None],
        stop: &stop,
        store: None,
    };
    // 1000-byte frames at 8 Mb/s are 1000 µs apart.
    let series = bw(vec![1000], Spacing::Rate(8e6), 20);
    let report = sweep::run(r.client.as_mut().unwrap(), &series, &opts, &mut |_| {}).unwrap();
    let SeriesReport::Bw(b) = &report else { panic!() };
    assert!((b.results[0].result.wait_us - 1000.0).abs() < 1e-9);

    // A search whose upper end (20 Mb/s) loopback carries without loss ends after one trial there.
    let plan = ZeroLossPlan {
        trial: Duration::from_millis(100),
        max_rate_bps: Some(20e6),
        resolution: 0.01,
    };
    let series = bw(vec![1000], Spacing::ZeroLoss(plan), 100);
    let mut zero = Vec::new();
    let report = sweep::run(r.client.as_mut().unwrap(), &series, &opts, &mut |e| {
        if let SweepEvent::ZeroLoss(z) = e {
            zero.push(z.clone());
        }
    })
    .unwrap();
    let SeriesReport::Bw(b) = &report else { panic!() };
    assert_eq!(zero.len(), 1);
    assert_eq!(b.zero_loss, zero);
    let z = &zero[0];
    // Each trial is either lossless at its rate or recorded as failed; the best is one of them.
    let best = z.user_mbps.map(|u| u * 1e6);
    assert!(z.trials.iter().any(|t| t.lossless && Some(t.rate_bps) == best) || best.is_none());
    assert_eq!(z.trials[0].rate_bps, 20e6);
    assert_eq!(b.results.len(), z.trials.len());
    // 250 frames of 1000 bytes at 20 Mb/s is 100 ms.
    assert_eq!(b.results[0].result.count, 250);
}
