//! Set-up commands: `mode`, `net_protocol`, `net_port`, `mtu`, `set_disks`. Like jive5ab, each setter is
//! refused (6) while a recording is on; queries always answer. Settings are kept per runtime and applied
//! to the controller at `record=on` (`set_disks` at once).

use std::net::IpAddr;

use crate::controller::Controller;
use crate::proto::{ReturnCode, Statement};

use super::mode::parse_mode;
use super::reply::J5Reply;
use super::{fmt_g, transfermode, Jive5ab};

/// jive5ab's default data port.
pub const DEFAULT_DATA_PORT: u16 = 2630;

/// `net_protocol`'s first field, as jive5ab stores it (`udp` is stored as `udps`, `pudp` as plain UDP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// Plain UDP datagrams, one frame each (`pudp`).
    Pudp,
    /// UDP with an 8-byte sequence number before each frame (`udps`, and `udp`).
    Udps,
    /// As `udps`, without reordering (`udpsnor`): what the Field System sets.
    Udpsnor,
    /// jive5ab's default; vlbiflow does not record over TCP.
    Tcp,
    /// Accepted and reported, not recordable by vlbiflow: `udt`, `vtp`, `rtcp`, `itcp`, `unix`.
    Other(&'static str),
}

impl Protocol {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pudp" => Protocol::Pudp,
            "udp" | "udps" => Protocol::Udps,
            "udpsnor" => Protocol::Udpsnor,
            "tcp" => Protocol::Tcp,
            "udt" => Protocol::Other("udt"),
            "vtp" => Protocol::Other("vtp"),
            "rtcp" => Protocol::Other("rtcp"),
            "itcp" => Protocol::Other("itcp"),
            "unix" => Protocol::Other("unix"),
            _ => return None,
        })
    }

    /// The name `net_protocol?` reports.
    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Pudp => "pudp",
            Protocol::Udps => "udps",
            Protocol::Udpsnor => "udpsnor",
            Protocol::Tcp => "tcp",
            Protocol::Other(n) => n,
        }
    }

    /// Datagrams carry an 8-byte sequence number (PSN) before the frame.
    pub fn psn(&self) -> Option<bool> {
        match self {
            Protocol::Pudp => Some(false),
            Protocol::Udps | Protocol::Udpsnor => Some(true),
            _ => None,
        }
    }
}

/// One `net_port` entry: `[<ip>@]<port>[=<suffix>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortEntry {
    /// Local address to bind (a multicast group in jive5ab); all interfaces without one.
    pub ip: Option<IpAddr>,
    pub port: u16,
    pub suffix: Option<String>,
}

impl Default for PortEntry {
    fn default() -> Self {
        PortEntry {
            ip: None,
            port: DEFAULT_DATA_PORT,
            suffix: None,
        }
    }
}

impl PortEntry {
    fn parse(s: &str) -> Result<Self, String> {
        let (addr, suffix) = match s.split_once('=') {
            Some((a, sfx)) => (a, Some(sfx)),
            None => (s, None),
        };
        let (ip, port) = match addr.split_once('@') {
            Some((ip, p)) => (
                Some(
                    ip.parse::<IpAddr>()
                        .map_err(|_| format!("'{ip}' is not an IP address"))?,
                ),
                p,
            ),
            None => (None, addr),
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{port}' is not a port number"))?;
        let suffix = match suffix {
            Some(x) => {
                vlbiflow_scan::validate_stream_label(x).map_err(|e| format!("suffix '{x}': {e}"))?;
                Some(x.to_owned())
            }
            None => None,
        };
        Ok(PortEntry {
            ip,
            port: if port == 0 { DEFAULT_DATA_PORT } else { port },
            suffix,
        })
    }

    fn text(&self) -> String {
        let mut s = String::new();
        if let Some(ip) = self.ip {
            s.push_str(&format!("{ip}@"));
        }
        s.push_str(&self.port.to_string());
        if let Some(x) = &self.suffix {
            s.push('=');
            s.push_str(x);
        }
        s
    }
}

/// A size with jive5ab's `k`/`M` suffixes (x1024, x1048576).
fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1024),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// An `ipd` value in nanoseconds: a number (`strtod`), then `u` (or nothing) for microseconds or `n` for
/// nanoseconds; -1 .. `INT_MAX` ns (`INT_MAX / 1000` us) as jive5ab accepts.
fn parse_ipd(a: &str) -> Option<i64> {
    let (n, rest) = split_number(a);
    let v: f64 = n.parse().ok()?;
    let ns_unit = match rest.chars().next() {
        None | Some('u') => false,
        Some('n') => true,
        Some(_) => return None,
    };
    let max = if ns_unit {
        f64::from(i32::MAX)
    } else {
        f64::from(i32::MAX / 1000)
    };
    if !(-1.0..max).contains(&v) {
        return None;
    }
    Some(if ns_unit { v as i64 } else { (v * 1000.0) as i64 })
}

