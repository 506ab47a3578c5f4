//! Subcommands. Each module: `Args` (clap) and `run(Args) -> anyhow::Result<ExitCode>`.

pub mod check;
pub mod ctl;
pub mod demo;
pub mod efficiency;
pub mod gather;
pub mod gen;
pub mod ls;
pub mod mesh;
pub mod net;
pub mod pathemu;
pub mod play;
pub mod receive;
pub mod record;
pub mod relay;
pub mod serve;
pub mod sink;
pub mod status;
pub mod xfer;

/// An error in what the user asked for (arguments, configuration): reported in one line, exit code 2,
/// before anything is sent or written.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A failure with its own exit status (other than 1, and 2 which is [`UsageError`]'s): reported in one line
/// like every error, the process then exits with `code`.
#[derive(Debug)]
pub struct ExitError {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for ExitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}

/// The exit status of a failed subcommand: 2 for a [`UsageError`], an [`ExitError`]'s own, else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<UsageError>().is_some() {
        2
    } else if let Some(x) = e.downcast_ref::<ExitError>() {
        x.code
    } else {
        1
    }
}

/// Returns early with a [`UsageError`].
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => { return Err(anyhow::Error::new($crate::cmd::UsageError(format!($($t)*)))) };
}
