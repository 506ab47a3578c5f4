//! Frames and sockets shared by the loopback tests.
#![allow(dead_code, unused_imports)]

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use vlbiflow_testkit::vdif::{stamp, Frame};

/// Frame length used by the tests (small, so thousands of frames take milliseconds).
pub const LEN: usize = 1032;
/// Frames per second per thread.
pub const RATE: u32 = 1000;

/// A VDIF frame of thread `thread` at time index `index` (second 1000 + index / RATE); the payload
/// carries `index` and `thread` so a frame can be recognised anywhere.
pub fn frame(thread: u16, index: u64) -> Vec<u8> {
    let mut f = Frame::new(LEN)
        .seconds(1000)
        .epoch(50)
        .at(index, RATE)
        .thread(thread)
        .station(b"Xx")
        .build();
    stamp(&mut f, index, thread);
    f
}

/// The `udps` datagram of `frame` with sequence number `psn`.
pub use vlbiflow_testkit::vdif::udps;

/// A receiving socket on an ephemeral loopback port with a large buffer.
pub fn listener() -> (UdpSocket, SocketAddr) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&s).set_recv_buffer_size(16 << 20).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let a = s.local_addr().unwrap();
    (s, a)
}

/// A free loopback UDP port (bound and released: good enough on loopback for a test).
pub use vlbiflow_testkit::net::free_udp_addr as free_port;

/// Receives `n` data datagrams (panics after the socket's read timeout); gap notices in between are
/// skipped.
pub fn recv_n(s: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
    recv_with_notices(s, n).0
}

/// Receives `n` data datagrams and every gap notice that came before the last of them.
pub fn recv_with_notices(s: &UdpSocket, n: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut buf = vec![0u8; 65536];
    let mut data = Vec::with_capacity(n);
    let mut notices = Vec::new();
    while data.len() < n {
        let k = s
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("datagram {} of {n}: {e}", data.len()));
        if vlbiflow_formats::notice::GapNotice::<&[u8]>::looks_like(&buf[..k]) {
            notices.push(buf[..k].to_vec());
        } else {
            data.push(buf[..k].to_vec());
        }
    }
    (data, notices)
}
