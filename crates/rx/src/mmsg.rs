//! `recvmmsg` receive path (with or without UDP GRO): an epoll set over the stream sockets; each ready
//! socket is drained in batches of up to 64 messages into preallocated buffers (vlbiflow-udp's
//! [`BatchReceiver`]), at most [`BATCHES_PER_TURN`] batches before the other sockets get their turn.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::Duration;

use vlbiflow_udp::{BatchReceiver, DropCounter};

use crate::sys::segments;
use crate::RxStats;
use vlbiflow_udp::Epoll;

/// Messages per `recvmmsg`.
pub const BATCH: usize = 64;
/// Batches taken from one ready socket before the next one is served.
pub const BATCHES_PER_TURN: usize = 16;
/// Receive buffer per message with GRO: a super-datagram carries at most 64 KiB.
const GRO_BUFFER: usize = 1 << 16;

/// The `udp` and `udp-gro` paths.
pub struct MmsgRx {
    socks: Vec<UdpSocket>,
    epoll: Epoll,
    rx: BatchReceiver,
    bufs: Vec<u8>,
    buf_size: usize,
    max_datagram: usize,
    drops: Vec<DropCounter>,
    ready: Vec<usize>,
    gro: bool,
    stats: RxStats,
}

impl MmsgRx {
    /// Serves `socks` (non-blocking); datagrams up to `max_datagram` bytes, with GRO super-datagrams when
    /// the sockets have GRO enabled (`gro`).
    pub fn new(socks: Vec<UdpSocket>, max_datagram: usize, gro: bool) -> io::Result<MmsgRx> {
        let epoll = Epoll::new(socks.iter().map(|s| s.as_fd()))?;
        // One byte more than the largest datagram, so a longer one shows up as truncated.
        let buf_size = if gro { GRO_BUFFER } else { max_datagram + 1 };
        Ok(MmsgRx {
            drops: vec![DropCounter::default(); socks.len()],
            socks,
            epoll,
            rx: BatchReceiver::new(BATCH),
            bufs: vec![0u8; BATCH * buf_size],
            buf_size,
            max_datagram,
            ready: Vec::new(),
            gro,
            stats: RxStats::default(),
        })
    }

    /// Waits at most `timeout`, then drains the ready sockets, handing every datagram to `f(stream, bytes)`.
    pub fn poll<F: FnMut(usize, &[u8])>(&mut self, timeout: Duration, mut f: F) -> io::Result<usize> {
        let mut ready = std::mem::take(&mut self.ready);
        let waited = self.epoll.wait(timeout, &mut ready);
        let mut handed = 0;
        let result = waited.and_then(|()| {
            for &i in &ready {
                handed += self.drain(i, &mut f)?;
            }
            Ok(())
        });
        self.ready = ready;
        result.map(|()| handed)
    }

    fn drain<F: FnMut(usize, &[u8])>(&mut self, i: usize, f: &mut F) -> io::Result<usize> {
        let mut handed = 0;
        for _ in 0..BATCHES_PER_TURN {
            let bufs = self.bufs.chunks_exact_mut(self.buf_size);
            let batch = match self.rx.recv(&self.socks[i], bufs, Duration::ZERO) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            let n = batch.len();
            if let Some(c) = batch.drop_counter() {
                self.drops[i].update(c);
            }
            if n == 0 {
                break;
            }
            self.stats.syscalls += 1;
            for (m, buf) in batch.messages().iter().zip(self.bufs.chunks_exact(self.buf_size)) {
                self.stats.messages += 1;
                if m.truncated {
                    self.stats.truncated += m.datagrams() as u64;
                    continue;
                }
                let data = &buf[..m.len];
                let seg = if self.gro { m.gro_segment } else { None };
                let (max, stats) = (self.max_datagram, &mut self.stats);
                segments(data, seg, |d| {
                    if d.len() > max {
                        stats.truncated += 1;
                    } else {
                        stats.datagrams += 1;
                        stats.bytes += d.len() as u64;
                        handed += 1;
                        f(i, d);
                    }
                });
            }
            if n < BATCH {
                break;
            }
        }
        Ok(handed)
    }

    /// Counters so far.
    pub fn stats(&self) -> RxStats {
        RxStats {
            kernel_drops: self.drops.iter().map(DropCounter::total).sum(),
            ..self.stats
        }
    }

    /// How the path is set up.
    pub fn detail(&self) -> String {
        format!(
            "recvmmsg, {BATCH} messages of {} B per call{}",
            self.buf_size,
            if self.gro { ", UDP GRO" } else { "" }
        )
    }
}
