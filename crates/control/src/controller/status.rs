//! The full status report ([`StatusReport`]) built from the controller's state.

use std::path::PathBuf;

use vlbiflow_formats::time::{UtcTime, VdifTime};
use vlbiflow_recorder::RecorderStatus;

use super::{Controller, RecordState};
use crate::report::*;

impl Controller {
    /// The full status at `now`.
    pub fn report(&self, now: UtcTime) -> StatusReport {
        let live: Option<RecorderStatus> = match &self.state {
            RecordState::Active { rec, .. } => Some(rec.status()),
            _ => None,
        };
        let (plan, started) = match &self.state {
            RecordState::Pending { plan, start } => (Some(plan), Some(UtcTime::from_unix(*start, 0))),
            RecordState::Active { plan, started, .. } => (Some(plan), Some(*started)),
            RecordState::Starting { plan, .. } => (Some(plan), None),
            RecordState::Off => (None, None),
        };
        let record = RecordReport {
            state: self.state_name().into(),
            group: plan.map(|p| p.group.clone()).or_else(|| self.open_group.clone()),
            scan: plan.map(|p| p.scan.clone()),
            scan_number: self.scans.len() + usize::from(plan.is_some()),
            start_utc: started.map(|t| t.to_iso8601()),
            elapsed_s: live.as_ref().map(|s| s.elapsed.as_secs_f64()).unwrap_or(0.0),
            duration_s: plan.and_then(|p| p.duration).map(|d| d.as_secs_f64()),
            last_error: self.last_error.clone(),
        };
        let streams_cfg = plan.map(|p| &p.streams).unwrap_or(&self.committed);
        let streams = streams_cfg
            .iter()
            .map(|s| {
                let mut r = StreamReport {
                    label: s.label.clone(),
                    format: s.kind.name().into(),
                    address: s.address.to_string(),
                    interface: s.interface.clone(),
                    psn: s.spec().psn,
                    frame_size: s.payload_size,
                    threads: s.threads.clone(),
                    rate_bps: self.rates.stream_bps.get(&s.label).copied().unwrap_or(0.0),
                    ..Default::default()
                };
                if let Some(ls) = live
                    .as_ref()
                    .and_then(|l| l.streams.iter().find(|x| x.label == s.label))
                {
                    let c = &ls.counters;
                    r.packets = c.packets;
                    r.bytes = c.bytes;
                    r.lost = c.lost;
                    r.out_of_order = c.out_of_order;
                    r.duplicates = c.duplicates;
                    r.invalid_frames = c.invalid_frames;
                    r.rejected = c.rejected;
                    r.filtered = c.filtered;
                    r.dropped_no_buffer = c.dropped_no_buffer;
                    r.kernel_drops = c.kernel_drops;
                    r.wrong_source = c.wrong_source;
                    r.loss_fraction = c.loss_fraction();
                    // A configured rate stands; the one learned from the data only fills in.
                    r.frame_rate = s.frame_rate.or(ls.frame_rate);
                    r.recv_buffer = ls.recv_buffer;
                    r.vdif_times = ls
                        .threads
                        .iter()
                        .filter_map(|t| {
                            let time: VdifTime = t.last_time?;
                            let delta = t
                                .frame_rate
                                .filter(|_| s.frame_rate.is_none())
                                .or(s.frame_rate)
                                .or(ls.frame_rate)
                                .and_then(|rate| time.to_utc(rate).ok())
                                .map(|u| u.as_f64() - now.as_f64());
                            Some(VdifTimeReport {
                                thread: t.thread,
                                epoch: time.epoch,
                                second: time.seconds,
                                frame: time.frame,
                                delta_s: delta,
                            })
                        })
                        .collect();
                }
                r
            })
            .collect();
        let group_name = record.group.clone().unwrap_or_default();
        let disk_paths: Vec<PathBuf> = match (plan, &self.open_group) {
            (Some(p), _) => p.disks.clone(),
            (None, Some(g)) => self.group_disks(g),
            (None, None) => Vec::new(),
        };
        let disks = disk_paths
            .iter()
            .map(|p| {
                let key = p.display().to_string();
                let (free, total) = self.disks.space(p).unwrap_or((0, 0));
                let ld = live.as_ref().and_then(|l| l.disks.iter().find(|d| &d.path == p));
                DiskReport {
                    path: key.clone(),
                    group: group_name.clone(),
                    free_bytes: free,
                    total_bytes: total,
                    written_bytes: ld.map(|d| d.bytes).unwrap_or(0),
                    write_rate: self.rates.disk_bytes_per_s.get(&key).copied().unwrap_or(0.0),
                    failed: ld.and_then(|d| d.failed.clone()),
                    present: self.disks.is_dir(p),
                }
            })
            .collect();
        let groups = self
            .cfg
            .groups
            .keys()
            .map(|g| {
                let (free, total, found) = self.space_of(&self.group_disks(g));
                GroupReport {
                    name: g.clone(),
                    open: self.open_group.as_deref() == Some(g),
                    disks_found: found,
                    disks_nominal: self.nominal.get(g).copied().unwrap_or(0),
                    free_bytes: free,
                    total_bytes: total,
                }
            })
            .collect();
        let mut scans: Vec<ScanReport> = self
            .scans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let t = s.meta.as_ref().map(|m| m.totals()).unwrap_or_default();
                ScanReport {
                    number: i + 1,
                    name: s.name.clone(),
                    state: match &s.meta {
                        Some(m) if m.complete => "complete",
                        Some(_) => "incomplete",
                        None => "unreadable",
                    }
                    .into(),
                    start_utc: s.meta.as_ref().map(|m| m.start_utc.clone()),
                    end_utc: s.meta.as_ref().and_then(|m| m.end_utc.clone()),
                    bytes: t.bytes,
                    packets: t.packets,
                    lost: t.lost,
                    disks: s.meta.as_ref().map(|m| m.disks.len()).unwrap_or(0),
                }
            })
            .collect();
        if let (Some(p), Some(l)) = (plan, &live) {
            let t = l.totals();
            scans.push(ScanReport {
                number: self.scans.len() + 1,
                name: p.scan.clone(),
                state: record.state.clone(),
                start_utc: record.start_utc.clone(),
                end_utc: None,
                bytes: t.bytes,
                packets: t.packets,
                lost: t.lost,
                disks: p.disks.len(),
            });
        }
        StatusReport {
            name: self.cfg.name.clone(),
            version: format!("vlbiflow {}", env!("CARGO_PKG_VERSION")),
            time_unix: now.as_f64(),
            time_utc: now.to_iso8601(),
            record,
            streams,
            disks,
            groups,
            pool: live.as_ref().map(|l| PoolReport {
                total: l.pool.total,
                free: l.pool.free,
                queued: l.pool.queued,
                block_bytes: l.pool.block_bytes,
                free_bytes: (l.pool.free * l.pool.block_bytes) as u64,
                total_bytes: (l.pool.total * l.pool.block_bytes) as u64,
                limit: l.flow.pool_limit,
                limit_bytes: (l.flow.pool_limit * l.pool.block_bytes) as u64,
                fill: l.flow.pool_fill,
                input_rate: l.flow.input_rate,
                write_rate: l.flow.write_rate,
                rate_window_s: vlbiflow_recorder::flow::RATE_WINDOW.as_secs_f64(),
                disks_behind: l.flow.disks_behind(),
                time_to_full_s: l.flow.time_to_full,
            }),
            rates: self.rates.rates.clone(),
            scans,
            events: self.events.iter().cloned().collect(),
            forward: self.forward.report(&match &self.state {
                RecordState::Active { rec, .. } => rec.forward_status(),
                _ => Vec::new(),
            }),
        }
    }
}
