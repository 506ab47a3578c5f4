//! Checking and exporting VLBI recordings: Mark6 scatter-gather (v1 and v2), FlexBuff chunks, plain VDIF
//! and Mark5B files.
//!
//! Layers, from the disk up:
//! - [`source`]: locates the files of a scan (by name on disks, or given) and classifies them.
//! - [`read`]: one reader thread per file or disk, large positioned reads into recycled buffers, a k-way merge
//!   by block number; structural damage becomes findings with file and offset and the readers resynchronise.
//! - [`framer`]: cuts the byte stream into frames, carries frames across reads, skips garbage.
//! - [`engine`]: the sans-IO continuity and consistency checker; [`stats`]: sample statistics and spectra.
//! - [`report`]: runs a check and renders its verdict; [`gather`] writes a scan out as one frame stream;
//!   [`ls`] lists the scans on disks.

#![forbid(unsafe_code)]

pub mod engine;
pub mod finding;
pub mod framer;
pub mod frames;
pub mod gather;
pub mod ls;
pub mod plot;
pub mod read;
pub mod report;
pub mod source;
pub mod stats;

pub use engine::{CheckConfig, Checker, EngineReport};
pub use finding::{Finding, FindingKind, Position, Severity};
pub use report::{check, Report};
pub use source::{locate, LocateError, Recording};
pub use stats::StatsConfig;
