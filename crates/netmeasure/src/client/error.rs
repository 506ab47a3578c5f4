//! What a failed measurement says: the error, and what was measured before it.

use std::io;

use serde::{Deserialize, Serialize};
use vlbiflow_udp::SocketError;

use super::results::{BwLocal, LatPoint};
use crate::proto::ProtoError;

/// A measurement failure. [`NetError::Aborted`] keeps what was measured before the failure.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Control protocol failure.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// Test socket could not be opened.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// Other I/O failure.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Cause.
        source: io::Error,
    },
    /// Parameters that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// The test started but did not finish; `partial` holds the local measurements.
    #[error("test aborted after {}: {source}", partial.describe())]
    Aborted {
        /// What was measured.
        partial: Box<Partial>,
        /// Why it stopped.
        source: Box<NetError>,
    },
    /// Stopped by the user.
    #[error("interrupted")]
    Interrupted,
}

/// Local measurements of a test that did not finish.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum Partial {
    /// Sender side of a UDP throughput test.
    Bw(BwLocal),
    /// Latency points finished so far.
    Lat(Vec<LatPoint>),
    /// Sender side of a TCP test.
    Tcp {
        /// Bytes written per stream.
        bytes_sent: Vec<u64>,
        /// Seconds spent sending.
        duration_s: f64,
    },
}

impl Partial {
    fn describe(&self) -> String {
        match self {
            Partial::Bw(b) => format!(
                "sending {} of {} packets ({:.1} Mb/s)",
                b.sent, b.count, b.send_user_rate_mbps
            ),
            Partial::Lat(p) => format!("{} message sizes", p.len()),
            Partial::Tcp { bytes_sent, .. } => {
                format!("sending {} bytes", bytes_sent.iter().sum::<u64>())
            }
        }
    }
}
