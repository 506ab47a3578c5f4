//! The sender's feedback reader: the receiver's feedback datagrams, checked, for the data thread.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_xfer_proto::wire::{parse_feedback_datagram, Feedback};

/// Counters of the feedback reader.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FeedbackCounts {
    pub taken: u64,
    pub rejected: u64,
}

/// Reads feedback datagrams from the data socket (connected to the receiver's data port, so only its
/// datagrams arrive), checks them and passes them on, until `stop`; each wait is bounded.
pub(super) struct FeedbackReader {
    pub sock: UdpSocket,
    pub key: [u8; 32],
    pub transfer_id: u32,
    pub stop: Arc<AtomicBool>,
    pub out: crossbeam_channel::Sender<Feedback>,
}

impl FeedbackReader {
    pub(super) fn run(self) -> FeedbackCounts {
        use std::io::ErrorKind::{ConnectionRefused, Interrupted, TimedOut, WouldBlock};
        let mut c = FeedbackCounts::default();
        let mut buf = vec![0u8; 2048];
        if self
            .sock
            .set_read_timeout(Some(Duration::from_millis(50)))
            .is_err()
        {
            return c;
        }
        while !self.stop.load(Relaxed) {
            let n = match self.sock.recv(&mut buf) {
                Ok(n) => n,
                // timeouts, and ICMP errors reported on the connected socket
                Err(e) if matches!(e.kind(), WouldBlock | TimedOut | ConnectionRefused | Interrupted) => {
                    continue
                }
                Err(_) => {
                    // anything else: do not spin on it
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            match parse_feedback_datagram(Some(&self.key), self.transfer_id, &buf[..n]) {
                Ok(f) => {
                    c.taken += 1;
                    // a full channel means the data loop is stalled: a later feedback repeats this one
                    let _ = self.out.try_send(f);
                }
                Err(_) => c.rejected += 1,
            }
        }
        c
    }
}
