//! Network monitoring for a VLBI network (`vlbiflow net agent`, `vlbiflow net hub`, `vlbiflow net
//! mesh`, `vlbiflow net capacity`).
//!
//! Layout: the sans-IO parts are [`config`] (the mesh TOML), [`timespec`] (ISO-8601 durations,
//! cron), [`plan`] (which run happens when: rounds, exclusivity on hosts and links, slip),
//! [`schedule`] (the agent's and the hub's state machines) and [`alerts`] (hysteresis and no-data);
//! [`archive`] stores runs on SQLite or PostgreSQL. See docs/mesh.md for what is built so far.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod alerts;
pub mod archive;
pub mod auth;
pub mod config;
pub mod dispersion;
pub mod plan;
pub mod report;
pub mod schedule;
pub mod timespec;
