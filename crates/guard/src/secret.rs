//! Tokens come from a file (`--token-file PATH`) or the environment ([`TOKEN_ENV`]), never from the
//! command line: every user of the host can read another process's arguments in `/proc/PID/cmdline`
//! (proc(5)), while a file of mode 0600 and a process's environment (`/proc/PID/environ`, readable only by
//! its owner) are private to the owner.

use std::path::{Path, PathBuf};

/// The environment variable a token is read from when no `--token-file` is given.
pub const TOKEN_ENV: &str = "VLBIFLOW_TOKEN";

/// Why a token could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("reading the token file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the token file {0} is empty")]
    Empty(PathBuf),
    #[error("the token in {0} is not one line of printable text")]
    Malformed(String),
}

/// The message for a token given on the command line.
pub fn refuse_command_line(flag: &str) -> String {
    format!(
        "{flag} VALUE would show the token to every user of this host (in /proc/PID/cmdline): \
         put it in a file only you can read and pass --token-file PATH, or set {TOKEN_ENV}"
    )
}

fn check(token: &str, whence: &str) -> Result<String, SecretError> {
    let t = token.trim_end_matches(['\n', '\r']);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(SecretError::Malformed(whence.to_owned()));
    }
    Ok(t.to_owned())
}

/// Reads a token from `path`: its first line, without the line end.
pub fn read_token_file(path: &Path) -> Result<String, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_owned(),
        source,
    })?;
    let line = text.lines().next().unwrap_or("");
    if line.trim().is_empty() {
        return Err(SecretError::Empty(path.to_owned()));
    }
    check(line, &path.display().to_string())
}

/// The token: from `file` when given, else from [`TOKEN_ENV`] when set and not empty, else none.
pub fn token(file: Option<&Path>) -> Result<Option<String>, SecretError> {
    if let Some(p) = file {
        return read_token_file(p).map(Some);
    }
    match std::env::var(TOKEN_ENV) {
        Ok(v) if !v.is_empty() => check(&v, TOKEN_ENV).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, "s3cret-token-value\n").unwrap();
        assert_eq!(read_token_file(&p).unwrap(), "s3cret-token-value");
        assert_eq!(token(Some(&p)).unwrap().as_deref(), Some("s3cret-token-value"));
        std::fs::write(&p, "\n").unwrap();
        assert!(matches!(read_token_file(&p), Err(SecretError::Empty(_))));
        std::fs::write(&p, "a\x07b\n").unwrap();
        assert!(matches!(read_token_file(&p), Err(SecretError::Malformed(_))));
        assert!(matches!(
            read_token_file(&d.path().join("missing")),
            Err(SecretError::Read { .. })
        ));
        assert!(refuse_command_line("--token").contains("--token-file"));
        assert!(refuse_command_line("--token").contains(TOKEN_ENV));
    }
}
