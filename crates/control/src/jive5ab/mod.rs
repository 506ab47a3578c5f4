//! jive5ab's command dialect (the VSI-S / Mark5C command set with jive5ab's FlexBuff extensions), as the
//! NASA Field System and correlator operators send it to a FlexBuff running jive5ab 3.1.0. `vlbiflow
//! serve --dialect jive5ab` answers it on its command port instead of the Mark6 dialect.
//!
//! Sans-IO, like the Mark6 side: [`parse`] frames and parses requests, [`reply`] formats replies,
//! [`Jive5ab`] holds the dialect's settings (per jive5ab "runtime") and maps each statement onto the
//! daemon's [`Controller`]: `mode`, `net_protocol` and `net_port` become the controller's input streams,
//! `set_disks` its disk group, `record=on` its `record=on`. Slow work comes back as a [`Step`] for the
//! daemon to finish outside the controller's lock. `docs/jive5ab-dialect.md` lists every keyword.

pub mod daemon;
pub mod datastream;
pub mod disk2net;
mod info;
pub mod mode;
pub mod net2file;
pub mod parse;
mod record;
pub mod reply;
pub mod session;
mod setup;
pub mod transfer;

use std::collections::{BTreeMap, VecDeque};

use vlbiflow_formats::time::UtcTime;

use crate::controller::{Controller, Ticket};
use crate::proto::{ReturnCode, Statement};
use info::{dir_info, evlbi, version};

pub use mode::{parse_mode, Mode};
pub use parse::{parse_request, Item, Request, RequestFramer};
pub use reply::{parse_j5_reply, J5Reply, ParsedJ5Reply};
pub use setup::{PortEntry, Protocol};

/// jive5ab's default command port.
pub const DEFAULT_PORT: u16 = 2620;
/// The runtime every connection starts in (and the only one that records in vlbiflow).
pub const DEFAULT_RUNTIME: &str = "default";
/// Most errors kept for `error?`.
const MAX_ERRORS: usize = 64;
/// Most runtimes.
const MAX_RUNTIMES: usize = 64;

/// What the daemon does with a statement's outcome.
#[derive(Debug)]
pub enum Step {
    /// Send this reply.
    Now(J5Reply),
    /// A `record=on` handed the controller a start ([`crate::controller::Action::Start`]): carry out the
    /// controller's actions, then pass the start's reply to [`Jive5ab::started`].
    Start(PendingStart),
    /// A `record=off`: carry out the controller's actions and send this reply once the controller is idle
    /// (the recording flushed), so that `scan_check?` right after sees the whole scan, as with jive5ab.
    WhenIdle(J5Reply),
    /// A `disk2file`: run the copy in the background ([`transfer::run_disk2file`]) and send the reply.
    Disk2File(transfer::Disk2FileJob, J5Reply),
    /// A `disk2net = connect`: run the transfer in the background ([`disk2net::run_disk2net`]) and send
    /// the reply.
    Disk2Net(disk2net::Disk2NetJob, J5Reply),
    /// A `net2file = open`: open the file and the data port ([`net2file::open_net2file`]), reply
    /// `0 : <file size>` (or the error), then run the transfer in the background
    /// ([`net2file::run_net2file`]).
    Net2File(net2file::Net2FileJob),
}

/// A `record=on` waiting for its start's outcome.
#[derive(Debug, Clone)]
pub struct PendingStart {
    pub ticket: Ticket,
    /// The recording's name (with jive5ab's suffix letter if the name was taken).
    pub name: String,
    /// The name got a suffix: the reply names it.
    pub renamed: bool,
    /// The runtime that asked.
    pub runtime: String,
}

/// One connection's own state: the runtime it is in, `echo`, the runtimes it made `transient`.
#[derive(Debug, Clone)]
pub struct Conn {
    pub runtime: String,
    pub echo: bool,
    /// Runtimes this connection created with `runtime = <name> : transient`: deleted when it closes
    /// ([`Jive5ab::close`]), as jive5ab does.
    pub transient: Vec<String>,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            runtime: DEFAULT_RUNTIME.into(),
            echo: false,
            transient: Vec::new(),
        }
    }
}

