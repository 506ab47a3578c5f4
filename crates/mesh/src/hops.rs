//! `vlbiflow net capacity HOST --hops`: capacity hop by hop, by the dispersion of TTL-limited
//! trains (Trace-Rate, pathchar).
//!
//! For each TTL from 1, trains of UDP datagrams leave with that TTL; the router at that hop drops
//! them and answers each with an ICMP time exceeded (the destination, reached, answers port
//! unreachable). The socket reads those from its error queue (`IP_RECVERR`, no privileges needed)
//! with the kernel's receive time of each ICMP message, and the quoted datagram says which packet it
//! answers. The spacing of the answers is the train's dispersion up to that hop, so the settled tail
//! rate of the trains ([`crate::dispersion`], the same analysis as end to end) is the capacity of the
//! path up to and including the link into that hop; the first hop whose rate falls well below the
//! ones before it holds the bottleneck.
//!
//! What limits it: routers rate-limit ICMP (Linux: `net.ipv4.icmp_ratelimit`, `icmp_msgs_per_sec`,
//! `icmp_ratemask`; most routers answer a handful and then about one a second), so a hop that
//! answers too few packets of a train is reported as rate-limited with no rate; the answers come
//! back over the reverse path, whose queues add noise (but not a lower rate unless it is slower
//! than the forward path up to the hop); generating ICMP is the router's slow path, so a fast hop
//! may read slower than it is; and a sender that cannot keep a hop busy (an unshaped hop faster than
//! this host sends datagram by datagram) yields only a lower bound. IPv4 only.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use vlbiflow_net::wire::{realtime_ns, PacketKind, TestPacket, TestPacketRepr, HEADER_LEN};
use vlbiflow_udp::errqueue::{self, ICMP_DEST_UNREACH, ICMP_TIME_EXCEEDED, SO_EE_ORIGIN_ICMP};
use vlbiflow_udp::{open_udp, BatchSender, UdpConfig};

use crate::dispersion::{fit_train, needs_longer, sender_bound, summarise_length, TrainLength};

/// How to probe hop by hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HopsParams {
    /// UDP payload bytes per packet.
    pub size: usize,
    /// Destination UDP port (nothing should listen there, so the destination answers unreachable).
    pub port: u16,
    /// Highest TTL tried.
    pub max_hops: u8,
    /// Longest train, packets (trains of 64, 128, ... until settled).
    pub train: usize,
    /// Trains per length.
    pub trains_per_length: usize,
    /// Trains grow at least until they carry this many bytes.
    pub min_train_bytes: usize,
    /// Idle time between trains, at least (twice the last train's spread when longer).
    pub gap: Duration,
    /// How long to wait for more answers after the last one (or after sending, for the first).
    pub reply_wait: Duration,
}

impl Default for HopsParams {
    fn default() -> Self {
        HopsParams {
            size: 1472,
            port: 33434,
            max_hops: 30,
            train: 2048,
            trains_per_length: 3,
            min_train_bytes: 512 << 10,
            gap: Duration::from_millis(20),
            reply_wait: Duration::from_millis(300),
        }
    }
}

/// What one hop said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    /// The TTL the trains left with.
    pub ttl: u8,
    /// Who answered (None: no answer).
    pub address: Option<Ipv4Addr>,
    /// The answer was the destination's (port unreachable): the last hop.
    pub destination: bool,
    /// Capacity of the path up to and including the link into this hop, Mb/s: the settled tail rate
    /// of the trains' answers.
    pub capacity_mbps: Option<f64>,
    /// When the sender could not keep the hop busy: the rate the answers came at, a lower bound, Mb/s.
    pub at_least_mbps: Option<f64>,
    /// Packets sent with this TTL and answers read.
    pub sent: usize,
    /// Answers read.
    pub answered: usize,
    /// Why there is no rate, or what to keep in mind.
    pub note: String,
    /// The trains by length.
    pub trains: Vec<TrainLength>,
}

/// The hop list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HopsResult {
    /// Probed address.
    pub target: Ipv4Addr,
    /// One entry per TTL tried.
    pub hops: Vec<Hop>,
    /// The last hop whose capacity fell below 0.8 of the rate (or lower bound) of the hop before it
    /// with one: where the narrowest link is.
    pub limiting_ttl: Option<u8>,
    /// Parameters.
    pub params: HopsParams,
    /// Seconds it took.
    pub duration_s: f64,
}

