//! Network monitoring for a VLBI network (`vlbiflow net agent`, `vlbiflow net hub`, `vlbiflow net
//! mesh`, `vlbiflow net capacity`).
//!
//! Layout: the sans-IO parts are [`config`] (the mesh TOML), [`timespec`] (ISO-8601 durations,
//! cron), [`plan`] (which run happens when: rounds, exclusivity on hosts and links, slip),
//! [`schedule`] (the agent's and the hub's state machines), [`alerts`] (hysteresis and no-data),
//! [`auth`] (MACs between agents and hub), [`dispersion`] (capacity from packet pairs and trains)
//! and the parsers of [`counters`]. The I/O: [`agent`], [`hub`] (with its pages, [`plots`] and
//! `/metrics`), [`archive`] (SQLite or PostgreSQL), [`runner`] (one run's measurement),
//! [`capacity`] (the probes), [`hops`] (TTL-limited trains, hop by hop), [`api`] (the read API's client)
//! and [`tls`] (the HTTP clients' TLS; the archive's is in [`archive`]). See docs/mesh.md.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod agent;
pub mod alerts;
pub mod api;
pub mod archive;
pub mod auth;
pub mod capacity;
pub mod config;
pub mod counters;
pub mod dispersion;
pub mod escape;
pub mod hops;
pub mod hub;
pub mod plan;
pub mod plots;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod timespec;
pub mod tls;