/// A recording's byte range chosen by `scan_set` (or the last `record=off`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanSel {
    pub name: String,
    pub start: u64,
    /// 0: to the end.
    pub end: u64,
}

/// One jive5ab runtime's settings.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub mode: Option<Mode>,
    /// `mode = none` was given (rather than no mode at all).
    pub mode_none: bool,
    pub protocol: Protocol,
    pub sockbuf: u64,
    pub blocksize: u64,
    pub nbuf: u64,
    pub ports: Vec<PortEntry>,
    pub mtu: u32,
    pub readers: u32,
    pub writers: u32,
    /// Mark6 scatter-gather files rather than FlexBuff chunks.
    pub mk6: bool,
    pub unique_names: bool,
    pub scan: Option<ScanSel>,
    /// Recordings made in this runtime, oldest first (jive5ab's session list).
    pub session: Vec<String>,
    /// The last `disk2file` of this runtime.
    pub disk2file: Option<transfer::Disk2File>,
    /// The last `disk2net` of this runtime.
    pub disk2net: Option<disk2net::Disk2Net>,
    /// `ipd`: nanoseconds between the datagrams of a UDP `disk2net`; -1: from the mode; 0: unpaced.
    pub ipd_ns: i64,
    /// The delay `ipd = -1` gave the last UDP `disk2net` (`ipd?` shows it).
    pub theoretical_ipd_ns: i64,
    /// The last `net2file` of this runtime.
    pub net2file: Option<net2file::Net2File>,
    /// The host `disk2net = connect` last sent to.
    pub host: String,
    /// `datastream` definitions.
    pub datastreams: datastream::DataStreams,
}

impl Default for Runtime {
    /// jive5ab's start-up values (`src/netparms.h`, `src/runtime.cc`): tcp, port 2630, MTU 1500, 128 KiB
    /// blocks, 8 of them, 4 MiB socket buffers, one reader and one writer thread, FlexBuff format.
    fn default() -> Self {
        Runtime {
            mode: None,
            mode_none: false,
            protocol: Protocol::Tcp,
            sockbuf: 4 << 20,
            blocksize: 128 << 10,
            nbuf: 8,
            ports: vec![PortEntry::default()],
            mtu: 1500,
            readers: 1,
            writers: 1,
            mk6: false,
            unique_names: true,
            scan: None,
            session: Vec::new(),
            disk2file: None,
            disk2net: None,
            net2file: None,
            ipd_ns: 0,
            theoretical_ipd_ns: 0,
            host: String::new(),
            datastreams: datastream::DataStreams::default(),
        }
    }
}

/// A queued error (`error?` pops them, `status?` shows the oldest).
#[derive(Debug, Clone)]
struct ErrorEntry {
    number: i64,
    message: String,
    first: UtcTime,
    last: UtcTime,
    occurrences: u64,
}

/// Facts about the machine the identification queries report.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// Host name (`dts_id?` serial: up to the first dot).
    pub host: String,
    /// First line of /proc/version (`os_rev?`), if readable.
    pub os_rev: Option<String>,
}

/// The dialect's state, shared by all connections of a daemon.
#[derive(Debug)]
pub struct Jive5ab {
    runtimes: BTreeMap<String, Runtime>,
    errors: VecDeque<ErrorEntry>,
    /// The controller's last error already queued.
    seen_error: Option<String>,
    id: Identity,
}

/// Query-only keywords (a command form answers 2, as jive5ab does).
const QUERY_ONLY: &[&str] = &[
    "dts_id",
    "version",
    "os_rev",
    "status",
    "error",
    "rtime",
    "scan_check",
    "dir_info",
    "transfermode",
];

