//! `vlbiflow net efficiency`: what receiving a stream costs per transport. Arguments and printing
//! only: the tests run in `vlbiflow_efficiency`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use vlbiflow_efficiency::plot::{plot_efficiency, plot_loss, read_loss_series};
use vlbiflow_efficiency::{run_series, table_lines, EffEvent, EffParams, EffReport, EffSetup};
use vlbiflow_net::{resolve_responder, Client};
use vlbiflow_rx::Transport;

use crate::units::{parse_bit_rate, parse_bytes, parse_seconds};
use crate::usage;

pub const EXAMPLES: &str = "\
Examples:
  # Every transport both ends offer, one 8 kB stream flat out, 5 s each, 3 alternating repeats
  vlbiflow net efficiency 10.0.0.2 --plot eff.png

  # A LOFAR-like load: 50 flows of 8 kB datagrams at 6 Gb/s in total, received by one thread
  vlbiflow net efficiency 10.0.0.2 --streams 50 --rate 6Gbps --transports udp,udp-gro,uring,tcp

  # Through a lossy path (vlbiflow pathemu --loss 1%): record the setting with the results
  vlbiflow net efficiency 10.77.0.2 --path-loss 1% --json > loss-1.json

  # Bandwidth against path loss from saved runs
  vlbiflow net efficiency --from loss-0.json --from loss-1.json --from loss-5.json \\
      --plot-loss loss.png

  # ... with a line measured by another tool through the same path (CSV: loss_percent,gbps)
  vlbiflow net efficiency --from loss-0.json --from loss-1.json --plot-loss loss.png \\
      --loss-series 'vlbiflow xfer=xfer-loss.csv'

Transports: udp (recvmmsg), udp-gro (recvmmsg with UDP GRO), uring (io_uring multishot recvmsg into \
provided buffers), uring-gro, xdp (AF_XDP, generic mode, datagrams up to 3798 bytes; root at the \
responder), tcp (autotuned). The sender is one thread (sendmmsg, optionally --gso; TCP: \
non-blocking writes of 32 messages); the receiver is one thread of the responder. Each datagram starts \
with an 8-byte sequence number per flow, so loss is counted exactly. CPU is the sending and the \
receiving thread's user and system time per GB, plus the whole host's (/proc/stat) including softirq; \
energy from RAPL (powercap) where the host exposes it. Compare transports within one run: the order \
alternates between repeats so that drifting load favours none.

Columns (medians over the repeats): n = repeats measured; Gb/s and ±% = its spread, (max - min) / \
median; loss%; send_usr, send_sys, recv_usr, recv_sys = the sending and the receiving thread's user and \
system CPU seconds per GB; recv±% = the spread of the receiver's; host_sirq and host_busy = the whole \
host's softirq and user + system + softirq seconds per GB; J/GB and Gb/s/W from RAPL (- where not \
readable); eff_recv and eff_both = GB per CPU second of the receiving thread, and of both threads, \
relative to the best transport of the run (1 = best).

Exit status 1 when any test failed (the table then leaves it out) or nothing was measured. A transport \
the responder refuses for the setup (e.g. xdp for datagrams above 3798 bytes) is listed as unavailable \
with the reason, as one it does not offer, and is not a failure.";

