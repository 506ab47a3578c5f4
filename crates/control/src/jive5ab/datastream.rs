//! `datastream` (jive5ab ≥ 3.0, `src/mk5command/datastream.cc`, `src/mk6info.cc`): named sets of VDIF
//! match specifications. With datastreams defined, jive5ab records each VDIF frame into the recording
//! `<scan>_ds<name>` of the first datastream (in name order) one of whose specifications matches the frame,
//! `{thread}` and `{station}` in the name replaced from the frame's header; frames matching none are
//! dropped.
//!
//! A specification is `[[<host>][@<port>]/][<station>.]<threads>`: an optional sender (IPv4 address and/or
//! UDP port, `*` for any), an optional VDIF station (one or two letters, `0x` and 1-4 hex digits, or `*`)
//! and the threads (`*`, or a comma-separated list of ids and inclusive `lo-hi` ranges). Omitted parts
//! match everything.
//!
//! This module is the command's state and syntax; the names it expands are recording names, checked
//! against vlbiflow's scan-name rule when a datastream is added.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use super::reply::{J5Reply, ReturnCode};
use crate::proto::Statement;

/// Highest VDIF thread id (the header's thread field is 10 bits).
pub const MAX_THREAD: u16 = 1023;
/// Most datastreams per runtime.
pub const MAX_DATASTREAMS: usize = 64;
/// Most specifications per datastream.
pub const MAX_SPECS: usize = 64;
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

/// One defined datastream: its specifications as given (for `datastream? <name>`) and compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStream {
    pub text: Vec<String>,
    pub specs: Vec<MatchSpec>,
}

/// A runtime's datastreams, by name (jive5ab tries them in name order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataStreams {
    defined: BTreeMap<String, DataStream>,
}

impl DataStreams {
    pub fn is_empty(&self) -> bool {
        self.defined.is_empty()
    }

    pub fn len(&self) -> usize {
        self.defined.len()
    }

    pub fn get(&self, name: &str) -> Option<&DataStream> {
        self.defined.get(name)
    }

    /// The datastreams in the order they are tried.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &DataStream)> {
        self.defined.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Adds `name` with `specs` (empty ones skipped).
    pub fn add(&mut self, name: &str, specs: &[String]) -> Result<(), (ReturnCode, String)> {
        let text: Vec<String> = specs.iter().filter(|s| !s.is_empty()).cloned().collect();
        if text.is_empty() {
            return Err((
                ReturnCode::Parameter,
                "Missing data stream match specification(s)".into(),
            ));
        }
        let err4 = |m: String| Err((ReturnCode::Error, m));
        if self.defined.contains_key(name) {
            return err4(format!("The data stream '{name}' already has a definition"));
        }
        if self.defined.len() >= MAX_DATASTREAMS {
            return err4(format!("at most {MAX_DATASTREAMS} data streams"));
        }
        if text.len() > MAX_SPECS {
            return err4(format!(
                "at most {MAX_SPECS} match specifications per data stream"
            ));
        }
        // The widest expansion a frame can give: a scan name of one character, thread 1023, station as
        // four hex digits. The name must then still be a valid recording name.
        let sample = format!("x{SUFFIX_SEP}{}", expand(name, 0xffff, MAX_THREAD));
        if let Err(e) = vlbiflow_formats::names::validate_scan_name(&sample) {
            let why = match e {
                vlbiflow_formats::Error::Invalid { reason, .. } => reason.to_string(),
                e => e.to_string(),
            };
            return err4(format!(
                "data stream name '{name}' makes an invalid recording name ({why})"
            ));
        }
        let specs = text
            .iter()
            .map(|s| MatchSpec::parse(s))
            .collect::<Result<Vec<_>, _>>();
        match specs {
            Ok(specs) => {
                self.defined.insert(name.to_owned(), DataStream { text, specs });
                Ok(())
            }
            Err(e) => err4(e),
        }
    }

    pub fn remove(&mut self, name: &str) -> Result<(), (ReturnCode, String)> {
        match self.defined.remove(name) {
            Some(_) => Ok(()),
            None => Err((
                ReturnCode::Error,
                format!("The data stream '{name}' was not defined so cannot remove it"),
            )),
        }
    }

    pub fn clear(&mut self) {
        self.defined.clear();
    }

    /// The datastream (its unexpanded name) that takes a frame, if any.
    pub fn route(&self, station: u16, thread: u16, sender: Option<SocketAddrV4>) -> Option<&str> {
        self.defined
            .iter()
            .find(|(_, ds)| ds.specs.iter().any(|m| m.matches(station, thread, sender)))
            .map(|(k, _)| k.as_str())
    }
}

