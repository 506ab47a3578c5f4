//! Sans-IO core of `vlbiflow xfer`: rate-controlled, verified, resumable bulk transfer over UDP.
//!
//! No sockets, files, threads or clocks inside: [`Sender`] and [`Receiver`] are state machines driven by
//! datagrams, control messages and the `now` the caller passes in; they ask the I/O layer for file bytes
//! ([`Transmit`]) and hand it the bytes to write ([`Delivery`]). See `docs/xfer-protocol.md`.

#![forbid(unsafe_code)]

pub mod event;
pub mod hash;
pub mod rate;
pub mod receiver;
pub mod sender;
pub mod timing;
mod window;
pub mod wire;

pub use event::Event;
pub use rate::{RateConfig, RateMode};
pub use receiver::{Delivery, Receiver, ReceiverConfig, ReceiverStats};
pub use sender::{Sender, SenderConfig, SenderStats, Transmit};
pub use wire::{AbortKind, ChunkHash, ControlMsg};
