//! A frame tap: something that sees every recorded frame of a stream on the capture thread, right after
//! the frame was stored in its block (forwarding while recording, `vlbiflow-evlbi`).
//!
//! The recording has priority: a tap must return at once (copy what it needs, count what it cannot take,
//! never block, allocate or lock per frame). Frames dropped for want of a block buffer are not recorded;
//! the tap is told of each with its PSN and header, so a forwarder can leave a hole at its place.

/// Bytes of a frame's header handed to [`FrameTap::unstored`] (a VDIF legacy header, or a Mark5B header).
pub const TAP_HEADER_LEN: usize = 16;

/// Sees the frames a stream records; see the module docs. Installed with
/// [`Recorder::start_with_taps`](crate::Recorder::start_with_taps).
pub trait FrameTap: Send {
    /// `frames` holds a whole number of the stream's frames (its frame size each, packet sequence number
    /// stripped), in arrival order, as just stored; `psns` their packet sequence numbers, one per frame,
    /// when the stream has them (`,psn`). Called one or more times per received batch.
    fn stored(&mut self, frames: &[u8], psns: Option<&[u64]>);

    /// A frame of the stream that arrived and was not stored for want of a buffer: its PSN (PSN streams)
    /// and the first [`TAP_HEADER_LEN`] bytes of the frame. Called after the batch's stored frames, in
    /// arrival order (a batch stores frames until it runs out of buffers, then stores none).
    fn unstored(&mut self, psn: Option<u64>, header: &[u8; TAP_HEADER_LEN]);
}
