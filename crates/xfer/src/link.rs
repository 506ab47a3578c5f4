//! The control link of a running transfer: a reader thread that parses lines from the secure channel into
//! [`Inbound`] messages and a writer thread that sends queued lines, so the data thread never blocks on
//! TCP. Closing drains what was queued before the connection is shut down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use vlbiflow_xfer_proto::ControlMsg;

use crate::secure::{SecureConn, SecureReader, SecureWriter};
use crate::session::Session;

/// A message from the peer.
#[derive(Debug)]
pub enum Inbound {
    /// A protocol control message.
    Ctl(ControlMsg),
    /// A session message.
    Sess(Session),
    /// The connection ended; the reason.
    Closed(String),
    /// The peer sent a line this side does not understand (another protocol version, a bug, or not a
    /// peer at all); the reason. Nothing more is read. The receiver of this should tell the peer why in an
    /// `abort` before it gives up, so that the other side's operator learns it too.
    Refused(String),
}

/// Both threads of a control link.
pub struct Link {
    /// Messages from the peer.
    pub rx: Receiver<Inbound>,
    tx: Option<Sender<String>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<SecureWriter>>,
}

fn parse(line: &str) -> Result<Inbound, String> {
    if Session::is_session_line(line) {
        Session::parse(line).map(Inbound::Sess)
    } else {
        ControlMsg::parse_line(line)
            .map(Inbound::Ctl)
            .map_err(|e| e.to_string())
    }
}

/// How long a transfer's control connection may carry nothing before it is given up: the protocol's own
/// dead-peer detection (`dead_timeout`, counting data datagrams as well as control messages) is what finds
/// a peer that is gone; this is a backstop above it. It must outlast TCP's retransmission backoff on a
/// saturated path: beside a TCP BBR flow filling a 2 Gb/s, 50 ms emulated path, the client's control
/// connection carried nothing for 30 s while data and feedback still flowed, and the daemon gave up a
/// healthy transfer (`bench/xfer-compete.sh`).
pub fn control_stall_limit(dead_timeout: Duration) -> Duration {
    (dead_timeout + Duration::from_secs(20)).max(Duration::from_secs(120))
}

impl Link {
    /// Starts the threads on an authenticated connection. The peer may stay silent at most `idle`.
    pub fn start(conn: SecureConn, idle: Duration) -> Link {
        let SecureConn { mut rx, tx: w, .. } = conn;
        rx.set_idle_timeout(idle);
        let stop = Arc::new(AtomicBool::new(false));
        let (in_tx, in_rx) = unbounded();
        let (out_tx, out_rx) = unbounded::<String>();
        let s = stop.clone();
        let reader = std::thread::Builder::new()
            .name("xfer-ctl-rx".into())
            .spawn(move || read_loop(rx, in_tx, s))
            .expect("spawn control reader");
        let writer = std::thread::Builder::new()
            .name("xfer-ctl-tx".into())
            .spawn(move || write_loop(w, out_rx))
            .expect("spawn control writer");
        Link {
            rx: in_rx,
            tx: Some(out_tx),
            stop,
            reader: Some(reader),
            writer: Some(writer),
        }
    }

    /// Queues a line.
    pub fn send(&self, line: String) {
        if let Some(t) = &self.tx {
            let _ = t.send(line);
        }
    }

    /// Queues a session message.
    pub fn send_session(&self, m: &Session) {
        self.send(m.to_line());
    }

    /// Sends what is queued, then closes the connection and joins both threads.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.tx.take();
        if let Some(w) = self.writer.take() {
            if let Ok(w) = w.join() {
                w.shutdown();
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn read_loop(mut rx: SecureReader, out: Sender<Inbound>, stop: Arc<AtomicBool>) {
    loop {
        let msg = match rx.read_line(Some(&stop)) {
            Ok(Some(line)) => match parse(&line) {
                Ok(m) => m,
                Err(e) => Inbound::Refused(format!("a message from the peer was not understood: {e}")),
            },
            Ok(None) => Inbound::Closed("the peer closed the control connection".into()),
            Err(e) => Inbound::Closed(format!("control connection: {e}")),
        };
        let end = matches!(msg, Inbound::Closed(_) | Inbound::Refused(_));
        if out.send(msg).is_err() || end {
            return;
        }
    }
}

fn write_loop(mut w: SecureWriter, rx: Receiver<String>) -> SecureWriter {
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if w.send_line(&line).is_err() {
                    // the reader sees the broken connection and reports it
                    return w;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return w,
        }
    }
}
