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

/// Returns early with a [`UsageError`].
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => { return Err(anyhow::Error::new($crate::cmd::UsageError(format!($($t)*)))) };
}