/// Why hop-by-hop probing failed.
#[derive(Debug, thiserror::Error)]
pub enum HopsError {
    /// A socket call failed.
    #[error("hops: {what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Not an IPv4 target.
    #[error("hops: {0} is not an IPv4 address (hop-by-hop probing is IPv4 only)")]
    NotIpv4(IpAddr),
    /// Bad parameters.
    #[error("hops: {0}")]
    Invalid(String),
    /// Stopped.
    #[error("hops: stopped before the probes were done")]
    Stopped,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HopsError {
    let what = what.into();
    move |source| HopsError::Io { what, source }
}

/// Most answers of a train may be missing before the hop counts as rate-limiting ICMP.
const MIN_ANSWERED: f64 = 0.5;
/// Datagrams per send call: few, so that the time each call returned bounds its packets' hand-over
/// tightly (trains here go datagram by datagram: a router answers a GSO super-datagram once).
const SEND_BATCH: usize = 8;
/// Silent hops in a row after which probing stops.
const MAX_SILENT: usize = 3;

/// Probes `target` hop by hop; `progress` hears one line per hop.
pub fn measure_hops(
    target: IpAddr,
    p: &HopsParams,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<HopsResult, HopsError> {
    let IpAddr::V4(target) = target else {
        return Err(HopsError::NotIpv4(target));
    };
    if !(HEADER_LEN..=8972).contains(&p.size) {
        return Err(HopsError::Invalid(format!(
            "size {} outside {HEADER_LEN}..=8972 bytes",
            p.size
        )));
    }
    if p.max_hops == 0 || p.train < 8 || p.trains_per_length == 0 {
        return Err(HopsError::Invalid(
            "max hops, train length (at least 8) and trains per length must be positive".into(),
        ));
    }
    let t0 = Instant::now();
    let dest = SocketAddr::new(IpAddr::V4(target), p.port);
    let (sock, _) = open_udp(&UdpConfig {
        timestamps: true,
        send_buffer: Some(p.train * (p.size + 512)),
        // The ICMP answers of a whole train wait in the error queue, which counts against the
        // receive buffer (about 1.3 kB per answer).
        recv_buffer: Some((p.train * 2304).max(4 << 20)),
        ..UdpConfig::sender(dest)
    })
    .map_err(|e| HopsError::Io {
        what: format!("UDP socket to {dest}"),
        source: std::io::Error::other(e.to_string()),
    })?;
    errqueue::enable_recverr(&sock).map_err(io("IP_RECVERR"))?;
    let mut area = vec![0u8; p.train * p.size];
    let mut sender = BatchSender::new(SEND_BATCH);
    let mut test_id = (realtime_ns() as u32) | 1;
    let mut hops = Vec::new();
    let mut silent = 0;
    for ttl in 1..=p.max_hops {
        sock.set_ttl(ttl.into()).map_err(io(format!("IP_TTL {ttl}")))?;
        let mut hop = Hop {
            ttl,
            address: None,
            destination: false,
            capacity_mbps: None,
            at_least_mbps: None,
            sent: 0,
            answered: 0,
            note: String::new(),
            trains: Vec::new(),
        };
        let mut n = 64usize.min(p.train);
        let mut last_span = Duration::ZERO;
        let mut lower = 0.0f64;
        let bytes = p.size + 28;
        'lengths: while needs_longer(&hop.trains, bytes, p.min_train_bytes) {
            let mut fits = Vec::new();
            let mut rates = Vec::new();
            let mut unanswered = 0;
            for _ in 0..p.trains_per_length {
                if stop.load(Ordering::Relaxed) {
                    return Err(HopsError::Stopped);
                }
                std::thread::sleep(p.gap.max(last_span * 2).min(Duration::from_secs(1)));
                test_id = test_id.wrapping_add(1);
                let train = send_train(&sock, &mut sender, &mut area[..n * p.size], p.size, test_id)?;
                let answers = read_answers(&sock, n, test_id, p.reply_wait)?;
                hop.sent += n;
                hop.answered += answers.count;
                unanswered += n - answers.count;
                if answers.count == 0 {
                    if hop.answered > 0 {
                        hop.note = rate_limited(&hop);
                    }
                    break 'lengths;
                }
                hop.address = hop.address.or(answers.from);
                hop.destination |= answers.unreachable || answers.from == Some(target);
                let t = crate::capacity::times_of_received(
                    &train.send_ns,
                    &answers.recv,
                    &train.handed,
                    0,
                    bytes,
                );
                if t.recv_ns.len() >= 2 {
                    let span = t.recv_ns[t.recv_ns.len() - 1] - t.recv_ns[0];
                    last_span = Duration::from_nanos(span.max(0) as u64);
                    if span > 0 {
                        rates.push(8.0 * (bytes * (t.recv_ns.len() - 1)) as f64 / span as f64 * 1e3);
                    }
                }
                fits.push(fit_train(&t));
            }
            // The lower bound: the longest trains' arrival rate (shorter ones may be inside a
            // bucket's burst).
            lower = median(&mut rates).unwrap_or(lower);
            hop.trains.push(summarise_length(n, fits));
            if (unanswered as f64) > (1.0 - MIN_ANSWERED) * (n * p.trains_per_length) as f64 {
                hop.note = rate_limited(&hop);
                break;
            }
            if sender_bound(&hop.trains, bytes, p.min_train_bytes)
                || n >= p.train
                || unanswered as f64 > 0.05 * (n * p.trains_per_length) as f64
            {
                break;
            }
            n = (n * 2).min(p.train);
        }
        let settled = hop.trains.iter().rev().find(|l| l.settled);
        let limited = hop.trains.iter().all(|l| l.sender_limited == l.fits.len());
        if hop.answered == 0 {
            hop.note = "no answer (the hop does not send ICMP time exceeded, or filters it)".into();
        } else if let Some(l) = settled {
            hop.capacity_mbps = l.tail_mbps;
            // Answers missing from trains longer than the settled ones: a queue on the path dropped
            // their ends, or ICMP rate limits cut in; either way the rate stands.
            hop.note = if hop.answered < hop.sent {
                format!(
                    "{} of {} packets answered: longer trains lost packets (a queue on the path or ICMP rate limits)",
                    hop.answered, hop.sent
                )
            } else {
                String::new()
            };
        } else if limited && hop.note.is_empty() && lower > 0.0 {
            hop.at_least_mbps = Some(lower);
            hop.note = "the sender could not keep this hop busy: a lower bound".into();
        } else if hop.note.is_empty() {
            hop.note = "the trains' answers did not settle on one rate".into();
        }
        progress(&format!(
            "hop {ttl}: {} {}{}",
            hop.address.map(|a| a.to_string()).unwrap_or_else(|| "*".into()),
            match (hop.capacity_mbps, hop.at_least_mbps) {
                (Some(c), _) => format!("{c:.1} Mb/s"),
                (None, Some(l)) => format!("at least {l:.1} Mb/s"),
                _ => "-".into(),
            },
            if hop.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", hop.note)
            }
        ));
        let done = hop.destination;
        silent = if hop.answered == 0 { silent + 1 } else { 0 };
        hops.push(hop);
        if done || silent >= MAX_SILENT {
            break;
        }
    }
    Ok(HopsResult {
        target,
        limiting_ttl: limiting(&hops),
        hops,
        params: p.clone(),
        duration_s: t0.elapsed().as_secs_f64(),
    })
}

