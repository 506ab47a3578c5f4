//! Text tables of results (aligned columns or CSV), one line per finished test, and the one-line
//! summaries printed under them. Rendering only: the caller prints the lines.

use std::fmt::Write as _;

use crate::archive::Stored;
use crate::client::{BwResult, LatResult, TcpResult};
use crate::load::CpuLoadSpec;
use crate::sweep::{Row, Series, SweepEvent, ZeroLoss};

/// Column names and widths.
pub type Columns = &'static [(&'static str, usize)];

/// Throughput columns (the UDPmon line plus the extra statistics).
pub const BW_COLUMNS: Columns = &[
    ("load", 6),
    ("size", 6),
    ("sent", 8),
    ("wait_us", 8),
    ("send_Mbps", 10),
    ("recv", 8),
    ("lost", 7),
    ("ooo", 5),
    ("%lost", 7),
    ("lost_net", 8),
    ("recv_Mbps", 10),
    ("wire_Mbps", 10),
    ("jitter_us", 9),
    ("dly50_us", 9),
    ("dly99_us", 9),
    ("reord", 7),
    ("idle_s%", 7),
    ("idle_r%", 7),
];

/// Latency columns, one line per message size.
pub const LAT_COLUMNS: Columns = &[
    ("load", 6),
    ("size", 6),
    ("sent", 7),
    ("recv", 7),
    ("lost", 6),
    ("min_us", 9),
    ("p50_us", 9),
    ("mean_us", 9),
    ("p99_us", 9),
    ("max_us", 9),
];

/// TCP columns.
pub const TCP_COLUMNS: Columns = &[
    ("load", 6),
    ("streams", 7),
    ("Mbps", 10),
    ("GB", 7),
    ("s_cpu/GB", 9),
    ("r_cpu/GB", 9),
    ("s_usr%", 7),
    ("s_sys%", 7),
    ("s_sirq%", 7),
    ("s_idle%", 7),
    ("r_usr%", 7),
    ("r_sys%", 7),
    ("r_sirq%", 7),
    ("r_idle%", 7),
    ("cc", 8),
    ("rtt_us", 7),
    ("cwnd", 6),
    ("retrans", 7),
    ("sndbuf", 9),
    ("rcvbuf", 9),
];

/// Archive listing columns.
pub const HISTORY_COLUMNS: Columns = &[
    ("id", 5),
    ("time", 24),
    ("kind", 12),
    ("local", 16),
    ("remote", 22),
    ("metric", 22),
    ("value", 12),
];

/// A table layout: aligned columns, or CSV.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The columns.
    pub columns: Columns,
    /// Comma-separated instead of aligned.
    pub csv: bool,
}

impl Table {
    /// A table of `columns`, as CSV when `csv`.
    pub fn new(columns: Columns, csv: bool) -> Self {
        Table { columns, csv }
    }

    /// The header line.
    pub fn header(&self) -> String {
        let names: Vec<String> = self.columns.iter().map(|c| c.0.to_string()).collect();
        self.line(&names)
    }

    /// One line of cells.
    pub fn line(&self, cells: &[String]) -> String {
        if self.csv {
            return cells.join(",");
        }
        let mut s = String::new();
        for ((_, w), c) in self.columns.iter().zip(cells) {
            let _ = write!(s, "{c:>w$} ");
        }
        s.trim_end().to_string()
    }
}

fn load_cell(load: Option<CpuLoadSpec>) -> String {
    load.map(|l| l.nice.to_string()).unwrap_or_else(|| "-".into())
}

/// The [`BW_COLUMNS`] of one test.
pub fn bw_cells(row: &Row<BwResult>) -> Vec<String> {
    let r = &row.result;
    let a = &r.remote.arrivals;
    let (d50, d99) = a
        .delay
        .as_ref()
        .map(|d| (d.hist.p50, d.hist.p99))
        .unwrap_or((0.0, 0.0));
    vec![
        load_cell(row.load),
        r.size.to_string(),
        r.local.sent.to_string(),
        format!("{:.2}", r.wait_us),
        format!("{:.2}", r.send_user_rate_mbps),
        r.received.to_string(),
        r.lost.to_string(),
        r.out_of_order.to_string(),
        format!("{:.3}", r.loss_percent),
        r.lost_in_network.to_string(),
        format!("{:.2}", r.recv_user_rate_mbps),
        format!("{:.2}", r.recv_wire_rate_mbps),
        format!("{:.2}", a.jitter_us),
        format!("{d50:.1}"),
        format!("{d99:.1}"),
        format!("{:.4}", a.reorder.ratio),
        format!("{:.1}", r.local.host.cpu.idle),
        format!("{:.1}", r.remote.host.cpu.idle),
    ]
}

