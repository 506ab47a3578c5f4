//! jive5ab's datastreams (jive5ab >= 3.0, `src/mk6info.cc`): rules that send each VDIF frame to the
//! recording `<scan>_ds<name>` of the first rule (in name order) one of whose specifications matches the
//! frame, `{thread}` and `{station}` in the name replaced from the frame's header; frames matching no rule
//! are dropped.
//!
//! A specification is `[[<host>][@<port>]/][<station>.]<threads>`: an optional sender (IPv4 address and/or
//! UDP port, `*` for any), an optional VDIF station (one or two letters, `0x` and 1-4 hex digits, or `*`)
//! and the threads (`*`, or a comma-separated list of ids and inclusive `lo-hi` ranges). Omitted parts
//! match everything.
//!
//! [`Router`] is the per-frame side: a frame's recording slot is one table load once its thread has been
//! seen; the first frame of a thread (or of a new station) takes the slow path, which allocates only when
//! it opens a new recording.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

/// Highest VDIF thread id (the header's thread field is 10 bits).
pub const MAX_THREAD: u16 = 1023;
/// What jive5ab puts between the scan name and the expanded datastream name.
pub const SUFFIX_SEP: &str = "_ds";

/// Which VDIF station a specification matches. Two ASCII letters are the station id's high byte (first
/// letter) and low byte, as the VDIF header stores a two-character code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StationMatch {
    Any,
    /// The whole 16-bit id (`0x1601`, or two letters).
    Id(u16),
    /// One letter: the id's high byte only.
    High(u8),
}

/// One compiled match specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchSpec {
    pub host: Option<Ipv4Addr>,
    pub port: Option<u16>,
    pub station: StationMatch,
    /// Inclusive thread ranges; empty matches every thread.
    pub threads: Vec<(u16, u16)>,
}

impl MatchSpec {
    /// Compiles one specification; the error says what is wrong with it.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("the vdif criterion '{spec}' {why}"));
        let (sender, rest) = match spec.split_once('/') {
            Some((s, r)) => (Some(s), r),
            None => (None, spec),
        };
        let (mut host, mut port) = (None, None);
        if let Some(sender) = sender {
            let (h, p) = match sender.split_once('@') {
                Some((h, p)) => (h, Some(p)),
                None => (sender, None),
            };
            if h.contains('*') && h != "*" {
                return bad("has a '*' inside the host");
            }
            if !h.is_empty() && h != "*" {
                match h.parse::<Ipv4Addr>() {
                    Ok(a) => host = Some(a),
                    Err(_) => return bad("names a host that is not a dotted-quad IPv4 address"),
                }
            }
            match p {
                None | Some("*") => {}
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u16>() {
                    Ok(n) => port = Some(n),
                    Err(_) => return bad("has a port out of range (0-65535)"),
                },
                Some(_) => return bad("has a port that is not a number or '*'"),
            }
        }
        let (station, threads) = match rest.split_once('.') {
            Some((s, t)) => match parse_station(s) {
                Some(st) => (st, t),
                None => return bad("has a station that is not 1-2 letters, 0x and 1-4 hex digits, or '*'"),
            },
            None => (StationMatch::Any, rest),
        };
        let threads = match parse_threads(threads) {
            Ok(t) => t,
            Err(why) => return bad(&why),
        };
        Ok(MatchSpec {
            host,
            port,
            station,
            threads,
        })
    }

    /// Whether a frame of `station` and `thread`, from `sender` (`None`: unknown, matches only
    /// specifications without a sender), matches.
    pub fn matches(&self, station: u16, thread: u16, sender: Option<SocketAddrV4>) -> bool {
        if self.host.is_some() || self.port.is_some() {
            let Some(s) = sender else { return false };
            if self.host.is_some_and(|h| h != *s.ip()) || self.port.is_some_and(|p| p != s.port()) {
                return false;
            }
        }
        let station_ok = match self.station {
            StationMatch::Any => true,
            StationMatch::Id(id) => station == id,
            StationMatch::High(c) => (station >> 8) as u8 == c,
        };
        station_ok
            && (self.threads.is_empty() || self.threads.iter().any(|&(lo, hi)| (lo..=hi).contains(&thread)))
    }
}