/// Receive cost per transport: Gb/s, loss, CPU per GB at both ends, energy where readable.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Responder host or HOST:PORT (default port 14233); not needed with --from
    #[arg(required_unless_present = "from")]
    host: Option<String>,
    // the responder's token, for a responder run with --token-file
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
    /// Transports to measure, comma separated (default: all)
    #[arg(long, value_name = "LIST")]
    transports: Option<String>,
    /// Flows (UDP sockets or TCP connections), all received by one thread
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Datagram size in bytes, sequence number included (TCP: bytes per message); default an 8224-byte
    /// VDIF frame plus its 8-byte PSN
    #[arg(long, default_value = "8232", value_name = "BYTES")]
    size: String,
    /// Aggregate rate over all flows, e.g. 6Gbps (default: flat out)
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Sending time per test
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    duration: String,
    /// Repeats of every transport (alternating order)
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// UDP: datagrams per GSO send (0: single datagrams, as a hardware backend sends them)
    #[arg(long, default_value_t = 0)]
    gso: u16,
    /// Receive buffer per UDP socket at the responder
    #[arg(long, value_name = "BYTES")]
    recv_buffer: Option<String>,
    /// Send buffer per socket
    #[arg(long, default_value = "8MiB", value_name = "BYTES")]
    send_buffer: String,
    /// TCP: congestion control of the sending connections, e.g. cubic (default: the host's)
    #[arg(long, value_name = "NAME")]
    tcp_congestion: Option<String>,
    /// Random loss the path was set to (e.g. 1% or 0.01), recorded with the results for --plot-loss
    #[arg(long, value_name = "FRACTION")]
    path_loss: Option<String>,
    /// Free-form label recorded with the results
    #[arg(long)]
    label: Option<String>,
    /// Load saved --json reports instead of measuring (repeatable)
    #[arg(long, value_name = "FILE")]
    from: Vec<PathBuf>,
    /// Longest wait for any control answer
    #[arg(long, default_value = "5", value_name = "SECONDS")]
    timeout: String,
    /// Print the report as JSON on standard output instead of the table
    #[arg(long)]
    json: bool,
    /// Write the bandwidth / CPU / efficiency plot (.png or .svg)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Write bandwidth against path loss from all reports that carry --path-loss (.png or .svg)
    #[arg(long, value_name = "FILE")]
    plot_loss: Option<PathBuf>,
    /// With --plot-loss: a line measured by another tool through the same path, LABEL=FILE.csv with the
    /// header loss_percent,gbps (bench/efficiency.sh adds vlbiflow xfer's verified goodput this way)
    #[arg(long, value_name = "LABEL=FILE", requires = "plot_loss")]
    loss_series: Vec<String>,
    /// No progress lines on standard error
    #[arg(long, short)]
    quiet: bool,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a fraction or percentage"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s:?} is outside 0..100%"))
    }
}

fn params(a: &Args) -> anyhow::Result<EffParams> {
    let size = match parse_bytes(&a.size) {
        Ok(b) => b as usize,
        Err(e) => usage!("--size: {e}"),
    };
    let duration = match parse_seconds(&a.duration) {
        Ok(s) if s > 0.0 => s,
        Ok(_) => usage!("--duration must be positive"),
        Err(e) => usage!("--duration: {e}"),
    };
    let rate_bps = match &a.rate {
        Some(r) => match parse_bit_rate(r) {
            Ok(b) => Some(b),
            Err(e) => usage!("--rate: {e}"),
        },
        None => None,
    };
    let recv_buffer = match &a.recv_buffer {
        Some(b) => match parse_bytes(b) {
            Ok(v) => Some(v as usize),
            Err(e) => usage!("--recv-buffer: {e}"),
        },
        None => None,
    };
    let send_buffer = match parse_bytes(&a.send_buffer) {
        Ok(v) => v as usize,
        Err(e) => usage!("--send-buffer: {e}"),
    };
    let p = EffParams {
        setup: EffSetup {
            transport: Transport::Udp,
            streams: a.streams,
            size,
            duration_ms: (duration * 1000.0).round() as u64,
            recv_buffer,
        },
        rate_bps,
        gso: a.gso,
        send_buffer,
        tcp_congestion: a.tcp_congestion.clone(),
    };
    if let Err(e) = p.validate() {
        usage!("{e}");
    }
    Ok(p)
}

