//! The parameters and results of the client's tests, and the arithmetic that turns both ends'
//! measurements into results.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::host::{HostUsage, ProcessCpu};
use crate::proto::{BwRemote, TcpRemote};
use crate::stats::HistSummary;
use crate::tcpinfo::TcpSockInfo;
use crate::wire::HEADER_LEN;

/// Ethernet preamble 8 + header 14 + CRC 4 + gap 12 + IPv4 20 + UDP 8 bytes per packet, the UDPmon
/// wire-rate convention.
pub const WIRE_OVERHEAD: usize = 66;

/// Parameters of one UDP throughput test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwParams {
    /// Datagram size (UDP payload), bytes.
    pub size: usize,
    /// Packets to send.
    pub count: u64,
    /// Spacing between packets, µs (0: as fast as possible).
    pub wait_us: f64,
    /// Send buffer to request, bytes.
    pub send_buffer: Option<usize>,
    /// Receive buffer for the responder to request, bytes.
    pub recv_buffer: Option<usize>,
    /// Packets per sendmmsg at most.
    pub batch: usize,
    /// Send datagrams that are due together (behind schedule, or flat out) as GSO super-datagrams
    /// (falls back to one datagram per message when the path refuses GSO).
    pub gso: bool,
    /// Most datagrams per GSO super-datagram (0: as many as fit in one, up to the kernel's limit).
    #[serde(default)]
    pub gso_segments: usize,
    /// Ask the responder for every packet's times ([`BwRemote::timeline`]) and note when each
    /// send call returned ([`BwLocal::handed`]); at most [`crate::stats::MAX_TIMELINE`] packets.
    #[serde(default)]
    pub timeline: bool,
}

impl BwParams {
    /// `count` packets of `size` bytes spaced `wait_us`, 4 MiB buffers, batches of 32.
    pub fn new(size: usize, count: u64, wait_us: f64) -> Self {
        BwParams {
            size,
            count,
            wait_us,
            send_buffer: Some(4 << 20),
            recv_buffer: Some(8 << 20),
            batch: 32,
            gso: true,
            gso_segments: 0,
            timeline: false,
        }
    }

    /// The spacing that offers `rate_bps` of UDP payload at `size` bytes per packet, µs.
    pub fn wait_for_rate(size: usize, rate_bps: f64) -> f64 {
        8.0 * size as f64 / rate_bps * 1e6
    }

    /// Checks the numbers; the message names what is wrong.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(HEADER_LEN..=65_507).contains(&self.size) {
            return Err(format!(
                "bw: size {} outside {HEADER_LEN}..=65507 bytes",
                self.size
            ));
        }
        if self.count == 0 || self.count > crate::responder::MAX_TEST_PACKETS {
            return Err(format!(
                "bw: count {} outside 1..={}",
                self.count,
                crate::responder::MAX_TEST_PACKETS
            ));
        }
        if !self.wait_us.is_finite() || self.wait_us < 0.0 {
            return Err(format!(
                "bw: wait {} µs is not a non-negative number",
                self.wait_us
            ));
        }
        Ok(())
    }
}

/// The sending side of a throughput test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BwLocal {
    /// Packets asked for.
    pub count: u64,
    /// Packets handed to the kernel.
    pub sent: u64,
    /// First to last send, s.
    pub send_duration_s: f64,
    /// 8 x size x sent / duration, Mb/s.
    pub send_user_rate_mbps: f64,
    /// sendmmsg calls.
    pub syscalls: u64,
    /// GSO super-datagrams among the messages sent.
    #[serde(default)]
    pub gso_sends: u64,
    /// EAGAIN retries.
    pub would_block: u64,
    /// ENOBUFS retries.
    pub no_buffers: u64,
    /// ECONNREFUSED seen.
    pub refused: u64,
    /// The sender's CPU during the test.
    pub host: HostUsage,
    /// Receive buffer the responder got, bytes.
    pub remote_buffer: usize,
    /// With [`BwParams::timeline`]: per send call that handed packets to the kernel, the number of
    /// packets handed so far and the CLOCK_REALTIME ns when the call returned (every packet up to
    /// that number was in the kernel by then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed: Vec<(u64, u64)>,
}

