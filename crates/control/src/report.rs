//! The daemon's status as data: served as JSON on `GET /status`, rendered as Prometheus text on
//! `GET /metrics` and as the MonitorStatus-like view of `vlbiflow status`.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Everything the daemon knows, at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Recorder name (host name unless configured).
    pub name: String,
    pub version: String,
    /// Wall clock of the report, Unix seconds.
    pub time_unix: f64,
    pub time_utc: String,
    pub record: RecordReport,
    /// Committed input streams, with live counters while recording.
    pub streams: Vec<StreamReport>,
    /// Disks of the recording (or of the open group when idle).
    pub disks: Vec<DiskReport>,
    pub groups: Vec<GroupReport>,
    pub pool: Option<PoolReport>,
    /// Rates over the last second.
    pub rates: Rates,
    /// Every scan on the disks, oldest first.
    pub scans: Vec<ScanReport>,
    /// Recent operator events, oldest first.
    pub events: Vec<String>,
    /// Forwarding while recording (real-time e-VLBI).
    #[serde(default)]
    pub forward: crate::forward::ForwardReport,
}

/// The recording state (`record?`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordReport {
    /// off | pending | recording | flushing
    pub state: String,
    pub group: Option<String>,
    pub scan: Option<String>,
    /// Number the scan has (or will have) in the scan list, from 1.
    pub scan_number: usize,
    /// Start (pending: the start time to come), ISO-8601.
    pub start_utc: Option<String>,
    pub elapsed_s: f64,
    pub duration_s: Option<f64>,
    /// Why the last recording could not start or ended with an error.
    pub last_error: Option<String>,
}

/// One input stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub label: String,
    pub format: String,
    pub address: String,
    pub interface: String,
    pub psn: bool,
    pub frame_size: u32,
    pub threads: Vec<u16>,
    /// Counters of the current scan (zero when idle).
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub invalid_frames: u64,
    pub rejected: u64,
    pub filtered: u64,
    pub dropped_no_buffer: u64,
    pub kernel_drops: u64,
    /// Datagrams from sources the stream does not accept (`from`): dropped.
    #[serde(default)]
    pub wrong_source: u64,
    pub loss_fraction: f64,
    /// Received rate over the last second, bits/s.
    pub rate_bps: f64,
    pub frame_rate: Option<u32>,
    /// VDIF time of the last frame, per thread.
    pub vdif_times: Vec<VdifTimeReport>,
    pub recv_buffer: usize,
}

/// VDIF time of a thread's last frame and its offset from the wall clock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VdifTimeReport {
    pub thread: u16,
    pub epoch: u8,
    pub second: u32,
    pub frame: u32,
    /// VDIF time minus wall clock, seconds (negative: data behind the clock); None if the rate is unknown.
    pub delta_s: Option<f64>,
}

/// One disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskReport {
    pub path: String,
    pub group: String,
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// Written by the current scan.
    pub written_bytes: u64,
    /// Over the last second, bytes/s.
    pub write_rate: f64,
    pub failed: Option<String>,
    pub present: bool,
}

/// One configured disk group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupReport {
    pub name: String,
    pub open: bool,
    pub disks_found: usize,
    pub disks_nominal: usize,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// Block pool and queue of the current recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// Blocks allocated so far.
    pub total: usize,
    /// Blocks free for capture, of `total`.
    pub free: usize,
    /// Sealed blocks waiting for a disk writer.
    pub queued: usize,
    pub block_bytes: usize,
    /// Bytes of the free blocks (`free` x `block_bytes`).
    #[serde(default)]
    pub free_bytes: u64,
    /// Bytes of the allocated blocks (`total` x `block_bytes`).
    #[serde(default)]
    pub total_bytes: u64,
    /// Blocks the pool may grow to (its memory limit) while the disks are behind.
    #[serde(default)]
    pub limit: usize,
    /// Bytes the pool may grow to (`limit` x `block_bytes`).
    #[serde(default)]
    pub limit_bytes: u64,
    /// Blocks in use as a fraction of `limit`, 0..=1.
    #[serde(default)]
    pub fill: f64,
    /// Frame bytes arriving from all streams, bytes per second, over the last `rate_window_s` seconds.
    #[serde(default)]
    pub input_rate: f64,
    /// Bytes the disks confirmed written, bytes per second, over the last `rate_window_s` seconds.
    #[serde(default)]
    pub write_rate: f64,
    /// The window of `input_rate` and `write_rate`, seconds.
    #[serde(default)]
    pub rate_window_s: f64,
    /// The disks-behind alarm: raised when the streams' backlog grew beyond what the recorder holds in
    /// flight, cleared when the disks caught up (with hysteresis).
    #[serde(default)]
    pub disks_behind: bool,
    /// Seconds until no block is free at the rate the pool fills (only while the disks are behind).
    #[serde(default)]
    pub time_to_full_s: Option<f64>,
}

