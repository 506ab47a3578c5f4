//! Address filters: `ADDR` or `ADDR/PREFIX` (CIDR), IPv4 or IPv6. An IPv4-mapped IPv6 address (what a
//! dual-stack socket reports for an IPv4 peer) matches as its IPv4 address.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One address block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why an address block could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address or ADDR/PREFIX block (e.g. 192.0.2.7, 192.0.2.0/24, 2001:db8::/32)")]
pub struct PrefixError(pub String);

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

impl Prefix {
    /// The block of `addr` with `len` leading bits (at most 32 for IPv4, 128 for IPv6).
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (len <= max).then_some(Prefix { addr, len })
    }

    /// True when `ip` is in the block.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = if self.len == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.len)
                };
                u32::from(a) & m == u32::from(b) & m
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = if self.len == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.len)
                };
                u128::from(a) & m == u128::from(b) & m
            }
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PrefixError(s.to_owned());
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| err())?;
        let addr = canonical(addr);
        let len = match l {
            Some(l) => l.trim().parse::<u8>().map_err(|_| err())?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Prefix::new(addr, len).ok_or_else(err)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Several blocks: an address passes when any of them holds it. Empty means nobody.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(pub Vec<Prefix>);

impl AllowList {
    /// True when `ip` is in one of the blocks.
    #[inline]
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|p| p.contains(ip))
    }

    /// True when no block is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_parse_and_match() {
        let p: Prefix = "192.0.2.0/24".parse().unwrap();
        assert!(p.contains(ip("192.0.2.200")));
        assert!(!p.contains(ip("192.0.3.1")));
        assert!(p.contains(ip("::ffff:192.0.2.9")));
        assert!(!p.contains(ip("2001:db8::1")));
        let one: Prefix = "10.1.2.3".parse().unwrap();
        assert_eq!(one.to_string(), "10.1.2.3/32");
        assert!(one.contains(ip("10.1.2.3")) && !one.contains(ip("10.1.2.4")));
        let v6: Prefix = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.1")));
        let mapped: Prefix = "::ffff:192.0.2.0/24".parse().unwrap_or(p);
        assert!(mapped.contains(ip("192.0.2.1")));
        for bad in ["", "192.0.2.0/33", "2001:db8::/129", "host.example", "1.2.3.4/x"] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_list() {
        let l = AllowList(vec![
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        ]);
        assert!(l.allows(ip("192.0.2.1")) && l.allows(ip("2001:db8::1")));
        assert!(!l.allows(ip("2001:db8::2")) && !l.allows(ip("127.0.0.1")));
        assert!(!AllowList::default().allows(ip("127.0.0.1")));
    }
}