/// One UDPmon-style throughput line plus the extra statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    /// Datagram size, bytes.
    pub size: usize,
    /// Packets asked for.
    pub count: u64,
    /// Spacing asked for, µs.
    pub wait_us: f64,
    /// Sent user rate, Mb/s.
    pub send_user_rate_mbps: f64,
    /// Packets received.
    pub received: u64,
    /// Packets lost.
    pub lost: u64,
    /// Packets out of order (RFC 4737 reordered).
    pub out_of_order: u64,
    /// Lost percent.
    pub loss_percent: f64,
    /// Lost minus the drops the receiving host counted (socket overflow).
    pub lost_in_network: i64,
    /// 8 x size x received / (last - first arrival), Mb/s.
    pub recv_user_rate_mbps: f64,
    /// The same with 66 bytes of Ethernet/IP/UDP overhead per packet, Mb/s.
    pub recv_wire_rate_mbps: f64,
    /// Sender details.
    pub local: BwLocal,
    /// Receiver details and statistics.
    pub remote: BwRemote,
    /// Socket and setup warnings.
    pub warnings: Vec<String>,
}

impl BwResult {
    pub(crate) fn new(p: &BwParams, local: BwLocal, remote: BwRemote, warnings: Vec<String>) -> Self {
        let a = &remote.arrivals;
        let span = a.receive_span_s();
        // With n arrivals the span covers n-1 gaps; UDPmon divides all n packets by it.
        let rate = |bytes: usize| {
            if span > 0.0 {
                8.0 * bytes as f64 * a.received as f64 / span / 1e6
            } else {
                0.0
            }
        };
        let host_drops = remote.socket_drops as i64;
        BwResult {
            size: p.size,
            count: p.count,
            wait_us: p.wait_us,
            send_user_rate_mbps: local.send_user_rate_mbps,
            received: a.received,
            lost: a.lost,
            out_of_order: a.out_of_order,
            loss_percent: a.loss_percent(),
            lost_in_network: a.lost as i64 - host_drops,
            recv_user_rate_mbps: rate(p.size),
            recv_wire_rate_mbps: rate(p.size + WIRE_OVERHEAD),
            local,
            remote,
            warnings,
        }
    }
}

/// Parameters of a latency test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatParams {
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Measured requests per size.
    pub count: u64,
    /// Unmeasured requests before each size.
    pub warmup: u64,
    /// How long to wait for each reply.
    pub reply_timeout: Duration,
}

/// Latency at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatPoint {
    /// Message size, bytes.
    pub size: usize,
    /// Requests sent (measured).
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Requests without a reply within the timeout.
    pub lost: u64,
    /// Round-trip times, µs.
    pub rtt_us: HistSummary,
}

/// Latency against message size with a least-squares line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatResult {
    /// One point per size.
    pub points: Vec<LatPoint>,
    /// Slope of median RTT against size, µs per byte (round trip: both directions' per-byte cost).
    pub slope_us_per_byte: f64,
    /// Intercept, µs (the fixed cost of a round trip).
    pub intercept_us: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
    /// Requests the responder echoed.
    pub echoed: u64,
    /// Datagrams the responder ignored.
    pub foreign: u64,
}

impl LatResult {
    pub(crate) fn new(points: Vec<LatPoint>, echoed: u64, foreign: u64) -> Self {
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.rtt_us.count > 0)
            .map(|p| (p.size as f64, p.rtt_us.p50))
            .collect();
        let (slope, intercept, r2) = least_squares(&xy).unwrap_or((0.0, 0.0, 0.0));
        LatResult {
            points,
            slope_us_per_byte: slope,
            intercept_us: intercept,
            r2,
            echoed,
            foreign,
        }
    }
}

