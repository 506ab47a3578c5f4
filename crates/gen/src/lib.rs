//! The simulated VDIF backend behind `vlbiflow gen`: what SimulateDeviceTX does for Mark6 tests and
//! fill2net for jive5ab, with exact time stamps, real-looking payloads and accurate pacing.
//!
//! - [`plan`] checks a request and resolves frame rates and the header template;
//! - [`sequencer`] yields time-stamped headers in a backend's thread order (sans-IO);
//! - [`payload`] synthesises zeros, quantised noise or noise with a tone;
//! - [`net`] sends paced batches to UDP destinations; [`file`] writes the same frames to a file.

#![forbid(unsafe_code)]

pub mod file;
pub mod net;
pub mod payload;
pub mod plan;
pub mod sequencer;

pub use plan::{GenPlan, GenRequest, PayloadKind, PlanError, RateRequest, StartTime, StopAfter};

use serde::Serialize;

/// What a run did, for the progress line, the closing summary and `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenSummary {
    /// Streams (destinations) sent to.
    pub streams: usize,
    /// Frames sent or written, all streams.
    pub frames: u64,
    /// Frames left out on purpose (`--drop-every`), all streams.
    pub dropped: u64,
    /// Frame bytes (VDIF headers included, PSN and UDP/IP headers not), all streams.
    pub bytes: u64,
    /// Datagram bytes handed to the kernel (frames plus PSN), all streams.
    pub datagram_bytes: u64,
    /// Wall-clock seconds from the first frame to now/the end.
    pub elapsed_s: f64,
    /// Requested frame bit rate, all streams.
    pub requested_bps: f64,
    /// Achieved frame bit rate, all streams, over the whole run.
    pub achieved_bps: f64,
    /// Whole 1 s windows measured by the pacer.
    pub windows: u64,
    /// Largest relative error of any whole 1 s window against the requested rate (0.001 = 0.1%).
    pub worst_window_error: f64,
    /// Send calls retried after ENOBUFS/EAGAIN (the kernel's queue was full).
    pub send_retries: u64,
    /// Largest lateness of a batch against its schedule, seconds.
    pub max_late_s: f64,
    /// Stopped by a signal or a stop request before the planned end.
    pub interrupted: bool,
    /// The machine could not keep up with the requested rate.
    pub cannot_keep_up: bool,
    /// The wall-clock duration ended before every planned frame was sent (the machine was behind).
    pub cut_short: bool,
}

impl GenSummary {
    /// An empty summary for `streams` streams of `plan`.
    pub fn new(plan: &GenPlan, streams: usize) -> Self {
        GenSummary {
            streams,
            requested_bps: plan.frame_bits_per_second() * streams as f64,
            ..Default::default()
        }
    }

    /// Fills the derived fields for `elapsed` seconds.
    pub fn finish(&mut self, plan: &GenPlan, elapsed: f64) {
        self.elapsed_s = elapsed;
        self.bytes = self.frames * plan.request.frame_size as u64;
        self.datagram_bytes = self.frames * plan.datagram_len as u64;
        self.achieved_bps = if elapsed > 0.0 {
            self.bytes as f64 * 8.0 / elapsed
        } else {
            0.0
        };
    }
}
