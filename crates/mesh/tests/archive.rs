//! The archive on SQLite and on a real PostgreSQL server started for the test: the same checks on
//! both (migrations, planned runs, outcomes ranked, sweep points one row each, counters, alerts,
//! overlap query, retention).

mod common;

use common::pg::PgServer;
use vlbiflow_mesh::archive::{AlertEvent, Archive, RunFilter, MIGRATIONS};
use vlbiflow_mesh::config::Kind;
use vlbiflow_mesh::plan::PlannedRun;
use vlbiflow_mesh::report::{CounterSample, Metrics, Outcome, Point, Reason, RunReport};

fn run(id: u32, src: &str, dst: &str, start: i64, res: &[&str]) -> PlannedRun {
    PlannedRun {
        id: format!("bw/{start}/{src}->{dst}#{id}"),
        test: "bw".into(),
        kind: Kind::Sweep,
        cycle: start,
        src: src.into(),
        dst: dst.into(),
        start,
        end: start + 1000,
        exclusive: true,
        resources: res.iter().map(|s| s.to_string()).collect(),
        slot: 0,
        skipped: None,
    }
}

fn ok(r: &PlannedRun, started: i64, ended: i64, mbps: f64) -> RunReport {
    RunReport {
        run: r.clone(),
        started_at: Some(started),
        ended_at: Some(ended),
        reported_by: r.src.clone(),
        outcome: Outcome::Ok {
            metrics: Metrics {
                throughput_mbps: Some(mbps),
                loss_percent: Some(0.5),
                ..Metrics::default()
            },
            points: (0..3)
                .map(|i| Point {
                    size: 1472,
                    wait_us: 10.0 * i as f64,
                    offered_mbps: 100.0 * (i + 1) as f64,
                    recv_mbps: 90.0 * (i + 1) as f64,
                    loss_percent: i as f64,
                    jitter_us: 1.0,
                })
                .collect(),
            result: serde_json::json!({"x": 1}),
        },
    }
}

