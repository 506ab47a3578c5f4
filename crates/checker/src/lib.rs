//! Checking VLBI recordings: the continuity and consistency checker, sample statistics, spectra and plots,
//! over the readers of `vlbiflow-reader` (Mark6 scatter-gather, FlexBuff, plain VDIF and Mark5B).
//!
//! - [`engine`]: the sans-IO continuity and consistency checker; [`stats`]: sample statistics and spectra;
//!   [`plot`]: spectra as PNG.
//! - [`report`]: runs a check (readers, framer, engine) and renders its verdict.

#![forbid(unsafe_code)]

mod blocks;
pub mod engine;
mod parallel;
pub mod plot;
pub mod report;
pub mod stats;

pub use engine::{CheckConfig, Checker, EngineReport};
pub use report::{check, Report};
pub use stats::StatsConfig;
