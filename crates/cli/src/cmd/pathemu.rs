//! `vlbiflow pathemu`: a long, lossy path between two network namespaces (the emulator is
//! `vlbiflow-pathemu`; this file parses, prints and handles signals).

use crate::units::{fmt_bit_rate, parse_bit_rate, parse_bytes, parse_seconds};
use crate::usage;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vlbiflow_pathemu::{DirReport, Emulator, LinkConfig, LogFormat, LossModel, PathConfig};

const EXAMPLES: &str = "\
Examples:
  # A 50 ms round trip at 2 Gb/s with 0.1% random loss, until Ctrl-C
  vlbiflow pathemu --rtt 50ms --rate 2Gbps --queue 4MB --loss 0.1%

  # Bursty loss (Gilbert-Elliott, mean burst 1/r = 10 packets, about 1% lost) with a drop log
  vlbiflow pathemu --delay 10ms --ge 0.1%,10% --drop-log drops.csv --duration 60 --json

  # Measure through it (in other terminals; vf-pe-a / vf-pe-b are the default namespaces)
  ip netns exec vf-pe-b vlbiflow net responder --listen 10.77.0.2:14233
  ip netns exec vf-pe-a vlbiflow net lat 10.77.0.2 --count 100
  ip netns exec vf-pe-a vlbiflow gen --dest 10.77.0.2:4001 --rate 1Gbps --duration 10 --psn

Side A is 10.77.0.1 and side B 10.77.0.2 (point to point, MTU 9000). Impairments apply to both
directions, each with its own queue and random-number stream; --impair a-b (or b-a) keeps the other
direction to the delay alone, e.g. a lossy data path with a clean return path for acknowledgements.
When the path is up a line \"pathemu: ready ...\" goes to standard error; the summary goes to
standard output at the end (Ctrl-C, SIGTERM or --duration), then the devices and the namespaces it
created are removed.

Loss models: --loss P drops each packet independently with probability P. --ge p,r[,h,k] is a
Gilbert-Elliott chain: good->bad with probability p and bad->good with r after each packet; a packet
gets through with probability k in the good state and h in the bad one (defaults h=0, k=1: bursts of
mean 1/r packets). Note netem's gemodel takes the loss probabilities 1-h and 1-k instead.
Drop log columns: time_s,unix_time,dir,reason,proto,len,src,sport,dst,dport,payload_hex (first 16
bytes of the UDP/TCP payload). Details: docs/pathemu.md.";

