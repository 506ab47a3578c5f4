//! The queries on scans, rates and state: `scan_check?`, `rtime?` (recording time left on the open
//! group at the recent rate), `status?`, `evlbi?`.

use vlbiflow_scan::StreamCounters;

use super::scan_list::{data_rate, data_span, parse_iso};
use super::{format_mark6_time, Controller, RecordState, Result};
use crate::proto::{Reply, ReturnCode as Rc, Statement};

impl Controller {
    /// The scan being recorded or flushed (or about to be), if any.
    pub(super) fn current_scan(&self) -> Option<&str> {
        match &self.state {
            RecordState::Starting { plan, .. } | RecordState::Active { plan, .. } => Some(&plan.scan),
            _ => None,
        }
    }

    pub(super) fn scan_check(&self, st: &Statement) -> Result {
        let which = st.arg(0);
        // The latest scan (or this one by name or number) is not complete yet: say so rather than answer
        // for the one before, which a script would take for the scan it just recorded.
        if let Some(current) = self.current_scan() {
            let number = (self.scans.len() + 1).to_string();
            if which.is_empty() || which == current || which == number {
                return Err(Reply::reason(
                    st,
                    Rc::Busy,
                    format!(
                        "scan {current} is {}: retry when record? says off",
                        self.state_name()
                    ),
                ));
            }
        }
        let (number, entry) = if which.is_empty() {
            match self.scans.last() {
                Some(e) => (self.scans.len(), e),
                None => return Err(Reply::reason(st, Rc::NotNow, "no scan recorded yet")),
            }
        } else if let Some(i) = which
            .parse::<usize>()
            .ok()
            .filter(|&i| i >= 1 && i <= self.scans.len())
        {
            (i, &self.scans[i - 1])
        } else if let Some(i) = self.scans.iter().position(|s| s.name == which) {
            (i + 1, &self.scans[i])
        } else {
            return Err(Reply::reason(st, Rc::Parameter, format!("no scan {which:?}")));
        };
        let Some(m) = &entry.meta else {
            return Err(Reply::reason(
                st,
                Rc::Failed,
                format!(
                    "scan {}: {}",
                    entry.name,
                    entry.error.as_deref().unwrap_or("metadata unreadable")
                ),
            ));
        };
        let mut f = vec![
            number.to_string(),
            entry.name.clone(),
            if m.complete { "complete" } else { "incomplete" }.into(),
        ];
        for s in &m.streams {
            let c = &s.counters;
            let first = s.first_frame_utc.as_deref().and_then(parse_iso);
            let duration = data_span(s);
            let status = if c.packets == 0 || c.lost > 0 || c.invalid_frames > 0 {
                "data?"
            } else if first.is_none() || s.frame_rate.is_none() {
                "time?"
            } else {
                "OK"
            };
            let gbps = data_rate(s) / 1e9;
            f.extend([
                s.label.clone(),
                status.into(),
                s.kind.name().into(),
                first
                    .map(|t| format_mark6_time(t.floor() as i64))
                    .unwrap_or_else(|| "-".into()),
                format!("{duration:.3}"),
                format!("{:.6}", c.bytes as f64 / 1e9),
                format!("{gbps:.4}"),
                (c.lost * u64::from(s.frame_size)).to_string(),
            ]);
        }
        Ok(Reply::to(st, Rc::Done, f))
    }

    /// The recording's data rate (bits/s), as `scan_check?` computes it: each stream's bytes over the time
    /// its frames span (first to last time stamp), summed over streams. While recording, the scan so far
    /// (the rate `status` shows over the last second when no time stamps tell); when idle, the last scan
    /// that recorded data.
    pub(super) fn recent_rate(&self) -> f64 {
        if let RecordState::Active { rec, .. } = &self.state {
            let st = rec.status();
            let by_span: f64 = st
                .streams
                .iter()
                .filter_map(|s| Some(s.counters.bytes as f64 * 8.0 / s.data_span()?))
                .sum();
            return if by_span > 0.0 {
                by_span
            } else {
                self.rates.rates.rx_bps
            };
        }
        self.scans
            .iter()
            .rev()
            .filter_map(|s| s.meta.as_ref())
            .map(|m| m.streams.iter().map(data_rate).sum::<f64>())
            .find(|&r| r > 0.0)
            .unwrap_or(0.0)
    }

    pub(super) fn rtime(&self, st: &Statement) -> Reply {
        let Some(group) = &self.open_group else {
            return Reply::reason(st, Rc::NotNow, "no group open");
        };
        let (free, total, _) = self.space_of(&self.group_disks(group));
        let rate = self.recent_rate();
        let seconds = if rate > 0.0 {
            format!("{:.0}", free as f64 * 8.0 / rate)
        } else {
            "unknown".into()
        };
        Reply::to(
            st,
            Rc::Done,
            vec![
                group.clone(),
                seconds,
                format!("{:.3}", free as f64 / 1e9),
                format!(
                    "{:.2}",
                    if total > 0 {
                        100.0 * free as f64 / total as f64
                    } else {
                        0.0
                    }
                ),
                format!("{:.4}", rate / 1e9),
            ],
        )
    }

    pub(super) fn status_query(&self, st: &Statement) -> Reply {
        Reply::to(
            st,
            Rc::Done,
            vec![
                self.state_name().into(),
                self.open_group.clone().unwrap_or_else(|| "none".into()),
                format!("{} streams", self.committed.len()),
                format!("{} scans", self.scans.len()),
                self.last_error.clone().unwrap_or_else(|| "ok".into()),
            ],
        )
    }

    pub(super) fn evlbi(&self, st: &Statement) -> Reply {
        let c: StreamCounters = match &self.state {
            RecordState::Active { rec, .. } => rec.status().totals(),
            _ => self
                .scans
                .last()
                .and_then(|s| s.meta.as_ref())
                .map(|m| m.totals())
                .unwrap_or_default(),
        };
        let expected = c.packets + c.lost;
        let pct = |n: u64| {
            if expected > 0 {
                100.0 * n as f64 / expected as f64
            } else {
                0.0
            }
        };
        Reply::to(
            st,
            Rc::Done,
            vec![
                "total".into(),
                expected.to_string(),
                "loss".into(),
                format!("{} ({:.2}%)", c.lost, pct(c.lost)),
                "out-of-order".into(),
                format!("{} ({:.2}%)", c.out_of_order, pct(c.out_of_order)),
                "extent".into(),
                "n/a seqnr/pkt".into(),
            ],
        )
    }
}
