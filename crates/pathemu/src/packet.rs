//! What the drop log says about a packet: a summary read from the IP header (version, protocol, addresses),
//! the TCP/UDP ports and the first bytes of the transport payload (enough to tell which VDIF frame it was:
//! its packet sequence number or header), and the formatting of drop-log lines as CSV or JSON.
//!
//! [`PacketSummary::parse`] never fails: whatever it cannot read (a truncated header, an unknown protocol, a
//! later fragment) it leaves out.

use crate::model::{DropReason, Nanos};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of transport payload kept in a summary.
pub const HEAD_LEN: usize = 16;

/// IP protocol numbers the summary knows.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;

/// The identifying fields of one IP packet. `Copy` and fixed-size: it travels to the drop-log writer
/// without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketSummary {
    /// 4 or 6; 0 when the packet is not IP.
    pub version: u8,
    /// IP protocol (IPv6: the next header after the fixed header).
    pub proto: u8,
    /// Source address.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: Option<IpAddr>,
    /// TCP/UDP source port.
    pub sport: Option<u16>,
    /// TCP/UDP destination port.
    pub dport: Option<u16>,
    /// First bytes of the TCP/UDP payload (`head_len` of them are valid).
    pub head: [u8; HEAD_LEN],
    /// Valid bytes in `head`.
    pub head_len: u8,
    /// Length of the whole IP packet.
    pub len: u32,
}

impl PacketSummary {
    /// Reads what it can from an IP packet as a TUN device (IFF_NO_PI) carries it.
    pub fn parse(pkt: &[u8]) -> PacketSummary {
        let mut s = PacketSummary {
            version: 0,
            proto: 0,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            head: [0; HEAD_LEN],
            head_len: 0,
            len: pkt.len() as u32,
        };
        let Some(&b0) = pkt.first() else { return s };
        let transport = match b0 >> 4 {
            4 if pkt.len() >= 20 => {
                let ihl = usize::from(b0 & 0x0f) * 4;
                s.version = 4;
                s.proto = pkt[9];
                s.src = Some(IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15])));
                s.dst = Some(IpAddr::V4(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19])));
                let frag_offset = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
                let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]])).min(pkt.len());
                (ihl >= 20 && frag_offset == 0 && total >= ihl).then(|| &pkt[ihl..total])
            }
            6 if pkt.len() >= 40 => {
                s.version = 6;
                s.proto = pkt[6];
                let mut a = [0u8; 16];
                a.copy_from_slice(&pkt[8..24]);
                s.src = Some(IpAddr::V6(Ipv6Addr::from(a)));
                a.copy_from_slice(&pkt[24..40]);
                s.dst = Some(IpAddr::V6(Ipv6Addr::from(a)));
                let total = (40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]))).min(pkt.len());
                Some(&pkt[40..total])
            }
            _ => None,
        };
        let Some(t) = transport else { return s };
        let payload = match s.proto {
            PROTO_UDP if t.len() >= 8 => Some(&t[8..]),
            PROTO_TCP if t.len() >= 20 => {
                let off = usize::from(t[12] >> 4) * 4;
                Some(if off >= 20 && off <= t.len() {
                    &t[off..]
                } else {
                    &t[t.len()..]
                })
            }
            _ => None,
        };
        if let Some(p) = payload {
            s.sport = Some(u16::from_be_bytes([t[0], t[1]]));
            s.dport = Some(u16::from_be_bytes([t[2], t[3]]));
            let n = p.len().min(HEAD_LEN);
            s.head[..n].copy_from_slice(&p[..n]);
            s.head_len = n as u8;
        }
        s
    }

    /// The valid payload bytes.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }
}

/// Which way a packet was going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From namespace A to namespace B.
    AtoB,
    /// From namespace B to namespace A.
    BtoA,
}

impl Direction {
    /// `a-b` or `b-a`, as in the drop log.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::AtoB => "a-b",
            Direction::BtoA => "b-a",
        }
    }
}

/// One dropped packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropRecord {
    /// When it arrived, nanoseconds since the emulator started.
    pub t_ns: Nanos,
    /// Its direction.
    pub dir: Direction,
    /// Why it was dropped.
    pub reason: DropReason,
    /// What it was.
    pub pkt: PacketSummary,
}

/// Drop-log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Comma-separated values with a header line ([`CSV_HEADER`]).
    Csv,
    /// One JSON object per line.
    JsonLines,
}

/// The header line of a CSV drop log.
pub const CSV_HEADER: &str = "time_s,unix_time,dir,reason,proto,len,src,sport,dst,dport,payload_hex";

struct Hex<'a>(&'a [u8]);

impl std::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

struct Opt<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => Ok(()),
        }
    }
}

struct JsonOpt<T>(Option<T>, bool);

impl<T: std::fmt::Display> std::fmt::Display for JsonOpt<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.0, self.1) {
            (Some(v), true) => write!(f, "\"{v}\""),
            (Some(v), false) => v.fmt(f),
            (None, _) => f.write_str("null"),
        }
    }
}

