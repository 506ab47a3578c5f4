//! Network measurement for VLBI stations: UDPmon-style throughput, loss, jitter and latency tests,
//! TCP tests with CPU accounting, a responder for the far end, a SQLite archive and plots.
//!
//! Layout: sans-IO logic ([`stats`], [`proto`], [`search`], [`wire`], the parsers in [`host`]) is
//! tested deterministically; [`client`], [`responder`] and [`control`] do the socket work; [`sweep`]
//! runs series of tests (sweeps, the zero-loss search, CPU-load sweeps) with events for a front end,
//! and [`table`] renders their results as text.
//!
//! Features (both on by default): `archive` (the SQLite file, `archive::Archive`) and `plot`
//! (the `plot` module, PNG/SVG). Without them the protocol, the client, the responder and the sweeps remain.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod archive;
pub mod client;
pub mod control;
pub mod eff;
pub mod host;
pub mod load;
#[cfg(feature = "plot")]
pub mod plot;
pub mod proto;
pub mod responder;
pub mod search;
#[cfg(test)]
mod sim;
pub mod stats;
pub mod sweep;
pub mod table;
pub mod tcpinfo;
pub mod wire;

pub use client::{
    resolve_responder, BwParams, BwResult, Client, LatParams, LatResult, NetError, Partial, TcpParams,
    TcpResult, DEFAULT_PORT,
};
pub use responder::{Responder, ResponderConfig, ResponderCounters};
pub use search::ZeroLossSearch;
pub use stats::{ArrivalStats, ArrivalSummary};
pub use sweep::{
    BwReport, BwSweep, Report, Row, Spacing, SweepError, SweepEvent, SweepOptions, TcpSweep, ZeroLoss,
};
