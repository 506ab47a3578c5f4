//! `record`, `scan_set` and `scan_check?` (jive5ab 3.1.0 `src/mk5command/net2vbs.cc`, `scan_set_vbs.cc`,
//! `scan_check_vbs.cc`, `src/scan_check.cc`), mapped onto the controller's recording.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use vlbiflow_formats::time::UtcTime;
use vlbiflow_scan::{FrameKind, ScanFormat};

use crate::controller::{Answer, Controller, InputStream, ScanEntry, UDP_HEADER_OFFSET};
use crate::proto::{Reply, ReturnCode, Statement};

use super::mode::Format;
use super::reply::J5Reply;
use super::setup::in_progress;
use super::{fmt_g, Jive5ab, PendingStart, Runtime, ScanSel, Step, DEFAULT_RUNTIME};

/// Bytes of IPv4 + UDP headers a datagram adds to its payload within the MTU.
const IP_UDP_OVERHEAD: u32 = 28;

impl Jive5ab {
    /// `record = on : <scan> | off | nthread : [<r>] : [<w>] | mk6 : <0|1> |
    /// check_unique_recording_names : <0|1> ;`, `record? [nthread|mk6] ;`.
    pub(super) fn record(&mut self, rt: &str, st: &Statement, ctl: &mut Controller, now: UtcTime) -> Step {
        let kw = st.keyword.as_str();
        let now_reply = |code, fields: Vec<String>| Step::Now(J5Reply::new(kw, st.query, code, fields));
        let msg = |code, m: String| Step::Now(J5Reply::msg(kw, st.query, code, m));
        if st.query {
            let r = self.rt_mut(rt);
            return match st.arg(0) {
                "nthread" => now_reply(
                    ReturnCode::Done,
                    vec![r.readers.to_string(), r.writers.to_string()],
                ),
                "mk6" => now_reply(ReturnCode::Done, vec![u8::from(r.mk6).to_string()]),
                "" => {
                    let fields = match (ctl.state_name(), ctl.recording_bytes()) {
                        ("pending" | "recording", Some(bytes)) if rt == DEFAULT_RUNTIME => vec![
                            "on".into(),
                            r.session.len().to_string(),
                            r.session.last().cloned().unwrap_or_default(),
                            bytes.to_string(),
                        ],
                        _ => vec!["off".into()],
                    };
                    now_reply(ReturnCode::Done, fields)
                }
                other => msg(
                    ReturnCode::Parameter,
                    format!("{other} does not apply to record?"),
                ),
            };
        }
        let flag = |a: &str| match a {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        match st.arg(0) {
            "on" => self.record_on(rt, st, ctl, now),
            "off" => self.record_off(rt, st, ctl, now),
            "nthread" => {
                let parse = |a: &str| -> Result<Option<u32>, ()> {
                    if a.is_empty() {
                        Ok(None)
                    } else {
                        a.parse::<u32>().map(Some).map_err(|_| ())
                    }
                };
                match (parse(st.arg(1)), parse(st.arg(2))) {
                    (Ok(r), Ok(w))
                        if w.is_none_or(|w| (1..=64).contains(&w)) && r.is_none_or(|r| r <= 64) =>
                    {
                        let rr = self.rt_mut(rt);
                        rr.readers = r.unwrap_or(rr.readers);
                        rr.writers = w.unwrap_or(rr.writers);
                        now_reply(ReturnCode::Done, vec![])
                    }
                    _ => msg(
                        ReturnCode::Conflict,
                        "nthread takes <readers> and <writers 1..64>".into(),
                    ),
                }
            }
            "mk6" => match flag(st.arg(1)) {
                Some(v) => {
                    if let Some(r) = in_progress(st, ctl) {
                        return Step::Now(r);
                    }
                    self.rt_mut(rt).mk6 = v;
                    now_reply(ReturnCode::Done, vec![])
                }
                None => msg(ReturnCode::Parameter, "mk6 : <0|1>".into()),
            },
            "check_unique_recording_names" => match flag(st.arg(1)) {
                Some(v) => {
                    self.rt_mut(rt).unique_names = v;
                    now_reply(ReturnCode::Done, vec![])
                }
                None => msg(
                    ReturnCode::Parameter,
                    "check_unique_recording_names : <0|1>".into(),
                ),
            },
            other => msg(ReturnCode::NotNow, format!("{other} does not apply to record")),
        }
    }

    fn record_on(&mut self, rt: &str, st: &Statement, ctl: &mut Controller, now: UtcTime) -> Step {
        let kw = st.keyword.as_str();
        let fail = |code, m: String| Step::Now(J5Reply::msg(kw, false, code, m));
        if ctl.state_name() != "off" {
            return fail(ReturnCode::Conflict, "Already doing vbsrecord".into());
        }
        if rt != DEFAULT_RUNTIME {
            return fail(
                ReturnCode::Conflict,
                format!("vlbiflow records in runtime '{DEFAULT_RUNTIME}' only"),
            );
        }
        let scan = st.arg(1);
        if scan.is_empty() {
            return fail(ReturnCode::Conflict, "must provide a scan name".into());
        }
        let r = self.rt_mut(rt).clone();
        if let Err(e) = super::datastream::record_check(&r) {
            return fail(ReturnCode::Error, e);
        }
        let streams = match streams_for(&r) {
            Ok(s) => s,
            Err(e) => return fail(ReturnCode::Conflict, e),
        };
        if let Err(e) = vlbiflow_formats::names::validate_scan_name(scan) {
            return fail(ReturnCode::Parameter, format!("scan name '{scan}': {e}"));
        }
        let (name, renamed) = match unique_name(scan, ctl.scans(), r.unique_names) {
            Ok(n) => n,
            Err(e) => return fail(ReturnCode::Conflict, e),
        };
        ctl.set_format(if r.mk6 {
            ScanFormat::Mark6
        } else {
            ScanFormat::Flexbuff
        });
        ctl.set_datastreams(r.datastreams.rules());
        if let Err(e) = ctl.set_streams(streams) {
            return fail(ReturnCode::Conflict, e);
        }
        let mark6 = Statement {
            keyword: "record".into(),
            query: false,
            args: vec!["on".into(), String::new(), name.clone()],
        };
        match ctl.handle(&mark6, now) {
            Answer::Later(ticket) => Step::Start(PendingStart {
                ticket,
                name,
                renamed,
                runtime: rt.to_owned(),
            }),
            Answer::Now(reply) => Step::Now(translate(kw, &reply)),
        }
    }

    /// The reply to a `record=on` once its start's outcome is known (`reply`: the controller's reply to
    /// the Mark6 `record=on` it made; `None` if it was lost).
    pub fn started(&mut self, p: &PendingStart, reply: Option<Reply>, now: UtcTime) -> J5Reply {
        match reply {
            Some(r) if r.code == ReturnCode::Done => {
                self.rt_mut(&p.runtime).session.push(p.name.clone());
                let f = if p.renamed { vec![p.name.clone()] } else { vec![] };
                J5Reply::new("record", false, ReturnCode::Done, f)
            }
            Some(r) => {
                let j = translate("record", &r);
                self.push_error(-1, j.fields.join(" "), now);
                j
            }
            None => J5Reply::msg(
                "record",
                false,
                ReturnCode::Error,
                "the recording's start was lost",
            ),
        }
    }

    fn record_off(&mut self, rt: &str, st: &Statement, ctl: &mut Controller, now: UtcTime) -> Step {
        let kw = st.keyword.as_str();
        if rt != DEFAULT_RUNTIME || !matches!(ctl.state_name(), "pending" | "recording") {
            return Step::Now(J5Reply::msg(kw, false, ReturnCode::Conflict, "Not doing record"));
        }
        let off = Statement {
            keyword: "record".into(),
            query: false,
            args: vec!["off".into()],
        };
        let reply = match ctl.handle(&off, now) {
            Answer::Now(r) => r,
            Answer::Later(_) => unreachable!("record=off answers at once"),
        };
        if reply.code != ReturnCode::Done {
            return Step::Now(translate(kw, &reply));
        }
        // As jive5ab: the finished recording becomes the current scan for scan_check? and disk2*.
        let r = self.rt_mut(rt);
        if let Some(name) = r.session.last().cloned() {
            r.scan = Some(ScanSel {
                name,
                start: 0,
                end: 0,
            });
        }
        Step::WhenIdle(J5Reply::new(kw, false, ReturnCode::Initiated, vec![]))
    }

    /// `scan_set = [<n>|<search>|inc|dec] [: <start> [: <end>]] ;`, `scan_set? ;`.
    pub(super) fn scan_set(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        let r = self.rt_mut(rt);
        if st.query {
            let f = match &r.scan {
                Some(s) => vec![
                    r.session
                        .iter()
                        .position(|n| *n == s.name)
                        .map_or(-1, |i| i as i64)
                        .to_string(),
                    s.name.clone(),
                    s.start.to_string(),
                    s.end.to_string(),
                ],
                None => vec!["-1".into(), String::new(), "0".into(), "0".into()],
            };
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if let Some(reply) = in_progress(st, ctl) {
            return reply;
        }
        let err = |code, m: String| J5Reply::msg(kw, false, code, m);
        let which = st.arg(0);
        let current = r
            .scan
            .as_ref()
            .and_then(|s| r.session.iter().position(|n| *n == s.name));
        let name = match which {
            "" => match r.session.last() {
                Some(n) => n.clone(),
                None => {
                    return err(
                        ReturnCode::Conflict,
                        "there are no scans recorded in this session".into(),
                    )
                }
            },
            "inc" | "dec" => {
                let Some(i) = current else {
                    return err(
                        ReturnCode::Conflict,
                        format!("there is no recorded scan to {which}rement from"),
                    );
                };
                let j = if which == "inc" {
                    (i + 1) % r.session.len()
                } else {
                    (i + r.session.len() - 1) % r.session.len()
                };
                r.session[j].clone()
            }
            n if n.parse::<usize>().is_ok() => {
                let i = n.parse::<usize>().unwrap_or(0);
                match r.session.get(i.wrapping_sub(1)) {
                    Some(s) => s.clone(),
                    None => {
                        return err(
                            ReturnCode::Parameter,
                            format!("scan {i} is not in this session's 1..{}", r.session.len()),
                        )
                    }
                }
            }
            search => {
                let lower = search.to_ascii_lowercase();
                match r
                    .session
                    .iter()
                    .rev()
                    .find(|n| n.to_ascii_lowercase().contains(&lower))
                {
                    Some(n) => n.clone(),
                    // As jive5ab: no session scan matches, so the string is a recording's name.
                    None => search.to_owned(),
                }
            }
        };
        let on_disks = ctl.scans_on_open_disks();
        let Some(entry) = on_disks.iter().find(|s| s.name == name) else {
            return err(
                ReturnCode::Error,
                format!("no recording '{name}' on the selected disks"),
            );
        };
        let total = entry.meta.as_ref().map_or(0, |m| m.totals().bytes);
        let start = match st.arg(1) {
            "" | "s" => 0,
            "s+" => 65536.min(total),
            "c" => total / 2,
            "e" => total.saturating_sub(1_000_000),
            b => match b.parse::<u64>() {
                Ok(v) => v,
                Err(_) => {
                    return err(
                        ReturnCode::Parameter,
                        format!("start '{b}' is not s, s+, c, e or a byte number"),
                    )
                }
            },
        };
        // Without an end, the end of the recording (jive5ab `scan_set_vbs.cc`: `fpEnd( vbsrec->length() )`).
        let end = match st.arg(2) {
            "" => total,
            e => match e.strip_prefix('+').unwrap_or(e).parse::<u64>() {
                Ok(v) if e.starts_with('+') => start.saturating_add(v),
                Ok(v) => v,
                Err(_) => {
                    return err(
                        ReturnCode::Parameter,
                        format!("end '{e}' is not a byte number or +<bytes>"),
                    )
                }
            },
        };
        if start > total || (end != 0 && (end < start || end > total)) {
            return err(
                ReturnCode::Parameter,
                "scan pointer offset(s) are out of bound".into(),
            );
        }
        r.scan = Some(ScanSel { name, start, end });
        J5Reply::new(kw, false, ReturnCode::Done, vec![])
    }

    /// `scan_check? [<strict>] : [<bytes>] ;`: the format, tracks, start, duration, track rate and missing
    /// bytes of the current scan, from the recording's metadata (jive5ab reads the data for them).
    pub(super) fn scan_check(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> J5Reply {
        let kw = &st.keyword;
        let r = self.rt_mut(rt);
        let err = |code, m: String| J5Reply::msg(kw, true, code, m);
        if st.arg(0) == "verbose" {
            return J5Reply::new(kw, true, ReturnCode::Done, vec!["verbose".into(), "false".into()]);
        }
        let Some(sel) = &r.scan else {
            return err(ReturnCode::Parameter, "no scan name given".into());
        };
        if ctl.state_name() != "off" && r.session.last() == Some(&sel.name) {
            return err(
                ReturnCode::Conflict,
                format!("not whilst {} is being recorded", sel.name),
            );
        }
        let on_disks = ctl.scans_on_open_disks();
        let Some(entry) = on_disks.iter().find(|s| s.name == sel.name) else {
            return err(
                ReturnCode::Error,
                format!("no recording '{}' on the selected disks", sel.name),
            );
        };
        match scan_check_fields(entry, r) {
            Ok(f) => J5Reply::new(kw, true, ReturnCode::Done, f),
            Err((code, m)) => err(code, m),
        }
    }
}

/// The controller's (Mark6) refusal as jive5ab would give it.
fn translate(kw: &str, r: &Reply) -> J5Reply {
    let code = match r.code {
        ReturnCode::Done => ReturnCode::Done,
        ReturnCode::Initiated => ReturnCode::Initiated,
        ReturnCode::Busy => ReturnCode::Busy,
        ReturnCode::Parameter => ReturnCode::Parameter,
        ReturnCode::Failed | ReturnCode::Error => ReturnCode::Error,
        ReturnCode::NotNow | ReturnCode::Conflict => ReturnCode::Conflict,
        ReturnCode::NoSuchKeyword => ReturnCode::NoSuchKeyword,
    };
    J5Reply::msg(kw, false, code, r.fields.join(" "))
}

/// The controller's input streams for a runtime's mode, protocol, ports and MTU.
fn streams_for(r: &Runtime) -> Result<Vec<InputStream>, String> {
    let Some(mode) = &r.mode else {
        return Err("vbsrecord can only record a known data format (mode = ...)".into());
    };
    let Some(psn) = r.protocol.psn() else {
        return Err(format!(
            "vlbiflow records UDP (net_protocol = udpsnor, udps or pudp), not {}",
            r.protocol.name()
        ));
    };
    let frame = mode.frame_size();
    let need = frame + IP_UDP_OVERHEAD + if psn { 8 } else { 0 };
    if need > r.mtu {
        return Err(format!(
            "a {frame}-byte frame needs {need}-byte datagrams but mtu = {}: vlbiflow takes one frame per datagram (mtu = 9000)",
            r.mtu
        ));
    }
    let kind = match mode.format {
        Format::Vdif { .. } => FrameKind::Vdif,
        Format::Mark5b => FrameKind::M5b,
    };
    Ok(r.ports
        .iter()
        .map(|p| InputStream {
            label: p.suffix.clone().unwrap_or_else(|| format!("port{}", p.port)),
            kind,
            payload_size: frame,
            payload_offset: UDP_HEADER_OFFSET + if psn { 8 } else { 0 },
            psn_offset: if psn { UDP_HEADER_OFFSET } else { 0 },
            interface: "-".into(),
            address: SocketAddr::new(p.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), p.port),
            slot: String::new(),
            threads: Vec::new(),
            frame_rate: None,
            from: Default::default(),
        })
        .collect())
}

/// jive5ab's unique recording names: a name already on the disks gets the first free letter of
/// `a`..`z`, `A`..`Z` appended.
fn unique_name(scan: &str, scans: &[ScanEntry], check: bool) -> Result<(String, bool), String> {
    let taken = |n: &str| scans.iter().any(|s| s.name == n);
    if !check || !taken(scan) {
        return Ok((scan.to_owned(), false));
    }
    ('a'..='z')
        .chain('A'..='Z')
        .map(|c| format!("{scan}{c}"))
        .find(|n| !taken(n))
        .map(|n| (n, true))
        .ok_or_else(|| "more than 52 recordings with the same scan name is not possible".into())
}

/// Unix seconds as jive5ab's VEX time with four decimals, e.g. `2026y060d12h00m00.0000s`.
fn vex4(t: f64) -> String {
    let whole = t.floor();
    let base = vlbiflow_formats::vex_time::format(whole as i64);
    let minute = &base[..base.len().saturating_sub(3)];
    let sec = (whole as i64).rem_euclid(60) as f64 + (t - whole);
    format!("{minute}{sec:07.4}s")
}

/// `scan_check?`'s fields after the return code: `? : <scan> : <format> : <ntrack> : <start> :
/// <duration>s : <track Mb/s>Mbps : <missing bytes> [: <VDIF frame size>]`.
fn scan_check_fields(entry: &ScanEntry, r: &Runtime) -> Result<Vec<String>, (ReturnCode, String)> {
    let Some(m) = &entry.meta else {
        return Err((
            ReturnCode::Error,
            format!(
                "{}: {}",
                entry.name,
                entry.error.as_deref().unwrap_or("metadata unreadable")
            ),
        ));
    };
    let Some(s) = m.streams.iter().find(|s| s.counters.packets > 0) else {
        return Err((
            ReturnCode::Conflict,
            "scan too short to check, need 1000000bytes have 0".into(),
        ));
    };
    let mode = r.mode.as_ref().filter(|md| {
        md.frame_size() == s.frame_size
            && matches!(
                (md.format, s.kind),
                (Format::Mark5b, FrameKind::M5b) | (Format::Vdif { .. }, FrameKind::Vdif)
            )
    });
    let vdif = s.kind == FrameKind::Vdif;
    let format = match (mode, vdif) {
        (Some(md), _) => md.format_name(),
        (None, true) => "VDIF",
        (None, false) => "Mark5B",
    };
    let threads = s.threads.len().max(1) as u32;
    let ntrack = mode.map_or("?".to_owned(), |md| {
        (md.ntrack() * if vdif { threads } else { 1 }).to_string()
    });
    let first = s.first_frame_utc.as_deref().and_then(UtcTime::parse_iso8601);
    let last = s.last_frame_utc.as_deref().and_then(UtcTime::parse_iso8601);
    let start = first.map_or("?".to_owned(), vex4);
    // The duration is jive5ab's: the last frame's time stamp minus the first's (`src/scan_check.cc`,
    // `end_time - start_time`; without the rate, whole seconds and `.****`).
    let (duration, rate) = match (first, last, mode) {
        (Some(a), Some(b), Some(md)) if b >= a => (
            format!("{}s", fmt_g(b - a)),
            format!("{}Mbps", fmt_g(md.track_rate() / 1e6)),
        ),
        (Some(a), Some(b), None) if b >= a => {
            (format!("{}.****s", (b.floor() - a.floor()) as i64), "?".into())
        }
        _ => ("0.****s".into(), "?".into()),
    };
    let missing = (s.counters.lost * u64::from(s.frame_size)).to_string();
    let mut f = vec![
        "?".into(),
        entry.name.clone(),
        format.into(),
        ntrack,
        start,
        duration,
        rate,
        missing,
    ];
    if vdif {
        f.push(s.frame_size.to_string());
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vex_time_with_decimals() {
        // 2026-03-01T12:00:00Z
        assert_eq!(vex4(1_772_366_400.25), "2026y060d12h00m00.2500s");
        assert_eq!(vex4(1_772_366_459.5), "2026y060d12h00m59.5000s");
    }

    #[test]
    fn names_get_jive5abs_suffix_letters() {
        let e = |n: &str| ScanEntry {
            name: n.into(),
            meta: None,
            error: None,
        };
        let scans = vec![e("a"), e("aa"), e("b")];
        assert_eq!(unique_name("c", &scans, true).unwrap(), ("c".into(), false));
        assert_eq!(unique_name("a", &scans, true).unwrap(), ("ab".into(), true));
        assert_eq!(unique_name("a", &scans, false).unwrap(), ("a".into(), false));
        let full: Vec<ScanEntry> = std::iter::once(e("x"))
            .chain(('a'..='z').chain('A'..='Z').map(|c| e(&format!("x{c}"))))
            .collect();
        assert!(unique_name("x", &full, true).unwrap_err().contains("52"));
    }
}
