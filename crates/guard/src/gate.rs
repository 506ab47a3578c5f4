//! Admission of connections before they authenticate, as a sans-IO state machine (the caller passes the
//! time in and does the I/O).
//!
//! A service asks [`Gate::arrive`] for every accepted connection. A connection is *pending* until it either
//! authenticates ([`Gate::passed`]) or fails: a wrong key, garbage, or silence until the handshake deadline
//! ([`Gate::struck`]). Pending connections are limited per address and in all, so a flood of idle
//! connections from one address cannot take the slots of others, and the slots of authenticated sessions
//! (counted by the service itself) are never used by pending ones.
//!
//! Every failed or silent handshake is a *strike* against its address. Past a few free strikes, each new
//! connection from that address is held for a delay that doubles with every strike up to a ceiling (a
//! tarpit) before its handshake may start. Nothing is ever refused for its strikes alone: a client with the
//! right key behind the same address (a NAT) waits at most the ceiling, and a success clears the strikes.
//! Strikes are forgotten after a quiet period.
//!
//! IPv6 addresses are grouped by their /64 prefix (one host usually holds a whole /64); IPv4-mapped IPv6
//! addresses count as their IPv4 address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Limits of a [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateConfig {
    /// Pending (unauthenticated) connections at once from one address (or IPv6 /64).
    pub per_address: usize,
    /// Pending connections at once from all addresses.
    pub pending: usize,
    /// Strikes of an address before its connections are delayed.
    pub free_strikes: u32,
    /// The first delay; it doubles with every further strike.
    pub base_delay: Duration,
    /// The longest delay.
    pub max_delay: Duration,
    /// Strikes are forgotten this long after the last one.
    pub forget: Duration,
    /// Addresses remembered at most (the oldest strikes are forgotten first beyond this).
    pub max_tracked: usize,
}

impl Default for GateConfig {
    /// 8 pending per address, 32 in all, 3 free strikes, then 250 ms doubling up to 4 s, strikes forgotten
    /// after 60 s, 65,536 addresses remembered.
    fn default() -> Self {
        GateConfig {
            per_address: 8,
            pending: 32,
            free_strikes: 3,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
            forget: Duration::from_secs(60),
            max_tracked: 65_536,
        }
    }
}

/// What to do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let it start its handshake after `delay` (zero for an address without strikes). It is pending now:
    /// report its outcome with [`Gate::passed`] or [`Gate::struck`].
    Admit {
        /// How long to hold the connection before reading from it.
        delay: Duration,
    },
    /// Close it now: its address has [`GateConfig::per_address`] pending connections already. Not pending.
    AddressBusy,
    /// Close it now: [`GateConfig::pending`] connections are pending already. Not pending.
    Full,
}

/// The key an address is counted under: IPv4 as is, IPv6 by its /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrKey {
    V4(u32),
    V6(u64),
}

