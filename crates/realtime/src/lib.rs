//! Real-time e-VLBI as sans-IO state machines (quinn-proto style): driven by events and a clock that the
//! caller supplies, with every socket, file and FIFO outside. See `docs/realtime.md` for the design.
//!
//! - [`reorder::Reorderer`]: the correlator side. Frames keyed by PSN or VDIF time come in out of order,
//!   duplicated or not at all; a continuous, ordered stream goes out, with a fill frame at exactly the keys
//!   that did not arrive in time.
//! - [`forward::ForwardQueue`]: one per forwarding destination on the station side. A bounded ring with
//!   token-bucket pacing; offering a frame never blocks, a full queue drops and counts.
//! - [`latency::LatencyHistogram`]: end-to-end latency from a frame's VDIF time stamp to its arrival, with
//!   the host-minus-backend clock offset stated.
//!
//! Nothing here allocates, locks or formats per frame: rings and bitmaps are sized at construction.

#![forbid(unsafe_code)]

pub mod forward;
pub mod latency;
pub mod pace;
pub mod position;
pub mod reorder;

pub use forward::{ForwardConfig, ForwardCounters, ForwardQueue};
pub use latency::{LatencyBin, LatencyHistogram, LatencySummary};
pub use pace::TokenBucket;
pub use reorder::{Arrival, Busy, FillMode, KeyMode, OutputKind, ReorderConfig, ReorderCounters, Reorderer};