fn parse_station(s: &str) -> Option<StationMatch> {
    if s == "*" {
        return Some(StationMatch::Any);
    }
    if let Some(hex) = s.strip_prefix("0x") {
        if (1..=4).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return u16::from_str_radix(hex, 16).ok().map(StationMatch::Id);
        }
        return None;
    }
    match s.as_bytes() {
        [a] if a.is_ascii_alphabetic() => Some(StationMatch::High(*a)),
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            Some(StationMatch::Id(u16::from_be_bytes([*a, *b])))
        }
        _ => None,
    }
}

fn parse_threads(t: &str) -> Result<Vec<(u16, u16)>, String> {
    if t == "*" {
        return Ok(Vec::new());
    }
    let id = |s: &str| -> Result<u16, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err("has threads that are not '*' or a list of ids and ranges".into());
        }
        match s.parse::<u16>() {
            Ok(n) if n <= MAX_THREAD => Ok(n),
            _ => Err(format!("has thread id {s} out of range (0..{MAX_THREAD})")),
        }
    };
    let mut out = Vec::new();
    for entry in t.split(',') {
        let (lo, hi) = match entry.split_once('-') {
            Some((lo, hi)) => (id(lo)?, id(hi)?),
            None => {
                let n = id(entry)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(format!("has an empty thread range {entry}"));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

/// `name` with `{thread}` replaced by the thread id in decimal and `{station}` by the station's two
/// letters (one if the low byte is 0) when they are letters or digits, else by four lower-case hex
/// digits (jive5ab prints any printable character, and pads hex with spaces; neither is a valid
/// recording name here).
pub fn expand(name: &str, station: u16, thread: u16) -> String {
    let mut s = String::new();
    expand_into(&mut s, name, station, thread);
    s
}

/// [`expand`] into `out` (cleared first): no allocation once `out` has room.
pub fn expand_into(out: &mut String, name: &str, station: u16, thread: u16) {
    out.clear();
    let mut rest = name;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("{thread}") {
            let _ = write!(out, "{thread}");
            rest = t;
        } else if let Some(t) = tail.strip_prefix("{station}") {
            let [hi, lo] = station.to_be_bytes();
            if hi.is_ascii_alphanumeric() && (lo == 0 || lo.is_ascii_alphanumeric()) {
                out.push(hi as char);
                if lo != 0 {
                    out.push(lo as char);
                }
            } else {
                let _ = write!(out, "{station:04x}");
            }
            rest = t;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
}

/// One datastream: its (unexpanded) name and compiled specifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub specs: Vec<MatchSpec>,
}

/// Most recordings one scan's datastreams may open; frames that would open more are dropped
/// ([`Router::overflow`] counts them).
pub const MAX_RECORDINGS: usize = 64;
/// [`Router`] table entry: not resolved yet.
const UNKNOWN: u8 = 254;
/// [`Router`] table entry: the thread matches no datastream.
const DROP: u8 = 255;
/// Entries of [`Router`]'s cache for rules that match on the sender (a power of two).
const SENDER_CACHE: usize = 1024;
/// A cache key no frame has (bit 127 is never set by [`sender_key`]).
const NO_KEY: u128 = u128::MAX;

/// A frame's (sender, station, thread) as one number: 32 + 16 bits of sender, 16 of station, 10 of thread,
/// and bit 74 set when the sender is known.
#[inline]
fn sender_key(station: u16, thread: u16, sender: Option<SocketAddrV4>) -> u128 {
    let s = sender.map_or(0, |a| {
        (1u128 << 48) | (u128::from(u32::from(*a.ip())) << 16) | u128::from(a.port())
    });
    (s << 26) | (u128::from(station) << 10) | u128::from(thread)
}

/// Routes frames to recording slots (0.., in the order they are first seen) by datastream rules.
#[derive(Debug, Clone)]
pub struct Router {
    /// In the order they are tried (by name, as jive5ab's `std::map`).
    rules: Vec<Rule>,
    /// Expanded name (suffix after `_ds`) of each slot.
    names: Vec<String>,
    /// Slot by thread, for frames of station `station`.
    by_thread: Box<[u8; 1024]>,
    station: Option<u16>,
    /// Some rule matches on the sender: frames are looked up in `by_sender_cache` instead of the table.
    by_sender: bool,
    /// With rules on the sender: the slots of recently seen (sender, station, thread) keys, direct-mapped
    /// (a key that collides with another is resolved again; the rules decide, never the cache).
    by_sender_cache: Box<[(u128, u8); SENDER_CACHE]>,
    scratch: String,
    overflow: u64,
}

impl Router {
    /// A router for `rules` (sorted by name here).
    pub fn new(mut rules: Vec<Rule>) -> Self {
        rules.sort_by(|a, b| a.name.cmp(&b.name));
        let by_sender = rules
            .iter()
            .flat_map(|r| &r.specs)
            .any(|m| m.host.is_some() || m.port.is_some());
        Router {
            rules,
            names: Vec::with_capacity(MAX_RECORDINGS),
            by_thread: Box::new([UNKNOWN; 1024]),
            station: None,
            by_sender,
            by_sender_cache: Box::new([(NO_KEY, UNKNOWN); SENDER_CACHE]),
            scratch: String::with_capacity(64),
            overflow: 0,
        }
    }

    /// The slot of a frame of `station`, `thread` (10 bits) from `sender`; `None`: drop it.
    #[inline]
    pub fn slot(&mut self, station: u16, thread: u16, sender: Option<SocketAddrV4>) -> Option<u8> {
        let t = usize::from(thread & MAX_THREAD);
        if self.by_sender {
            let key = sender_key(station, thread & MAX_THREAD, sender);
            let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((key >> 64) as u64);
            let i = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % SENDER_CACHE;
            match self.by_sender_cache[i] {
                (k, DROP) if k == key => return None,
                (k, s) if k == key => return Some(s),
                _ => {}
            }
            let before = self.overflow;
            let slot = self.resolve(station, thread & MAX_THREAD, sender);
            // A frame dropped because it would open too many recordings is not cached: counted each time.
            if self.overflow == before {
                self.by_sender_cache[i] = (key, slot.unwrap_or(DROP));
            }
            return slot;
        }
        if self.station == Some(station) {
            match self.by_thread[t] {
                UNKNOWN => {}
                DROP => return None,
                s => return Some(s),
            }
        }
        self.resolve(station, thread & MAX_THREAD, sender)
    }

    #[cold]
    fn resolve(&mut self, station: u16, thread: u16, sender: Option<SocketAddrV4>) -> Option<u8> {
        if self.station != Some(station) {
            self.by_thread.fill(UNKNOWN);
            self.station = Some(station);
        }
        let rule = self
            .rules
            .iter()
            .find(|r| r.specs.iter().any(|m| m.matches(station, thread, sender)));
        let slot = match rule {
            None => DROP,
            Some(r) => {
                expand_into(&mut self.scratch, &r.name, station, thread);
                match self.names.iter().position(|n| *n == self.scratch) {
                    Some(i) => i as u8,
                    None if self.names.len() < MAX_RECORDINGS => {
                        self.names.push(self.scratch.clone());
                        (self.names.len() - 1) as u8
                    }
                    None => {
                        self.overflow += 1;
                        return None;
                    }
                }
            }
        };
        if !self.by_sender {
            self.by_thread[usize::from(thread)] = slot;
        }
        (slot != DROP).then_some(slot)
    }

    /// The expanded names of the slots opened so far, by slot.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Frames dropped because they would have opened more than [`MAX_RECORDINGS`] recordings.
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// The recording name of `slot` in scan `scan`: `<scan>_ds<name>`.
    pub fn recording_name(&self, scan: &str, slot: u8) -> Option<String> {
        self.names
            .get(usize::from(slot))
            .map(|n| format!("{scan}{SUFFIX_SEP}{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(a: &str) -> Option<SocketAddrV4> {
        Some(a.parse().unwrap())
    }

    #[test]
    fn specifications_of_jive5abs_manual() {
        let m = MatchSpec::parse("*").unwrap();
        assert_eq!(
            (m.host, m.port, m.station, m.threads.len()),
            (None, None, StationMatch::Any, 0)
        );
        assert!(m.matches(0xffff, 1023, None));

        let m = MatchSpec::parse("192.168.1.10/0-4,12-16").unwrap();
        assert_eq!(m.host, Some(Ipv4Addr::new(192, 168, 1, 10)));
        assert_eq!(m.threads, [(0, 4), (12, 16)]);
        assert!(m.matches(7, 4, sender("192.168.1.10:1234")));
        assert!(!m.matches(7, 5, sender("192.168.1.10:1234")));
        assert!(!m.matches(7, 4, sender("192.168.1.11:1234")));
        assert!(!m.matches(7, 4, None), "a sender to match and no sender known");

        let m = MatchSpec::parse("192.168.1.10@42667/*.*").unwrap();
        assert_eq!((m.port, m.station), (Some(42667), StationMatch::Any));
        assert!(m.matches(1, 2, sender("192.168.1.10:42667")));
        assert!(!m.matches(1, 2, sender("192.168.1.10:42668")));
        let m = MatchSpec::parse("@42667/3").unwrap();
        assert_eq!((m.host, m.port), (None, Some(42667)));
        let m = MatchSpec::parse("*@*/3").unwrap();
        assert_eq!(
            (m.host, m.port, m.threads.as_slice()),
            (None, None, &[(3, 3)][..])
        );
        assert_eq!(MatchSpec::parse("/3").unwrap().threads, [(3, 3)]);

        let m = MatchSpec::parse("Hh.*").unwrap();
        assert_eq!(m.station, StationMatch::Id(u16::from_be_bytes([b'H', b'h'])));
        assert!(m.matches(0x4868, 9, None));
        assert!(!m.matches(0x4869, 9, None));
        let m = MatchSpec::parse("H.1").unwrap();
        assert!(m.matches(0x4800, 1, None) && m.matches(0x4868, 1, None) && !m.matches(0x4968, 1, None));
        assert_eq!(
            MatchSpec::parse("0x1601.*").unwrap().station,
            StationMatch::Id(0x1601)
        );
        assert_eq!(
            MatchSpec::parse("0xDEAD.*").unwrap().station,
            StationMatch::Id(0xdead)
        );
        assert_eq!(
            MatchSpec::parse("*.0,2,4,6").unwrap().threads,
            [(0, 0), (2, 2), (4, 4), (6, 6)]
        );
    }

    #[test]
    fn malformed_specifications_say_why() {
        for (spec, why) in [
            ("", "not '*' or a list"),
            ("1,", "not '*' or a list"),
            ("1-", "not '*' or a list"),
            ("a", "not '*' or a list"),
            ("5-3", "empty thread range 5-3"),
            ("1024", "out of range"),
            ("99999", "out of range"),
            ("ABC.1", "station"),
            ("0x12345.1", "station"),
            ("0x.1", "station"),
            ("1a.1", "station"),
            ("host.example/1", "dotted-quad"),
            ("1.2.3.4@70000/1", "port out of range"),
            ("1.2.3.4@x/1", "port that is not"),
            ("1.2.3.4@/1", "port that is not"),
            ("a*b/1", "'*' inside the host"),
            ("1/2/3", "dotted-quad"),
        ] {
            let e = MatchSpec::parse(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn names_expand_from_the_frame() {
        assert_eq!(expand("plain", 0x4868, 3), "plain");
        assert_eq!(expand("{thread}", 0x4868, 3), "3");
        assert_eq!(
            expand("RCP-{station}-{thread}-{thread}", 0x4868, 17),
            "RCP-Hh-17-17"
        );
        assert_eq!(expand("{station}", 0x4800, 0), "H");
        assert_eq!(expand("{station}", 0x1601, 0), "1601");
        assert_eq!(
            expand("{station}", 0x2f41, 0),
            "2f41",
            "'/' is not part of a name"
        );
        assert_eq!(expand("{station}", 0x00ab, 0), "00ab");
    }

    #[test]
    fn router_opens_a_recording_per_expanded_name() {
        let rule = |n: &str, s: &str| Rule {
            name: n.into(),
            specs: vec![MatchSpec::parse(s).unwrap()],
        };
        let mut r = Router::new(vec![rule("t{thread}", "0-1"), rule("odd", "*.1,3")]);
        // "odd" sorts before "t{thread}": thread 1 goes there, thread 0 to t0, thread 2 nowhere.
        assert_eq!(r.slot(0x4868, 0, None), Some(0));
        assert_eq!(r.slot(0x4868, 1, None), Some(1));
        assert_eq!(r.slot(0x4868, 3, None), Some(1));
        assert_eq!(r.slot(0x4868, 2, None), None);
        assert_eq!(r.names(), ["t0", "odd"]);
        for _ in 0..3 {
            assert_eq!(
                (r.slot(0x4868, 0, None), r.slot(0x4868, 2, None)),
                (Some(0), None)
            );
        }
        // Another station: same rules, same names (no {station} in them).
        assert_eq!(r.slot(0x4142, 0, None), Some(0));
        assert_eq!(
            r.recording_name("exp_st_no0001", 1).as_deref(),
            Some("exp_st_no0001_dsodd")
        );

        let mut r = Router::new(vec![rule("{station}", "*")]);
        assert_eq!(
            (r.slot(0x4142, 5, None), r.slot(0x4344, 5, None)),
            (Some(0), Some(1))
        );
        assert_eq!(r.slot(0x4142, 6, None), Some(0));
        assert_eq!(r.names(), ["AB", "CD"]);

        let mut r = Router::new(vec![rule("{thread}", "*")]);
        for t in 0..MAX_RECORDINGS as u16 {
            assert_eq!(r.slot(1, t, None), Some(t as u8));
        }
        assert_eq!(r.slot(1, MAX_RECORDINGS as u16, None), None);
        assert_eq!(r.overflow(), 1);

        let mut r = Router::new(vec![rule("a", "10.0.0.1@5000/*"), rule("b", "*")]);
        let from = |p: u16| Some(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), p));
        assert_eq!(
            (r.slot(0, 0, from(5000)), r.slot(0, 0, from(5001))),
            (Some(0), Some(1))
        );
        assert_eq!(r.slot(0, 0, from(5000)), Some(0));
        // Many senders, threads and stations, seen repeatedly: the cache always answers as the rules do.
        for round in 0..3 {
            for p in 4000..6000u16 {
                let t = p % 7;
                let want = if p == 5000 { Some(0) } else { Some(1) };
                assert_eq!(r.slot(p % 3, t, from(p)), want, "round {round} port {p}");
            }
            assert_eq!(r.slot(0, 0, None), Some(1), "no sender: only rules without one");
        }
        let mut r = Router::new(vec![rule("{thread}", "10.0.0.1/*")]);
        let from = |t: u16| Some(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000 + t));
        for _ in 0..2 {
            for t in 0..=MAX_RECORDINGS as u16 {
                let want = (usize::from(t) < MAX_RECORDINGS).then_some(t as u8);
                assert_eq!(r.slot(0, t, from(t)), want);
            }
            assert_eq!(r.slot(0, 0, None), None, "the rule needs the sender");
        }
        assert_eq!(r.overflow(), 2, "an overflowing frame is counted every time");
    }
}
