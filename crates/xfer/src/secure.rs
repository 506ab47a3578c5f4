//! The authenticated, encrypted control channel.
//!
//! TCP, then a Noise `NNpsk0` handshake (`Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`, the `snow` crate): the
//! pre-shared key is mixed in before the first message, so each side proves it holds the key (mutual
//! authentication without certificates), and ephemeral X25519 keys give forward secrecy. Afterwards every
//! frame is a Noise transport message (ChaCha20-Poly1305) carrying a piece of the byte stream of JSON
//! lines. Frames are a 2-byte big-endian length and the ciphertext.
//!
//! The handshake hash becomes the session secret from which the per-transfer datagram key is derived
//! (`vlbiflow_xfer_proto::wire::derive_data_key`), so data tags are bound to this authenticated session.
//!
//! A responder that cannot decrypt the first message (wrong key) answers with a short plaintext notice so
//! the client can say "wrong key" instead of "connection closed"; the notice carries nothing secret.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use snow::StatelessTransportState;

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE: &[u8] = b"vlbiflow xfer control v1";
const MAX_FRAME: usize = 65535;
const TAG: usize = 16;
/// Longest line accepted on the control channel.
pub const MAX_LINE: usize = 64 << 20;
/// Plaintext notice sent (as a frame) by a responder whose handshake failed.
const NOTICE_BAD_KEY: &[u8] = b"\0vlbiflow-xfer: authentication failed";
/// Plaintext notice sent by a responder that refuses the address for now (too many failed logins).
const NOTICE_BLOCKED: &[u8] = b"\0vlbiflow-xfer: too many failed logins from this address, try later";

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The peer holds a different key (or is not a vlbiflow xfer peer).
    #[error("authentication failed: {0}")]
    BadKey(String),
    /// The responder refuses this address for now.
    #[error("refused: {0}")]
    Blocked(String),
    /// The connection broke or timed out during the handshake.
    #[error("during authentication: {0}")]
    Io(#[from] io::Error),
    /// The peer sent nothing during the whole timeout (a probe, a port scan).
    #[error("no handshake within the timeout")]
    Silent,
}

fn params() -> snow::params::NoiseParams {
    NOISE_PARAMS.parse().expect("valid Noise parameters")
}

fn write_frame(s: &mut impl Write, b: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(2 + b.len());
    buf.extend_from_slice(&(b.len() as u16).to_be_bytes());
    buf.extend_from_slice(b);
    s.write_all(&buf)
}

/// Reads exactly `buf.len()` bytes, retrying timeouts of the socket until `deadline` (or, without one,
/// until `stop` is set or `idle` passes without a byte).
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    idle: Duration,
    stop: Option<&AtomicBool>,
) -> io::Result<()> {
    let mut got = 0;
    let mut last = Instant::now();
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    if got == 0 {
                        "the peer closed the connection"
                    } else {
                        "the peer closed the connection inside a frame"
                    },
                ))
            }
            Ok(n) => {
                got += n;
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) || now.duration_since(last) >= idle {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out waiting for the peer",
                    ));
                }
                if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_frame(
    s: &mut TcpStream,
    deadline: Option<Instant>,
    idle: Duration,
    stop: Option<&AtomicBool>,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let mut len = [0u8; 2];
    read_full(s, &mut len, deadline, idle, stop)?;
    let n = u16::from_be_bytes(len) as usize;
    out.resize(n, 0);
    read_full(s, out, deadline, idle, stop)
}

/// Both halves of an authenticated connection, the session secret and the peer's address.
pub struct SecureConn {
    /// Reading half.
    pub rx: SecureReader,
    /// Writing half.
    pub tx: SecureWriter,
    /// Secret shared by both ends of this session (the Noise handshake hash).
    pub secret: [u8; 32],
    /// The peer.
    pub peer: SocketAddr,
}

fn finish(
    stream: TcpStream,
    st: StatelessTransportState,
    hash: &[u8],
    peer: SocketAddr,
) -> io::Result<SecureConn> {
    let secret = blake3::derive_key("vlbiflow xfer v1 session secret", hash);
    let st = Arc::new(st);
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let w = stream.try_clone()?;
    Ok(SecureConn {
        rx: SecureReader {
            s: stream,
            st: st.clone(),
            nonce: 0,
            plain: Vec::new(),
            pos: 0,
            frame: Vec::new(),
            idle: Duration::from_secs(30),
        },
        tx: SecureWriter {
            s: w,
            st,
            nonce: 0,
            buf: vec![0u8; MAX_FRAME + 2],
        },
        secret,
        peer,
    })
}

