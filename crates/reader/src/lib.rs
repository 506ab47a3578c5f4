//! Reading VLBI recordings: Mark6 scatter-gather (v1 and v2), FlexBuff chunks, plain VDIF and Mark5B files.
//!
//! Layers, from the disk up:
//! - [`source`]: locates the files of a scan (by name on disks, or given) and classifies them.
//! - [`read`]: one reader thread per file or disk, positioned reads of about 1 MiB into recycled buffers, a
//!   k-way merge by block number; structural damage becomes findings with file and offset and the readers
//!   resynchronise. Readers may also work on the blocks they read themselves (`BlockWork`: the checker
//!   validates there) and hand on only what they made of each block.
//! - [`framer`]: cuts the byte stream into frames, carries frames across reads, skips garbage.
//! - [`frames`]: a pull reader of whole frames over the two above; [`gather`] writes a scan out as one frame
//!   stream; [`ls`] lists the scans on disks.
//! - [`finding`]: what the readers report about a recording (damage, gaps, garbage), each with its position.
//!
//! The checker (`vlbiflow-checker`) drives the same pipeline into its continuity engine.

#![forbid(unsafe_code)]

pub mod finding;
pub mod framer;
pub mod frames;
pub mod gather;
pub mod ls;
pub mod read;
pub mod source;

pub use finding::{Finding, FindingKind, Position, Severity};
pub use source::{locate, LocateError, Recording};