/// Emulate a long, lossy path (delay, jitter, loss, rate and queue limits) between two network namespaces
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Namespace of side A (created if missing, removed at the end if created)
    #[arg(long, default_value = "vf-pe-a", value_name = "NAME")]
    ns_a: String,
    /// Namespace of side B
    #[arg(long, default_value = "vf-pe-b", value_name = "NAME")]
    ns_b: String,
    /// Leave the namespaces it created
    #[arg(long)]
    keep: bool,
    /// Address of side A
    #[arg(long, default_value = "10.77.0.1", value_name = "IPV4")]
    addr_a: Ipv4Addr,
    /// Address of side B
    #[arg(long, default_value = "10.77.0.2", value_name = "IPV4")]
    addr_b: Ipv4Addr,
    /// One-way propagation delay, e.g. 25ms
    #[arg(long, value_name = "TIME", conflicts_with = "rtt")]
    delay: Option<String>,
    /// Round-trip time (half of it each way), e.g. 50ms
    #[arg(long, value_name = "TIME")]
    rtt: Option<String>,
    /// Uniform jitter of +-TIME on the one-way delay (FIFO: packets keep their order)
    #[arg(long, value_name = "TIME")]
    jitter: Option<String>,
    /// Let jitter reorder packets
    #[arg(long, requires = "jitter")]
    reorder: bool,
    /// Random loss probability, e.g. 1% or 0.01
    #[arg(long, value_name = "P", conflicts_with = "ge")]
    loss: Option<String>,
    /// Gilbert-Elliott loss: p,r[,h,k] (percent or fractions), see below
    #[arg(long, value_name = "p,r[,h,k]")]
    ge: Option<String>,
    /// Bottleneck rate (IP bytes), e.g. 2Gbps
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Drop-tail queue limit at the bottleneck (default 1000 packets of the MTU)
    #[arg(long, value_name = "BYTES", requires = "rate")]
    queue: Option<String>,
    /// Directions that get the jitter, loss, rate and queue (the delay applies both ways)
    #[arg(long, value_enum, default_value_t = Impair::Both)]
    impair: Impair,
    /// MTU of both devices
    #[arg(long, default_value_t = 9000)]
    mtu: u32,
    /// Seed of the loss and jitter random numbers (same seed, same packets: same losses)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Packet memory per direction (default: queue + bandwidth-delay product with room to spare)
    #[arg(long, value_name = "BYTES")]
    buffer: Option<String>,
    /// Write every dropped packet to FILE (CSV, or JSON lines if FILE ends in .json or .jsonl)
    #[arg(long, value_name = "FILE")]
    drop_log: Option<PathBuf>,
    /// Stop after this long (default: until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "SECONDS")]
    duration: Option<String>,
    /// Run the forwarding threads as SCHED_FIFO real-time threads: tighter timing on a busy machine, but
    /// a flood above what it can forward then takes a whole core from everything else
    #[arg(long)]
    realtime: bool,
    /// Wake this many microseconds before a packet is due and spin the rest: packets leave within a few
    /// µs of their due time instead of tens of µs, but a busy direction then keeps a core spinning
    /// (at 2 Gb/s of 9000-byte packets, one is due every 36 µs)
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    spin_us: u64,
    /// Wake at most once per this many microseconds (not with --spin-us; 0: at every arrival and due
    /// time): packets are read and leave in batches, up to that much after their time, as a router's
    /// interrupt moderation does. Each wake-up costs several µs on a VM, and at 2 Gb/s there are tens of
    /// thousands a second per direction: the default takes about half the CPU of waking for each
    #[arg(long, value_name = "MICROSECONDS",
          default_value_t = vlbiflow_pathemu::DEFAULT_WAKE_EVERY.as_micros() as u64,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    wake_every_us: u64,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Impair {
    Both,
    #[value(name = "a-b")]
    AB,
    #[value(name = "b-a")]
    BA,
}

fn time_ns(s: &str, what: &str) -> anyhow::Result<u64> {
    match parse_seconds(s) {
        Ok(v) if v <= 3600.0 => Ok((v * 1e9).round() as u64),
        Ok(_) => usage!("--{what} {s:?}: at most an hour"),
        Err(e) => usage!("--{what}: {e}"),
    }
}

/// A probability: `1%` or `0.01`.
fn probability(s: &str, what: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1.0).contains(&(v / scale)) => Ok(v / scale),
        _ => usage!("{what} {s:?}: give a probability as 0..100% or 0..1"),
    }
}

fn loss_model(a: &Args) -> anyhow::Result<LossModel> {
    if let Some(l) = &a.loss {
        return Ok(LossModel::Random {
            p: probability(l, "--loss")?,
        });
    }
    let Some(ge) = &a.ge else {
        return Ok(LossModel::None);
    };
    let v: Vec<&str> = ge.split(',').collect();
    if !(2..=4).contains(&v.len()) {
        usage!("--ge {ge:?}: give p,r or p,r,h or p,r,h,k");
    }
    let names = ["p", "r", "h", "k"];
    let mut x = [0.0, 0.0, 0.0, 1.0];
    for (i, s) in v.iter().enumerate() {
        x[i] = probability(s, &format!("--ge {}", names[i]))?;
    }
    let m = LossModel::GilbertElliott {
        p: x[0],
        r: x[1],
        h: x[2],
        k: x[3],
    };
    if let Err(e) = m.validate() {
        usage!("--ge {ge:?}: {e}");
    }
    Ok(m)
}