/// Connects as the initiator: sends the first handshake message, checks the responder's answer.
pub fn client_handshake(
    mut stream: TcpStream,
    psk: &[u8; 32],
    timeout: Duration,
) -> Result<SecureConn, AuthError> {
    let peer = stream.peer_addr()?;
    let deadline = Instant::now() + timeout;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut hs = snow::Builder::new(params())
        .psk(0, psk)
        .prologue(PROLOGUE)
        .build_initiator()
        .map_err(|e| io::Error::other(format!("noise: {e}")))?;
    let mut buf = vec![0u8; MAX_FRAME];
    let n = hs
        .write_message(&[], &mut buf)
        .map_err(|e| io::Error::other(format!("noise: {e}")))?;
    write_frame(&mut stream, &buf[..n])?;
    let mut frame = Vec::new();
    match read_frame(&mut stream, Some(deadline), timeout, None, &mut frame) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(AuthError::BadKey(format!(
                "{peer} closed the connection during the handshake (not a vlbiflow xfer daemon, or it refused this address)"
            )))
        }
        Err(e) => return Err(e.into()),
    }
    if frame.as_slice() == NOTICE_BAD_KEY {
        return Err(AuthError::BadKey(format!(
            "{peer} rejected our key: this key file is not the daemon's (compare what `vlbiflow xfer key` prints on both hosts)"
        )));
    }
    if frame.as_slice() == NOTICE_BLOCKED {
        return Err(AuthError::Blocked(format!(
            "{peer}: too many failed logins from this address; wait a minute and retry with the right key"
        )));
    }
    let mut payload = vec![0u8; MAX_FRAME];
    hs.read_message(&frame, &mut payload).map_err(|_| {
        AuthError::BadKey(format!(
            "{peer} answered, but not with our key: the daemon's key differs from ours"
        ))
    })?;
    let hash = hs.get_handshake_hash().to_vec();
    let t = hs
        .into_stateless_transport_mode()
        .map_err(|e| io::Error::other(format!("noise: {e}")))?;
    Ok(finish(stream, t, &hash, peer)?)
}

/// Tells a refused address so and closes (no handshake).
pub fn refuse_blocked(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_frame(&mut stream, NOTICE_BLOCKED);
}

/// Answers as the responder: reads the first message (which only a holder of the key can make), answers.
pub fn server_handshake(
    stream: TcpStream,
    psk: &[u8; 32],
    timeout: Duration,
) -> Result<SecureConn, AuthError> {
    server_handshake_any(stream, &[psk], timeout).map(|(c, _)| c)
}

/// Like [`server_handshake`] for a daemon with several keys: the first message is tried with each of
/// `psks` in turn (it decrypts with the client's key only); the connection and the index of that key.
pub fn server_handshake_any(
    mut stream: TcpStream,
    psks: &[&[u8; 32]],
    timeout: Duration,
) -> Result<(SecureConn, usize), AuthError> {
    let peer = stream.peer_addr()?;
    let deadline = Instant::now() + timeout;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut frame = Vec::new();
    match read_frame(&mut stream, Some(deadline), timeout, None, &mut frame) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::TimedOut | io::ErrorKind::ConnectionReset
            ) =>
        {
            return Err(AuthError::Silent)
        }
        Err(e) => return Err(e.into()),
    }
    let mut payload = vec![0u8; MAX_FRAME];
    let mut found = None;
    for (i, psk) in psks.iter().enumerate() {
        let mut hs = snow::Builder::new(params())
            .psk(0, &psk[..])
            .prologue(PROLOGUE)
            .build_responder()
            .map_err(|e| io::Error::other(format!("noise: {e}")))?;
        if hs.read_message(&frame, &mut payload).is_ok() {
            found = Some((hs, i));
            break;
        }
    }
    let Some((mut hs, index)) = found else {
        let _ = write_frame(&mut stream, NOTICE_BAD_KEY);
        return Err(AuthError::BadKey(format!(
            "{peer}: first handshake message does not decrypt with our key"
        )));
    };
    let mut buf = vec![0u8; MAX_FRAME];
    let n = hs
        .write_message(&[], &mut buf)
        .map_err(|e| io::Error::other(format!("noise: {e}")))?;
    write_frame(&mut stream, &buf[..n])?;
    let hash = hs.get_handshake_hash().to_vec();
    let t = hs
        .into_stateless_transport_mode()
        .map_err(|e| io::Error::other(format!("noise: {e}")))?;
    Ok((finish(stream, t, &hash, peer)?, index))
}

