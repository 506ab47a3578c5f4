//! Rows as read back: runs, the filter that lists them, alert changes.

use serde::Serialize;

use super::db::Val;
use crate::timespec::Ms;

/// A run row as read back.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunRow {
    /// Run id.
    pub id: String,
    /// Test name.
    pub test: String,
    /// Test kind.
    pub kind: String,
    /// Source host.
    pub src: String,
    /// Destination host.
    pub dst: String,
    /// Planned start, ms.
    pub planned_start: Ms,
    /// Planned end, ms.
    pub planned_end: Ms,
    /// Exclusive.
    pub exclusive: bool,
    /// planned, ok or failed.
    pub status: String,
    /// Failure reason.
    pub reason: Option<String>,
    /// Failure detail.
    pub detail: Option<String>,
    /// Actual start.
    pub started_at: Option<Ms>,
    /// Actual end.
    pub ended_at: Option<Ms>,
    /// Throughput, Mb/s.
    pub throughput_mbps: Option<f64>,
    /// Loss, percent.
    pub loss_percent: Option<f64>,
    /// RTT, ms.
    pub rtt_ms: Option<f64>,
    /// Capacity, Mb/s.
    pub capacity_mbps: Option<f64>,
    /// Who reported it.
    pub reported_by: Option<String>,
}

pub(super) const RUN_COLUMNS: &str =
    "id, test, kind, src, dst, planned_start, planned_end, exclusive, status, reason, detail, \
     started_at, ended_at, throughput_mbps, loss_percent, rtt_ms, capacity_mbps, reported_by";

pub(super) fn run_row(r: &[Val]) -> RunRow {
    let t = |i: usize| r[i].text().unwrap_or_default().to_string();
    let ot = |i: usize| r[i].text().map(str::to_string);
    RunRow {
        id: t(0),
        test: t(1),
        kind: t(2),
        src: t(3),
        dst: t(4),
        planned_start: r[5].int().unwrap_or(0),
        planned_end: r[6].int().unwrap_or(0),
        exclusive: r[7].int() == Some(1),
        status: t(8),
        reason: ot(9),
        detail: ot(10),
        started_at: r[11].int(),
        ended_at: r[12].int(),
        throughput_mbps: r[13].real(),
        loss_percent: r[14].real(),
        rtt_ms: r[15].real(),
        capacity_mbps: r[16].real(),
        reported_by: ot(17),
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this source.
    pub src: Option<String>,
    /// Only this destination.
    pub dst: Option<String>,
    /// Only this test.
    pub test: Option<String>,
    /// Only this status (planned, ok, failed).
    pub status: Option<String>,
    /// Planned start at or after.
    pub since: Option<Ms>,
    /// Planned start before.
    pub until: Option<Ms>,
    /// Newest first, at most this many.
    pub limit: Option<usize>,
}

/// An alert change as stored.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AlertEvent {
    /// Unique id.
    pub id: String,
    /// When, ms.
    pub t: Ms,
    /// Rule name.
    pub rule: String,
    /// Source host ("" for none).
    pub src: String,
    /// Destination host.
    pub dst: String,
    /// Metric.
    pub metric: String,
    /// "raised" or "cleared".
    pub state: String,
    /// The value that changed it (None for no-data).
    pub value: Option<f64>,
    /// The threshold crossed.
    pub threshold: Option<f64>,
    /// In words.
    pub message: String,
}