fn describe(c: &LinkConfig) -> String {
    let mut s = format!("delay {:.3} ms", c.delay_ns as f64 / 1e6);
    if c.jitter_ns > 0 {
        s += &format!(
            " +-{:.3} ms{}",
            c.jitter_ns as f64 / 1e6,
            if c.reorder { " (reordering)" } else { "" }
        );
    }
    match c.rate_bps {
        Some(r) => s += &format!(", rate {}, queue {} B", fmt_bit_rate(r as f64), c.queue_limit),
        None => s += ", no rate limit",
    }
    match c.loss {
        LossModel::None => s += ", no loss",
        LossModel::Random { p } => s += &format!(", random loss {:.4}%", p * 100.0),
        LossModel::GilbertElliott { p, r, h, k } => {
            s += &format!(
                ", Gilbert-Elliott p={p} r={r} h={h} k={k} (long-run loss {:.4}%)",
                c.loss.stationary_loss() * 100.0
            )
        }
    }
    s
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let delay_ns = match (&a.delay, &a.rtt) {
        (Some(d), _) => time_ns(d, "delay")?,
        (None, Some(r)) => time_ns(r, "rtt")? / 2,
        (None, None) => 0,
    };
    let jitter_ns = a
        .jitter
        .as_deref()
        .map(|j| time_ns(j, "jitter"))
        .transpose()?
        .unwrap_or(0);
    let rate_bps = match &a.rate {
        Some(r) => match parse_bit_rate(r) {
            Ok(v) if (1e3..=1e12).contains(&v) => Some(v.round() as u64),
            Ok(_) => usage!("--rate {r:?}: give 1kbps..1Tbps"),
            Err(e) => usage!("--rate: {e}"),
        },
        None => None,
    };
    if !(576..=65_535).contains(&a.mtu) {
        usage!("--mtu {}: give 576..65535", a.mtu);
    }
    let queue_limit = match &a.queue {
        Some(q) => match parse_bytes(q) {
            Ok(v) if v >= u64::from(a.mtu) => v,
            Ok(_) => usage!("--queue {q:?}: at least one packet of the MTU ({} bytes)", a.mtu),
            Err(e) => usage!("--queue: {e}"),
        },
        None => 1000 * u64::from(a.mtu),
    };
    let duration = match &a.duration {
        Some(d) => match parse_seconds(d).map(Duration::try_from_secs_f64) {
            Ok(Ok(d)) if !d.is_zero() => Some(d),
            _ => usage!("--duration {d:?}: give a positive time, e.g. 60 or 10m"),
        },
        None => None,
    };
    let loss = loss_model(&a)?;
    let mut link = LinkConfig {
        rate_bps,
        queue_limit,
        delay_ns,
        jitter_ns,
        reorder: a.reorder,
        loss,
        buffer_bytes: 0,
        seed: a.seed,
    };
    link.buffer_bytes = match &a.buffer {
        Some(b) => match parse_bytes(b) {
            Ok(v) if (2 * 65_535..=1 << 36).contains(&v) => v as usize,
            Ok(_) => usage!("--buffer {b:?}: give 128KiB..64GiB"),
            Err(e) => usage!("--buffer: {e}"),
        },
        // Without a rate limit, room for 10 Gb/s in flight.
        None => link.default_buffer(10_000_000_000),
    };
    let impaired_b_to_a = LinkConfig {
        seed: a.seed.wrapping_add(0x9e37_79b9),
        ..link.clone()
    };
    // The other direction of a one-way impairment: the same delay, nothing else.
    let mut clean = LinkConfig {
        delay_ns,
        seed: link.seed,
        ..LinkConfig::transparent()
    };
    clean.buffer_bytes = clean.default_buffer(10_000_000_000);
    let (a_to_b, b_to_a) = match a.impair {
        Impair::Both => (link.clone(), impaired_b_to_a),
        Impair::AB => (link.clone(), clean.clone()),
        Impair::BA => (clean.clone(), impaired_b_to_a),
    };
    let drop_log = a.drop_log.clone().map(|p| {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        let fmt = if ext == "json" || ext == "jsonl" {
            LogFormat::JsonLines
        } else {
            LogFormat::Csv
        };
        (p, fmt)
    });
    let cfg = PathConfig {
        ns_a: a.ns_a.clone(),
        ns_b: a.ns_b.clone(),
        addr_a: a.addr_a,
        addr_b: a.addr_b,
        mtu: a.mtu,
        keep: a.keep,
        a_to_b: a_to_b.clone(),
        b_to_a: b_to_a.clone(),
        drop_log,
        realtime: a.realtime,
        spin: std::time::Duration::from_micros(a.spin_us),
        wake_every: std::time::Duration::from_micros(a.wake_every_us),
    };

    let stop = crate::stop::on_interrupt(crate::stop::Second::Exit)?;
    let emu = Emulator::setup(cfg).map_err(|e| match e {
        vlbiflow_pathemu::Error::Config(m) => anyhow::Error::new(crate::cmd::UsageError(m)),
        e => anyhow::Error::new(e),
    })?;
    let (dev_a, dev_b) = emu.devices();
    let ways = if a.impair == Impair::Both {
        format!("each way: {}", describe(&a_to_b))
    } else {
        format!("a-b: {}; b-a: {}", describe(&a_to_b), describe(&b_to_a))
    };
    eprintln!(
        "pathemu: ready: A = namespace {} address {} (device {dev_a}), B = namespace {} address {} (device {dev_b}), \
         MTU {}; {ways}",
        a.ns_a, a.addr_a, a.ns_b, a.addr_b, a.mtu,
    );
    eprintln!(
        "pathemu: use e.g. `ip netns exec {} vlbiflow net responder --listen {}:14233` and \
         `ip netns exec {} vlbiflow net lat {}`",
        a.ns_b, a.addr_b, a.ns_a, a.addr_b
    );
    let report = emu.run(&stop, duration)?;
    if a.json {
        let v = serde_json::json!({
            "ns_a": a.ns_a, "ns_b": a.ns_b, "addr_a": a.addr_a, "addr_b": a.addr_b, "mtu": a.mtu,
            "config": a_to_b, "config_b_to_a": b_to_a, "report": report,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        outln!("pathemu: {:.1} s", report.duration_s);
        for (name, d) in [("a-b", &report.a_to_b), ("b-a", &report.b_to_a)] {
            print_dir(name, d);
        }
        if a.drop_log.is_some() {
            outln!(
                "  drop log: {} lines{}",
                report.drop_log_lines,
                if report.drop_log_lost > 0 {
                    format!(", {} drops NOT logged (writer fell behind)", report.drop_log_lost)
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_dir(name: &str, d: &DirReport) {
    let c = &d.counters;
    let lost = if c.in_packets > 0 {
        c.dropped() as f64 / c.in_packets as f64
    } else {
        0.0
    };
    outln!(
        "  {name}: in {} packets ({} B), out {} ({} B), dropped {} ({:.4}%; random {}, burst {}, queue {}, memory {}), \
         expected line loss {:.4}%, max queue {} B, in flight at stop {}",
        c.in_packets,
        c.in_bytes,
        c.out_packets,
        c.out_bytes,
        c.dropped(),
        lost * 100.0,
        c.dropped_random,
        c.dropped_burst,
        c.dropped_queue,
        c.dropped_memory,
        d.expected_loss * 100.0,
        c.queue_max_bytes,
        d.in_flight_at_stop
    );
    let h = &d.late_hist;
    if c.out_packets > 0 {
        outln!(
            "  {name}: sent after their due time by <10 µs {}, 10-100 µs {}, 0.1-1 ms {}, >1 ms {} (latest {:.3} ms)",
            h[0],
            h[1],
            h[2],
            h[3],
            d.late_max_ns as f64 / 1e6
        );
    }
    let kin = d.kernel_dropped_in.unwrap_or(0);
    let kout = d.kernel_dropped_out.unwrap_or(0);
    if kin + kout + d.write_errors + d.read_errors + c.reordered > 0 {
        outln!(
            "  {name}: kernel dropped {kin} before and {kout} after the emulator, write errors {}, read errors {}, reordered {}",
            d.write_errors, d.read_errors, c.reordered
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn model(args: &[&str]) -> LossModel {
        let t = T::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        loss_model(&t.a).unwrap()
    }

    #[test]
    fn loss_options_parse_into_the_documented_models() {
        assert_eq!(model(&[]), LossModel::None);
        assert_eq!(model(&["--loss", "1%"]), LossModel::Random { p: 0.01 });
        assert_eq!(model(&["--loss", "0.25"]), LossModel::Random { p: 0.25 });
        // Gilbert's model by default: h = 0 (all lost in bad), k = 1 (none lost in good).
        let m = model(&["--ge", "0.1%,10%"]);
        assert_eq!(
            m,
            LossModel::GilbertElliott {
                p: 0.001,
                r: 0.1,
                h: 0.0,
                k: 1.0
            }
        );
        assert!((m.stationary_loss() - 0.001 / 0.101).abs() < 1e-12);
        assert_eq!(
            model(&["--ge", "5%,20%,30%,0.99"]),
            LossModel::GilbertElliott {
                p: 0.05,
                r: 0.2,
                h: 0.3,
                k: 0.99
            }
        );
        assert!(probability("101%", "x").is_err());
        assert!(probability("-1%", "x").is_err());
        assert!(probability("1.5", "x").is_err());
    }
}
