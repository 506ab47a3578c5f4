//! Transport-efficiency tests on the control connection: the messages and the hook through which a
//! responder runs their receiving end.
//!
//! Protocol (on the control connection of [`crate::proto`]): `EffProbe` -> `EffTransports` (what the
//! responder's kernel offers); `EffStart(EffSetup)` -> `EffReady { ports }` -> traffic ->
//! `EffFinish { sent }` -> `EffResult`. The measuring itself (the receive paths, the sender, the
//! energy meter, series and summaries) lives in the `vlbiflow-efficiency` crate, which plugs its
//! receiving end into a responder through [`EffService`]
//! ([`crate::ResponderConfig::efficiency`]). A responder without one answers the probe with every
//! transport unavailable and refuses the setup.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use vlbiflow_rx::{RxStats, Transport};

use crate::host::{CpuSeconds, ProcessCpu};

/// Most flows one test may use.
pub const MAX_STREAMS: u32 = 512;
/// Smallest UDP datagram (the 8-byte sequence number and a little payload).
pub const MIN_SIZE: usize = 16;
/// Largest UDP datagram.
pub const MAX_SIZE: usize = 65_507;
/// Longest test.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// What the receiving end needs to set a test up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffSetup {
    /// Receive path.
    pub transport: Transport,
    /// Flows (UDP sockets or TCP connections).
    pub streams: u32,
    /// UDP datagram size in bytes (sequence number included); TCP: bytes per message.
    pub size: usize,
    /// How long the sender sends, ms.
    pub duration_ms: u64,
    /// Receive buffer per UDP socket, bytes (TCP: left to autotuning).
    pub recv_buffer: Option<usize>,
}

impl EffSetup {
    /// Checks the numbers; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_STREAMS).contains(&self.streams) {
            return Err(format!("streams {} outside 1..={MAX_STREAMS}", self.streams));
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            return Err(format!("size {} outside {MIN_SIZE}..={MAX_SIZE}", self.size));
        }
        if self.duration_ms == 0 || self.duration_ms > MAX_DURATION.as_millis() as u64 {
            return Err(format!(
                "duration {} ms outside 1..={} ms",
                self.duration_ms,
                MAX_DURATION.as_millis()
            ));
        }
        Ok(())
    }
}

/// Whether the responder offers a transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// The transport.
    pub transport: Transport,
    /// None when available, else why not.
    pub unavailable: Option<String>,
}

/// Energy used over an interval (RAPL).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Joules over all package zones (DRAM zones included when the host reports them under a package).
    pub joules: f64,
    /// Joules per zone, named as the kernel names them, e.g. `intel-rapl:0 package-0`.
    pub zones: Vec<(String, f64)>,
}

/// Machine-wide and process counters of one end over one test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndUsage {
    /// The thread that sent or received.
    pub thread: ProcessCpu,
    /// The whole process over the test.
    pub process: ProcessCpu,
    /// The whole host over the test (all processes, all CPUs).
    pub host: CpuSeconds,
    /// Seconds the host counters cover.
    pub interval_s: f64,
    /// RAPL energy over the same interval, where readable.
    pub energy: Option<Energy>,
    /// Why there is no energy figure (e.g. "not readable here: ...").
    pub energy_note: Option<String>,
    /// The kernel's boot id (equal at both ends: one host).
    pub boot_id: String,
}

/// What the receiving end reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffRemote {
    /// How the receive path was set up (e.g. io_uring flags, buffers).
    pub detail: String,
    /// The receive path's counters.
    pub rx: RxStats,
    /// Datagrams (TCP: reads) received.
    pub received: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// UDP: datagrams missing from the flows' sequences (summed over flows).
    pub lost: u64,
    /// UDP: datagrams that arrived after a later one.
    pub out_of_order: u64,
    /// UDP: datagrams seen twice.
    pub duplicates: u64,
    /// Seconds from the first to the last data received.
    pub active_s: f64,
    /// The receiving end's CPU and energy.
    pub usage: EndUsage,
}

/// The receiving end of efficiency tests, as a responder runs it.
pub trait EffService: Send + Sync + std::fmt::Debug {
    /// What this host offers, probed now (the reply to `EffProbe`).
    fn transports(&self) -> Vec<Availability>;

    /// Opens the sockets of `setup` on `ip` and starts receiving; the message says why not.
    fn start(
        &self,
        setup: &EffSetup,
        ip: IpAddr,
        default_recv_buffer: usize,
    ) -> Result<Box<dyn EffReceive>, String>;
}

/// One efficiency test being received.
pub trait EffReceive: Send {
    /// Ports to send to (one per flow for UDP; one listening port for TCP).
    fn ports(&self) -> Vec<u16>;

    /// Kernel-granted receive buffer per UDP socket, bytes (0 for TCP).
    fn granted_buffer(&self) -> usize;

    /// The sender is done: drain what is still arriving, then return the result.
    fn finish(self: Box<Self>) -> Result<EffRemote, String>;

    /// Abandons the test.
    fn abort(self: Box<Self>);
}

/// Every transport unavailable: the probe answer of a responder without an [`EffService`].
pub fn none_offered() -> Vec<Availability> {
    Transport::ALL
        .iter()
        .map(|&t| Availability {
            transport: t,
            unavailable: Some(NOT_SERVED.into()),
        })
        .collect()
}

/// Why a responder without an [`EffService`] refuses efficiency tests.
pub const NOT_SERVED: &str = "this responder does not run efficiency tests (vlbiflow net responder does)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_checks_name_the_field() {
        let ok = EffSetup {
            transport: Transport::Udp,
            streams: 1,
            size: 1472,
            duration_ms: 100,
            recv_buffer: None,
        };
        assert!(ok.validate().is_ok());
        let e = EffSetup {
            streams: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("streams"), "{e}");
        let e = EffSetup {
            size: 8,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("size"), "{e}");
        let e = EffSetup { duration_ms: 0, ..ok }.validate().unwrap_err();
        assert!(e.contains("duration"), "{e}");
    }
}
