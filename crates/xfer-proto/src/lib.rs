//! Sans-IO core of `vlbiflow xfer`: rate-controlled, verified, resumable bulk transfer over UDP.
//!
//! No sockets, files, threads or clocks inside: [`Sender`](sender::Sender) and
//! [`Receiver`](receiver::Receiver) are state machines driven by datagrams, control messages and the
//! `now` the caller passes in. See `docs/xfer-protocol.md`.

pub mod rate;
pub mod wire;