/// The leading number of `a` (sign, digits, '.') and the rest.
fn split_number(a: &str) -> (&str, &str) {
    let end = a
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0)))
        .map_or(a.len(), |(i, _)| i);
    a.split_at(end)
}

/// Nanoseconds as `ipd?` shows microseconds: whole, or `%f`.
fn micros(ns: i64) -> String {
    if ns % 1000 == 0 {
        (ns / 1000).to_string()
    } else {
        format!("{:.6}", ns as f32 / 1000.0)
    }
}

/// jive5ab's `compute_theoretical_ipd` (`src/mk5command/mk5.cc`): datagrams of `datagram` bytes at the
/// mode's data rate, 10% faster to make up for overhead, the delay floored to whole nanoseconds; 0
/// without a rate.
pub(super) fn theoretical_ipd_ns(mode: Option<&super::Mode>, datagram: u32) -> i64 {
    let Some(m) = mode else { return 0 };
    let per_s = m.mbps * 1e6 / (f64::from(datagram.max(1)) * 8.0) * 1.1;
    if per_s > 0.0 && per_s.is_finite() {
        (1e9 / per_s).floor() as i64
    } else {
        0
    }
}

/// The 6 jive5ab gives a setter while a transfer runs.
pub(super) fn in_progress(st: &Statement, ctl: &Controller) -> Option<J5Reply> {
    (ctl.state_name() != "off").then(|| {
        J5Reply::msg(
            &st.keyword,
            st.query,
            ReturnCode::Conflict,
            format!("not whilst {} is in progress", transfermode(ctl)),
        )
    })
}

impl Jive5ab {
    /// `mode = <format string> ;`, `mode? ;`.
    pub(super) fn mode(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let r = self.rt_mut(rt);
            let f = match &r.mode {
                Some(m) => vec![
                    m.text.clone(),
                    m.format_name().into(),
                    m.ntrack().to_string(),
                    format!("{:.3}", m.track_rate()),
                    m.payload.to_string(),
                ]
                .into_iter()
                .take(if matches!(m.format, super::mode::Format::Mark5b) {
                    4
                } else {
                    5
                })
                .collect(),
                None => vec![
                    if r.mode_none { "none" } else { "" }.into(),
                    "<unknown>".into(),
                    "0".into(),
                    "0.000".into(),
                ],
            };
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if let Some(r) = in_progress(st, ctl) {
            return r;
        }
        if st.args.len() > 1 {
            return J5Reply::msg(
                kw,
                false,
                ReturnCode::Error,
                "vlbiflow takes the one-field form: mode = VDIF_<payload>-<Mbps>-<nchan>-<bits> or Mark5B-<Mbps>-<nchan>-<bits>",
            );
        }
        match parse_mode(st.arg(0)) {
            Ok(m) => {
                let r = self.rt_mut(rt);
                r.mode_none = m.is_none();
                r.mode = m;
                J5Reply::new(kw, false, ReturnCode::Done, vec![])
            }
            Err(e) => J5Reply::msg(kw, false, ReturnCode::Error, e),
        }
    }

