//! Waiting for one descriptor with a timeout (`ppoll(2)` through rustix), and the timespec such waits
//! take.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

pub use rustix::event::{PollFlags, Timespec};

/// `d` as a timespec (seconds saturate at `i64::MAX`).
pub fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: d.subsec_nanos().into(),
    }
}

/// Waits until `fd` has any of `events` or `timeout` has passed (to the nanosecond; zero only looks)
/// and returns the events that occurred: empty on timeout. The kernel reports `ERR` and `HUP` whether
/// asked for or not. An interrupting signal (EINTR) counts as a timeout, so callers re-check their own
/// deadlines and stop flags.
pub fn wait(fd: impl AsFd, events: PollFlags, timeout: Duration) -> io::Result<PollFlags> {
    let mut fds = [rustix::event::PollFd::new(&fd, events)];
    match rustix::event::poll(&mut fds, Some(&timespec(timeout))) {
        Ok(0) => Ok(PollFlags::empty()),
        Ok(_) => Ok(fds[0].revents()),
        Err(rustix::io::Errno::INTR) => Ok(PollFlags::empty()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn timespec_splits_and_saturates() {
        let t = timespec(Duration::new(3, 250_000_000));
        assert_eq!((t.tv_sec, t.tv_nsec), (3, 250_000_000));
        assert_eq!(timespec(Duration::MAX).tv_sec, i64::MAX);
        let z = timespec(Duration::ZERO);
        assert_eq!((z.tv_sec, z.tv_nsec), (0, 0));
    }

    #[test]
    fn waits_for_a_datagram_or_times_out() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(wait(&rx, PollFlags::IN, Duration::from_millis(1))
            .unwrap()
            .is_empty());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        let got = wait(&rx, PollFlags::IN, Duration::from_secs(10)).unwrap();
        assert!(got.contains(PollFlags::IN), "{got:?}");
        // A socket can always be written to: zero only looks.
        assert!(wait(&tx, PollFlags::OUT, Duration::ZERO)
            .unwrap()
            .contains(PollFlags::OUT));
    }
}
