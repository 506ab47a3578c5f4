//! TCP receive path: an epoll set over the connections (non-blocking, receive buffers left to the kernel's
//! autotuning); each ready connection is read into one 256 KiB buffer until it would block (at most
//! [`READS_PER_TURN`] reads before the others get their turn). A connection closed by its sender leaves
//! the set.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::RxStats;
use vlbiflow_udp::Epoll;

/// Bytes per read.
pub const READ_SIZE: usize = 256 << 10;
/// Reads from one ready connection before the next one is served.
pub const READS_PER_TURN: usize = 16;

/// The `tcp` path.
pub struct TcpRx {
    conns: Vec<TcpStream>,
    open: Vec<bool>,
    epoll: Epoll,
    buf: Vec<u8>,
    ready: Vec<usize>,
    stats: RxStats,
}

impl TcpRx {
    /// Serves accepted connections (set non-blocking here).
    pub fn new(conns: Vec<TcpStream>) -> io::Result<TcpRx> {
        for c in &conns {
            c.set_nonblocking(true)?;
        }
        let epoll = Epoll::new(conns.iter().map(|c| c.as_fd()))?;
        Ok(TcpRx {
            open: vec![true; conns.len()],
            conns,
            epoll,
            buf: vec![0u8; READ_SIZE],
            ready: Vec::new(),
            stats: RxStats::default(),
        })
    }

    /// Waits at most `timeout`, then reads the ready connections, handing each read's bytes to
    /// `f(stream, bytes)`. Returns the number of reads that returned data.
    pub fn poll<F: FnMut(usize, &[u8])>(&mut self, timeout: Duration, mut f: F) -> io::Result<usize> {
        let mut ready = std::mem::take(&mut self.ready);
        let result = self.epoll.wait(timeout, &mut ready).and_then(|()| {
            let mut reads = 0;
            for &i in &ready {
                reads += self.drain(i, &mut f)?;
            }
            Ok(reads)
        });
        self.ready = ready;
        result
    }

    fn drain<F: FnMut(usize, &[u8])>(&mut self, i: usize, f: &mut F) -> io::Result<usize> {
        let mut reads = 0;
        for _ in 0..READS_PER_TURN {
            if !self.open[i] {
                break;
            }
            match (&self.conns[i]).read(&mut self.buf) {
                Ok(0) => {
                    self.open[i] = false;
                    self.epoll.remove(&self.conns[i])?;
                }
                Ok(n) => {
                    self.stats.syscalls += 1;
                    self.stats.messages += 1;
                    self.stats.datagrams += 1;
                    self.stats.bytes += n as u64;
                    reads += 1;
                    f(i, &self.buf[..n]);
                    if n < self.buf.len() {
                        // Drained for now (a short read): let epoll say when there is more.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(reads)
    }

    /// Every connection has been closed by its sender.
    pub fn all_closed(&self) -> bool {
        !self.open.iter().any(|&o| o)
    }

    /// Counters so far.
    pub fn stats(&self) -> RxStats {
        self.stats
    }
}
