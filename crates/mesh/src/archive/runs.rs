//! Runs in the archive: planned runs, outcomes, sweep points, passive counters and the queries over them.

use super::db::{ArchiveError, Backend, Val};
use super::rows::{run_row, RunFilter, RunRow, RUN_COLUMNS};
use super::Archive;
use crate::plan::PlannedRun;
use crate::report::{CounterSample, Outcome, RunReport};
use crate::timespec::Ms;

impl Archive {
    /// Archives planned runs (rows with status "planned" and their resources); runs already present
    /// are left alone.
    pub fn plan(&mut self, runs: &[PlannedRun], now: Ms) -> Result<(), ArchiveError> {
        self.tx(|db| {
            for r in runs {
                insert_planned(db, r, now)?;
            }
            Ok(())
        })
    }

    /// Archives reports; a report replaces an earlier one of the same run only when it ranks higher
    /// (a result over a failure, an agent's failure over the hub's inference). Returns how many
    /// changed a row.
    pub fn record(&mut self, reports: &[RunReport], now: Ms) -> Result<usize, ArchiveError> {
        self.tx(|db| {
            let mut changed = 0;
            for r in reports {
                insert_planned(db, &r.run, now)?;
                let (reason, detail, m, result) = match &r.outcome {
                    Outcome::Ok { metrics, result, .. } => (None, None, Some(metrics), Some(result.to_string())),
                    Outcome::Failed { reason, detail } => (Some(reason.as_str()), Some(detail.clone()), None, None),
                };
                let n = db.execute(
                    "UPDATE runs SET status = ?, rank = ?, reason = ?, detail = ?, started_at = ?, ended_at = ?, \
                     throughput_mbps = ?, loss_percent = ?, rtt_ms = ?, capacity_mbps = ?, result = ?, \
                     reported_by = ?, updated_at = ? WHERE id = ? AND rank < ?",
                    &[
                        r.status().into(),
                        r.rank().into(),
                        reason.into(),
                        detail.into(),
                        r.started_at.into(),
                        r.ended_at.into(),
                        m.and_then(|m| m.throughput_mbps).into(),
                        m.and_then(|m| m.loss_percent).into(),
                        m.and_then(|m| m.rtt_ms).into(),
                        m.and_then(|m| m.capacity_mbps).into(),
                        result.into(),
                        r.reported_by.as_str().into(),
                        now.into(),
                        r.run.id.as_str().into(),
                        r.rank().into(),
                    ],
                )?;
                if n > 0 {
                    changed += 1;
                    if let Outcome::Ok { points, .. } = &r.outcome {
                        db.execute("DELETE FROM points WHERE run_id = ?", &[r.run.id.as_str().into()])?;
                        let t = r.started_at.unwrap_or(r.run.start);
                        for (i, p) in points.iter().enumerate() {
                            db.execute(
                                "INSERT INTO points (run_id, idx, src, dst, t, size, wait_us, offered_mbps, recv_mbps, \
                                 loss_percent, jitter_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                &[
                                    r.run.id.as_str().into(),
                                    (i as i64).into(),
                                    r.run.src.as_str().into(),
                                    r.run.dst.as_str().into(),
                                    t.into(),
                                    (p.size as i64).into(),
                                    p.wait_us.into(),
                                    p.offered_mbps.into(),
                                    p.recv_mbps.into(),
                                    p.loss_percent.into(),
                                    p.jitter_us.into(),
                                ],
                            )?;
                        }
                    }
                }
            }
            Ok(changed)
        })
    }

    /// Archives counter samples (a repeated sample is ignored).
    pub fn counters(&mut self, samples: &[CounterSample]) -> Result<(), ArchiveError> {
        self.tx(|db| {
            for s in samples {
                db.execute(
                    "INSERT INTO counters (host, iface, t, span_ms, rx_bytes, tx_bytes, rx_packets, tx_packets, \
                     rx_errors, tx_errors, rx_drops, tx_drops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (host, iface, t) DO NOTHING",
                    &[
                        s.host.as_str().into(),
                        s.iface.as_str().into(),
                        s.t.into(),
                        s.span_ms.into(),
                        (s.rx_bytes as i64).into(),
                        (s.tx_bytes as i64).into(),
                        (s.rx_packets as i64).into(),
                        (s.tx_packets as i64).into(),
                        (s.rx_errors as i64).into(),
                        (s.tx_errors as i64).into(),
                        (s.rx_drops as i64).into(),
                        (s.tx_drops as i64).into(),
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// Counter samples of a host since `since`, oldest first.
    pub fn counter_samples(&mut self, host: &str, since: Ms) -> Result<Vec<CounterSample>, ArchiveError> {
        let rows = self.db.query(
            "SELECT host, iface, t, span_ms, rx_bytes, tx_bytes, rx_packets, tx_packets, rx_errors, tx_errors, \
             rx_drops, tx_drops FROM counters WHERE host = ? AND t >= ? ORDER BY t, iface",
            &[host.into(), since.into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let u = |i: usize| r[i].int().unwrap_or(0).max(0) as u64;
                CounterSample {
                    host: r[0].text().unwrap_or_default().into(),
                    iface: r[1].text().unwrap_or_default().into(),
                    t: r[2].int().unwrap_or(0),
                    span_ms: r[3].int().unwrap_or(0),
                    rx_bytes: u(4),
                    tx_bytes: u(5),
                    rx_packets: u(6),
                    tx_packets: u(7),
                    rx_errors: u(8),
                    tx_errors: u(9),
                    rx_drops: u(10),
                    tx_drops: u(11),
                }
            })
            .collect())
    }

    /// Runs matching `f`, newest planned start first.
    pub fn runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>, ArchiveError> {
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
        let mut p: Vec<Val> = Vec::new();
        for (col, v) in [
            ("src", &f.src),
            ("dst", &f.dst),
            ("test", &f.test),
            ("status", &f.status),
        ] {
            if let Some(v) = v {
                sql += &format!(" AND {col} = ?");
                p.push(v.as_str().into());
            }
        }
        if let Some(s) = f.since {
            sql += " AND planned_start >= ?";
            p.push(s.into());
        }
        if let Some(u) = f.until {
            sql += " AND planned_start < ?";
            p.push(u.into());
        }
        sql += " ORDER BY planned_start DESC, id";
        if let Some(l) = f.limit {
            sql += &format!(" LIMIT {l}");
        }
        Ok(self.db.query(&sql, &p)?.iter().map(|r| run_row(r)).collect())
    }

    /// The full result JSON of a run.
    pub fn result_json(&mut self, id: &str) -> Result<Option<serde_json::Value>, ArchiveError> {
        let rows = self
            .db
            .query("SELECT result FROM runs WHERE id = ?", &[id.into()])?;
        Ok(rows
            .first()
            .and_then(|r| r[0].text())
            .and_then(|s| serde_json::from_str(s).ok()))
    }

    /// Runs planned but without an outcome.
    pub fn pending(&mut self) -> Result<Vec<PlannedRun>, ArchiveError> {
        let rows = self.db.query(
            "SELECT r.id, r.test, r.kind, r.cycle, r.src, r.dst, r.planned_start, r.planned_end, r.exclusive, \
             (SELECT COUNT(*) FROM run_resources x WHERE x.run_id = r.id) FROM runs r WHERE r.status = 'planned'",
            &[],
        )?;
        let mut out = Vec::new();
        for r in rows {
            let id = r[0].text().unwrap_or_default().to_string();
            let res = self
                .db
                .query(
                    "SELECT resource FROM run_resources WHERE run_id = ? ORDER BY resource",
                    &[id.as_str().into()],
                )?
                .iter()
                .filter_map(|x| x[0].text().map(str::to_string))
                .collect();
            let kind =
                serde_json::from_value(serde_json::Value::String(r[2].text().unwrap_or_default().into()));
            let Ok(kind) = kind else { continue };
            out.push(PlannedRun {
                id,
                test: r[1].text().unwrap_or_default().into(),
                kind,
                cycle: r[3].int().unwrap_or(0),
                src: r[4].text().unwrap_or_default().into(),
                dst: r[5].text().unwrap_or_default().into(),
                start: r[6].int().unwrap_or(0),
                end: r[7].int().unwrap_or(0),
                exclusive: r[8].int() == Some(1),
                resources: res,
                slot: 0,
                skipped: None,
            });
        }
        Ok(out)
    }

    /// The newest finished run of each (test, src, dst).
    pub fn latest(&mut self) -> Result<Vec<RunRow>, ArchiveError> {
        let sql = format!(
            "SELECT {} FROM runs r WHERE r.status = 'ok' AND r.planned_start = \
             (SELECT MAX(x.planned_start) FROM runs x WHERE x.status = 'ok' AND x.test = r.test AND x.src = r.src \
             AND x.dst = r.dst) ORDER BY r.src, r.dst, r.test",
            RUN_COLUMNS
                .split(", ")
                .map(|c| format!("r.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(self.db.query(&sql, &[])?.iter().map(|r| run_row(r)).collect())
    }

    /// Counts of runs by status and reason (optionally within a planned-start window).
    pub fn counts(
        &mut self,
        since: Option<Ms>,
        until: Option<Ms>,
    ) -> Result<Vec<(String, String, String, i64)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT test, status, COALESCE(reason, ''), COUNT(*) FROM runs WHERE planned_start >= ? AND planned_start < ? \
             GROUP BY test, status, COALESCE(reason, '') ORDER BY test, status, COALESCE(reason, '')",
            &[since.unwrap_or(i64::MIN).into(), until.unwrap_or(i64::MAX).into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].text().unwrap_or_default().into(),
                    r[1].text().unwrap_or_default().into(),
                    r[2].text().unwrap_or_default().into(),
                    r[3].int().unwrap_or(0),
                )
            })
            .collect())
    }

    /// Pairs of exclusive runs that overlapped in actual time on a shared host or link:
    /// (resource, run a, run b). Empty when exclusivity held.
    pub fn overlaps(&mut self) -> Result<Vec<(String, String, String)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT ra.resource, a.id, b.id FROM runs a \
             JOIN run_resources ra ON ra.run_id = a.id \
             JOIN run_resources rb ON rb.resource = ra.resource AND rb.run_id > a.id \
             JOIN runs b ON b.id = rb.run_id \
             WHERE a.exclusive = 1 AND b.exclusive = 1 \
             AND a.started_at IS NOT NULL AND b.started_at IS NOT NULL \
             AND a.started_at < b.ended_at AND b.started_at < a.ended_at \
             ORDER BY ra.resource, a.id",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].text().unwrap_or_default().into(),
                    r[1].text().unwrap_or_default().into(),
                    r[2].text().unwrap_or_default().into(),
                )
            })
            .collect())
    }

    /// Sweep points of a pair since `since`, oldest first: (t, run id, point).
    pub fn points(
        &mut self,
        src: &str,
        dst: &str,
        since: Ms,
    ) -> Result<Vec<(Ms, String, crate::report::Point)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT t, run_id, size, wait_us, offered_mbps, recv_mbps, loss_percent, jitter_us FROM points \
             WHERE src = ? AND dst = ? AND t >= ? ORDER BY t, idx",
            &[src.into(), dst.into(), since.into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].int().unwrap_or(0),
                    r[1].text().unwrap_or_default().to_string(),
                    crate::report::Point {
                        size: r[2].int().unwrap_or(0) as usize,
                        wait_us: r[3].real().unwrap_or(0.0),
                        offered_mbps: r[4].real().unwrap_or(0.0),
                        recv_mbps: r[5].real().unwrap_or(0.0),
                        loss_percent: r[6].real().unwrap_or(0.0),
                        jitter_us: r[7].real().unwrap_or(0.0),
                    },
                )
            })
            .collect())
    }
}

fn insert_planned(db: &mut dyn Backend, r: &PlannedRun, now: Ms) -> Result<(), ArchiveError> {
    let n = db.execute(
        "INSERT INTO runs (id, test, kind, src, dst, cycle, planned_start, planned_end, exclusive, status, rank, \
         updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned', 0, ?) ON CONFLICT (id) DO NOTHING",
        &[
            r.id.as_str().into(),
            r.test.as_str().into(),
            r.kind.as_str().into(),
            r.src.as_str().into(),
            r.dst.as_str().into(),
            r.cycle.into(),
            r.start.into(),
            r.end.into(),
            i64::from(r.exclusive).into(),
            now.into(),
        ],
    )?;
    if n > 0 {
        for res in &r.resources {
            db.execute(
                "INSERT INTO run_resources (run_id, resource) VALUES (?, ?) ON CONFLICT (run_id, resource) DO NOTHING",
                &[r.id.as_str().into(), res.as_str().into()],
            )?;
        }
    }
    Ok(())
}
