//! The pre-shared key: 32 random bytes, stored as 64 hex digits and a newline in a file only its owner may
//! read (mode 0600). `serve` creates it on first start; clients are given a copy. There is no default key.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::XferError;

/// A 32-byte pre-shared key. Its `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(pub [u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key(fingerprint {})", self.fingerprint())
    }
}

impl Key {
    /// A new random key from the operating system's generator.
    pub fn generate() -> Key {
        use rand::RngCore;
        let mut k = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut k);
        Key(k)
    }

    /// A short fingerprint to compare keys by eye (first 8 bytes of a BLAKE3 derivation, hex); it does
    /// not reveal the key.
    pub fn fingerprint(&self) -> String {
        let d = blake3::derive_key("vlbiflow xfer v1 key fingerprint", &self.0);
        hex(&d[..8])
    }

    /// Parses 64 hex digits (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Key, String> {
        let t = text.trim();
        if t.len() != 64 {
            return Err(format!("expected 64 hex digits, found {} characters", t.len()));
        }
        let mut k = [0u8; 32];
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).map_err(|_| "not hex".to_string())?;
            k[i] = u8::from_str_radix(s, 16).map_err(|_| format!("{s:?} is not a hex byte"))?;
        }
        Ok(Key(k))
    }

    /// Reads a key file, refusing one that others may read.
    pub fn load(path: &Path) -> Result<Key, XferError> {
        let meta = fs::metadata(path).map_err(|e| {
            XferError::Usage(format!(
                "key file {}: {e}; copy the daemon's key file here (it is created by `vlbiflow xfer serve` on first start) or give --key FILE",
                path.display()
            ))
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(XferError::Usage(format!(
                "key file {}: mode {mode:03o} lets others read it; run `chmod 600 {}`",
                path.display(),
                path.display()
            )));
        }
        let text = fs::read_to_string(path)
            .map_err(|e| XferError::Usage(format!("key file {}: {e}", path.display())))?;
        Key::parse(&text).map_err(|e| XferError::Usage(format!("key file {}: {e}", path.display())))
    }

    /// Reads the key file, or creates it with a new random key (mode 0600, parent directories 0700) when it
    /// does not exist. Returns the key and whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Key, bool), XferError> {
        if path.exists() {
            return Key::load(path).map(|k| (k, false));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| XferError::Usage(format!("key directory {}: {e}", parent.display())))?;
        }
        let key = Key::generate();
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| XferError::Usage(format!("creating key file {}: {e}", path.display())))?;
        let io = |e: std::io::Error| XferError::Usage(format!("writing key file {}: {e}", path.display()));
        f.write_all(format!("{}\n", hex(&key.0)).as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        Ok((key, true))
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_and_reloaded() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/xfer.key");
        let (k, created) = Key::load_or_create(&p).unwrap();
        assert!(created);
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let (k2, created) = Key::load_or_create(&p).unwrap();
        assert!(!created);
        assert_eq!(k, k2);
        assert!(!format!("{k:?}").contains(&hex(&k.0)));
    }

    #[test]
    fn refuses_readable_or_bad_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        fs::write(&p, format!("{}\n", hex(&[7; 32]))).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Key::load(&p).unwrap_err().to_string().contains("chmod 600"));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Key::load(&p).unwrap(), Key([7; 32]));
        fs::write(&p, "abc").unwrap();
        assert!(Key::load(&p).unwrap_err().to_string().contains("64 hex digits"));
        assert!(Key::load(&d.path().join("none"))
            .unwrap_err()
            .to_string()
            .contains("--key"));
    }
}