fn exercise(target: &str) {
    let mut a = Archive::open(target).unwrap();
    assert_eq!(a.schema_version().unwrap(), MIGRATIONS.len() as i64);
    // Reopening migrates nothing and keeps data.
    let r1 = run(1, "A", "B", 10_000, &["host:A", "host:B", "link:up"]);
    let r2 = run(2, "C", "D", 10_500, &["host:C", "host:D", "link:up"]);
    let r3 = run(3, "B", "A", 20_000, &["host:A", "host:B"]);
    a.plan(&[r1.clone(), r2.clone(), r3.clone()], 1).unwrap();
    a.plan(std::slice::from_ref(&r1), 2).unwrap();
    drop(a);
    let mut a = Archive::open(target).unwrap();
    assert_eq!(a.pending().unwrap().len(), 3);
    // The hub infers a failure, then the agent's real result arrives later and replaces it; a
    // repeated delivery changes nothing.
    let inferred = RunReport::failed(&r1, "hub", Reason::AgentDown, "agent A did not report");
    assert_eq!(a.record(std::slice::from_ref(&inferred), 3).unwrap(), 1);
    assert_eq!(a.record(&[ok(&r1, 10_000, 10_900, 512.0)], 4).unwrap(), 1);
    assert_eq!(
        a.record(&[ok(&r1, 10_000, 10_900, 512.0), inferred], 5).unwrap(),
        0
    );
    // r2 overlaps r1 on link:up (10_600 < 10_900).
    a.record(&[ok(&r2, 10_600, 11_000, 300.0)], 6).unwrap();
    a.record(
        &[RunReport::failed(&r3, "B", Reason::Refused, "connection refused")],
        7,
    )
    .unwrap();
    assert!(a.pending().unwrap().is_empty());
    let rows = a.runs(&RunFilter::default()).unwrap();
    assert_eq!(rows.len(), 3);
    let row1 = rows.iter().find(|r| r.id == r1.id).unwrap();
    assert_eq!(
        (
            row1.status.as_str(),
            row1.throughput_mbps,
            row1.reported_by.as_deref()
        ),
        ("ok", Some(512.0), Some("A"))
    );
    let failed = a
        .runs(&RunFilter {
            status: Some("failed".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].reason.as_deref(), Some("refused"));
    assert_eq!(
        a.overlaps().unwrap(),
        vec![("link:up".to_string(), r1.id.clone(), r2.id.clone())]
    );
    let pts = a.points("A", "B", 0).unwrap();
    assert_eq!(pts.len(), 3);
    assert_eq!(pts[2].2.offered_mbps, 300.0);
    assert_eq!(a.latest().unwrap().len(), 2);
    let counts = a.counts(None, None).unwrap();
    assert_eq!(counts.iter().map(|c| c.3).sum::<i64>(), 3);
    assert_eq!(a.result_json(&r1.id).unwrap(), Some(serde_json::json!({"x": 1})));
    // Counters and alerts.
    let s = CounterSample {
        host: "A".into(),
        iface: "eth0".into(),
        t: 15_000,
        span_ms: 1000,
        rx_bytes: u64::MAX >> 2,
        tx_bytes: 2,
        rx_packets: 3,
        tx_packets: 4,
        rx_errors: 5,
        tx_errors: 6,
        rx_drops: 7,
        tx_drops: 8,
    };
    a.counters(&[s.clone(), s.clone()]).unwrap();
    assert_eq!(a.counter_samples("A", 0).unwrap(), vec![s]);
    let ev = |t: i64, state: &str| AlertEvent {
        id: format!("slow/A->B/{t}/{state}"),
        t,
        rule: "slow".into(),
        src: "A".into(),
        dst: "B".into(),
        metric: "throughput_mbps".into(),
        state: state.into(),
        value: Some(1.0),
        threshold: Some(2.0),
        message: "m".into(),
    };
    a.alert_event(&ev(100, "raised")).unwrap();
    assert_eq!(a.active_alerts().unwrap().len(), 1);
    a.alert_event(&ev(200, "cleared")).unwrap();
    assert!(a.active_alerts().unwrap().is_empty());
    assert_eq!(a.undelivered_alerts().unwrap().len(), 2);
    a.alert_delivered(&ev(100, "raised").id).unwrap();
    assert_eq!(a.undelivered_alerts().unwrap().len(), 1);
    a.agent_seen("A", 99, "vlbiflow", "abc").unwrap();
    a.agent_seen("A", 100, "vlbiflow", "abc").unwrap();
    assert_eq!(
        a.agents().unwrap(),
        vec![("A".to_string(), 100, "vlbiflow".to_string(), "abc".to_string())]
    );
    // Retention drops what is older than the cut, with its points and resources.
    a.retain(15_000).unwrap();
    assert_eq!(a.runs(&RunFilter::default()).unwrap().len(), 1);
    assert!(a.points("A", "B", 0).unwrap().is_empty());
    assert!(a.overlaps().unwrap().is_empty());
    let left = a.query("SELECT COUNT(*) FROM run_resources").unwrap();
    assert_eq!(left[0][0].int(), Some(2));
}

/// Several processes (here threads) opening a new archive at once: one migrates, the others wait
/// and find the schema in place (a hub and a reader starting together raced on CREATE TABLE).
fn concurrent_opens(target: &str) {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (b, t) = (barrier.clone(), target.to_string());
            std::thread::spawn(move || {
                b.wait();
                Archive::open(&t).map(|mut a| a.schema_version().unwrap())
            })
        })
        .collect();
    let versions: Vec<i64> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("concurrent open: {e}"))
        })
        .collect();
    assert!(
        versions.iter().all(|v| *v == versions[0] && *v > 0),
        "{versions:?}"
    );
}

#[test]
fn sqlite_archive() {
    let dir = tempfile::tempdir().unwrap();
    exercise(dir.path().join("sub/mesh.sqlite").to_str().unwrap());
    concurrent_opens(dir.path().join("fresh.sqlite").to_str().unwrap());
}

#[test]
fn postgresql_archive() {
    let pg = PgServer::start();
    exercise(&pg.url);
    Archive::open(&pg.url)
        .unwrap()
        .query("CREATE DATABASE fresh")
        .unwrap();
    concurrent_opens(&pg.url.replace("/postgres", "/fresh"));
    // A bad URL says where it tried.
    let e = Archive::open("postgresql://nobody:secret@%2Fnonexistent:5432/x")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("connect to PostgreSQL") && e.contains("***") && !e.contains("secret"),
        "{e}"
    );
}
