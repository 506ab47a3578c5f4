//! The daemon's Prometheus families (`GET /metrics`), encoded with `prometheus-client` by the daemons'
//! common endpoint (`vlbiflow-http`), which adds `vlbiflow_build_info` and the process metrics.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use vlbiflow_http::Families;

use crate::forward::DestTotals;
use crate::report::{Cumulative, DiskReport, StatusReport, StreamTotals};

/// The daemon's state at one scrape.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub report: StatusReport,
    pub cumulative: Cumulative,
}

/// The whole `/metrics` text (Prometheus text format 0.0.4) for `r` and `c`.
pub fn prometheus(r: &StatusReport, c: &Cumulative) -> String {
    vlbiflow_http::metrics::render(
        vlbiflow_http::BuildInfo::current(),
        Box::new(Snapshot {
            report: r.clone(),
            cumulative: c.clone(),
        }),
    )
}

impl Collector for Snapshot {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut f = Families(encoder);
        streams(&mut f, &self.report, &self.cumulative)?;
        disks(&mut f, &self.report, &self.cumulative)?;
        forward(&mut f, &self.report, &self.cumulative)?;
        let (r, c) = (&self.report, &self.cumulative);
        f.gauge1("vlbiflow_scans", "Scans on the disks.", r.scans.len() as u64)?;
        f.counter1(
            "vlbiflow_scans_recorded_total",
            "Scans recorded since the daemon started.",
            c.scans_recorded,
        )?;
        f.counter1(
            "vlbiflow_commands_total",
            "Statements received on the command port.",
            c.commands,
        )?;
        f.counter1(
            "vlbiflow_connections_total",
            "Command connections accepted.",
            c.connections,
        )?;
        f.counter1(
            "vlbiflow_connections_refused_total",
            "Command connections refused (over the connection limit).",
            c.connections_refused,
        )
    }
}

fn streams(f: &mut Families<'_>, r: &StatusReport, c: &Cumulative) -> fmt::Result {
    type Get = fn(&StreamTotals) -> u64;
    let counters: [(&str, &str, Get); 7] = [
        (
            "vlbiflow_stream_packets_total",
            "Datagrams (frames) stored, per stream, since the daemon started.",
            |t| t.packets,
        ),
        (
            "vlbiflow_stream_bytes_total",
            "Frame bytes stored, per stream, since the daemon started.",
            |t| t.bytes,
        ),
        (
            "vlbiflow_stream_lost_packets_total",
            "Frames missing from the sequence (PSN or VDIF time), per stream.",
            |t| t.lost,
        ),
        (
            "vlbiflow_stream_out_of_order_packets_total",
            "Frames that arrived after a later one, per stream.",
            |t| t.out_of_order,
        ),
        (
            "vlbiflow_stream_rejected_packets_total",
            "Datagrams that were not frames of the stream's size or format, per stream.",
            |t| t.rejected,
        ),
        (
            "vlbiflow_stream_wrong_source_packets_total",
            "Datagrams from sources the stream does not accept (from=), dropped, per stream.",
            |t| t.wrong_source,
        ),
        (
            "vlbiflow_stream_dropped_packets_total",
            "Datagrams dropped by the recorder (no free block) or the kernel (socket overflow), per stream.",
            |t| t.dropped,
        ),
    ];
    for (name, help, get) in counters {
        f.counter(
            name,
            help,
            c.streams.iter().map(|(l, t)| ([("stream", l.as_str())], get(t))),
        )?;
    }
    f.gauge(
        "vlbiflow_stream_receive_rate_bytes_per_second",
        "Stored rate over the last second, per stream.",
        r.streams
            .iter()
            .map(|s| ([("stream", s.label.as_str())], s.rate_bps / 8.0)),
    )
}

