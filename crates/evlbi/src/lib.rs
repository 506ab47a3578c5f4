//! Real-time e-VLBI I/O around the sans-IO core of `vlbiflow-realtime` (`docs/realtime.md`):
//!
//! - [`forward`]: forwarding while recording (a [`vlbiflow_recorder::FrameTap`]) or relaying: per
//!   destination a lock-free ring ([`ring`]), a thread filter, each frame's PSN its position in the
//!   stream, gap notices, token-bucket pacing and a sender thread (`udps`, plain VDIF, or TCP with
//!   reconnection); drops counted and declared, never waited for.
//! - [`receive`]: the correlator side: reorder within a window, fill exactly what did not arrive in time,
//!   deliver to a file, UDP port, FIFO or Unix socket ([`output`]).
//! - [`relay`]: net2net: receive, optionally reorder, restamp, fan out.
//! - [`play`]: disk2net: replay a recording at its original rate from its time stamps, or at a set rate.
//! - [`dest`]: destination specifications.

pub mod dest;
pub mod forward;
pub mod output;
pub mod play;
pub mod receive;
pub mod relay;
pub mod ring;

pub use dest::{DestSpec, Protocol};
pub use forward::{DestStatus, ForwardSource, ForwardTap, Forwarder};
pub use output::{Output, OutputSpec};
pub use play::{run_play, PlayConfig, PlayRate, PlayStatus};
pub use receive::{run_receive, InputProtocol, KeyChoice, ReceiveConfig, ReceiveStatus};
pub use relay::{run_relay, RelayConfig, RelayReorder, RelayStatus};