/// Keywords of jive5ab's FlexBuff command map that vlbiflow does not implement: 2 (a FlexBuff jive5ab
/// has them; every other keyword, the Mark5 hardware ones included, answers 7 as on a FlexBuff).
const NOT_IMPLEMENTED: &[&str] = &[
    "ack",
    "bufsize",
    "clock_set",
    "constraints",
    "dbglev",
    "disk2etransfer",
    "file2check",
    "file2mem",
    "file2net",
    "file_check",
    "fill2file",
    "fill2net",
    "fill2vbs",
    "group_def",
    "itcp_id",
    "mem2file",
    "mem2net",
    "mem2sfxc",
    "mem2time",
    "mem2vbs",
    "memstat",
    "net2check",
    "net2mem",
    "net2sfxc",
    "net2sfxcfork",
    "net2vbs",
    "play_rate",
    "spbs2file",
    "spbs2net",
    "spif2file",
    "spif2net",
    "spill2file",
    "spill2net",
    "splet2file",
    "splet2net",
    "task_id",
    "trackmask",
    "tstat",
    "vbs2net",
];

impl Jive5ab {
    /// The dialect's state at start-up: one runtime, `default`, with jive5ab's start-up values.
    pub fn new(id: Identity) -> Self {
        let mut runtimes = BTreeMap::new();
        runtimes.insert(DEFAULT_RUNTIME.to_owned(), Runtime::default());
        Jive5ab {
            runtimes,
            errors: VecDeque::new(),
            seen_error: None,
            id,
        }
    }

    /// A runtime's settings (`default` always exists).
    pub fn runtime(&self, name: &str) -> Option<&Runtime> {
        self.runtimes.get(name)
    }

    fn rt_mut(&mut self, name: &str) -> &mut Runtime {
        self.runtimes.entry(name.to_owned()).or_default()
    }

    /// Queues an error for `error?` / `status?` (repeats of the newest one are counted, as jive5ab does).
    pub fn push_error(&mut self, number: i64, message: String, now: UtcTime) {
        if let Some(e) = self.errors.back_mut() {
            if e.number == number && e.message == message {
                e.last = now;
                e.occurrences += 1;
                return;
            }
        }
        if self.errors.len() == MAX_ERRORS {
            self.errors.pop_front();
        }
        self.errors.push_back(ErrorEntry {
            number,
            message,
            first: now,
            last: now,
            occurrences: 1,
        });
    }

    /// Queues the controller's last error if it is new (a recording that failed or ended in error).
    fn collect_errors(&mut self, ctl: &Controller, now: UtcTime) {
        let e = ctl.last_error().map(str::to_owned);
        if e != self.seen_error {
            if let Some(msg) = &e {
                self.push_error(-1, msg.clone(), now);
            }
            self.seen_error = e;
        }
    }

