//! `net2file` (jive5ab 3.1.0 `src/mk5command/net2file.cc`, `net2file_fn`): data from the network written
//! to one plain file, on the runtime's `net_port` over its `net_protocol`:
//!
//! - `net2file = open : <file>,<n|w|a> [: <strict>] ;` opens the file (`n`: a new file, `w`: truncated,
//!   `a`: appended to; the mode is required, as in jive5ab's `open_file`) and the data port, replying
//!   `0 : <file size>`. `tcp` accepts one connection and writes its byte stream until the sender
//!   closes; `udps`/`udpsnor`/`udp` write each datagram's payload behind its 8-byte sequence number,
//!   `pudp` each whole datagram, in arrival order, until stopped. `<strict>` (1 or 2: only frames of
//!   the mode) is accepted and not applied: the bytes are written as they come.
//! - `net2file = stop ;` and `net2file = close ;` stop reading; what was received is written (`0`).
//! - `net2file? ;` → `active : <bytes written>` while open, `inactive : 0` after.
//!
//! As in jive5ab, a file that stays empty is removed when the transfer ends, and only one `net_port`
//! is allowed. Sans-IO here: the command hands the daemon a [`Net2FileJob`], which opens the file and
//! the socket ([`open_net2file`]) before the reply and then runs the transfer ([`run_net2file`],
//! blocking).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_udp::socket::{open_udp, UdpConfig};

use crate::controller::Controller;
use crate::proto::{ReturnCode, Statement};

use super::reply::J5Reply;
use super::setup::{in_progress, Protocol};
use super::{Jive5ab, Step};

/// How often a blocked accept or receive looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Largest datagram received.
const MAX_DATAGRAM: usize = 65536;
/// The sequence number before each frame of `udps`.
const PSN_LEN: usize = 8;

/// A transfer's state, shared by the commands and the job.
#[derive(Debug, Default)]
pub struct Shared {
    /// Bytes written to the file so far.
    pub written: AtomicU64,
    stop: AtomicBool,
    ended: AtomicBool,
}

/// One `net2file` as the runtime remembers it.
#[derive(Debug, Clone)]
pub struct Net2File {
    pub file: String,
    pub shared: Arc<Shared>,
}

impl Net2File {
    /// Open and not yet ended (jive5ab's transfer mode is `net2file`).
    pub fn active(&self) -> bool {
        !self.shared.ended.load(Ordering::Acquire)
    }

    /// Stops it (`stop`, `close`, or its runtime went away).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// How the file is opened (`<file>,<mode>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// `n`: the file must not exist.
    New,
    /// `w`: created or truncated.
    Write,
    /// `a`: created or appended to.
    Append,
}

/// What arrives on the data port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One TCP connection's byte stream.
    Tcp,
    /// Datagrams, each with (`psn`) or without an 8-byte sequence number before its payload.
    Udp { psn: bool },
}

/// A transfer for the daemon to open and run.
#[derive(Debug, Clone)]
pub struct Net2FileJob {
    pub file: PathBuf,
    pub mode: OpenMode,
    pub transport: Transport,
    /// The data port (and address) to receive on.
    pub bind: SocketAddr,
    /// Receive buffer (`net_protocol`'s socket buffer size).
    pub sockbuf: usize,
    pub shared: Arc<Shared>,
}

/// A transfer whose file and socket are open.
#[derive(Debug)]
pub struct Opened {
    job: Net2FileJob,
    out: BufWriter<File>,
    net: Net,
}