/// The last hop whose capacity fell below 0.8 of the rate (or lower bound) of the hop before it with one.
pub fn limiting(hops: &[Hop]) -> Option<u8> {
    let mut best_before: Option<f64> = None;
    let mut found = None;
    for h in hops {
        // Up to a hop with a lower bound the path is at least that fast; up to one with a rate,
        // exactly that fast.
        let Some(c) = h.capacity_mbps else {
            if let Some(l) = h.at_least_mbps {
                best_before = Some(l);
            }
            continue;
        };
        if best_before.is_some_and(|b| c < 0.8 * b) {
            found = Some(h.ttl);
        }
        best_before = Some(c);
    }
    found
}

fn rate_limited(hop: &Hop) -> String {
    format!(
        "{} of {} packets answered: ICMP rate-limited at this hop (net.ipv4.icmp_ratelimit / icmp_ratemask on Linux routers)",
        hop.answered, hop.sent
    )
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied()
}

/// A sent train: per packet its write time, and per send call the packets handed so far and when.
struct SentTrain {
    send_ns: Vec<i64>,
    handed: Vec<(u64, u64)>,
}

fn send_train(
    sock: &std::net::UdpSocket,
    sender: &mut BatchSender,
    area: &mut [u8],
    size: usize,
    test_id: u32,
) -> Result<SentTrain, HopsError> {
    let n = area.len() / size;
    let mut send_ns = vec![0i64; n];
    let mut handed = Vec::with_capacity(n);
    let mut k = 0;
    let mut retries = 0;
    while k < n {
        let m = (n - k).min(SEND_BATCH);
        for (j, b) in area[k * size..(k + m) * size].chunks_exact_mut(size).enumerate() {
            let ts = realtime_ns();
            TestPacketRepr {
                kind: PacketKind::Data,
                test_id,
                seq: (k + j) as u64,
                send_ts_ns: ts,
            }
            .emit(&mut TestPacket::new_unchecked(&mut b[..]));
            send_ns[k + j] = ts as i64;
        }
        let mut batch = sender.batch();
        for b in area[k * size..(k + m) * size].chunks_exact(size) {
            batch.push(&[b]);
        }
        match batch.flush(sock) {
            Ok(s) => k += s.datagrams,
            Err(e)
                if matches!(
                    e.source.raw_os_error(),
                    Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ECONNREFUSED)
                ) && retries < 4 * n =>
            {
                // An ICMP answer to an earlier packet is reported on the next send, which did not
                // go out: send it again.
                k += e.sent.datagrams;
                retries += 1;
            }
            Err(e) => {
                return Err(HopsError::Io {
                    what: format!("send to {:?}", sock.peer_addr().ok()),
                    source: e.source,
                })
            }
        }
        handed.push((k as u64, realtime_ns()));
    }
    Ok(SentTrain { send_ns, handed })
}

