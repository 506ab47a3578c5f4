//! Queries that describe the machine and the transfer: `status?`, `error?`, `dts_id?`, `version?`,
//! `os_rev?`, `rtime?`, `evlbi?`, `dir_info?` (jive5ab 3.1.0 `src/mk5command/status.cc`, `error.cc`,
//! `dtsid.cc`, `os_rev.cc`, `rtime_vbs.cc`, `evlbi.cc`, `dirinfo_vbs.cc`), in jive5ab's field layout.

use vlbiflow_formats::time::UtcTime;

use crate::controller::{Answer, Controller};
use crate::proto::{ReturnCode, Statement};

use super::reply::J5Reply;
use super::setup::mbps_text;
use super::{fmt_g, Jive5ab};

/// `status?` bits on a FlexBuff: ready, error pending, delayed completion (two bits), recording.
const READY: u32 = 1;
const ERROR_PENDING: u32 = 1 << 1;
const DELAYED: u32 = (1 << 3) | (1 << 4);
const RECORDING: u32 = 1 << 6;
const DISK2FILE: u32 = 1 << 12;
const DISK2NET: u32 = 1 << 14;

fn vex_now(t: UtcTime) -> String {
    vlbiflow_formats::vex_time::format(t.unix_seconds)
}

impl Jive5ab {
    /// `status? ;`: `0x<8 hex digits>`, and the oldest queued error (number, message, time) if any.
    pub(super) fn status(&self, ctl: &Controller) -> J5Reply {
        let mut word = READY;
        if !self.errors.is_empty() {
            word |= ERROR_PENDING;
        }
        if ctl.state_name() != "off" {
            word |= DELAYED | RECORDING;
        }
        if self.disk2file_running() {
            word |= DELAYED | DISK2FILE;
        }
        if self.disk2net_running() {
            word |= DELAYED | DISK2NET;
        }
        let mut f = vec![format!("0x{word:08x}")];
        if let Some(e) = self.errors.front() {
            f.extend([e.number.to_string(), e.message.clone(), vex_now(e.first)]);
        }
        J5Reply::new("status", true, ReturnCode::Done, f)
    }

    /// `error? ;`: pops the oldest queued error: number, message, time, and for repeats the last time
    /// and the count; five empty fields when none is queued.
    pub(super) fn error(&mut self) -> J5Reply {
        let f = match self.errors.pop_front() {
            Some(e) => {
                let repeated = e.occurrences > 1;
                vec![
                    e.number.to_string(),
                    e.message,
                    vex_now(e.first),
                    if repeated { vex_now(e.last) } else { String::new() },
                    if repeated {
                        e.occurrences.to_string()
                    } else {
                        String::new()
                    },
                ]
            }
            None => vec![String::new(); 5],
        };
        J5Reply::new("error", true, ReturnCode::Done, f)
    }

    /// `dts_id? ;`: system type (`-`, no Mark5 hardware, as a FlexBuff), software, media (1 disk),
    /// serial (host name), DIMs, DOMs, command set revision, I/O board ids.
    pub(super) fn dts_id(&self) -> J5Reply {
        let serial = self.id.host.split('.').next().unwrap_or("").to_owned();
        let f = vec![
            "-".into(),
            format!("vlbiflow-{}", env!("CARGO_PKG_VERSION")),
            "1".into(),
            serial,
            "0".into(),
            "0".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ];
        J5Reply::new("dts_id", true, ReturnCode::Done, f)
    }

    /// `os_rev? ;`: the first line of /proc/version.
    pub(super) fn os_rev(&self) -> J5Reply {
        match &self.id.os_rev {
            Some(v) => J5Reply::new("os_rev", true, ReturnCode::Done, vec![v.clone()]),
            None => J5Reply::msg("os_rev", true, ReturnCode::Error, "failed to open /proc/version"),
        }
    }

