//! One error type for every layout: each variant names the field or structure at fault, so a caller can
//! print it with the file name and offset it knows and the user learns exactly what is wrong.

/// An error found while checking or building a frame, header or file structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the structure does.
    #[error("{what} truncated: needs {need} bytes, buffer has {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// A field holds a value outside what the layout allows.
    #[error("{field} out of range: {value} (allowed {allowed})")]
    OutOfRange {
        field: &'static str,
        value: u64,
        allowed: &'static str,
    },
    /// A length is not a multiple of the unit the format requires.
    #[error("{field} {value} is not a multiple of {unit}")]
    NotMultiple {
        field: &'static str,
        value: u64,
        unit: u64,
    },
    /// A length or size field disagrees with the bytes actually present.
    #[error("{field} says {header} bytes but the buffer holds {actual}")]
    LengthMismatch {
        field: &'static str,
        header: u64,
        actual: u64,
    },
    /// A sync word or magic number is wrong.
    #[error("bad {what} sync word: found {found:#010x}, expected {expected:#010x}")]
    BadSync {
        what: &'static str,
        found: u32,
        expected: u32,
    },
    /// A checksum does not match the content.
    #[error("bad {what} CRC: header has {found:#06x}, computed {computed:#06x}")]
    BadCrc {
        what: &'static str,
        found: u16,
        computed: u16,
    },
    /// A field holds a value that is representable but not valid in context.
    #[error("invalid {field}: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

pub type Result<T> = core::result::Result<T, Error>;
