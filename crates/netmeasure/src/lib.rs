//! Network measurement for VLBI stations: UDPmon-style throughput, loss, jitter and latency tests,
//! TCP tests with CPU accounting, a responder for the far end, a SQLite archive and plots.
//!
//! Layout: sans-IO logic ([`stats`], [`proto`], [`search`], [`wire`], the parsers in [`host`]) is
//! tested deterministically; [`client`], [`responder`] and [`control`] do the socket work.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod archive;
pub mod client;
pub mod control;
pub mod host;
pub mod load;
pub mod plot;
pub mod proto;
pub mod responder;
pub mod search;
pub mod stats;
pub mod tcpinfo;
pub mod wire;

pub use client::{BwParams, BwResult, Client, LatParams, LatResult, NetError, Partial, TcpParams, TcpResult};
pub use responder::{Responder, ResponderConfig, ResponderCounters};
pub use search::ZeroLossSearch;
pub use stats::{ArrivalStats, ArrivalSummary};