    /// `rtime? ;`: seconds left at the mode's rate (headers included), GB and percent free, format,
    /// tracks, 0MHz, total Mb/s.
    pub(super) fn rtime(&mut self, rt: &str, ctl: &Controller) -> J5Reply {
        let (disks, free, total) = ctl.open_disks();
        if disks.is_empty() || total == 0 {
            return J5Reply::msg(
                "rtime",
                true,
                ReturnCode::Conflict,
                "no disks selected (set_disks = ...)",
            );
        }
        let gb = format!("{}GB", fmt_g(free as f64 / 1e9));
        let pct = format!("{}%", fmt_g(free as f64 * 100.0 / total as f64));
        let f = match &self.rt_mut(rt).mode {
            Some(m) => {
                let data = if matches!(m.format, super::mode::Format::Mark5b) {
                    10_000
                } else {
                    m.payload
                };
                let bps = m.mbps * 1e6 * f64::from(m.frame_size()) / f64::from(data);
                vec![
                    format!("{}s", fmt_g(free as f64 * 8.0 / bps)),
                    gb,
                    pct,
                    m.format_name().into(),
                    m.ntrack().to_string(),
                    "0MHz".into(),
                    mbps_text(bps / 1e6),
                ]
            }
            None => vec![
                "<unkown> (no mode set yet)".into(),
                gb,
                pct,
                "<unknown>".into(),
                "0".into(),
                "0".into(),
                "<unknown> Mbps".into(),
            ],
        };
        J5Reply::new("rtime", true, ReturnCode::Done, f)
    }
}

/// `evlbi? ;`: packet statistics of the recording on (or the last one), in jive5ab's default format
/// `total : %t : loss : %l (%L) : out-of-order : %o (%O) : extent : %R`.
pub(super) fn evlbi(st: &Statement, ctl: &mut Controller, now: UtcTime) -> J5Reply {
    if !st.query {
        return J5Reply::msg(
            "evlbi",
            false,
            ReturnCode::NotNow,
            "custom statistics formats are not implemented",
        );
    }
    let q = Statement {
        keyword: "evlbi".into(),
        query: true,
        args: Vec::new(),
    };
    let Answer::Now(r) = ctl.handle(&q, now) else {
        return J5Reply::msg("evlbi", true, ReturnCode::Error, "no statistics");
    };
    // The Mark6 reply: total : <n> : loss : <n> (<p>%) : out-of-order : <n> (<p>%) : extent : ...
    let total: u64 = r.fields.get(1).and_then(|t| t.parse().ok()).unwrap_or(0);
    let count = |i: usize| -> u64 {
        r.fields
            .get(i)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    };
    let pct = |n: u64| {
        if total > 0 {
            100.0 * n as f64 / total as f64
        } else {
            0.0
        }
    };
    let (lost, ooo) = (count(3), count(5));
    J5Reply::new(
        "evlbi",
        true,
        ReturnCode::Done,
        vec![
            "total".into(),
            total.to_string(),
            "loss".into(),
            format!("{lost} ({:5.2}%)", pct(lost)),
            "out-of-order".into(),
            format!("{ooo} ({:5.2}%)", pct(ooo)),
            "extent".into(),
            "0seqnr/pkt".into(),
        ],
    )
}

/// `dir_info? ;`: `? : <bytes used> : <bytes total>` over the selected disks.
pub(super) fn dir_info(ctl: &Controller) -> J5Reply {
    let (_, free, total) = ctl.open_disks();
    J5Reply::new(
        "dir_info",
        true,
        ReturnCode::Done,
        vec![
            "?".into(),
            total.saturating_sub(free).to_string(),
            total.to_string(),
        ],
    )
}

/// `version? ;`: jive5ab's layout (program, version, word size, build, host, date, time, StreamStor
/// API, etransfer) with vlbiflow's values.
pub(super) fn version() -> J5Reply {
    J5Reply::new(
        "version",
        true,
        ReturnCode::Done,
        vec![
            "vlbiflow".into(),
            env!("CARGO_PKG_VERSION").into(),
            format!("{}bit", usize::BITS),
            if cfg!(debug_assertions) {
                "Debug"
            } else {
                "Release"
            }
            .into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "nossapi".into(),
            String::new(),
        ],
    )
}