    /// Executes one statement of connection `conn` against `ctl` at `now`.
    pub fn handle(&mut self, conn: &mut Conn, st: &Statement, ctl: &mut Controller, now: UtcTime) -> Step {
        self.collect_errors(ctl, now);
        if !self.runtimes.contains_key(&conn.runtime) {
            // Another connection deleted it.
            let msg = format!("current runtime ('{}') has been deleted", conn.runtime);
            return Step::Now(J5Reply::msg(&st.keyword, st.query, ReturnCode::Error, msg));
        }
        let kw = st.keyword.as_str();
        let q = st.query;
        let reply = |code, msg: &str| Step::Now(J5Reply::msg(kw, q, code, msg));
        if !q && QUERY_ONLY.contains(&kw) {
            return reply(ReturnCode::NotNow, "only available as query");
        }
        let rt = conn.runtime.clone();
        let now_reply = match kw {
            "record" if !st.query && st.arg(0) == "on" && self.disk2file_running() => J5Reply::msg(
                kw,
                false,
                ReturnCode::Conflict,
                "not whilst disk2file is in progress",
            ),
            "record" if !st.query && st.arg(0) == "on" && self.disk2net_running() => J5Reply::msg(
                kw,
                false,
                ReturnCode::Conflict,
                "not whilst disk2net is in progress",
            ),
            "record" if !st.query && st.arg(0) == "on" && self.net2file_running() => J5Reply::msg(
                kw,
                false,
                ReturnCode::Conflict,
                "not whilst net2file is in progress",
            ),
            "record" => return self.record(&rt, st, ctl, now),
            "net2file" => return self.net2file(&rt, st, ctl),
            "disk2net" => return self.disk2net(&rt, st, ctl),
            "disk2file" => return self.disk2file(&rt, st, ctl),
            "runtime" => self.runtime_cmd(conn, st),
            "echo" => echo(conn, st),
            "mode" => self.mode(&rt, st, ctl),
            "net_protocol" => self.net_protocol(&rt, st, ctl),
            "net_port" => self.net_port(&rt, st, ctl),
            "mtu" => self.mtu(&rt, st, ctl),
            "ipd" => self.ipd(&rt, st),
            "datastream" => {
                let busy = setup::in_progress(st, ctl);
                datastream::datastream(&mut self.rt_mut(&rt).datastreams, st, busy)
            }
            "set_disks" => self.set_disks(&rt, st, ctl),
            "scan_set" => self.scan_set(&rt, st, ctl),
            "scan_check" => self.scan_check(&rt, st, ctl),
            "status" => self.status(ctl),
            "error" => self.error(),
            "dts_id" => self.dts_id(),
            "version" => version(),
            "os_rev" => self.os_rev(),
            "rtime" => self.rtime(&rt, ctl),
            "evlbi" => evlbi(st, ctl, now),
            "dir_info" => dir_info(ctl),
            "transfermode" => J5Reply::new(kw, q, ReturnCode::Done, vec![transfermode(ctl).into()]),
            "reset" if !q && st.arg(0) == "abort" && self.abort_disk2file(&rt) => {
                J5Reply::new(kw, false, ReturnCode::Done, vec![])
            }
            "reset" => reset(st, ctl),
            _ if NOT_IMPLEMENTED.contains(&kw) => J5Reply::msg(
                kw,
                q,
                ReturnCode::NotNow,
                "not implemented by vlbiflow's jive5ab dialect",
            ),
            _ => J5Reply::msg(kw, q, ReturnCode::NoSuchKeyword, "ENOSYS - not implemented"),
        };
        Step::Now(now_reply)
    }

    /// A connection closed: its `transient` runtimes are deleted (jive5ab `src/test.cc`). A transfer
    /// still running in one is stopped.
    pub fn close(&mut self, conn: &Conn) {
        for name in &conn.transient {
            if let Some(r) = self.runtimes.remove(name) {
                if let Some(d) = r.disk2net.filter(disk2net::Disk2Net::active) {
                    d.stop();
                }
                if let Some(d) = r.disk2file.filter(transfer::Disk2File::active) {
                    d.progress.abort.store(true, std::sync::atomic::Ordering::Release);
                }
                if let Some(n) = r.net2file.filter(net2file::Net2File::active) {
                    n.stop();
                }
            }
        }
    }

