//! Host names and addresses: `HOST:PORT` text to socket addresses.
//!
//! One address is chosen IPv4 first: the data sockets bind `0.0.0.0` by default, and a host name that
//! also has an IPv6 address (`localhost` usually lists `::1` first) would otherwise reach nothing.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// Why `HOST:PORT` gives no address.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Not `HOST:PORT`, or the name lookup failed.
    #[error("cannot resolve {addr:?}: {source}")]
    Lookup {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// The lookup found no address.
    #[error("{addr:?} resolves to no address")]
    NoAddress { addr: String },
}

/// Every address of `addr` (`HOST:PORT`, `IPV4:PORT` or `[IPV6]:PORT`) in the resolver's order; a
/// literal address without a lookup.
pub fn resolve_all(addr: &str) -> Result<Vec<SocketAddr>, ResolveError> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let all: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|source| ResolveError::Lookup {
            addr: addr.to_owned(),
            source,
        })?
        .collect();
    if all.is_empty() {
        return Err(ResolveError::NoAddress {
            addr: addr.to_owned(),
        });
    }
    Ok(all)
}

/// One address of `addr` (see [`resolve_all`]): the first IPv4 one, else the first.
pub fn resolve(addr: &str) -> Result<SocketAddr, ResolveError> {
    let all = resolve_all(addr)?;
    Ok(all.iter().find(|a| a.is_ipv4()).copied().unwrap_or(all[0]))
}

/// `HOST:PORT` text for a host (a name, an IPv4 address, or an IPv6 address with or without brackets)
/// and a port: an IPv6 address is put in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_names_and_failures() {
        assert_eq!(
            resolve("127.0.0.1:4001").unwrap(),
            "127.0.0.1:4001".parse().unwrap()
        );
        assert_eq!(resolve("[::1]:7").unwrap(), "[::1]:7".parse().unwrap());
        assert_eq!(resolve("localhost:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert!(!resolve_all("localhost:9").unwrap().is_empty());
        for bad in ["127.0.0.1", "no-such-host.invalid:1", ""] {
            let e = resolve(bad).unwrap_err();
            assert!(matches!(e, ResolveError::Lookup { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("cannot resolve"), "{e}");
        }
    }

    #[test]
    fn brackets_ipv6_hosts() {
        assert_eq!(host_port("::1", 5), "[::1]:5");
        assert_eq!(host_port("[::1]", 5), "[::1]:5");
        assert_eq!(host_port("10.0.0.1", 5), "10.0.0.1:5");
        assert_eq!(host_port("example.org", 5), "example.org:5");
    }
}