/// Ordinary least squares y = a x + b: (a, b, r^2); None for fewer than 2 distinct x.
pub fn least_squares(xy: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return None;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let a = sxy / sxx;
    let b = my - a * mx;
    let r2 = if syy > 0.0 { sxy * sxy / (sxx * syy) } else { 1.0 };
    Some((a, b, r2))
}

/// Parameters of a TCP test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpParams {
    /// Parallel connections.
    pub streams: u32,
    /// Sending time.
    pub duration: Duration,
    /// Bytes per write.
    pub write_size: usize,
    /// Send buffer per connection, bytes.
    pub send_buffer: Option<usize>,
    /// Receive buffer per connection (responder side), bytes.
    pub recv_buffer: Option<usize>,
}

/// A TCP throughput result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpResult {
    /// Connections.
    pub streams: u32,
    /// Sending time, s.
    pub duration_s: f64,
    /// Bytes written per stream.
    pub bytes_sent: Vec<u64>,
    /// Bytes the receiver read in total.
    pub bytes_received: u64,
    /// Receiver bytes over the receiver's first-to-last-byte span, Mb/s.
    pub rate_mbps: f64,
    /// The sender's CPU seconds per GB received: its test threads' (the sending threads and the one
    /// watching the control connection), not the rest of the process's (a `--cpu-load` competitor).
    pub sender_cpu_s_per_gb: f64,
    /// The receiver's CPU seconds per GB received: its test threads' (or, from a responder that does not
    /// report them, its whole process's).
    pub receiver_cpu_s_per_gb: f64,
    /// The sender's host and whole process during the test.
    pub local_host: HostUsage,
    /// The CPU time of the sender's test threads.
    #[serde(default)]
    pub local_threads: ProcessCpu,
    /// Sender sockets at the end.
    pub local_sockets: Vec<TcpSockInfo>,
    /// The receiver's view.
    pub remote: TcpRemote,
}

impl TcpResult {
    pub(crate) fn new(
        p: &TcpParams,
        bytes_sent: Vec<u64>,
        duration_s: f64,
        local_host: HostUsage,
        local_threads: ProcessCpu,
        local_sockets: Vec<TcpSockInfo>,
        remote: TcpRemote,
    ) -> Self {
        let received: u64 = remote.bytes.iter().sum();
        let span = remote.last_ns.saturating_sub(remote.first_ns) as f64 * 1e-9;
        let gb = received as f64 / 1e9;
        let per_gb = |s: f64| if gb > 0.0 { s / gb } else { 0.0 };
        TcpResult {
            streams: p.streams,
            duration_s,
            bytes_sent,
            bytes_received: received,
            rate_mbps: if span > 0.0 {
                8.0 * received as f64 / span / 1e6
            } else {
                0.0
            },
            sender_cpu_s_per_gb: per_gb(local_threads.total_s()),
            receiver_cpu_s_per_gb: per_gb(remote.threads.unwrap_or(remote.host.process).total_s()),
            local_host,
            local_threads,
            local_sockets,
            remote,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_exact_line() {
        let xy = [
            (64.0, 20.0 + 0.01 * 64.0),
            (1472.0, 20.0 + 14.72),
            (8192.0, 20.0 + 81.92),
        ];
        let (a, b, r2) = least_squares(&xy).unwrap();
        assert!((a - 0.01).abs() < 1e-12 && (b - 20.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-12);
        assert!(least_squares(&[(1.0, 1.0)]).is_none());
        assert!(least_squares(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }

    #[test]
    fn wait_for_rate_matches_udpmon_arithmetic() {
        // 1472 bytes at 200 Mb/s: 58.88 µs apart.
        assert!((BwParams::wait_for_rate(1472, 200e6) - 58.88).abs() < 1e-9);
    }
}