    /// `runtime? ;`, `runtime = <name> [: new|exists|transient|delete] ;` (jive5ab `src/test.cc`).
    fn runtime_cmd(&mut self, conn: &mut Conn, st: &Statement) -> J5Reply {
        let kw = &st.keyword;
        if st.query {
            let mut f = vec![conn.runtime.clone(), self.runtimes.len().to_string()];
            f.extend(self.runtimes.keys().filter(|k| **k != conn.runtime).cloned());
            return J5Reply::new(kw, true, ReturnCode::Done, f);
        }
        if st.args.is_empty() || st.args.len() > 2 {
            return J5Reply::msg(kw, false, ReturnCode::Parameter, "expects one or two parameters");
        }
        let name = match st.arg(0) {
            "0" => DEFAULT_RUNTIME.to_owned(),
            "" => return J5Reply::msg(kw, false, ReturnCode::Error, "cannot create runtime with no name"),
            n => n.to_owned(),
        };
        if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return J5Reply::msg(
                kw,
                false,
                ReturnCode::Parameter,
                "runtime names are up to 64 printable characters",
            );
        }
        let exists = self.runtimes.contains_key(&name);
        let err = |code, msg: String| J5Reply::msg(kw, false, code, msg);
        match st.arg(1) {
            "" => {}
            "new" | "transient" if exists => {
                return err(ReturnCode::Conflict, format!("'{name}' already exists"))
            }
            "new" => {}
            "transient" => conn.transient.push(name.clone()),
            "exists" if !exists => return err(ReturnCode::Conflict, format!("'{name}' doesn't exist")),
            "exists" => return J5Reply::new(kw, false, ReturnCode::Done, vec![name]),
            "delete" => {
                if name == DEFAULT_RUNTIME {
                    return err(ReturnCode::Conflict, "cannot delete the default runtime".into());
                }
                if self.runtimes.remove(&name).is_none() {
                    return err(ReturnCode::Conflict, format!("no active runtime '{name}'"));
                }
                if conn.runtime == name {
                    conn.runtime = DEFAULT_RUNTIME.into();
                }
                return J5Reply::new(kw, false, ReturnCode::Done, vec![name]);
            }
            other => {
                return err(
                    ReturnCode::Parameter,
                    format!("'{other}' is not new, exists, transient or delete"),
                )
            }
        }
        if !exists && self.runtimes.len() >= MAX_RUNTIMES {
            return err(ReturnCode::Conflict, format!("at most {MAX_RUNTIMES} runtimes"));
        }
        self.rt_mut(&name);
        conn.runtime = name.clone();
        J5Reply::new(kw, false, ReturnCode::Done, vec![name])
    }
}

fn echo(conn: &mut Conn, st: &Statement) -> J5Reply {
    let kw = &st.keyword;
    if st.query {
        let v = if conn.echo { "on" } else { "off" };
        return J5Reply::new(kw, true, ReturnCode::Done, vec![v.into()]);
    }
    match (st.args.len(), st.arg(0)) {
        (1, "on") => conn.echo = true,
        (1, "off") => conn.echo = false,
        _ => {
            return J5Reply::msg(
                kw,
                false,
                ReturnCode::Parameter,
                "expects exactly one parameter 'on' or 'off'",
            )
        }
    }
    J5Reply::new(kw, false, ReturnCode::Done, vec![])
}

/// jive5ab's transfer mode name for the controller's state.
fn transfermode(ctl: &Controller) -> &'static str {
    match ctl.state_name() {
        "off" => "no_transfer",
        _ => "vbsrecord",
    }
}

/// `reset = abort ;` with no `disk2file`/`disk2net` running (those are stopped before this is reached).
fn reset(st: &Statement, ctl: &Controller) -> J5Reply {
    let kw = &st.keyword;
    if st.query {
        return J5Reply::msg(kw, true, ReturnCode::NotNow, "only available as command");
    }
    match st.arg(0) {
        "abort" if ctl.state_name() != "off" => J5Reply::msg(
            kw,
            false,
            ReturnCode::Conflict,
            "not whilst vbsrecord is in progress (record=off stops a recording)",
        ),
        "abort" => J5Reply::msg(kw, false, ReturnCode::Conflict, "nothing running to abort"),
        other => J5Reply::msg(
            kw,
            false,
            ReturnCode::Conflict,
            format!("{other} does not apply to reset for FlexBuff/Mark6"),
        ),
    }
}

/// A number as C++'s `ostream << double` prints it (`%g`, six significant digits), as jive5ab's replies
/// show durations, rates and sizes.
pub fn fmt_g(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.5e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mant), exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim(&format!("{x:.decimals$}"))
    }
}

#[cfg(test)]
mod tests;
