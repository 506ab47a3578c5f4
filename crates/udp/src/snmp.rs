//! The kernel's UDP counters from `/proc/net/snmp` (per network namespace): how many datagrams the
//! stack received, dropped for lack of receive-buffer room, and so on. Reading them before and after a
//! run tells whether losses happened in the kernel rather than on the wire.

use std::path::{Path, PathBuf};

/// Where the kernel publishes the counters.
pub const SNMP_PATH: &str = "/proc/net/snmp";

/// The `Udp:` counters of `/proc/net/snmp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// Datagrams delivered to sockets.
    pub in_datagrams: u64,
    /// Datagrams for ports nobody listens on.
    pub no_ports: u64,
    /// Datagrams dropped on receive for any reason (includes `rcvbuf_errors`).
    pub in_errors: u64,
    /// Datagrams sent.
    pub out_datagrams: u64,
    /// Datagrams dropped because a socket receive buffer was full.
    pub rcvbuf_errors: u64,
    /// Sends that failed for lack of send-buffer room.
    pub sndbuf_errors: u64,
    /// Datagrams with a bad checksum.
    pub in_csum_errors: u64,
    /// Multicast/broadcast datagrams no socket wanted.
    pub ignored_multi: u64,
    /// Datagrams dropped because the socket memory limit (`net.ipv4.udp_mem`) was exceeded.
    pub mem_errors: u64,
}

/// Failure reading or parsing the counters.
#[derive(Debug, thiserror::Error)]
pub enum SnmpError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file has no `Udp:` header and value line pair.
    #[error("{path}: no \"Udp:\" header and value lines")]
    NoUdpLines { path: PathBuf },
    /// A column this crate needs is absent.
    #[error("{path}: \"Udp:\" lines have no {column} column")]
    MissingColumn { path: PathBuf, column: &'static str },
    /// Header and value lines have different numbers of fields.
    #[error("{path}: \"Udp:\" header has {names} columns but the value line has {values}")]
    ColumnCount {
        path: PathBuf,
        names: usize,
        values: usize,
    },
    /// A value is not a non-negative integer.
    #[error("{path}: \"Udp:\" column {column} value {value:?} is not a non-negative integer")]
    BadValue {
        path: PathBuf,
        column: String,
        value: String,
    },
}

const COLUMNS: [&str; 9] = [
    "InDatagrams",
    "NoPorts",
    "InErrors",
    "OutDatagrams",
    "RcvbufErrors",
    "SndbufErrors",
    "InCsumErrors",
    "IgnoredMulti",
    "MemErrors",
];

impl UdpCounters {
    /// Reads the counters of the current network namespace.
    pub fn read() -> Result<Self, SnmpError> {
        Self::read_from(Path::new(SNMP_PATH))
    }