#[derive(Debug)]
enum Net {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

/// Splits `<file>,<mode>` as jive5ab's `open_file` does (the mode is required; `r` does not write).
fn file_and_mode(arg: &str) -> Result<(&str, OpenMode), String> {
    let Some((file, mode)) = arg.split_once(',') else {
        return Err("add ',<mode>' to the filename (w,a,n)".into());
    };
    if file.is_empty() {
        return Err("no actual filename given".into());
    }
    let mode = match mode.to_ascii_lowercase().as_str() {
        "n" => OpenMode::New,
        "w" => OpenMode::Write,
        "a" => OpenMode::Append,
        "" => return Err("no actual openmode (w,a,n) given".into()),
        m => return Err(format!("invalid openmode '{m}'")),
    };
    Ok((file, mode))
}

impl Jive5ab {
    /// `net2file = open : <file>,<mode> [: <strict>] | stop | close ;`, `net2file? ;`.
    pub(super) fn net2file(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> Step {
        let kw = st.keyword.as_str();
        let msg = |code, m: String| Step::Now(J5Reply::msg(kw, st.query, code, m));
        let r = self.rt_mut(rt);
        let current = r.net2file.clone().filter(Net2File::active);
        if st.query {
            let f = match &current {
                Some(n) => vec![
                    "active".into(),
                    n.shared.written.load(Ordering::Acquire).to_string(),
                ],
                None => vec!["inactive".into(), "0".into()],
            };
            return Step::Now(J5Reply::new(kw, true, ReturnCode::Done, f));
        }
        let other = if r.disk2net.as_ref().is_some_and(|d| d.active()) {
            Some("disk2net")
        } else if r.disk2file.as_ref().is_some_and(|d| d.active()) {
            Some("disk2file")
        } else {
            None
        };
        if let Some(t) = other {
            return msg(ReturnCode::Conflict, format!("not whilst {t} is in progress"));
        }
        if let Some(reply) = in_progress(st, ctl) {
            return Step::Now(reply);
        }
        match st.arg(0) {
            "open" => {
                if current.is_some() {
                    return msg(ReturnCode::Conflict, "Already doing net2file".into());
                }
                let transport = match r.protocol {
                    Protocol::Tcp => Transport::Tcp,
                    Protocol::Pudp => Transport::Udp { psn: false },
                    Protocol::Udps | Protocol::Udpsnor => Transport::Udp { psn: true },
                    Protocol::Other(p) => {
                        return msg(
                            ReturnCode::Conflict,
                            format!("net2file over {p} is not supported by vlbiflow (tcp, udps, pudp)"),
                        )
                    }
                };
                if r.ports.len() != 1 {
                    return msg(
                        ReturnCode::Conflict,
                        format!(
                            "This code does not support reading from multiple (={}) ports",
                            r.ports.len()
                        ),
                    );
                }
                let (file, mode) = match file_and_mode(st.arg(1)) {
                    Ok(v) => v,
                    Err(e) => return msg(ReturnCode::Error, e),
                };
                match st.arg(2) {
                    "" | "1" | "2" => {}
                    s => {
                        return msg(
                            ReturnCode::Error,
                            format!("<strict>, when set, MUST be 1 or 2, not '{s}'"),
                        )
                    }
                }
                let port = &r.ports[0];
                let bind = SocketAddr::new(port.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), port.port);
                let shared = Arc::new(Shared::default());
                r.net2file = Some(Net2File {
                    file: file.to_owned(),
                    shared: shared.clone(),
                });
                Step::Net2File(Net2FileJob {
                    file: PathBuf::from(file),
                    mode,
                    transport,
                    bind,
                    sockbuf: usize::try_from(r.sockbuf).unwrap_or(usize::MAX),
                    shared,
                })
            }
            "stop" | "close" => match current {
                Some(n) => {
                    n.stop();
                    Step::Now(J5Reply::new(kw, false, ReturnCode::Done, vec![]))
                }
                None => msg(ReturnCode::Conflict, "Not doing net2file yet".into()),
            },
            other => msg(ReturnCode::NotNow, format!("{other} does not apply to net2file")),
        }
    }