/// `name` with `{thread}` replaced by the thread id in decimal and `{station}` by the station's two
/// letters (one if the low byte is 0) when they are letters or digits, else by four lower-case hex
/// digits (jive5ab prints any printable character, and pads hex with spaces; neither is a valid
/// recording name here).
pub fn expand(name: &str, station: u16, thread: u16) -> String {
    if !name.contains('{') {
        return name.to_owned();
    }
    let [hi, lo] = station.to_be_bytes();
    let st = if hi.is_ascii_alphanumeric() && (lo == 0 || lo.is_ascii_alphanumeric()) {
        let mut s = String::from(hi as char);
        if lo != 0 {
            s.push(lo as char);
        }
        s
    } else {
        format!("{station:04x}")
    };
    name.replace("{thread}", &thread.to_string())
        .replace("{station}", &st)
}

/// Whether `record=on` can start in runtime `r` given its datastreams: jive5ab's two conditions (VDIF
/// only; not together with `net_port` suffixes), then vlbiflow's own: the recorder does not route frames
/// by datastream yet, so a recording with datastreams defined is refused rather than made as one
/// recording.
pub(super) fn record_check(r: &super::Runtime) -> Result<(), String> {
    if r.datastreams.is_empty() {
        return Ok(());
    }
    if !matches!(
        r.mode.as_ref().map(|m| &m.format),
        Some(super::mode::Format::Vdif { .. })
    ) {
        return Err("Datastreams can only be enabled for VDIF".into());
    }
    if r.ports
        .iter()
        .any(|p| p.suffix.as_deref().is_some_and(|s| !s.is_empty()))
    {
        return Err("Mixing suffixes on datastreams and net_ports currently not supported".into());
    }
    Err(
        "recording datastreams is not implemented by vlbiflow yet (datastream = clear records one scan)"
            .into(),
    )
}

/// The `datastream` command and query against a runtime's datastreams. `busy`: the refusal when a
/// transfer is running (commands only; queries are always answered).
pub(super) fn datastream(ds: &mut DataStreams, st: &Statement, busy: Option<J5Reply>) -> J5Reply {
    let kw = st.keyword.as_str();
    if st.query {
        let name = st.arg(0);
        if name.is_empty() {
            let mut f = vec![ds.len().to_string()];
            f.extend(ds.iter().map(|(n, _)| n.to_owned()));
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        return match ds.get(name) {
            Some(d) => {
                let mut f = vec![name.to_owned()];
                f.extend(d.text.iter().cloned());
                J5Reply::new(kw, true, ReturnCode::Done, f)
            }
            None => J5Reply::msg(
                kw,
                true,
                ReturnCode::Parameter,
                format!("The stream '{name}' is not defined"),
            ),
        };
    }
    if let Some(r) = busy {
        return r;
    }
    let done = || J5Reply::new(kw, false, ReturnCode::Done, vec![]);
    let outcome = match st.arg(0) {
        "" => Err((
            ReturnCode::Parameter,
            "subcommand (add, remove, clear, reset) is required".to_owned(),
        )),
        "add" | "remove" if st.arg(1).is_empty() => {
            Err((ReturnCode::Parameter, "Missing data stream name".to_owned()))
        }
        "add" => ds.add(st.arg(1), st.args.get(2..).unwrap_or(&[])),
        "remove" => ds.remove(st.arg(1)),
        "clear" => {
            ds.clear();
            Ok(())
        }
        // jive5ab forgets the names it expanded for the last recording; vlbiflow expands them per
        // recording, so there is nothing to forget.
        "reset" => Ok(()),
        other => Err((ReturnCode::NotNow, format!("{other} does not apply to {kw}"))),
    };
    match outcome {
        Ok(()) => done(),
        Err((code, msg)) => J5Reply::msg(kw, false, code, msg),
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
    fn first_datastream_by_name_takes_the_frame() {
        let mut ds = DataStreams::default();
        ds.add("b-odd", &["*.1,3,5,7".into()]).unwrap();
        ds.add("a-low", &["0-3".into()]).unwrap();
        assert_eq!(ds.route(0, 1, None), Some("a-low"));
        assert_eq!(ds.route(0, 5, None), Some("b-odd"));
        assert_eq!(ds.route(0, 6, None), None);
        assert_eq!(
            ds.add("bad name", &["*".into()]).unwrap_err().0,
            ReturnCode::Error
        );
        let long = "n".repeat(61);
        assert!(
            ds.add(&long, &["*".into()]).is_err(),
            "x_ds + 61 bytes is over 64"
        );
        assert!(ds.add(&"n".repeat(60), &["*".into()]).is_ok());
        assert!(ds.add("{station}{station}", &["*".into()]).is_ok());
        assert_eq!(ds.len(), 4);
    }
}
