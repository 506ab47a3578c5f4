//! A path emulator for tests and benchmarks: two network namespaces joined through a user-space forwarder
//! on TUN devices that adds delay and jitter, random and bursty (Gilbert-Elliott) loss, a rate limit and
//! a drop-tail queue, at jumbo MTU, and logs every packet it drops. It stands in for netem, which this
//! project's kernels lack.
//!
//! - [`model`]: the sans-IO per-direction link model (fed packets with their arrival time, polled for the
//!   packets due), deterministic under a seed and simulated time.
//! - [`packet`]: the drop log's view of a packet (protocol, addresses, ports, first payload bytes) and its
//!   CSV / JSON-lines formatting.
//! - [`emu`]: the I/O layer: namespaces, TUN devices, one forwarding thread per direction, the drop-log
//!   writer. `vlbiflow pathemu` is its command line; `docs/pathemu.md` the manual.

pub mod emu;
/// The sans-IO link model (its own crate, free of I/O, so that simulators use it too).
pub use vlbiflow_pathmodel as model;
pub mod packet;
pub mod sys;

pub use emu::{DirReport, Emulator, Error, PathConfig, Report, DEFAULT_WAKE_EVERY};
pub use model::{Counters, DropReason, Link, LinkConfig, LossModel, Nanos, Verdict};
pub use packet::{Direction, DropRecord, LogFormat, PacketSummary};
