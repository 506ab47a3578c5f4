//! A series as an aligned text table with notes.

use crate::series::EffReport;

/// Formats a figure or "-" when there is none.
fn fig(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// The summary as an aligned text table with notes (energy, shared host, transports left out).
pub fn table_lines(r: &EffReport) -> Vec<String> {
    let head = [
        "transport",
        "n",
        "Gb/s",
        "±%",
        "loss%",
        "send_usr",
        "send_sys",
        "recv_usr",
        "recv_sys",
        "recv±%",
        "host_sirq",
        "host_busy",
        "J/GB",
        "Gb/s/W",
        "eff_recv",
        "eff_both",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for s in &r.summary {
        let opt = |v: Option<f64>, d: usize| v.map(|x| fig(x, d)).unwrap_or_else(|| "-".into());
        rows.push(vec![
            s.transport.map(|t| t.name().to_owned()).unwrap_or_default(),
            s.repeats.to_string(),
            fig(s.gbps, 2),
            fig(s.gbps_spread * 100.0, 1),
            fig(s.loss * 100.0, 3),
            fig(s.send_user, 3),
            fig(s.send_system, 3),
            fig(s.recv_user, 3),
            fig(s.recv_system, 3),
            fig(s.recv_cpu_spread * 100.0, 1),
            fig(s.host_softirq, 3),
            fig(s.host_busy, 3),
            opt(s.joules_per_gb, 1),
            opt(s.gbps_per_watt, 3),
            fig(s.recv_efficiency, 2),
            fig(s.both_efficiency, 2),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(c, v)| {
                    if c == 0 {
                        format!("{v:<w$}", w = widths[c])
                    } else {
                        format!("{v:>w$}", w = widths[c])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect();
    out.push(String::new());
    out.push(
        "CPU columns: seconds per GB (sender per GB sent, receiver and host per GB received); send_/recv_: the one \
         sending / receiving thread; host_: whole machine from /proc/stat (all processes). ±%: (max-min)/median over \
         the repeats. eff_*: GB per CPU second of the receiving thread (recv) or of both threads (both), relative \
         to the best transport."
            .into(),
    );
    if let Some(run) = r.runs.first() {
        if run.metrics.same_host {
            out.push(
                "Both ends share one kernel (same boot id): host figures and energy are counted once, and the kernel's \
                 receive work (softirq) runs largely in the sender's system calls."
                    .into(),
            );
        }
        match (&run.remote.usage.energy, &run.remote.usage.energy_note) {
            (Some(_), _) => out.push("Energy: RAPL package counters (powercap).".into()),
            (None, Some(n)) => out.push(format!("Energy (RAPL): {n}.")),
            (None, None) => {}
        }
    }
    for s in &r.summary {
        let cc = match &s.tcp_congestion {
            Some(cc) => format!("; sender congestion control {cc}"),
            None => String::new(),
        };
        out.push(format!(
            "{}: {}{cc}",
            s.transport.map(|t| t.name()).unwrap_or(""),
            s.detail
        ));
    }
    for a in &r.unavailable {
        out.push(format!(
            "{}: not measured: {}",
            a.transport,
            a.unavailable.as_deref().unwrap_or("?")
        ));
    }
    out
}