impl AddrKey {
    /// The key of `ip`.
    pub fn of(ip: IpAddr) -> AddrKey {
        match ip {
            IpAddr::V4(a) => AddrKey::V4(a.into()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => AddrKey::V4(v4.into()),
                None => AddrKey::V6((u128::from(a) >> 64) as u64),
            },
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    pending: usize,
    strikes: u32,
    last_strike: Option<Instant>,
}

/// Pre-authentication admission state of one service.
#[derive(Debug)]
pub struct Gate {
    cfg: GateConfig,
    addrs: HashMap<AddrKey, Entry>,
    pending: usize,
}

impl Gate {
    /// A gate with these limits.
    pub fn new(cfg: GateConfig) -> Self {
        Gate {
            cfg,
            addrs: HashMap::new(),
            pending: 0,
        }
    }

    /// The limits.
    pub fn config(&self) -> &GateConfig {
        &self.cfg
    }

    /// Connections pending now.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Strikes held against `ip` at `now`.
    pub fn strikes(&self, ip: IpAddr, now: Instant) -> u32 {
        self.addrs
            .get(&AddrKey::of(ip))
            .map(|e| if self.expired(e, now) { 0 } else { e.strikes })
            .unwrap_or(0)
    }

    /// The delay of a connection from an address with `strikes`.
    pub fn delay_for(&self, strikes: u32) -> Duration {
        if strikes <= self.cfg.free_strikes {
            return Duration::ZERO;
        }
        let doublings = (strikes - self.cfg.free_strikes - 1).min(30);
        self.cfg
            .base_delay
            .saturating_mul(1u32 << doublings)
            .min(self.cfg.max_delay)
    }

    fn expired(&self, e: &Entry, now: Instant) -> bool {
        e.last_strike
            .is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.forget)
    }

    /// A connection from `ip` was accepted at `now`.
    pub fn arrive(&mut self, ip: IpAddr, now: Instant) -> Verdict {
        if self.pending >= self.cfg.pending {
            return Verdict::Full;
        }
        let k = AddrKey::of(ip);
        if !self.addrs.contains_key(&k) && self.addrs.len() >= self.cfg.max_tracked {
            self.prune(now);
        }
        let forget = self.cfg.forget;
        let e = self.addrs.entry(k).or_default();
        if e.last_strike
            .is_some_and(|t| now.saturating_duration_since(t) >= forget)
        {
            e.strikes = 0;
            e.last_strike = None;
        }
        if e.pending >= self.cfg.per_address {
            return Verdict::AddressBusy;
        }
        e.pending += 1;
        let strikes = e.strikes;
        self.pending += 1;
        Verdict::Admit {
            delay: self.delay_for(strikes),
        }
    }

    /// A pending connection from `ip` authenticated: it is no longer pending and the address's strikes are
    /// cleared.
    pub fn passed(&mut self, ip: IpAddr) {
        let k = AddrKey::of(ip);
        if let Some(e) = self.addrs.get_mut(&k) {
            if e.pending > 0 {
                e.pending -= 1;
                self.pending = self.pending.saturating_sub(1);
            }
            e.strikes = 0;
            e.last_strike = None;
            if e.pending == 0 {
                self.addrs.remove(&k);
            }
        }
    }

    /// A pending connection from `ip` failed its handshake or stayed silent until the deadline: it is no
    /// longer pending and its address gets a strike.
    pub fn struck(&mut self, ip: IpAddr, now: Instant) {
        let k = AddrKey::of(ip);
        let e = self.addrs.entry(k).or_default();
        if e.pending > 0 {
            e.pending -= 1;
            self.pending = self.pending.saturating_sub(1);
        }
        e.strikes = e.strikes.saturating_add(1);
        e.last_strike = Some(now);
    }

    /// A pending connection from `ip` ended neither way (the service is stopping, or turned it away for a
    /// reason of its own before the handshake): it is no longer pending, no strike.
    pub fn left(&mut self, ip: IpAddr) {
        let k = AddrKey::of(ip);
        if let Some(e) = self.addrs.get_mut(&k) {
            if e.pending > 0 {
                e.pending -= 1;
                self.pending = self.pending.saturating_sub(1);
            }
            if e.pending == 0 && e.strikes == 0 {
                self.addrs.remove(&k);
            }
        }
    }

    /// Forgets expired strikes, then (still too many) the oldest ones of addresses with nothing pending.
    fn prune(&mut self, now: Instant) {
        let forget = self.cfg.forget;
        self.addrs.retain(|_, e| {
            e.pending > 0
                || e.last_strike
                    .is_some_and(|t| now.saturating_duration_since(t) < forget)
        });
        if self.addrs.len() >= self.cfg.max_tracked {
            let mut idle: Vec<(Instant, AddrKey)> = self
                .addrs
                .iter()
                .filter(|(_, e)| e.pending == 0)
                .filter_map(|(k, e)| e.last_strike.map(|t| (t, *k)))
                .collect();
            idle.sort_unstable_by_key(|(t, _)| *t);
            let excess = self.addrs.len() + 1 - self.cfg.max_tracked;
            for (_, k) in idle.into_iter().take(excess) {
                self.addrs.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    fn admitted(v: Verdict) -> Duration {
        match v {
            Verdict::Admit { delay } => delay,
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn an_idle_flood_from_one_address_leaves_room_for_others() {
        let mut g = Gate::new(GateConfig::default());
        let t = Instant::now();
        for _ in 0..8 {
            assert_eq!(admitted(g.arrive(ip(1), t)), Duration::ZERO);
        }
        for _ in 0..32 {
            assert_eq!(g.arrive(ip(1), t), Verdict::AddressBusy);
        }
        assert_eq!(g.pending(), 8);
        // another address gets in at once, and authenticates
        assert_eq!(admitted(g.arrive(ip(2), t)), Duration::ZERO);
        g.passed(ip(2));
        assert_eq!(g.pending(), 8);
    }

    #[test]
    fn the_pending_total_is_bounded() {
        let mut g = Gate::new(GateConfig::default());
        let t = Instant::now();
        for i in 0..32 {
            admitted(g.arrive(ip(i), t));
        }
        assert_eq!(g.arrive(ip(200), t), Verdict::Full);
        g.left(ip(0));
        admitted(g.arrive(ip(200), t));
    }

    #[test]
    fn strikes_delay_an_address_doubling_up_to_the_ceiling_and_never_refuse() {
        let mut g = Gate::new(GateConfig::default());
        let t = Instant::now();
        let mut delays = Vec::new();
        for i in 0..10u64 {
            let now = t + Duration::from_secs(i);
            delays.push(admitted(g.arrive(ip(1), now)).as_millis());
            g.struck(ip(1), now);
        }
        assert_eq!(delays, [0, 0, 0, 0, 250, 500, 1000, 2000, 4000, 4000]);
        // another address is not delayed
        assert_eq!(
            admitted(g.arrive(ip(2), t + Duration::from_secs(10))),
            Duration::ZERO
        );
        // the right key from the struck address: delayed, then admitted, and its strikes are cleared
        let now = t + Duration::from_secs(11);
        assert_eq!(admitted(g.arrive(ip(1), now)), Duration::from_secs(4));
        g.passed(ip(1));
        assert_eq!(g.strikes(ip(1), now), 0);
        assert_eq!(admitted(g.arrive(ip(1), now)), Duration::ZERO);
    }

    #[test]
    fn strikes_are_forgotten_after_a_quiet_minute() {
        let mut g = Gate::new(GateConfig::default());
        let t = Instant::now();
        for _ in 0..6 {
            admitted(g.arrive(ip(1), t));
            g.struck(ip(1), t);
        }
        assert_eq!(g.strikes(ip(1), t), 6);
        let later = t + Duration::from_secs(60);
        assert_eq!(g.strikes(ip(1), later), 0);
        assert_eq!(admitted(g.arrive(ip(1), later)), Duration::ZERO);
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let mut g = Gate::new(GateConfig {
            per_address: 1,
            ..GateConfig::default()
        });
        let t = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        admitted(g.arrive(a, t));
        assert_eq!(g.arrive(b, t), Verdict::AddressBusy);
        admitted(g.arrive(c, t));
        admitted(g.arrive(ip(7), t));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped());
        assert_eq!(g.arrive(mapped, t), Verdict::AddressBusy);
        assert_eq!(
            g.arrive(IpAddr::V6(Ipv6Addr::LOCALHOST), t),
            Verdict::Admit {
                delay: Duration::ZERO
            }
        );
    }

    #[test]
    fn remembered_addresses_are_bounded() {
        let mut g = Gate::new(GateConfig {
            max_tracked: 100,
            ..GateConfig::default()
        });
        let t = Instant::now();
        for i in 0..1000u32 {
            let a = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            let now = t + Duration::from_millis(i as u64);
            admitted(g.arrive(a, now));
            g.struck(a, now);
            assert!(g.addrs.len() <= 100, "{}", g.addrs.len());
        }
        assert_eq!(g.pending(), 0);
        // the most recent strikes are the ones kept
        assert_eq!(g.strikes(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 999)), t), 1);
    }
}