struct Answers {
    /// Per packet: the ICMP answer's receive time (ns), or -1.
    recv: Vec<i64>,
    count: usize,
    from: Option<Ipv4Addr>,
    unreachable: bool,
}

fn read_answers(
    sock: &std::net::UdpSocket,
    n: usize,
    test_id: u32,
    wait: Duration,
) -> Result<Answers, HopsError> {
    let mut a = Answers {
        recv: vec![-1; n],
        count: 0,
        from: None,
        unreachable: false,
    };
    let mut buf = [0u8; 64];
    let mut next_unquoted = 0;
    while a.count < n {
        let Some(e) = errqueue::recv_icmp_error(sock, &mut buf, wait).map_err(io("read ICMP answers"))?
        else {
            break;
        };
        if e.origin != SO_EE_ORIGIN_ICMP
            || !(e.icmp_type == ICMP_TIME_EXCEEDED || e.icmp_type == ICMP_DEST_UNREACH)
        {
            continue;
        }
        let Some(ts) = e.timestamp_ns else { continue };
        // The quoted datagram names the packet; a router that quotes only the UDP header leaves
        // arrival order.
        let seq = match TestPacket::new_checked(&buf[..e.len]) {
            Ok(p) if p.test_id() == test_id => p.seq() as usize,
            Ok(_) => continue,
            Err(_) => next_unquoted,
        };
        if seq >= n || a.recv[seq] >= 0 {
            continue;
        }
        next_unquoted = seq + 1;
        a.recv[seq] = ts as i64;
        a.count += 1;
        a.from = a.from.or(e.offender);
        a.unreachable |= e.icmp_type == ICMP_DEST_UNREACH;
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(ttl: u8, c: Option<f64>, l: Option<f64>) -> Hop {
        Hop {
            ttl,
            address: None,
            destination: false,
            capacity_mbps: c,
            at_least_mbps: l,
            sent: 0,
            answered: 0,
            note: String::new(),
            trains: Vec::new(),
        }
    }

    #[test]
    fn limiting_hop_is_the_first_well_below_the_ones_before() {
        assert_eq!(
            limiting(&[hop(1, None, Some(500.0)), hop(2, Some(99.0), None)]),
            Some(2)
        );
        assert_eq!(
            limiting(&[hop(1, Some(1000.0), None), hop(2, Some(950.0), None)]),
            None
        );
        assert_eq!(
            limiting(&[
                hop(1, Some(1000.0), None),
                hop(2, None, None),
                hop(3, Some(400.0), None),
                hop(4, Some(390.0), None)
            ]),
            Some(3)
        );
        assert_eq!(limiting(&[hop(1, Some(100.0), None)]), None);
    }
}