fn transports(a: &Args) -> anyhow::Result<Vec<Transport>> {
    let Some(list) = &a.transports else {
        return Ok(Transport::ALL.to_vec());
    };
    let mut out = Vec::new();
    for name in list.split(',').filter(|s| !s.trim().is_empty()) {
        match Transport::parse(name) {
            Ok(t) if !out.contains(&t) => out.push(t),
            Ok(_) => {}
            Err(e) => usage!("--transports: {e}"),
        }
    }
    if out.is_empty() {
        usage!("--transports: empty list");
    }
    Ok(out)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.repeats == 0 {
        usage!("--repeats must be at least 1");
    }
    let path_loss = match &a.path_loss {
        Some(s) => match parse_fraction(s) {
            Ok(v) => Some(v),
            Err(e) => usage!("--path-loss: {e}"),
        },
        None => None,
    };
    let mut reports: Vec<EffReport> = Vec::new();
    for f in &a.from {
        let text = std::fs::read_to_string(f).with_context(|| format!("--from {}", f.display()))?;
        let r: EffReport = serde_json::from_str(&text)
            .with_context(|| format!("--from {}: not a `net efficiency --json` report", f.display()))?;
        reports.push(r);
    }
    // Tests that started and failed: any one makes the measurement incomplete, exit 1. A setup the
    // responder refuses leaves the transport unavailable (with the reason), as one it does not offer.
    let mut failed = 0u32;
    let mut nothing_measured = false;
    if let Some(host) = &a.host {
        let p = params(&a)?;
        let list = transports(&a)?;
        let timeout = match parse_seconds(&a.timeout) {
            Ok(s) if s > 0.0 => Duration::from_secs_f64(s),
            _ => usage!("--timeout: {:?} is not a positive number of seconds", a.timeout),
        };
        let addr = resolve_responder(host).map_err(anyhow::Error::msg)?;
        let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
        let token = a.token.resolve()?;
        let mut client = Client::connect_with_token(addr, timeout, token.as_deref())?;
        let quiet = a.quiet;
        let total = list.len() as u32 * a.repeats;
        let mut done = 0u32;
        let mut report = run_series(&mut client, &p, &list, a.repeats, &stop, &mut |e| {
            if let EffEvent::Failed { refused: false, .. } = e {
                failed += 1;
            }
            if quiet {
                return;
            }
            match e {
                EffEvent::Starting { transport, repeat } => {
                    done += 1;
                    eprint!("[{done}/{total}] {transport:<9} repeat {}: ", repeat + 1);
                    let _ = std::io::stderr().flush();
                }
                EffEvent::Finished(r) => {
                    let m = &r.metrics;
                    eprintln!(
                        "{:.2} Gb/s, loss {:.3}%, receiver {:.3} s/GB, sender {:.3} s/GB",
                        m.gbps,
                        m.loss * 100.0,
                        m.recv_cpu(),
                        m.send_cpu_s_per_gb.0 + m.send_cpu_s_per_gb.1
                    );
                }
                EffEvent::Failed {
                    error, refused: true, ..
                } => eprintln!("refused, left out: {error}"),
                EffEvent::Failed { error, .. } => eprintln!("FAILED: {error}"),
            }
        })?;
        report.path_loss = path_loss;
        report.label = a.label.clone();
        nothing_measured = report.runs.is_empty();
        reports.insert(0, report);
    }
    let Some(first) = reports.first() else {
        usage!("nothing to show: give a responder host or --from FILE");
    };
    if a.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, first)?;
        writeln!(out)?;
    } else {
        for l in table_lines(first) {
            outln!("{l}");
        }
    }
    if let Some(path) = &a.plot {
        plot_efficiency(path, first)?;
        if !a.quiet {
            eprintln!("plot: {}", path.display());
        }
    }
    if let Some(path) = &a.plot_loss {
        let with_loss: Vec<EffReport> = reports
            .iter()
            .filter(|r| r.path_loss.is_some())
            .cloned()
            .collect();
        if with_loss.is_empty() {
            usage!("--plot-loss: no report carries --path-loss");
        }
        let mut extra = Vec::new();
        for spec in &a.loss_series {
            let Some((label, file)) = spec.split_once('=') else {
                usage!("--loss-series {spec:?}: expected LABEL=FILE.csv");
            };
            match read_loss_series(label, Path::new(file)) {
                Ok(s) => extra.push(s),
                Err(e) => usage!("--loss-series: {e}"),
            }
        }
        plot_loss(path, &with_loss, &extra)?;
        if !a.quiet {
            eprintln!("loss plot: {} ({} report(s))", path.display(), with_loss.len());
        }
    }
    if failed > 0 || nothing_measured {
        if failed > 0 {
            let it = if failed == 1 { "it" } else { "them" };
            eprintln!(
                "vlbiflow: {} failed; the summary leaves {it} out",
                crate::units::fmt_count(failed.into(), "test", "tests")
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_fraction;

    #[test]
    fn fractions_and_percentages() {
        assert_eq!(parse_fraction("1%"), Ok(0.01));
        assert_eq!(parse_fraction("0.05"), Ok(0.05));
        assert!(parse_fraction("150%").is_err());
        assert!(parse_fraction("x").is_err());
    }
}