/// Rates over the last second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub rx_bps: f64,
    pub lost_per_s: f64,
    pub write_bytes_per_s: f64,
}

/// One point of the rate history (one per second, the last ten minutes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub rx_bps: f64,
    pub lost_per_s: f64,
    pub write_bytes_per_s: f64,
}

/// One scan of the list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScanReport {
    pub number: usize,
    pub name: String,
    /// complete | incomplete | recording | unreadable
    pub state: String,
    pub start_utc: Option<String>,
    pub end_utc: Option<String>,
    pub bytes: u64,
    pub packets: u64,
    pub lost: u64,
    pub disks: usize,
}

/// One stream's counters summed over scans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTotals {
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub rejected: u64,
    /// Dropped for want of a block buffer plus dropped by the kernel.
    pub dropped: u64,
    /// From sources the stream does not accept (`from`).
    #[serde(default)]
    pub wrong_source: u64,
}

impl StreamTotals {
    /// Adds `other` field by field.
    pub fn add(&mut self, other: &StreamTotals) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.lost += other.lost;
        self.out_of_order += other.out_of_order;
        self.rejected += other.rejected;
        self.dropped += other.dropped;
        self.wrong_source += other.wrong_source;
    }
}

/// Counters kept across scans since the daemon started, so that Prometheus counters never go backwards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cumulative {
    /// Per stream label.
    pub streams: Vec<(String, StreamTotals)>,
    /// Per disk path: bytes written.
    pub disks: Vec<(String, u64)>,
    pub scans_recorded: u64,
    pub commands: u64,
    pub connections: u64,
    pub connections_refused: u64,
    /// Per forwarding destination label.
    #[serde(default)]
    pub forward: Vec<(String, crate::forward::DestTotals)>,
}

pub use crate::metrics::prometheus;

fn si(v: f64, unit: &str) -> String {
    vlbiflow_units::fmt_si(v, unit, 2)
}

