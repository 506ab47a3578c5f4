//! `disk2net` (jive5ab 3.1.0 `src/mk5command/disk2net_vbs.cc`): the `scan_set` range of a recording sent
//! to the network in three steps, as jive5ab's operators (and `m5copy`) drive it:
//!
//! - `disk2net = connect : [<host>] ;` opens the connection to `<host>` (or the last one) at the
//!   runtime's first `net_port`, over the runtime's `net_protocol`: `tcp` (a byte stream) or `udps`/
//!   `udpsnor`/`udp` (one frame per datagram behind an 8-byte sequence number, jive5ab's udps framing) or
//!   `pudp` (plain datagrams). `1`: the connection completes in the background.
//! - `disk2net = on [: [+]<start> [: <end>|+<len>]] ;` starts the data (`0`), by default the `scan_set`
//!   range; `+<start>` is relative to it.
//! - `disk2net = disconnect ;` stops it (`1`).
//! - `disk2net? ;` → `<inactive|connected|active> : <host> : <start> : <current> : <end>` while a transfer
//!   is set up, `inactive` once it has ended.
//!
//! The bytes are the recording's frames in block order (as `vlbiflow gather` writes them, as in
//! `disk2file`). Sans-IO here: the command hands the daemon a [`Disk2NetJob`] to run
//! ([`run_disk2net`], blocking) and keeps its shared state for `on`, `disconnect` and the queries.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vlbiflow_evlbi::output::{Output, OutputSpec};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_udp::pace::{Pacer, Wait};

use crate::controller::Controller;
use crate::proto::{ReturnCode, Statement};

use super::reply::J5Reply;
use super::setup::{in_progress, theoretical_ipd_ns, Protocol, DEFAULT_DATA_PORT};
use super::transfer::{Progress, RangeWriter, ABORTED, STOP};
use super::{Jive5ab, Step};

/// How long `connect` tries to reach the destination.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a transfer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Opening the connection.
    Connecting,
    /// Connected, waiting for `on`.
    Connected,
    /// Sending.
    Running,
    /// Ended (sent its range, was disconnected, or failed).
    Ended,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    start: u64,
    /// 0: to the end of the recording.
    end: u64,
}

/// A transfer's state, shared by the commands and the job.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Bytes of the range sent so far (`written`), and the stop flag (`abort`).
    progress: Arc<Progress>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transfer's phase.
    pub fn phase(&self) -> Phase {
        self.lock().phase
    }

    fn stopped(&self) -> bool {
        self.progress.abort.load(Ordering::Acquire)
    }

    fn stop(&self) {
        let guard = self.lock();
        self.progress.abort.store(true, Ordering::Release);
        drop(guard);
        self.wake.notify_all();
    }

    fn set_phase(&self, phase: Phase) {
        let mut s = self.lock();
        if s.phase != Phase::Ended {
            s.phase = phase;
        }
        drop(s);
        self.wake.notify_all();
    }
}

/// One `disk2net` as the runtime remembers it.
#[derive(Debug, Clone)]
pub struct Disk2Net {
    pub scan: String,
    pub host: String,
    pub shared: Arc<Shared>,
}

impl Disk2Net {
    /// Set up and not yet ended (jive5ab's transfer mode is `disk2net`).
    pub fn active(&self) -> bool {
        self.shared.phase() != Phase::Ended
    }

    /// Stops it (`disconnect`, or its runtime went away).
    pub fn stop(&self) {
        self.shared.stop();
    }
}

/// A transfer for the daemon to run.
#[derive(Debug, Clone)]
pub struct Disk2NetJob {
    pub scan: String,
    pub dest: String,
    /// UDP with (`Some(true)`) or without (`Some(false)`) sequence numbers; `None`: TCP.
    pub udp_psn: Option<bool>,
    /// Where the recording's files are.
    pub disks: Vec<PathBuf>,
    /// UDP only: the time between datagrams (`ipd`); zero: as fast as they go.
    pub ipd: Duration,
    pub shared: Arc<Shared>,
}