    /// `net_protocol = [<proto>] : [<sockbuf>] : [<blocksize>] : [<nbuf>] ;`, `net_protocol? ;`.
    pub(super) fn net_protocol(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let r = self.rt_mut(rt);
            let f = vec![
                r.protocol.name().into(),
                r.sockbuf.to_string(),
                r.blocksize.to_string(),
                r.nbuf.to_string(),
            ];
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if let Some(r) = in_progress(st, ctl) {
            return r;
        }
        let bad = |code, msg: String| J5Reply::msg(kw, false, code, msg);
        let proto = match st.arg(0) {
            "" => None,
            p => match Protocol::parse(&p.to_ascii_lowercase()) {
                Some(p) => Some(p),
                None => return bad(ReturnCode::Conflict, format!("unknown protocol '{p}'")),
            },
        };
        let mut sizes = [None; 3];
        let limits = [(1u64 << 10, 1u64 << 30), (1 << 10, 1 << 30), (1, 1 << 16)];
        let names = ["socbuf size", "blocksize", "nbuf"];
        for i in 0..3 {
            let a = st.arg(i + 1);
            if a.is_empty() {
                continue;
            }
            match parse_size(a) {
                Some(v) if (limits[i].0..=limits[i].1).contains(&v) => sizes[i] = Some(v),
                _ => {
                    return bad(
                        ReturnCode::Parameter,
                        format!(
                            "{} '{a}' out of range [{}, {}]",
                            names[i], limits[i].0, limits[i].1
                        ),
                    )
                }
            }
        }
        if st.args.len() > 4 {
            return bad(
                ReturnCode::Parameter,
                "at most 4 fields: protocol : sockbuf : blocksize : nbuf".into(),
            );
        }
        let r = self.rt_mut(rt);
        if let Some(p) = proto {
            r.protocol = p;
        }
        if let Some(v) = sizes[0] {
            r.sockbuf = v;
        }
        if let Some(v) = sizes[1] {
            r.blocksize = v;
        }
        if let Some(v) = sizes[2] {
            r.nbuf = v;
        }
        J5Reply::new(kw, false, ReturnCode::Done, vec![])
    }

    /// `net_port = [<ip>@]<port>[=<suffix>] [: ...] ;`, `net_port? ;`.
    pub(super) fn net_port(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let f = self.rt_mut(rt).ports.iter().map(PortEntry::text).collect();
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if let Some(r) = in_progress(st, ctl) {
            return r;
        }
        let bad = |msg: String| J5Reply::msg(kw, false, ReturnCode::Parameter, msg);
        if st.args.is_empty() || st.args.iter().all(String::is_empty) {
            return bad("no port given".into());
        }
        let mut ports = Vec::new();
        for a in &st.args {
            match PortEntry::parse(a) {
                Ok(p) if ports.contains(&p) => return bad(format!("'{a}' given twice")),
                Ok(p) => ports.push(p),
                Err(e) => return bad(e),
            }
        }
        let with_suffix = ports.iter().filter(|p| p.suffix.is_some()).count();
        if ports.len() == 1 && with_suffix == 1 {
            return bad("a single port cannot carry a suffix".into());
        }
        if with_suffix != 0 && with_suffix != ports.len() {
            return bad("either all ports carry a suffix or none does".into());
        }
        self.rt_mut(rt).ports = ports;
        J5Reply::new(kw, false, ReturnCode::Done, vec![])
    }

