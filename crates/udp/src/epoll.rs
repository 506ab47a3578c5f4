//! An epoll set over a fixed list of descriptors (sockets, connections), whose event data is the
//! descriptor's index in that list: the readiness loop of every multi-stream receiver (the recorder's
//! capture thread, the receive-path benchmarks). Allocates at construction only.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::buffer::spare_capacity;
use rustix::event::epoll;

/// An epoll set (level-triggered, readable) whose event data is the index of the descriptor.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<epoll::Event>,
}

impl Epoll {
    /// An epoll set over `fds`; descriptor `i` of the iterator reports as index `i`.
    pub fn new<'a>(fds: impl IntoIterator<Item = BorrowedFd<'a>>) -> io::Result<Epoll> {
        let fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let mut n = 0;
        for (i, f) in fds.into_iter().enumerate() {
            epoll::add(&fd, f, epoll::EventData::new_u64(i as u64), epoll::EventFlags::IN)?;
            n += 1;
        }
        Ok(Epoll {
            fd,
            events: Vec::with_capacity(n.max(1)),
        })
    }

    /// Removes a descriptor (a failed stream, a closed connection).
    pub fn remove(&self, f: impl AsFd) -> io::Result<()> {
        Ok(epoll::delete(&self.fd, f)?)
    }

    /// Waits at most `timeout`; the indices of the ready descriptors go into `ready` (cleared first). An
    /// interrupted wait returns with `ready` empty.
    pub fn wait(&mut self, timeout: Duration, ready: &mut Vec<usize>) -> io::Result<()> {
        ready.clear();
        self.events.clear();
        let ts = crate::poll::timespec(timeout);
        match epoll::wait(&self.fd, spare_capacity(&mut self.events), Some(&ts)) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        ready.extend(self.events.iter().map(|e| e.data.u64() as usize));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn reports_the_index_of_each_ready_socket_and_times_out_otherwise() {
        let socks: Vec<UdpSocket> = (0..3).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        let mut ep = Epoll::new(socks.iter().map(|s| s.as_fd())).unwrap();
        let mut ready = Vec::new();
        ep.wait(Duration::from_millis(1), &mut ready).unwrap();
        assert!(ready.is_empty());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", socks[2].local_addr().unwrap()).unwrap();
        // Level-triggered: the datagram stays queued, so the wait reports it however long delivery took.
        ep.wait(Duration::from_secs(10), &mut ready).unwrap();
        assert_eq!(ready, vec![2]);
        ep.remove(&socks[2]).unwrap();
        ep.wait(Duration::from_millis(1), &mut ready).unwrap();
        assert!(ready.is_empty(), "a removed socket no longer reports");
    }
}