    /// Reads the counters from a file in `/proc/net/snmp` format.
    pub fn read_from(path: &Path) -> Result<Self, SnmpError> {
        let text = std::fs::read_to_string(path).map_err(|source| SnmpError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses `/proc/net/snmp` text; `path` only names the source in errors. The first two lines
    /// starting with exactly `Udp:` are the header and the values; unknown columns are ignored.
    pub fn parse(text: &str, path: &Path) -> Result<Self, SnmpError> {
        let mut udp = text.lines().filter_map(|l| l.strip_prefix("Udp:"));
        let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
            return Err(SnmpError::NoUdpLines {
                path: path.to_path_buf(),
            });
        };
        let names: Vec<&str> = names.split_whitespace().collect();
        let values: Vec<&str> = values.split_whitespace().collect();
        if names.len() != values.len() {
            return Err(SnmpError::ColumnCount {
                path: path.to_path_buf(),
                names: names.len(),
                values: values.len(),
            });
        }
        let mut found = [None; COLUMNS.len()];
        for (name, value) in names.iter().zip(&values) {
            if let Some(k) = COLUMNS.iter().position(|c| c == name) {
                let v = value.parse::<u64>().map_err(|_| SnmpError::BadValue {
                    path: path.to_path_buf(),
                    column: name.to_string(),
                    value: value.to_string(),
                })?;
                found[k] = Some(v);
            }
        }
        let get = |k: usize| {
            found[k].ok_or_else(|| SnmpError::MissingColumn {
                path: path.to_path_buf(),
                column: COLUMNS[k],
            })
        };
        Ok(UdpCounters {
            in_datagrams: get(0)?,
            no_ports: get(1)?,
            in_errors: get(2)?,
            out_datagrams: get(3)?,
            rcvbuf_errors: get(4)?,
            sndbuf_errors: get(5)?,
            in_csum_errors: get(6)?,
            ignored_multi: get(7)?,
            mem_errors: get(8)?,
        })
    }

    /// Counts since `earlier` (saturating at 0 if a counter went backwards, e.g. a namespace change).
    pub fn delta(&self, earlier: &UdpCounters) -> UdpCounters {
        UdpCounters {
            in_datagrams: self.in_datagrams.saturating_sub(earlier.in_datagrams),
            no_ports: self.no_ports.saturating_sub(earlier.no_ports),
            in_errors: self.in_errors.saturating_sub(earlier.in_errors),
            out_datagrams: self.out_datagrams.saturating_sub(earlier.out_datagrams),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(earlier.rcvbuf_errors),
            sndbuf_errors: self.sndbuf_errors.saturating_sub(earlier.sndbuf_errors),
            in_csum_errors: self.in_csum_errors.saturating_sub(earlier.in_csum_errors),
            ignored_multi: self.ignored_multi.saturating_sub(earlier.ignored_multi),
            mem_errors: self.mem_errors.saturating_sub(earlier.mem_errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 12345
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 2 30 4000 25 6 1 8 4
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 9 9 9 9 9 9 9 9 9
";

    fn p(text: &str) -> Result<UdpCounters, SnmpError> {
        UdpCounters::parse(text, Path::new("/proc/net/snmp"))
    }

    #[test]
    fn parses_udp_and_not_udplite() {
        let c = p(SAMPLE).unwrap();
        assert_eq!(
            c,
            UdpCounters {
                in_datagrams: 1000,
                no_ports: 2,
                in_errors: 30,
                out_datagrams: 4000,
                rcvbuf_errors: 25,
                sndbuf_errors: 6,
                in_csum_errors: 1,
                ignored_multi: 8,
                mem_errors: 4,
            }
        );
    }

    #[test]
    fn unknown_columns_ignored_and_order_free() {
        let text = "Udp: Future MemErrors IgnoredMulti InCsumErrors SndbufErrors RcvbufErrors OutDatagrams \
                    InErrors NoPorts InDatagrams\nUdp: 77 9 8 7 6 5 4 3 2 18446744073709551615\n";
        let c = p(text).unwrap();
        assert_eq!(c.in_datagrams, u64::MAX);
        assert_eq!(c.mem_errors, 9);
        assert_eq!(c.no_ports, 2);
    }

    #[test]
    fn errors_name_the_problem() {
        let missing = SAMPLE.replace(
            " MemErrors\nUdp: 1000 2 30 4000 25 6 1 8 4",
            "\nUdp: 1000 2 30 4000 25 6 1 8",
        );
        let e = p(&missing).unwrap_err();
        assert!(
            matches!(
                e,
                SnmpError::MissingColumn {
                    column: "MemErrors",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("MemErrors"));

        let e = p("Ip: 1\n").unwrap_err();
        assert!(matches!(e, SnmpError::NoUdpLines { .. }), "{e}");

        let e = p("Udp: InDatagrams NoPorts\nUdp: 1\n").unwrap_err();
        assert!(
            matches!(
                e,
                SnmpError::ColumnCount {
                    names: 2,
                    values: 1,
                    ..
                }
            ),
            "{e}"
        );

        let e = p(&SAMPLE.replace("Udp: 1000", "Udp: -1")).unwrap_err();
        assert!(
            e.to_string().contains("InDatagrams") && e.to_string().contains("\"-1\""),
            "{e}"
        );
    }

    #[test]
    fn delta_subtracts_and_saturates() {
        let later = p(SAMPLE).unwrap();
        let earlier = UdpCounters {
            in_datagrams: 400,
            rcvbuf_errors: 5,
            mem_errors: 10,
            ..later
        };
        let d = later.delta(&earlier);
        assert_eq!(d.in_datagrams, 600);
        assert_eq!(d.rcvbuf_errors, 20);
        assert_eq!(d.mem_errors, 0);
        assert_eq!(d.out_datagrams, 0);
    }

    #[test]
    fn reads_live_file() {
        let a = UdpCounters::read().unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.send_to(b"x", sock.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 4];
        sock.recv(&mut buf).unwrap();
        let d = UdpCounters::read().unwrap().delta(&a);
        assert!(d.out_datagrams >= 1 && d.in_datagrams >= 1, "{d:?}");
        let e = UdpCounters::read_from(Path::new("/nonexistent/snmp")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/snmp"));
    }
}