    /// `mtu = <64..9000> ;`, `mtu? ;`.
    pub(super) fn mtu(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let m = self.rt_mut(rt).mtu;
            return J5Reply::new(kw, true, ReturnCode::Done, vec![m.to_string()]);
        }
        if let Some(r) = in_progress(st, ctl) {
            return r;
        }
        match st.arg(0) {
            "" => J5Reply::msg(kw, false, ReturnCode::Parameter, "Missing argument to command"),
            a => match a.parse::<u32>() {
                Ok(m) if (64..=9000).contains(&m) => {
                    self.rt_mut(rt).mtu = m;
                    J5Reply::new(kw, false, ReturnCode::Done, vec![])
                }
                _ => J5Reply::msg(
                    kw,
                    false,
                    ReturnCode::Conflict,
                    format!("MTU '{a}' is not 64..9000"),
                ),
            },
        }
    }

    /// `ipd = <delay>[u|n] ;`, `ipd? ;` (jive5ab `src/mk5command/interpacketdelay.cc`): the delay between
    /// the datagrams of a UDP `disk2net`, microseconds unless `n` (nanoseconds) follows; `-1`: from the
    /// mode's data rate ([`theoretical_ipd_ns`], shown after the set value); `0`: unpaced (the
    /// default). Allowed at any time; a running transfer keeps the delay it started with.
    pub(super) fn ipd(&mut self, rt: &str, st: &Statement) -> J5Reply {
        let kw = &st.keyword;
        let r = self.rt_mut(rt);
        if st.query {
            let mut f = vec![micros(r.ipd_ns)];
            if r.ipd_ns < 0 {
                f.push(micros(r.theoretical_ipd_ns));
            }
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if st.arg(0).is_empty() {
            return J5Reply::msg(kw, false, ReturnCode::Parameter, "Command must have argument");
        }
        match parse_ipd(st.arg(0)) {
            Some(ns) => {
                r.ipd_ns = ns;
                J5Reply::new(kw, false, ReturnCode::Done, vec![])
            }
            None => {
                // jive5ab names microseconds only when a number was read and `u` or nothing follows
                let (n, rest) = split_number(st.arg(0));
                let us = !n.is_empty() && matches!(rest.chars().next(), None | Some('u'));
                let unit = if us { "us" } else { "ns" };
                let max = if unit == "ns" { i32::MAX } else { i32::MAX / 1000 };
                J5Reply::msg(
                    kw,
                    false,
                    ReturnCode::Conflict,
                    format!("ipd '{}' NaN/out of range (range [-1.0,{max}{unit}])", st.arg(0)),
                )
            }
        }
    }

    /// `set_disks = <pattern> [: ...] ;`, `set_disks? ;`. A pattern is a group of the daemon's
    /// configuration, jive5ab's built-in group `flexbuff`/`flexbuf` (`/mnt/disk<n>`), `mk6`
    /// (`/mnt/disks/<1-4>/<0-7>/data`) or `1`..`4` (one Mark6 slot), or a directory or glob.
    pub(super) fn set_disks(&mut self, _rt: &str, st: &Statement, ctl: &mut Controller) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let (disks, _, _) = ctl.open_disks();
            let mut f = vec![disks.len().to_string()];
            f.extend(disks.iter().map(|d| d.display().to_string()));
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if let Some(r) = in_progress(st, ctl) {
            return r;
        }
        let mut patterns = Vec::new();
        for a in st.args.iter().filter(|a| !a.is_empty()) {
            match a.as_str() {
                "null" => {
                    return J5Reply::msg(
                        kw,
                        false,
                        ReturnCode::Parameter,
                        "vlbiflow does not record to 'null'",
                    )
                }
                "flexbuff" | "flexbuf" => patterns.push("/mnt/disk[0-9]*".to_owned()),
                "mk6" => patterns.push("/mnt/disks/[1-4]/[0-7]/data".to_owned()),
                s @ ("1" | "2" | "3" | "4") => patterns.push(format!("/mnt/disks/{s}/[0-7]/data")),
                g if ctl.config().groups.contains_key(g) && g != GROUP => {
                    patterns.extend(ctl.config().groups[g].iter().cloned())
                }
                p if p.starts_with('/') && glob::Pattern::new(p).is_ok() => patterns.push(p.to_owned()),
                other => {
                    return J5Reply::msg(
                        kw,
                        false,
                        ReturnCode::Parameter,
                        format!("'{other}' is no group, built-in alias, directory or glob"),
                    )
                }
            }
        }
        let n = match ctl.set_group(GROUP, patterns) {
            Ok(n) => n,
            Err(e) => return J5Reply::msg(kw, false, ReturnCode::Conflict, e),
        };
        if n == 0 {
            return J5Reply::new(
                kw,
                false,
                ReturnCode::Parameter,
                vec![
                    "0".into(),
                    "no mountpoints matched your selection criteria".into(),
                ],
            );
        }
        J5Reply::new(kw, false, ReturnCode::Done, vec![n.to_string()])
    }
}

/// The controller group `set_disks` defines.
pub const GROUP: &str = "jive5ab";

/// The data rate of a mode in jive5ab's `rtime?` form, `<Mb/s>Mbps`.
pub(super) fn mbps_text(mbps: f64) -> String {
    format!("{}Mbps", fmt_g(mbps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_sizes() {
        assert_eq!(PortEntry::parse("0").unwrap().port, DEFAULT_DATA_PORT);
        let p = PortEntry::parse("239.1.2.3@46227=a").unwrap();
        assert_eq!(p.text(), "239.1.2.3@46227=a");
        assert!(PortEntry::parse("x@1").is_err());
        assert!(PortEntry::parse("70000").is_err());
        assert!(PortEntry::parse("1=a/b").is_err());
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("32k"), Some(32 << 10));
        assert_eq!(parse_size("32000000"), Some(32_000_000));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("99999999999999999999M"), None);
    }
}
