//! Blocking clients for the daemon's two ports, used by `vlbiflow ctl` and `vlbiflow status` (and tests):
//! a command connection that reads one reply per statement, and a minimal HTTP/1.1 GET.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::proto::count_statements;
use vlbiflow_udp::net::ResolveError;

/// Largest HTTP response read (status, metrics and history are far smaller); more is an error.
pub const MAX_HTTP_RESPONSE: u64 = 16 << 20;
/// Longest reply line read from the command port; more is an error.
pub const MAX_REPLY_LINE: u64 = 1 << 20;

/// Connects to the first address `addr` resolves to.
fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    let addrs = vlbiflow_udp::net::resolve_all(addr).map_err(|e| match e {
        ResolveError::Lookup { source, .. } => source,
        ResolveError::NoAddress { .. } => {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr}: no address"))
        }
    })?;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr}: no address"))))
}

/// A command connection.
pub struct CommandClient {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl CommandClient {
    /// Connects to `addr` (HOST:PORT); every read and write is bounded by `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> std::io::Result<Self> {
        let s = connect(addr, timeout)?;
        Ok(CommandClient {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Sends `text` (one or more statements) and returns one reply line per statement.
    pub fn send(&mut self, text: &str) -> std::io::Result<Vec<String>> {
        let n = count_statements(text);
        let mut line = text.trim_end_matches(['\n', '\r']).to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut replies = Vec::with_capacity(n);
        for _ in 0..n {
            replies.push(self.read_line()?);
        }
        Ok(replies)
    }

    /// Reads one reply line (without the newline).
    pub fn read_line(&mut self) -> std::io::Result<String> {
        let mut s = String::new();
        let n = (&mut self.reader).take(MAX_REPLY_LINE).read_line(&mut s)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by the daemon",
            ));
        }
        if !s.ends_with('\n') && n as u64 == MAX_REPLY_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("reply line longer than {MAX_REPLY_LINE} bytes: not a Mark6 daemon?"),
            ));
        }
        Ok(s.trim_end().to_string())
    }
}

/// GETs `path` from `addr`; returns the status code and body. The whole response must arrive within
/// `timeout` and be at most [`MAX_HTTP_RESPONSE`] bytes.
pub fn http_get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let mut s = connect(addr, timeout)?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let bad = |m: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("http://{addr}{path}: {m}"),
        )
    };
    let deadline = std::time::Instant::now() + timeout;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("http://{addr}{path}: response not complete within {timeout:?}"),
            ));
        }
        s.set_read_timeout(Some(left))?;
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        if raw.len() as u64 + n as u64 > MAX_HTTP_RESPONSE {
            return Err(bad(&format!("response larger than {MAX_HTTP_RESPONSE} bytes")));
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A server that sends `head` and then bytes until the client goes away.
    fn endless(head: &'static [u8]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(head);
            let chunk = vec![b'x'; 65536];
            while s.write_all(&chunk).is_ok() {}
        });
        addr
    }

    #[test]
    fn an_endless_http_body_is_an_error_not_unbounded_memory() {
        let addr = endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        let e = super::http_get(&addr, "/metrics", None, Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    #[test]
    fn an_endless_reply_line_is_an_error() {
        let addr = endless(b"!record? 0 : ");
        let mut c = super::CommandClient::connect(&addr, Duration::from_secs(30)).unwrap();
        let e = c.send("record?").unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }
    #[test]
    fn dechunks() {
        assert_eq!(
            super::dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(super::dechunk(b"zz\r\n").is_none());
    }
}
