//! Network monitoring for a VLBI network (`vlbiflow net agent`, `vlbiflow net hub`, `vlbiflow net
//! mesh`, `vlbiflow net capacity`).
//!
//! Layout: the sans-IO parts are [`config`] (the mesh TOML), [`timespec`] (ISO-8601 durations,
//! cron), [`plan`] (which run happens when: rounds, exclusivity on hosts and links, slip),
//! [`schedule`] (the agent's and the hub's state machines), [`alerts`] (hysteresis and no-data) and
//! [`dispersion`] (packet-pair/train capacity estimation). The I/O lives in [`agent`], [`hub`],
//! [`archive`] (SQLite or PostgreSQL), [`runner`] (the measurements), [`counters`] and [`capacity`].

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod archive;
pub mod config;
pub mod plan;
pub mod report;
pub mod schedule;
pub mod timespec;
