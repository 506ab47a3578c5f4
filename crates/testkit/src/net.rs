//! Loopback ports and sockets for tests.

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

/// A loopback UDP address that was free a moment ago (bound, then released). Good enough on
/// loopback for a test that binds it next; a test that can bind port 0 itself should.
pub fn free_udp_addr() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .expect("bind a UDP socket on 127.0.0.1")
        .local_addr()
        .expect("local address of a bound socket")
}

/// The port of [`free_udp_addr`].
pub fn free_udp_port() -> u16 {
    free_udp_addr().port()
}

/// A loopback TCP port that was free a moment ago.
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a TCP listener on 127.0.0.1")
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}

/// A receiving UDP socket on an ephemeral loopback port with a read timeout (so a test that waits
/// for a datagram that never comes fails instead of hanging).
pub fn udp_listener(timeout: Duration) -> (UdpSocket, SocketAddr) {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket on 127.0.0.1");
    s.set_read_timeout(Some(timeout)).expect("set a read timeout");
    let a = s.local_addr().expect("local address of a bound socket");
    (s, a)
}

/// A loopback port free a moment ago for both TCP and UDP (for a command that listens on both, or
/// where the test does not know which it will be).
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a TCP listener on 127.0.0.1");
        let port = l.local_addr().expect("local address of a bound listener").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free for both TCP and UDP in 100 tries");
}

/// A TCP connection to `to` from the loopback address `from` (e.g. `127.0.0.2`: another host, as far as
/// the service can tell), for tests of per-address limits.
pub fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a TCP socket");
    let a: SocketAddr = format!("{from}:0").parse().expect("a source address");
    s.bind(&a.into()).unwrap_or_else(|e| panic!("bind {a}: {e}"));
    s.connect(&to.into())
        .unwrap_or_else(|e| panic!("connect {a} -> {to}: {e}"));
    s.into()
}
