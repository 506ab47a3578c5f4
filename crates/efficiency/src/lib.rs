//! What receiving a stream costs, per transport: the same stream, `streams` flows of `size`-byte
//! datagrams (or TCP connections) sent flat out or at a set aggregate rate for a fixed time by one sender
//! thread, received by one thread of the responder over each transport of [`vlbiflow_rx::Transport`]. Per
//! test: Gb/s delivered, loss (from each flow's packet sequence numbers), CPU seconds per GB of the sending
//! and the receiving thread (user and system, from `getrusage(RUSAGE_THREAD)`), of both processes and of
//! the whole host (user, system, softirq from `/proc/stat`), and energy per GB and Gb/s per Watt from RAPL
//! where the host exposes it.
//!
//! The messages are those of [`vlbiflow_net::eff`]; a responder runs the receiving end when given
//! [`Service`] ([`vlbiflow_net::ResponderConfig::efficiency`]). [`run_series`] runs every transport
//! `repeats` times, alternating the order (A B C, C B A, ...) so that a machine whose load drifts favours
//! none, and [`summarise`] reduces the repeats to medians with their spread.
//!
//! Accounting notes, also shown with the results: the kernel's receive work for a datagram (IP, UDP,
//! socket queueing) runs in softirq, on loopback and veth mostly on the *sending* CPU, inside the sender's
//! system call; with tick-based accounting (no IRQ_TIME_ACCOUNTING) such ticks count as softirq in
//! `/proc/stat` and as system time of the thread that was running. Thread figures are therefore the
//! cost each end's thread carried, and the host figures (machine-wide, all processes) the whole cost,
//! noisy on a shared machine.
//!
//! Feature `plot` (on by default): the [`plot`] module (PNG/SVG).

#![deny(clippy::undocumented_unsafe_blocks)]

mod meter;
#[cfg(feature = "plot")]
pub mod plot;
pub mod power;
pub mod receive;
pub mod send;
pub mod series;
pub mod table;

pub use receive::{probe_all, Receiving, Service};
pub use send::{send, send_measured, EffParams, SendOutcome, TURN};
pub use series::{
    order, run_series, run_test, summarise, EffEvent, EffMetrics, EffReport, EffResult, TransportSummary,
};
pub use table::table_lines;
pub use vlbiflow_net::eff::{
    Availability, EffRemote, EffSetup, EndUsage, Energy, MAX_DURATION, MAX_SIZE, MAX_STREAMS, MIN_SIZE,
};

/// A responder configuration that also serves efficiency tests.
pub fn with_service(mut config: vlbiflow_net::ResponderConfig) -> vlbiflow_net::ResponderConfig {
    config.efficiency = Some(std::sync::Arc::new(Service));
    config
}
