//! The access token of `serve`, `ctl` and `status`: from a file (`--token-file`) or `$VLBIFLOW_TOKEN`,
//! never from the command line, which every user of the host can read in /proc/PID/cmdline.

use std::path::PathBuf;

use vlbiflow_guard::secret::{self, TOKEN_ENV};

/// `--token-file PATH`, and `--token` only to refuse it with directions.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TokenArgs {
    /// File whose first line is the access token (keep it mode 0600); default: $VLBIFLOW_TOKEN
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Refused: a token on the command line is visible to every user of the host
    #[arg(long, value_name = "TOKEN", hide = true)]
    pub token: Option<String>,
}

impl TokenArgs {
    /// The token from --token-file, else from $VLBIFLOW_TOKEN, else none; --token is a usage error.
    pub fn resolve(&self) -> anyhow::Result<Option<String>> {
        if self.token.is_some() {
            crate::usage!("{}", secret::refuse_command_line("--token"));
        }
        match secret::token(self.token_file.as_deref()) {
            Ok(t) => Ok(t),
            Err(e) => crate::usage!(
                "{e}{}",
                if self.token_file.is_none() {
                    format!(" (from ${TOKEN_ENV})")
                } else {
                    String::new()
                }
            ),
        }
    }
}