fn disks(f: &mut Families<'_>, r: &StatusReport, c: &Cumulative) -> fmt::Result {
    f.counter(
        "vlbiflow_disk_written_bytes_total",
        "Bytes written, per disk, since the daemon started.",
        c.disks.iter().map(|(d, v)| ([("disk", d.as_str())], *v)),
    )?;
    let labels = |d: &DiskReport| [("disk", d.path.clone()), ("group", d.group.clone())];
    f.gauge(
        "vlbiflow_disk_free_bytes",
        "Free space on the disk's file system.",
        r.disks.iter().map(|d| (labels(d), d.free_bytes)),
    )?;
    f.gauge(
        "vlbiflow_disk_size_bytes",
        "Size of the disk's file system.",
        r.disks.iter().map(|d| (labels(d), d.total_bytes)),
    )?;
    f.gauge(
        "vlbiflow_disk_write_rate_bytes_per_second",
        "Write rate over the last second, per disk.",
        r.disks.iter().map(|d| (labels(d), d.write_rate)),
    )?;
    f.gauge(
        "vlbiflow_disk_failed",
        "1 if the disk left the current scan after an error.",
        r.disks.iter().map(|d| (labels(d), u64::from(d.failed.is_some()))),
    )?;
    f.gauge(
        "vlbiflow_record_state",
        "1 for the current recording state.",
        ["off", "pending", "recording", "flushing"]
            .iter()
            .map(|s| ([("state", *s)], u64::from(r.record.state == *s))),
    )?;
    let Some(p) = &r.pool else { return Ok(()) };
    f.gauge1(
        "vlbiflow_pool_blocks_free",
        "Block buffers free for capture.",
        p.free as u64,
    )?;
    f.gauge1(
        "vlbiflow_pool_blocks_queued",
        "Sealed blocks waiting for a disk writer.",
        p.queued as u64,
    )?;
    f.gauge1(
        "vlbiflow_pool_blocks_limit",
        "Blocks the pool may grow to (its memory limit).",
        p.limit as u64,
    )?;
    f.gauge1(
        "vlbiflow_pool_fill_ratio",
        "Blocks in use as a fraction of the pool's limit.",
        p.fill,
    )?;
    f.gauge1(
        "vlbiflow_input_rate_bytes_per_second",
        "Frame bytes arriving from all streams.",
        p.input_rate,
    )?;
    f.gauge1(
        "vlbiflow_write_rate_bytes_per_second",
        "Bytes all disks confirmed written.",
        p.write_rate,
    )?;
    f.gauge1(
        "vlbiflow_disks_behind",
        "1 while the disks-behind alarm is raised: the backlog of frames not yet on disk grew over the last 20 s \
         beyond what the recorder holds in flight (cleared when the disks catch up).",
        u64::from(p.disks_behind),
    )?;
    if let Some(t) = p.time_to_full_s {
        f.gauge1(
            "vlbiflow_pool_time_to_full_seconds",
            "Seconds until no block is free at the current rates (present only while the disks are behind).",
            t,
        )?;
    }
    Ok(())
}

fn forward(f: &mut Families<'_>, r: &StatusReport, c: &Cumulative) -> fmt::Result {
    type Get = fn(&DestTotals) -> u64;
    let counters: [(&str, &str, Get); 3] = [
        (
            "vlbiflow_forward_offered_frames_total",
            "Recorded frames offered to a forwarding destination (its thread selection passed them), per destination.",
            |t| t.offered,
        ),
        (
            "vlbiflow_forward_sent_frames_total",
            "Frames sent to a forwarding destination, per destination.",
            |t| t.sent,
        ),
        (
            "vlbiflow_forward_sent_bytes_total",
            "Datagram (or TCP) bytes sent to a forwarding destination, PSN included, per destination.",
            |t| t.sent_bytes,
        ),
    ];
    for (name, help, get) in counters {
        f.counter(
            name,
            help,
            c.forward.iter().map(|(l, t)| ([("dest", l.as_str())], get(t))),
        )?;
    }
    f.counter(
        "vlbiflow_forward_dropped_frames_total",
        "Frames not forwarded, per destination and reason: queue_full (it or its pacing could not keep up), \
         send_error, disconnected (TCP down), at_stop (still queued when the scan ended).",
        c.forward.iter().flat_map(|(l, v)| {
            [
                ("queue_full", v.dropped_queue_full),
                ("send_error", v.dropped_send_error),
                ("disconnected", v.dropped_disconnected),
                ("at_stop", v.dropped_at_stop),
            ]
            .map(|(reason, n)| ([("dest", l.as_str()), ("reason", reason)], n))
        }),
    )?;
    f.counter(
        "vlbiflow_forward_skipped_positions_total",
        "Positions of the stream a forwarding destination skipped (each frame's PSN is its position, so \
         these are holes its receiver fills), per destination and reason: captured_lost (never reached the \
         recorder), no_buffer (the recorder had no buffer for it).",
        c.forward.iter().flat_map(|(l, v)| {
            [
                ("captured_lost", v.skipped_captured_lost),
                ("no_buffer", v.skipped_no_buffer),
            ]
            .map(|(reason, n)| ([("dest", l.as_str()), ("reason", reason)], n))
        }),
    )?;
    let dests = &r.forward.destinations;
    f.gauge(
        "vlbiflow_forward_queued_frames",
        "Frames waiting in a forwarding destination's queue.",
        dests.iter().map(|d| ([("dest", d.label.as_str())], d.queued)),
    )?;
    f.gauge(
        "vlbiflow_forward_connected",
        "1 while a forwarding destination is connected (UDP: while a scan forwards; TCP: while the connection is up).",
        dests
            .iter()
            .map(|d| ([("dest", d.label.as_str())], u64::from(d.connected))),
    )?;
    f.gauge1(
        "vlbiflow_forward_enabled",
        "1 while forwarding is on (in2net=on / forward=on).",
        u64::from(r.forward.enabled),
    )
}
