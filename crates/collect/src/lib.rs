//! `vlbiflow xfer collect`: after a session the correlator pulls every station's scans of an experiment
//! over one link that cannot take all of them at full rate.
//!
//! [`sched`] decides, without any I/O, which station may start a pull and at what rate each runs.

pub mod sched;

pub use sched::{Event, PullEnd, SchedConfig, Scheduler, StationId, StationSpec};