/// Parses `[+]<n>` (`Ok(None)` when empty); jive5ab takes decimal, `0x` hex and octal (`strtoull(.., 0)`).
fn byte_number(a: &str, what: &str) -> Result<Option<(bool, u64)>, String> {
    if a.is_empty() {
        return Ok(None);
    }
    if a.starts_with('-') {
        return Err(format!("relative {what} byte number not allowed here"));
    }
    let (rel, digits) = match a.strip_prefix('+') {
        Some(d) => (true, d),
        None => (false, a),
    };
    let v = if let Some(h) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse()
    };
    v.map(|v| Some((rel, v)))
        .map_err(|_| format!("failed to parse {what} byte number"))
}

impl Jive5ab {
    /// `disk2net = connect : [<host>] | on [: ...] | disconnect ;`, `disk2net? ;`.
    pub(super) fn disk2net(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> Step {
        let kw = st.keyword.as_str();
        let now = |code, f: Vec<String>| Step::Now(J5Reply::new(kw, st.query, code, f));
        let msg = |code, m: &str| Step::Now(J5Reply::msg(kw, false, code, m));
        let r = self.rt_mut(rt);
        let current = r.disk2net.clone().filter(Disk2Net::active);
        if st.query {
            let f = match &current {
                Some(d) => {
                    let s = d.shared.lock();
                    let status = match s.phase {
                        Phase::Running => "active",
                        Phase::Connected => "connected",
                        _ => "inactive",
                    };
                    let sent = d.shared.progress.written.load(Ordering::Acquire);
                    vec![
                        status.into(),
                        d.host.clone(),
                        s.start.to_string(),
                        (s.start + sent).to_string(),
                        s.end.to_string(),
                    ]
                }
                None => vec!["inactive".into()],
            };
            return now(ReturnCode::Done, f);
        }
        match st.arg(0) {
            "" => msg(
                ReturnCode::Parameter,
                "command w/o actual commands and/or arguments...",
            ),
            "connect" => {
                if current.is_some() {
                    return msg(ReturnCode::Conflict, "Already doing disk2net");
                }
                if r.disk2file.as_ref().is_some_and(|d| d.active()) {
                    return msg(ReturnCode::Conflict, "Already doing disk2file");
                }
                if r.net2file.as_ref().is_some_and(|n| n.active()) {
                    return msg(ReturnCode::Conflict, "Already doing net2file");
                }
                if let Some(reply) = in_progress(st, ctl) {
                    return Step::Now(reply);
                }
                let Some(sel) = r.scan.clone() else {
                    return msg(ReturnCode::Error, "no scan was set using scan_set=");
                };
                // As jive5ab: the host given, else the last one, else the runtime's `net_port` address.
                if !st.arg(1).is_empty() {
                    r.host = st.arg(1).to_owned();
                } else if r.host.is_empty() {
                    r.host = r
                        .ports
                        .first()
                        .and_then(|p| p.ip)
                        .map(|i| i.to_string())
                        .unwrap_or_default();
                }
                if r.host.is_empty() {
                    return msg(
                        ReturnCode::Parameter,
                        "no host given (disk2net = connect : <host>)",
                    );
                }
                let udp_psn = match r.protocol {
                    Protocol::Tcp => None,
                    Protocol::Pudp => Some(false),
                    Protocol::Udps | Protocol::Udpsnor => Some(true),
                    Protocol::Other(p) => {
                        return msg(
                            ReturnCode::Conflict,
                            &format!("disk2net over {p} is not supported by vlbiflow (tcp, udps, pudp)"),
                        )
                    }
                };
                let port = r.ports.first().map(|p| p.port).unwrap_or(DEFAULT_DATA_PORT);
                let shared = Arc::new(Shared {
                    state: Mutex::new(State {
                        phase: Phase::Connecting,
                        start: sel.start,
                        end: sel.end,
                    }),
                    wake: Condvar::new(),
                    progress: Arc::new(Progress::default()),
                });
                let host = r.host.clone();
                r.disk2net = Some(Disk2Net {
                    scan: sel.name.clone(),
                    host: host.clone(),
                    shared: shared.clone(),
                });
                Step::Disk2Net(
                    Disk2NetJob {
                        scan: sel.name,
                        dest: format!("{host}:{port}"),
                        udp_psn,
                        disks: ctl.open_disks().0,
                        ipd: match udp_psn {
                            Some(_) => datagram_delay(r),
                            None => Duration::ZERO,
                        },
                        shared,
                    },
                    J5Reply::new(kw, false, ReturnCode::Initiated, vec![]),
                )
            }
            "on" => {
                let Some(d) = current else {
                    return msg(ReturnCode::Conflict, "not doing anything");
                };
                let mut s = d.shared.lock();
                match s.phase {
                    Phase::Connected => {}
                    Phase::Connecting => return msg(ReturnCode::Conflict, "not connected yet"),
                    _ => return msg(ReturnCode::Conflict, "already running"),
                }
                let mut start = s.start;
                match byte_number(st.arg(1), "start") {
                    Ok(Some((true, v))) => start = start.saturating_add(v),
                    Ok(Some((false, v))) => start = v,
                    Ok(None) => {}
                    Err(e) => return msg(ReturnCode::Parameter, &e),
                }
                let end = match byte_number(st.arg(2), "end") {
                    Ok(Some((rel, v))) => {
                        let end = if rel { start.saturating_add(v) } else { v };
                        if end != 0 && end <= start {
                            return msg(
                                ReturnCode::Parameter,
                                &format!("end-byte-number {end} should be > start-byte-number {start}"),
                            );
                        }
                        end
                    }
                    Ok(None) => s.end,
                    Err(e) => return msg(ReturnCode::Parameter, &e),
                };
                if end != 0 && end < start {
                    return msg(ReturnCode::Conflict, "end byte should be larger than start byte");
                }
                s.start = start;
                s.end = end;
                s.phase = Phase::Running;
                drop(s);
                d.shared.wake.notify_all();
                now(ReturnCode::Done, vec![])
            }
            "disconnect" => match current {
                Some(d) => {
                    d.stop();
                    now(ReturnCode::Initiated, vec![])
                }
                None => msg(ReturnCode::Conflict, "Not doing disk2net"),
            },
            other => msg(ReturnCode::NotNow, &format!("{other} does not apply to disk2net")),
        }
    }

    /// A `disk2net` is set up in some runtime.
    pub(super) fn disk2net_running(&self) -> bool {
        self.runtimes
            .values()
            .any(|r| r.disk2net.as_ref().is_some_and(Disk2Net::active))
    }
}

/// The delay between a UDP transfer's datagrams: `ipd`, or with `ipd = -1` (as jive5ab) the one from
/// the mode's data rate, computed now for `ipd?` to show.
fn datagram_delay(r: &mut super::Runtime) -> Duration {
    let ns = if r.ipd_ns < 0 {
        let frame = r.mode.as_ref().map_or(0, |m| m.frame_size());
        r.theoretical_ipd_ns = theoretical_ipd_ns(r.mode.as_ref(), frame);
        r.theoretical_ipd_ns
    } else {
        r.ipd_ns
    };
    Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

/// Cuts a byte stream of frames into one datagram per frame (the frame length from the first VDIF
/// header, or Mark5B's); a last partial frame (a range that ends inside a frame) is not sent. With an
/// inter-packet delay, datagram `k` goes at `k x ipd` after the first on `vlbiflow-udp`'s absolute
/// schedule ([`Pacer`]: the long-run rate is exact however late one send is), one per send.
struct Datagrams {
    kind: FrameKind,
    out: Option<Output>,
    dest: SocketAddr,
    psn: bool,
    frame: Vec<u8>,
    frame_len: usize,
    ipd: Duration,
    pacer: Option<Pacer>,
    sent: u64,
    progress: Arc<Progress>,
}

impl Datagrams {
    fn send_frame(&mut self) -> io::Result<()> {
        if self.out.is_none() {
            let spec = OutputSpec::Udp {
                address: self.dest,
                psn: self.psn,
            };
            self.out = Some(Output::open(&spec, self.frame_len, Duration::ZERO, false)?);
            if !self.ipd.is_zero() {
                let per_s = 1.0 / self.ipd.as_secs_f64();
                self.pacer = Some(Pacer::new(per_s, Instant::now()).map_err(io::Error::other)?);
            }
        }
        if let Some(p) = &mut self.pacer {
            if p.wait_until_due_or_stop(self.sent, &self.progress.abort) == Wait::Stopped {
                return Err(io::Error::other(ABORTED));
            }
        }
        if let Some(o) = &mut self.out {
            o.write_frame(&self.frame)?;
            if self.pacer.is_some() {
                o.flush()?;
            }
        }
        self.sent += 1;
        self.frame.clear();
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        match &mut self.out {
            Some(o) => o.flush(),
            None => Ok(()),
        }
    }
}

impl Write for Datagrams {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() {
            if self.frame_len == 0 {
                let need = 16usize.saturating_sub(self.frame.len()).min(buf.len());
                self.frame.extend_from_slice(&buf[..need]);
                buf = &buf[need..];
                if self.frame.len() < 16 {
                    continue;
                }
                self.frame_len = match self.kind.fixed_frame_len() {
                    Some(l) => l,
                    None => VdifHeader::new_unchecked(&self.frame[..]).frame_len().max(16),
                };
                self.frame.reserve(self.frame_len);
            }
            let take = (self.frame_len - self.frame.len()).min(buf.len());
            self.frame.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.frame.len() == self.frame_len {
                self.send_frame()?;
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs a transfer to its end (blocking): connects, waits for `on` (or `disconnect`), sends the range.
pub fn run_disk2net(job: &Disk2NetJob) -> Result<(), String> {
    let result = transfer(job);
    job.shared.set_phase(Phase::Ended);
    match result {
        Err(e) if e.ends_with(ABORTED) => Ok(()),
        r => r,
    }
}

fn transfer(job: &Disk2NetJob) -> Result<(), String> {
    let sh = &job.shared;
    let dest = job
        .dest
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("cannot resolve {}", job.dest))?;
    let rec = vlbiflow_reader::source::locate_scan(&job.scan, &job.disks).map_err(|e| e.to_string())?;
    let tcp = match job.udp_psn {
        None => Some(TcpStream::connect_timeout(&dest, CONNECT_TIMEOUT).map_err(|e| format!("{dest}: {e}"))?),
        Some(_) => None,
    };
    sh.set_phase(Phase::Connected);
    let (start, end) = {
        let mut s = sh.lock();
        while s.phase == Phase::Connected && !sh.stopped() {
            s = sh.wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if sh.stopped() {
            return Ok(());
        }
        (s.start, s.end)
    };
    let gather = |out: &mut dyn Write| -> Result<(), String> {
        let mut w = RangeWriter {
            out,
            pos: 0,
            start,
            end,
            progress: sh.progress.clone(),
        };
        match vlbiflow_reader::gather::gather(&rec, &mut w, |_, _| {}) {
            Ok(_) => w.flush().map_err(|e| format!("{dest}: {e}")),
            Err(e) if e.to_string() == STOP => w.flush().map_err(|e| format!("{dest}: {e}")),
            Err(e) => Err(format!("{dest}: {e}")),
        }
    };
    match (tcp, job.udp_psn) {
        (Some(mut s), _) => {
            gather(&mut s)?;
            let _ = s.shutdown(std::net::Shutdown::Write);
            Ok(())
        }
        (None, psn) => {
            let mut d = Datagrams {
                kind: rec.frame_format(),
                out: None,
                dest,
                psn: psn.unwrap_or(true),
                frame: Vec::new(),
                frame_len: 0,
                ipd: job.ipd,
                pacer: None,
                sent: 0,
                progress: sh.progress.clone(),
            };
            gather(&mut d)?;
            d.finish().map_err(|e| format!("{dest}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_numbers_as_strtoull_base_0() {
        assert_eq!(byte_number("", "start"), Ok(None));
        assert_eq!(byte_number("1032", "start"), Ok(Some((false, 1032))));
        assert_eq!(byte_number("+0x10", "end"), Ok(Some((true, 16))));
        assert_eq!(byte_number("010", "end"), Ok(Some((false, 8))));
        assert!(byte_number("-5", "start").unwrap_err().contains("relative start"));
        assert!(byte_number("x", "end").is_err());
    }
}