/// The MonitorStatus-like text view of `vlbiflow status`.
pub fn render_monitor(r: &StatusReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "name: {}   ({}, {})", r.name, r.version, r.time_utc);
    let rec = &r.record;
    let _ = write!(o, "status: {}", rec.state);
    if let Some(s) = &rec.scan {
        let _ = write!(o, "   scan #{} {}", rec.scan_number, s);
    }
    if let Some(g) = &rec.group {
        let _ = write!(o, "   group {g}");
    }
    if rec.state == "recording" || rec.state == "flushing" {
        let _ = write!(o, "   {:.1} s", rec.elapsed_s);
        if let Some(d) = rec.duration_s {
            let _ = write!(o, " of {d:.0} s");
        }
    }
    if rec.state == "pending" {
        if let Some(s) = &rec.start_utc {
            let _ = write!(o, "   starts {s}");
        }
    }
    let _ = writeln!(o);
    if let Some(e) = &rec.last_error {
        let _ = writeln!(o, "last error: {e}");
    }
    let _ = writeln!(
        o,
        "rate: {}   loss: {:.0} frames/s   disks: {}",
        si(r.rates.rx_bps, "b/s"),
        r.rates.lost_per_s,
        si(r.rates.write_bytes_per_s, "B/s")
    );
    for s in &r.streams {
        let _ = writeln!(
            o,
            "stream: {} ({} {} on {}, interface {})",
            s.label,
            s.format,
            s.frame_size,
            s.address,
            if s.interface.is_empty() { "-" } else { &s.interface }
        );
        let _ = writeln!(o, "   rx packets: {}", s.packets);
        let _ = writeln!(o, "   rx bytes: {}", s.bytes);
        let _ = writeln!(
            o,
            "   dropped packets: {} (lost {}, no buffer {}, kernel {}, rejected {})",
            s.lost + s.dropped_no_buffer + s.kernel_drops + s.rejected,
            s.lost,
            s.dropped_no_buffer,
            s.kernel_drops,
            s.rejected
        );
        let _ = writeln!(
            o,
            "   rate: {}   loss fraction: {}",
            si(s.rate_bps, "b/s"),
            vlbiflow_units::fmt_fraction(s.loss_fraction, 3)
        );
        if !s.vdif_times.is_empty() {
            let _ = writeln!(o, "vdif_time: {}", s.label);
            let _ = writeln!(o, "       (id, epoch, second, frame, ~delta (s))");
            for t in &s.vdif_times {
                let delta = t.delta_s.map(|d| format!("{d:.6}")).unwrap_or_else(|| "?".into());
                let _ = writeln!(
                    o,
                    "       ({}, {}, {}, {}, {})",
                    t.thread, t.epoch, t.second, t.frame, delta
                );
            }
        }
    }
    if let Some(p) = &r.pool {
        let _ = writeln!(
            o,
            "pool: {}; {} queued for a disk",
            vlbiflow_recorder::status::pool_text(p.free, p.total, p.limit, p.block_bytes),
            p.queued
        );
        let _ = writeln!(
            o,
            "flow: in {} write {} ({:.0} s average){}",
            si(p.input_rate * 8.0, "b/s"),
            si(p.write_rate * 8.0, "b/s"),
            p.rate_window_s,
            match (p.disks_behind, p.time_to_full_s) {
                (true, Some(t)) => format!("  DISKS BEHIND: pool full in {t:.0} s"),
                (true, None) => "  DISKS BEHIND".into(),
                _ => String::new(),
            }
        );
    }
    let _ = writeln!(o, "disks:");
    for d in &r.disks {
        let fill = if d.total_bytes > 0 {
            100.0 * (1.0 - d.free_bytes as f64 / d.total_bytes as f64)
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "   {}  {}  written {}  free {} of {} ({fill:.1}% full){}",
            d.path,
            si(d.write_rate, "B/s"),
            si(d.written_bytes as f64, "B"),
            si(d.free_bytes as f64, "B"),
            si(d.total_bytes as f64, "B"),
            match (&d.failed, d.present) {
                (Some(e), _) => format!("  FAILED: {e}"),
                (None, false) => "  MISSING".into(),
                _ => String::new(),
            }
        );
    }
    let f = &r.forward;
    if !f.destinations.is_empty() {
        let _ = writeln!(
            o,
            "forward: {} ({} destination(s); net_protocol {}, net_port {})",
            if f.enabled { "on" } else { "off" },
            f.destinations.len(),
            f.net_protocol,
            f.net_port
        );
        for d in &f.destinations {
            let dropped =
                d.dropped_queue_full + d.dropped_send_error + d.dropped_disconnected + d.dropped_at_stop;
            let _ = writeln!(
                o,
                "   {} {}@{}{}{}: offered {} sent {} ({}) dropped {} (queue full {}, send error {}, disconnected {}, at stop {}) queued {}/{}{}{}",
                d.label,
                d.protocol,
                d.address,
                if d.threads.is_empty() {
                    String::new()
                } else {
                    format!(" threads {:?}", d.threads)
                },
                d.rate_bps.map(|b| format!(" paced {}", si(b, "b/s"))).unwrap_or_default(),
                d.offered,
                d.sent,
                si(d.sent_bytes as f64, "B"),
                dropped,
                d.dropped_queue_full,
                d.dropped_send_error,
                d.dropped_disconnected,
                d.dropped_at_stop,
                d.queued,
                d.queue_capacity,
                if d.protocol == "tcp" && !d.connected { " NOT CONNECTED" } else { "" },
                d.last_error.as_deref().map(|e| format!(" last error: {e}")).unwrap_or_default(),
            );
        }
    }
    let _ = writeln!(o, "scans: {}", r.scans.len());
    for s in r.scans.iter().rev().take(5) {
        let _ = writeln!(
            o,
            "   #{} {} {} {} lost {}",
            s.number,
            s.name,
            s.state,
            si(s.bytes as f64, "B"),
            s.lost
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (StatusReport, Cumulative) {
        let r = StatusReport {
            name: "m6".into(),
            record: RecordReport {
                state: "recording".into(),
                scan: Some("e_st_s1".into()),
                scan_number: 1,
                ..Default::default()
            },
            streams: vec![StreamReport {
                label: "a\"b".into(),
                packets: 10,
                vdif_times: vec![VdifTimeReport {
                    thread: 0,
                    epoch: 50,
                    second: 14401442,
                    frame: 683791,
                    delta_s: Some(-0.431088),
                }],
                ..Default::default()
            }],
            disks: vec![DiskReport {
                path: "/d/0".into(),
                group: "g".into(),
                free_bytes: 5,
                total_bytes: 10,
                present: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let c = Cumulative {
            streams: vec![(
                "a\"b".into(),
                StreamTotals {
                    packets: 10,
                    bytes: 80240,
                    lost: 1,
                    ..Default::default()
                },
            )],
            disks: vec![("/d/0".into(), 99)],
            ..Default::default()
        };
        (r, c)
    }

    /// Disks behind the streams are said in the metrics and the status text, with the rates and the time
    /// until the pool is full; a pool keeping up says neither.
    #[test]
    fn disks_behind_show_in_metrics_and_status_text() {
        let (mut r, c) = sample();
        r.pool = Some(PoolReport {
            total: 100,
            free: 40,
            queued: 55,
            block_bytes: 8_000_000,
            free_bytes: 320_000_000,
            total_bytes: 800_000_000,
            limit: 1000,
            limit_bytes: 8_000_000_000,
            fill: 0.06,
            rate_window_s: 5.0,
            input_rate: 1e9,
            write_rate: 0.8e9,
            disks_behind: true,
            time_to_full_s: Some(37.6),
        });
        let text = prometheus(&r, &c);
        for want in [
            "vlbiflow_disks_behind 1\n",
            "vlbiflow_pool_time_to_full_seconds 37.6\n",
            "vlbiflow_input_rate_bytes_per_second 1000000000.0\n",
            "vlbiflow_write_rate_bytes_per_second 800000000.0\n",
            "vlbiflow_pool_blocks_limit 1000\n",
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        let monitor = render_monitor(&r);
        assert!(monitor.contains("DISKS BEHIND: pool full in 38 s"), "{monitor}");
        // One wording for the pool: free of allocated, blocks and bytes, and what it may grow to.
        assert!(
            monitor.contains(
                "pool: 40 of 100 blocks free (0.32 of 0.80 GB), may grow to 1000 (8.00 GB); 55 queued"
            ),
            "{monitor}"
        );
        assert!(!monitor.contains("free_blocks"), "{monitor}");
        let p = r.pool.as_mut().unwrap();
        (p.disks_behind, p.time_to_full_s, p.write_rate) = (false, None, 1e9);
        let text = prometheus(&r, &c);
        assert!(text.contains("vlbiflow_disks_behind 0\n"));
        assert!(!text.contains("vlbiflow_pool_time_to_full_seconds"));
        assert!(!render_monitor(&r).contains("DISKS BEHIND"));
    }

    #[test]
    fn prometheus_has_typed_families_and_escaped_labels() {
        let (r, c) = sample();
        let text = prometheus(&r, &c);
        assert!(text.contains("# TYPE vlbiflow_stream_packets_total counter\n"));
        assert!(
            text.contains("vlbiflow_stream_packets_total{stream=\"a\\\"b\"} 10\n"),
            "{text}"
        );
        assert!(text.contains("vlbiflow_disk_written_bytes_total{disk=\"/d/0\"} 99\n"));
        assert!(text.contains("vlbiflow_disk_free_bytes{disk=\"/d/0\",group=\"g\"} 5\n"));
        assert!(text.contains("vlbiflow_record_state{state=\"recording\"} 1\n"));
        // Every sample line belongs to a declared family.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(text.contains(&format!("# TYPE {name} ")), "{line}");
        }
    }

    #[test]
    fn monitor_view_shows_the_mark6_fields() {
        let (r, _) = sample();
        let text = render_monitor(&r);
        for want in [
            "status: recording",
            "rx packets: 10",
            "(0, 50, 14401442, 683791, -0.431088)",
            "/d/0",
            "50.0% full",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
    }
}
