//! The daemons' HTTP side, one implementation for `vlbiflow serve`, `vlbiflow net hub` and
//! `vlbiflow xfer serve`:
//!
//! - [`serve`]: an axum [`Router`](axum::Router) on a TCP listener with a header-read timeout (a client
//!   that does not finish its request headers in time is disconnected, hyper's
//!   `http1::Builder::header_read_timeout`), a cap on open connections (a connection over the cap is
//!   closed as soon as it is accepted) and graceful shutdown on the daemon's stop signal;
//!   [`serve_with_tls`] the same on TLS ([`Tls`]: rustls, PEM certificate and key) with a handshake
//!   deadline.
//! - [`metrics`]: the `/metrics` endpoint in the Prometheus text format (version 0.0.4), encoded with
//!   `prometheus-client`, with `vlbiflow_build_info` and the standard process metrics added to the
//!   daemon's own families, behind an optional read-only metrics token.
//!
//! Naming follows <https://prometheus.io/docs/practices/naming/>: base units (bytes, seconds, ratios
//! 0-1), `_total` only on counters, `_timestamp_seconds` on Unix times.

pub mod metrics;
mod process;
mod server;

pub use metrics::{Asker, BuildInfo, Families, MetricsEndpoint};
pub use server::{serve, serve_with_tls, Limits, Tls, TlsError};
