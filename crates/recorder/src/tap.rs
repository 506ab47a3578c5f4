//! A frame tap: something that sees every recorded frame of a stream on the capture thread, right after
//! the frame was stored in its block (forwarding while recording, `vlbiflow-evlbi`).
//!
//! The recording has priority: a tap must return at once (copy what it needs, count what it cannot take,
//! never block, allocate or lock per frame). Frames dropped for want of a block buffer are not recorded and
//! are not shown to the tap.

/// Sees the frames a stream records; see the module docs. Installed with
/// [`Recorder::start_with_taps`](crate::Recorder::start_with_taps).
pub trait FrameTap: Send {
    /// `frames` holds a whole number of the stream's frames (its frame size each, packet sequence number
    /// stripped), in arrival order, as just stored. Called one or more times per received batch.
    fn stored(&mut self, frames: &[u8]);
}
