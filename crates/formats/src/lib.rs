//! Byte layouts of VLBI data: VDIF and Mark5B frames, Mark6 scatter-gather files and FlexBuff chunks.
//!
//! Every layout is a typed, zero-copy view over a byte buffer in the style of smoltcp's `wire` module:
//! `new_unchecked` wraps bytes without looking at them, `new_checked` verifies that every accessor will
//! stay in bounds and that the fields are self-consistent, getters read fields in place and setters write
//! them in place. A `*Repr` type is the parsed, owned form of a header with `parse` (view -> repr, with
//! validation that names the offending field) and `emit` (repr -> bytes).
//!
//! Nothing here allocates, locks or formats on the per-frame path; errors are small `Copy` values.

#![forbid(unsafe_code)]

pub mod error;
pub mod fill;
pub mod flexbuff;
pub mod kind;
pub mod mark5b;
pub mod mark6;
pub mod names;
pub mod notice;
pub mod psn;
pub mod samples;
pub mod time;
pub mod vdif;
pub mod vex_time;

pub use error::{Error, Result};
pub use kind::{FrameKind, UnknownFrameKind};
pub use names::validate_scan_name;
