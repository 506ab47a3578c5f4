//! Blocking clients for the daemon's two ports, used by `vlbiflow ctl` and `vlbiflow status` (and tests):
//! a command connection that reads one reply per statement, and a minimal HTTP/1.1 GET.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::proto::count_statements;

/// Connects to the first address `addr` resolves to.
fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
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
        if self.reader.read_line(&mut s)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by the daemon",
            ));
        }
        Ok(s.trim_end().to_string())
    }
}

/// GETs `path` from `addr`; returns the status code and body.
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
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let bad = |m: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("http://{addr}{path}: {m}"),
        )
    };
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
    #[test]
    fn dechunks() {
        assert_eq!(
            super::dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(super::dechunk(b"zz\r\n").is_none());
    }
}
