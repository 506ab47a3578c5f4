//! Errors of the transfer layer, by what the user should do about them (and the exit code the CLI gives).

/// What went wrong, in one sentence naming what and where.
#[derive(Debug, thiserror::Error)]
pub enum XferError {
    /// The request as given cannot work (arguments, local files): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// The peer refused: authentication failed, unknown root, path outside the roots, file exists: exit 3.
    #[error("{0}")]
    Refused(String),
    /// The transfer started but did not complete verified (network, peer died, disk): exit code 1.
    #[error("{0}")]
    Failed(String),
    /// A scan followed while it was recorded stopped growing and its recorder never marked it complete
    /// (the recorder died or was stopped uncleanly): what arrived is kept as `.part`; exit code 1.
    #[error("{0}")]
    Unfinished(String),
    /// Not now: the daemon runs as many transfers as it may, or another transfer is writing one of the
    /// files; nothing was written, retry later: exit code 4.
    #[error("{0}")]
    Busy(String),
    /// The daemon cannot be reached (nothing listens, no route), or a local file cannot be read: exit 5.
    #[error("{0}")]
    Io(String),
}

impl XferError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            XferError::Usage(_) => 2,
            XferError::Refused(_) => 3,
            XferError::Failed(_) | XferError::Unfinished(_) => 1,
            XferError::Busy(_) => 4,
            XferError::Io(_) => 5,
        }
    }
}

/// Shorthand for a [`XferError::Failed`] with a formatted message.
macro_rules! failed {
    ($($t:tt)*) => { $crate::error::XferError::Failed(format!($($t)*)) };
}
pub(crate) use failed;
