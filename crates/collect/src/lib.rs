//! `vlbiflow xfer collect`: after a session the correlator pulls every station's scans of an experiment
//! over one link that cannot take all of them at full rate.
//!
//! - [`sched`] decides, without any I/O, which station may start a pull and at what rate each runs.
//! - [`config`] reads the experiment's TOML file (and the scan names of a VEX file's `$SCHED`).
//! - [`state`] keeps what has arrived in an SQLite archive under the destination, so that a restarted
//!   collect resumes where it was.
//! - [`run`] drives the pulls: discovery (`ls`), pulls with a live rate cap, `--follow` of scans still
//!   recording, retries with resume, the status file and the metrics.

pub mod config;
pub mod run;
pub mod sched;
pub mod state;
pub mod status;

pub use config::CollectConfig;
pub use sched::{Event, PullEnd, SchedConfig, Scheduler, StationId, StationSpec};
