//! The matrix of host pairs: the newest figure of each pair per metric and per test, classified by
//! the thresholds and marked stale.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::state::{lock, Shared};
use crate::archive::RunRow;
use crate::config::Config;
use crate::timespec::{now_ms, Ms};

/// One cell of the matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    /// Source.
    pub src: String,
    /// Destination.
    pub dst: String,
    /// Newest figure per metric of any test: (value, time, test, class "good"/"warn"/"bad"/"none",
    /// stale). Where several tests give a metric (a sweep's loss and a latency test's) this is
    /// whichever ran last: `by_test` keeps them apart.
    pub metrics: BTreeMap<String, CellValue>,
    /// Newest figure per test and metric.
    #[serde(default)]
    pub by_test: BTreeMap<String, BTreeMap<String, CellValue>>,
}

/// A figure in a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellValue {
    /// Value.
    pub value: f64,
    /// When measured (planned start), ms.
    pub t: Ms,
    /// Test it came from.
    pub test: String,
    /// good, warn, bad or none (no threshold).
    pub class: String,
    /// Older than stale_after intervals of its test.
    pub stale: bool,
}

/// The matrix of host pairs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Matrix {
    /// Host names in configuration order.
    pub hosts: Vec<String>,
    /// One cell per directed pair that has results.
    pub cells: Vec<Cell>,
    /// When computed.
    pub now: Ms,
}

pub(super) fn matrix(s: &Shared) -> Result<Matrix, String> {
    let latest = lock(&s.archive).latest().map_err(|e| e.to_string())?;
    Ok(matrix_of(&s.cfg, &latest, now_ms()))
}

/// The matrix from the newest result of each (test, src, dst).
pub(super) fn matrix_of(cfg: &Config, latest: &[RunRow], now: Ms) -> Matrix {
    let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
    for r in latest {
        let interval = cfg
            .tests
            .iter()
            .find(|t| t.name == r.test)
            .map(|t| t.repeat.typical_interval())
            .unwrap_or(60_000);
        let cell = cells
            .entry((r.src.clone(), r.dst.clone()))
            .or_insert_with(|| Cell {
                src: r.src.clone(),
                dst: r.dst.clone(),
                metrics: BTreeMap::new(),
                by_test: BTreeMap::new(),
            });
        for (name, v) in [
            ("throughput_mbps", r.throughput_mbps),
            ("loss_percent", r.loss_percent),
            ("rtt_ms", r.rtt_ms),
            ("capacity_mbps", r.capacity_mbps),
        ] {
            let Some(v) = v else { continue };
            let value = CellValue {
                value: v,
                t: r.planned_start,
                test: r.test.clone(),
                class: cfg
                    .threshold(name)
                    .map(|t| t.classify(v))
                    .unwrap_or("none")
                    .into(),
                stale: (now - r.planned_start) as f64 > cfg.stale_after * interval as f64,
            };
            let per_test = cell.by_test.entry(r.test.clone()).or_default();
            if per_test.get(name).is_none_or(|c| c.t < r.planned_start) {
                per_test.insert(name.into(), value.clone());
            }
            if cell.metrics.get(name).is_none_or(|c| c.t < r.planned_start) {
                cell.metrics.insert(name.into(), value);
            }
        }
    }
    Matrix {
        hosts: cfg.hosts.iter().map(|h| h.name.clone()).collect(),
        cells: cells.into_values().collect(),
        now,
    }
}