    /// A `net2file` is open in some runtime.
    pub(super) fn net2file_running(&self) -> bool {
        self.runtimes
            .values()
            .any(|r| r.net2file.as_ref().is_some_and(Net2File::active))
    }
}

/// Opens the job's file and data port (blocking); returns them with the file's size, which the reply
/// reports. On failure the transfer has ended.
pub fn open_net2file(job: Net2FileJob) -> Result<(Opened, u64), String> {
    let shared = job.shared.clone();
    let r = open(job);
    if r.is_err() {
        shared.ended.store(true, Ordering::Release);
    }
    r
}

fn open(job: Net2FileJob) -> Result<(Opened, u64), String> {
    let mut o = OpenOptions::new();
    match job.mode {
        OpenMode::New => o.write(true).create_new(true),
        OpenMode::Write => o.write(true).create(true).truncate(true),
        OpenMode::Append => o.append(true).create(true),
    };
    let name = job.file.display().to_string();
    let file = o.open(&job.file).map_err(|e| format!("{name}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("{name}: {e}"))?.len();
    let net = match job.transport {
        Transport::Tcp => {
            let l = TcpListener::bind(job.bind).map_err(|e| format!("{}: {e}", job.bind));
            let l = l.and_then(|l| {
                l.set_nonblocking(true)
                    .map(|_| l)
                    .map_err(|e| format!("{}: {e}", job.bind))
            });
            Net::Tcp(l.inspect_err(|_| remove_if_empty(&job.file))?)
        }
        Transport::Udp { .. } => {
            let mut cfg = UdpConfig::receiver(job.bind);
            cfg.recv_buffer = Some(job.sockbuf);
            cfg.read_timeout = Some(POLL);
            let (s, _) = open_udp(&cfg).map_err(|e| {
                remove_if_empty(&job.file);
                e.to_string()
            })?;
            Net::Udp(s)
        }
    };
    let out = BufWriter::with_capacity(1 << 20, file);
    Ok((Opened { job, out, net }, size))
}

/// jive5ab's `net2file_remove_empty_file`: a destination that stayed empty goes.
fn remove_if_empty(file: &std::path::Path) {
    if std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.len() == 0) {
        let _ = std::fs::remove_file(file);
    }
}

/// Runs a transfer to its end (blocking): until the TCP sender closes, or until stopped.
pub fn run_net2file(o: Opened) -> Result<(), String> {
    let Opened { job, mut out, net } = o;
    let sh = &job.shared;
    let result = match net {
        Net::Tcp(l) => receive_tcp(&l, &mut out, sh),
        Net::Udp(s) => receive_udp(&s, job.transport, &mut out, sh),
    };
    let flushed = out.flush().map_err(|e| e.to_string());
    drop(out);
    remove_if_empty(&job.file);
    sh.ended.store(true, Ordering::Release);
    let name = job.file.display();
    result.and(flushed).map_err(|e| format!("{name}: {e}"))
}

fn stopped(sh: &Shared) -> bool {
    sh.stop.load(Ordering::Acquire)
}

fn write_counted(out: &mut impl Write, sh: &Shared, data: &[u8]) -> Result<(), String> {
    out.write_all(data).map_err(|e| e.to_string())?;
    sh.written.fetch_add(data.len() as u64, Ordering::AcqRel);
    Ok(())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Waits (looking at the stop flag) for one sender, then writes its stream until it closes.
fn receive_tcp(l: &TcpListener, out: &mut impl Write, sh: &Shared) -> Result<(), String> {
    let mut stream: TcpStream = loop {
        if stopped(sh) {
            return Ok(());
        }
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {
                let mut fds = [rustix::event::PollFd::new(l, rustix::event::PollFlags::IN)];
                let t = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: POLL.as_nanos() as _,
                };
                let _ = rustix::event::poll(&mut fds, Some(&t));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(POLL)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if stopped(sh) {
            return Ok(());
        }
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => write_counted(out, sh, &buf[..n])?,
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Writes each datagram (without its sequence number for `udps`) until stopped.
fn receive_udp(s: &UdpSocket, t: Transport, out: &mut impl Write, sh: &Shared) -> Result<(), String> {
    let skip = match t {
        Transport::Udp { psn: true } => PSN_LEN,
        _ => 0,
    };
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !stopped(sh) {
        match s.recv(&mut buf) {
            Ok(n) if n > skip => write_counted(out, sh, &buf[skip..n])?,
            Ok(_) => {}
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_mode_as_open_file() {
        assert_eq!(
            file_and_mode("/tmp/x.vdif,w"),
            Ok(("/tmp/x.vdif", OpenMode::Write))
        );
        assert_eq!(file_and_mode("a,A"), Ok(("a", OpenMode::Append)));
        assert!(file_and_mode("a,b,w")
            .unwrap_err()
            .contains("invalid openmode 'b,w'"));
        assert_eq!(file_and_mode("x,n"), Ok(("x", OpenMode::New)));
        assert!(file_and_mode("x").unwrap_err().contains("',<mode>'"));
        assert!(file_and_mode(",w").unwrap_err().contains("no actual filename"));
        assert!(file_and_mode("x,r").unwrap_err().contains("invalid openmode 'r'"));
    }
}