/// The [`LAT_COLUMNS`] of a latency test: one line per message size.
pub fn lat_cells(row: &Row<LatResult>) -> Vec<Vec<String>> {
    row.result
        .points
        .iter()
        .map(|pt| {
            let h = &pt.rtt_us;
            vec![
                load_cell(row.load),
                pt.size.to_string(),
                pt.sent.to_string(),
                pt.received.to_string(),
                pt.lost.to_string(),
                format!("{:.1}", h.min),
                format!("{:.1}", h.p50),
                format!("{:.1}", h.mean),
                format!("{:.1}", h.p99),
                format!("{:.1}", h.max),
            ]
        })
        .collect()
}

/// The [`TCP_COLUMNS`] of one test.
pub fn tcp_cells(row: &Row<TcpResult>) -> Vec<String> {
    let res = &row.result;
    let (l, r) = (&res.local_host.cpu, &res.remote.host.cpu);
    let s0 = res.local_sockets.first().cloned().unwrap_or_default();
    let r0 = res.remote.sockets.first().cloned().unwrap_or_default();
    let retrans: u64 = res.local_sockets.iter().map(|s| s.total_retrans as u64).sum();
    let pct = |x: f64| format!("{x:.1}");
    vec![
        load_cell(row.load),
        res.streams.to_string(),
        format!("{:.1}", res.rate_mbps),
        format!("{:.2}", res.bytes_received as f64 / 1e9),
        format!("{:.3}", res.sender_cpu_s_per_gb),
        format!("{:.3}", res.receiver_cpu_s_per_gb),
        pct(l.user),
        pct(l.system),
        pct(l.softirq),
        pct(l.idle),
        pct(r.user),
        pct(r.system),
        pct(r.softirq),
        pct(r.idle),
        s0.congestion.clone(),
        s0.rtt_us.to_string(),
        s0.snd_cwnd.to_string(),
        retrans.to_string(),
        s0.send_buffer.to_string(),
        r0.recv_buffer.to_string(),
    ]
}

/// The [`HISTORY_COLUMNS`] of one archived result.
pub fn history_cells(s: &Stored) -> Vec<String> {
    let r = &s.record;
    vec![
        s.id.to_string(),
        r.time.clone(),
        r.kind.clone(),
        r.local.clone(),
        r.remote.clone(),
        r.metric.clone(),
        format!("{:.3}", r.value),
    ]
}

/// The columns of a series' table.
pub fn columns(series: &Series) -> Columns {
    match series {
        Series::Bw(_) => BW_COLUMNS,
        Series::Lat(_) => LAT_COLUMNS,
        Series::Tcp(_) => TCP_COLUMNS,
    }
}

/// The lines of the table (and summaries under it) an event adds; none for progress and warnings.
pub fn event_lines(e: &SweepEvent, table: &Table) -> Vec<String> {
    match e {
        SweepEvent::Progress(_) | SweepEvent::Warning(_) => Vec::new(),
        SweepEvent::Bw(r) => vec![table.line(&bw_cells(r))],
        SweepEvent::Tcp(r) => vec![table.line(&tcp_cells(r))],
        SweepEvent::ZeroLoss(z) => vec![zero_loss_line(z)],
        SweepEvent::Lat(r) => {
            let fit = (!table.csv).then(|| lat_fit_line(&r.result));
            lat_cells(r)
                .iter()
                .map(|cells| table.line(cells))
                .chain(fit)
                .collect()
        }
    }
}

/// The summary line of a zero-loss search.
pub fn zero_loss_line(z: &ZeroLoss) -> String {
    match (z.user_mbps, z.wire_mbps) {
        (Some(u), Some(w)) => format!(
            "# zero-loss rate, {} B: {u:.2} Mb/s user, {w:.2} Mb/s wire ({} trials of {:.1} s)",
            z.size,
            z.trials.len(),
            z.trial_duration_s
        ),
        _ => format!(
            "# zero-loss rate, {} B: none found (every trial lost frames)",
            z.size
        ),
    }
}

/// The least-squares line of a latency test.
pub fn lat_fit_line(r: &LatResult) -> String {
    format!(
        "# least squares on the medians: y = {:.6} x + {:.2} µs (slope µs/byte, intercept µs), r² = {:.3}",
        r.slope_us_per_byte, r.intercept_us, r.r2
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_csv_lines() {
        let t = Table {
            columns: &[("a", 3), ("bb", 4)],
            csv: false,
        };
        assert_eq!(t.header(), "  a   bb");
        assert_eq!(t.line(&["1".into(), "2".into()]), "  1    2");
        let t = Table { csv: true, ..t };
        assert_eq!(t.header(), "a,bb");
        let row = Row {
            load: None,
            cpu_left_percent: 0.0,
            result: BwResult::default(),
        };
        assert_eq!(bw_cells(&row).len(), BW_COLUMNS.len());
    }
}
