//! Passive counters: the interfaces' byte, packet, error and drop counters from /proc/net/dev and
//! the UDP stack's from /proc/net/snmp, sampled by each agent; the differences between samples are
//! archived so a test result can be read against the link's load.

use std::collections::BTreeMap;

use crate::report::CounterSample;
use crate::timespec::Ms;

/// Raw counters of one interface (or "udp").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raw {
    /// rx bytes, tx bytes, rx packets, tx packets, rx errors, tx errors, rx drops, tx drops.
    pub v: [u64; 8],
}

/// Parses /proc/net/dev: interface name to counters.
pub fn parse_net_dev(text: &str) -> BTreeMap<String, Raw> {
    let mut out = BTreeMap::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() < 16 {
            continue;
        }
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop ...
        out.insert(
            name.trim().to_string(),
            Raw {
                v: [f[0], f[8], f[1], f[9], f[2], f[10], f[3], f[11]],
            },
        );
    }
    out
}

/// Parses the Udp lines of /proc/net/snmp: InDatagrams, OutDatagrams, InErrors, RcvbufErrors,
/// SndbufErrors as a [`Raw`] (rx/tx packets, rx errors, rx/tx drops).
pub fn parse_snmp_udp(text: &str) -> Option<Raw> {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().skip(1).collect();
    let values: Vec<u64> = lines
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |n: &str| {
        names
            .iter()
            .position(|x| *x == n)
            .and_then(|i| values.get(i))
            .copied()
            .unwrap_or(0)
    };
    Some(Raw {
        v: [
            0,
            0,
            get("InDatagrams"),
            get("OutDatagrams"),
            get("InErrors"),
            0,
            get("RcvbufErrors"),
            get("SndbufErrors"),
        ],
    })
}

/// Differences between samples.
#[derive(Debug, Default)]
pub struct Sampler {
    last: Option<(Ms, BTreeMap<String, Raw>)>,
}

impl Sampler {
    /// Feeds a reading at `t`; returns samples for the span since the previous reading. Counters
    /// that went backwards (interface reset) give no sample for that span.
    pub fn feed(
        &mut self,
        host: &str,
        t: Ms,
        now: BTreeMap<String, Raw>,
        interfaces: &[String],
    ) -> Vec<CounterSample> {
        let mut out = Vec::new();
        if let Some((t0, before)) = &self.last {
            for (name, raw) in &now {
                let wanted = if interfaces.is_empty() {
                    name != "lo"
                } else {
                    interfaces.contains(name) || name == "udp"
                };
                let Some(prev) = before.get(name).filter(|_| wanted) else {
                    continue;
                };
                if raw.v.iter().zip(prev.v.iter()).any(|(a, b)| a < b) {
                    continue;
                }
                let d: Vec<u64> = raw.v.iter().zip(prev.v.iter()).map(|(a, b)| a - b).collect();
                out.push(CounterSample {
                    host: host.into(),
                    iface: name.clone(),
                    t,
                    span_ms: t - t0,
                    rx_bytes: d[0],
                    tx_bytes: d[1],
                    rx_packets: d[2],
                    tx_packets: d[3],
                    rx_errors: d[4],
                    tx_errors: d[5],
                    rx_drops: d[6],
                    tx_drops: d[7],
                });
            }
        }
        self.last = Some((t, now));
        out
    }
}

/// Reads the host's counters now (interfaces and "udp").
pub fn read() -> BTreeMap<String, Raw> {
    let mut m = std::fs::read_to_string("/proc/net/dev")
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default();
    if let Some(u) = std::fs::read_to_string("/proc/net/snmp")
        .ok()
        .and_then(|t| parse_snmp_udp(&t))
    {
        m.insert("udp".into(), u);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 5000000   4000    1    2    0     0          0         0  6000000    5000    3    4    0     0       0          0
";
    const SNMP: &str = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 2 3 200 4 5 0 0 0
";

    #[test]
    fn parses_and_differences() {
        let d = parse_net_dev(DEV);
        assert_eq!(d["eth0"].v, [5_000_000, 6_000_000, 4000, 5000, 1, 3, 2, 4]);
        let u = parse_snmp_udp(SNMP).unwrap();
        assert_eq!(u.v, [0, 0, 100, 200, 3, 0, 4, 5]);
        let mut s = Sampler::default();
        let mut m = d.clone();
        m.insert("udp".into(), u);
        assert!(s.feed("A", 1000, m.clone(), &[]).is_empty());
        let mut m2 = m.clone();
        m2.get_mut("eth0").unwrap().v[0] += 1_250_000;
        m2.get_mut("udp").unwrap().v[6] += 7;
        let out = s.feed("A", 2000, m2, &[]);
        assert_eq!(out.len(), 2, "lo left out: {out:?}");
        let eth = out.iter().find(|x| x.iface == "eth0").unwrap();
        assert_eq!((eth.rx_bytes, eth.span_ms), (1_250_000, 1000));
        assert_eq!(out.iter().find(|x| x.iface == "udp").unwrap().rx_drops, 7);
        assert!(!read().is_empty());
    }
}