impl DropRecord {
    /// Writes one line (with its newline). `start_unix` is the Unix time of the emulator's time zero.
    pub fn write_line(&self, w: &mut impl Write, format: LogFormat, start_unix: f64) -> io::Result<()> {
        let t = self.t_ns as f64 / 1e9;
        let p = &self.pkt;
        match format {
            LogFormat::Csv => writeln!(
                w,
                "{t:.9},{:.6},{},{},{},{},{},{},{},{},{}",
                start_unix + t,
                self.dir.as_str(),
                self.reason,
                p.proto,
                p.len,
                Opt(p.src),
                Opt(p.sport),
                Opt(p.dst),
                Opt(p.dport),
                Hex(p.head())
            ),
            LogFormat::JsonLines => writeln!(
                w,
                "{{\"time_s\":{t:.9},\"unix_time\":{:.6},\"dir\":\"{}\",\"reason\":\"{}\",\"proto\":{},\"len\":{},\
                 \"src\":{},\"sport\":{},\"dst\":{},\"dport\":{},\"payload_hex\":\"{}\"}}",
                start_unix + t,
                self.dir.as_str(),
                self.reason,
                p.proto,
                p.len,
                JsonOpt(p.src, true),
                JsonOpt(p.sport, false),
                JsonOpt(p.dst, true),
                JsonOpt(p.dport, false),
                Hex(p.head())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(payload: &[u8]) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
            0,
            0,
        ];
        p.extend_from_slice(&[10, 77, 0, 1, 10, 77, 0, 2]);
        p.extend_from_slice(&[0x30, 0x39, 0x0f, 0xa1, 0, (8 + payload.len()) as u8, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn udp_summary_and_lines() {
        let payload: Vec<u8> = (0u8..20).collect();
        let s = PacketSummary::parse(&udp4(&payload));
        assert_eq!(s.version, 4);
        assert_eq!(s.proto, 17);
        assert_eq!(s.src, Some("10.77.0.1".parse().unwrap()));
        assert_eq!(s.dst, Some("10.77.0.2".parse().unwrap()));
        assert_eq!((s.sport, s.dport), (Some(12345), Some(4001)));
        assert_eq!(s.head(), &payload[..16]);
        let rec = DropRecord {
            t_ns: 1_500_000_000,
            dir: Direction::AtoB,
            reason: DropReason::Random,
            pkt: s,
        };
        let mut out = Vec::new();
        rec.write_line(&mut out, LogFormat::Csv, 100.0).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1.500000000,101.500000,a-b,random,17,48,10.77.0.1,12345,10.77.0.2,4001,000102030405060708090a0b0c0d0e0f\n"
        );
        let mut out = Vec::new();
        rec.write_line(&mut out, LogFormat::JsonLines, 100.0).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["dport"], 4001);
        assert_eq!(v["src"], "10.77.0.1");
        assert_eq!(v["payload_hex"], "000102030405060708090a0b0c0d0e0f");
    }

    #[test]
    fn random_and_mutated_packets_do_not_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let valid = udp4(&[9; 40]);
        for _ in 0..200_000 {
            let mut p = if rng.gen_bool(0.5) {
                valid.clone()
            } else {
                let n = rng.gen_range(0..80);
                (0..n).map(|_| rng.gen()).collect()
            };
            for _ in 0..rng.gen_range(0..4) {
                if !p.is_empty() {
                    let i = rng.gen_range(0..p.len());
                    p[i] = rng.gen();
                }
            }
            if rng.gen_bool(0.3) && !p.is_empty() {
                p[0] = if rng.gen_bool(0.5) { 0x45 } else { 0x60 };
            }
            let n = rng.gen_range(0..=p.len());
            let s = PacketSummary::parse(&p[..n]);
            assert!(s.head().len() <= HEAD_LEN);
            let rec = DropRecord {
                t_ns: 1,
                dir: Direction::BtoA,
                reason: DropReason::Queue,
                pkt: s,
            };
            let mut out = Vec::new();
            rec.write_line(&mut out, LogFormat::JsonLines, 0.0).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).expect("valid JSON");
        }
    }

    #[test]
    fn short_and_odd_packets_do_not_panic() {
        for n in 0..60 {
            let p = udp4(&[7; 4]);
            let _ = PacketSummary::parse(&p[..n.min(p.len())]);
            let mut q = vec![0x60u8; n];
            q.resize(n, 0x60);
            let _ = PacketSummary::parse(&q);
        }
        let s = PacketSummary::parse(&udp4(&[1, 2, 3]));
        assert_eq!(s.head(), &[1, 2, 3]);
        let mut frag = udp4(&[1; 30]);
        frag[7] = 5; // a later fragment: no transport header
        let s = PacketSummary::parse(&frag);
        assert_eq!((s.proto, s.sport, s.head_len), (17, None, 0));
    }
}
