//! Alert changes in the archive: stored, listed, the active ones, delivery to the webhook.

use super::db::{ArchiveError, Val};
use super::rows::AlertEvent;
use super::Archive;

impl Archive {
    /// Stores an alert change (not yet delivered to the webhook).
    pub fn alert_event(&mut self, e: &AlertEvent) -> Result<(), ArchiveError> {
        self.db.execute(
            "INSERT INTO alert_events (id, t, rule, src, dst, metric, state, value, threshold, message, delivered) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (id) DO NOTHING",
            &[
                e.id.as_str().into(),
                e.t.into(),
                e.rule.as_str().into(),
                e.src.as_str().into(),
                e.dst.as_str().into(),
                e.metric.as_str().into(),
                e.state.as_str().into(),
                e.value.into(),
                e.threshold.into(),
                e.message.as_str().into(),
            ],
        )?;
        Ok(())
    }

    fn alert_rows(&mut self, sql: &str, p: &[Val]) -> Result<Vec<AlertEvent>, ArchiveError> {
        Ok(self
            .db
            .query(sql, p)?
            .iter()
            .map(|r| AlertEvent {
                id: r[0].text().unwrap_or_default().into(),
                t: r[1].int().unwrap_or(0),
                rule: r[2].text().unwrap_or_default().into(),
                src: r[3].text().unwrap_or_default().into(),
                dst: r[4].text().unwrap_or_default().into(),
                metric: r[5].text().unwrap_or_default().into(),
                state: r[6].text().unwrap_or_default().into(),
                value: r[7].real(),
                threshold: r[8].real(),
                message: r[9].text().unwrap_or_default().into(),
            })
            .collect())
    }

    /// Alert changes, newest first (at most `limit`).
    pub fn alert_events(&mut self, limit: usize) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            &format!(
                "SELECT id, t, rule, src, dst, metric, state, value, threshold, message FROM alert_events \
                 ORDER BY t DESC, id LIMIT {limit}"
            ),
            &[],
        )
    }

    /// Alerts raised and not cleared: the newest change per (rule, pair) when it is "raised".
    pub fn active_alerts(&mut self) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            "SELECT e.id, e.t, e.rule, e.src, e.dst, e.metric, e.state, e.value, e.threshold, e.message \
             FROM alert_events e WHERE e.state = 'raised' AND e.t = (SELECT MAX(x.t) FROM alert_events x \
             WHERE x.rule = e.rule AND x.src = e.src AND x.dst = e.dst) ORDER BY e.t, e.id",
            &[],
        )
    }

    /// Alert changes not yet delivered to the webhook, oldest first.
    pub fn undelivered_alerts(&mut self) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            "SELECT id, t, rule, src, dst, metric, state, value, threshold, message FROM alert_events \
             WHERE delivered = 0 ORDER BY t, id",
            &[],
        )
    }

    /// Marks an alert change delivered.
    pub fn alert_delivered(&mut self, id: &str) -> Result<(), ArchiveError> {
        self.db
            .execute("UPDATE alert_events SET delivered = 1 WHERE id = ?", &[id.into()])?;
        Ok(())
    }
}