/// The reading half: decrypts frames and hands out lines.
pub struct SecureReader {
    s: TcpStream,
    st: Arc<StatelessTransportState>,
    nonce: u64,
    plain: Vec<u8>,
    pos: usize,
    frame: Vec<u8>,
    idle: Duration,
}

impl SecureReader {
    /// How long the peer may stay silent before [`read_line`](Self::read_line) fails with `TimedOut`.
    pub fn set_idle_timeout(&mut self, idle: Duration) {
        self.idle = idle;
    }

    /// The next line (without the newline); `Ok(None)` when the peer closed the connection between lines.
    /// Fails on a forged or damaged frame, a line over [`MAX_LINE`], silence longer than the idle timeout,
    /// or when `stop` is set.
    pub fn read_line(&mut self, stop: Option<&AtomicBool>) -> io::Result<Option<String>> {
        loop {
            if let Some(i) = self.plain[self.pos..].iter().position(|&b| b == b'\n') {
                let line = &self.plain[self.pos..self.pos + i];
                let s = String::from_utf8(line.to_vec())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "control line is not UTF-8"))?;
                self.pos += i + 1;
                if self.pos == self.plain.len() {
                    self.plain.clear();
                    self.pos = 0;
                }
                return Ok(Some(s));
            }
            if self.plain.len() - self.pos > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("control line longer than {MAX_LINE} bytes"),
                ));
            }
            match read_frame(&mut self.s, None, self.idle, stop, &mut self.frame) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && self.plain.len() == self.pos => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
            if self.pos > 0 {
                self.plain.drain(..self.pos);
                self.pos = 0;
            }
            let old = self.plain.len();
            self.plain.resize(old + self.frame.len(), 0);
            let n = self
                .st
                .read_message(self.nonce, &self.frame, &mut self.plain[old..])
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "control frame failed authentication")
                })?;
            self.nonce += 1;
            self.plain.truncate(old + n);
        }
    }
}

/// The writing half: encrypts lines into frames.
pub struct SecureWriter {
    s: TcpStream,
    st: Arc<StatelessTransportState>,
    nonce: u64,
    buf: Vec<u8>,
}

impl SecureWriter {
    /// Sends one line (a newline is added).
    pub fn send_line(&mut self, line: &str) -> io::Result<()> {
        let mut data = Vec::with_capacity(line.len() + 1);
        data.extend_from_slice(line.as_bytes());
        data.push(b'\n');
        for piece in data.chunks(MAX_FRAME - TAG) {
            let n = self
                .st
                .write_message(self.nonce, piece, &mut self.buf[2..])
                .map_err(|e| io::Error::other(format!("noise: {e}")))?;
            self.nonce += 1;
            self.buf[..2].copy_from_slice(&(n as u16).to_be_bytes());
            self.s.write_all(&self.buf[..2 + n])?;
        }
        Ok(())
    }

    /// Closes both directions of the connection (wakes a reader blocked on it).
    pub fn shutdown(&self) {
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(ck: [u8; 32], sk: [u8; 32]) -> (Result<SecureConn, AuthError>, Result<SecureConn, AuthError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let srv = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            server_handshake(s, &sk, Duration::from_secs(5))
        });
        let c = client_handshake(TcpStream::connect(a).unwrap(), &ck, Duration::from_secs(5));
        (c, srv.join().unwrap())
    }

    #[test]
    fn same_key_talks_and_shares_a_secret() {
        let (c, s) = pair([1; 32], [1; 32]);
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        assert_eq!(c.secret, s.secret);
        let long = "x".repeat(200_000);
        c.tx.send_line("hello").unwrap();
        c.tx.send_line(&long).unwrap();
        s.tx.send_line("back").unwrap();
        assert_eq!(s.rx.read_line(None).unwrap().unwrap(), "hello");
        assert_eq!(s.rx.read_line(None).unwrap().unwrap(), long);
        assert_eq!(c.rx.read_line(None).unwrap().unwrap(), "back");
        c.tx.shutdown();
        assert!(s.rx.read_line(None).unwrap().is_none());
    }

    #[test]
    fn wrong_key_is_named_on_both_sides() {
        let (c, s) = pair([1; 32], [2; 32]);
        let ce = c.err().unwrap().to_string();
        assert!(ce.contains("rejected our key"), "{ce}");
        assert!(matches!(s, Err(AuthError::BadKey(_))));
    }

    #[test]
    fn sessions_get_different_secrets() {
        let (a, _) = pair([3; 32], [3; 32]);
        let (b, _) = pair([3; 32], [3; 32]);
        assert_ne!(a.unwrap().secret, b.unwrap().secret);
    }
}
