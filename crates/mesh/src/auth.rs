//! Authentication between agents and the hub (sans-IO): every request and every response carries a
//! MAC (keyed BLAKE3) over its method, path, time stamp and body, with a key derived from the shared
//! token. The token itself never crosses the network; a request older or newer than [`MAX_SKEW`] is
//! refused, and an agent accepts a configuration only in a response the hub signed.

use crate::timespec::Ms;

/// The largest accepted difference between a request's time stamp and the receiver's clock, ms.
pub const MAX_SKEW: Ms = 300_000;
/// Header carrying the sender's time stamp (ms since the epoch).
pub const TIME_HEADER: &str = "x-vlbiflow-time";
/// Header carrying the MAC (hex).
pub const MAC_HEADER: &str = "x-vlbiflow-mac";

/// A shared secret.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AuthError {
    /// No or malformed headers.
    #[error("unauthenticated: missing or malformed {0} header")]
    Missing(&'static str),
    /// The time stamp is too far from ours.
    #[error("unauthenticated: time stamp {skew_s:.0} s away from this host's clock (more than {} s): check NTP", MAX_SKEW / 1000)]
    Skew {
        /// The difference, s.
        skew_s: f64,
    },
    /// The MAC does not match.
    #[error("unauthenticated: the message's MAC does not match (different token?)")]
    Mac,
}

impl Key {
    /// The key for a token (at least 16 characters, checked by the caller's configuration).
    pub fn from_token(token: &str) -> Key {
        Key(blake3::derive_key(
            "vlbiflow mesh agent-hub v1",
            token.trim().as_bytes(),
        ))
    }

    /// The MAC of one message.
    pub fn mac(&self, method: &str, path: &str, time: Ms, body: &[u8]) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        for part in [method.as_bytes(), path.as_bytes(), time.to_string().as_bytes()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.update(&(body.len() as u64).to_le_bytes());
        h.update(body);
        h.finalize().to_hex().to_string()
    }

    /// Checks a message's headers against its content and our clock `now`.
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        time: Option<&str>,
        mac: Option<&str>,
        body: &[u8],
        now: Ms,
    ) -> Result<(), AuthError> {
        let time: Ms = time
            .and_then(|t| t.trim().parse().ok())
            .ok_or(AuthError::Missing(TIME_HEADER))?;
        let mac = mac
            .map(str::trim)
            .filter(|m| m.len() == 64)
            .ok_or(AuthError::Missing(MAC_HEADER))?;
        if (now - time).abs() > MAX_SKEW {
            return Err(AuthError::Skew {
                skew_s: (now - time) as f64 / 1000.0,
            });
        }
        let want = self.mac(method, path, time, body);
        // Constant-time comparison through blake3's Hash equality.
        let parse = |s: &str| blake3::Hash::from_hex(s).ok();
        match (parse(&want), parse(mac)) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => Err(AuthError::Mac),
        }
    }
}

/// Checks a token read from a file or the environment: at least 16 characters, no whitespace inside.
pub fn check_token(token: &str) -> Result<&str, String> {
    let t = token.trim();
    if t.len() < 16 || t.chars().any(char::is_whitespace) {
        return Err(
            "the token must be at least 16 characters without spaces (e.g. `openssl rand -hex 24`)".into(),
        );
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let k = Key::from_token("0123456789abcdef-secret");
        let mac = k.mac("POST", "/api/v1/agent/sync", 1000, b"{}");
        assert!(k
            .verify(
                "POST",
                "/api/v1/agent/sync",
                Some("1000"),
                Some(&mac),
                b"{}",
                2000
            )
            .is_ok());
        // Anything changed, or another token, fails.
        assert_eq!(
            k.verify(
                "POST",
                "/api/v1/agent/sync",
                Some("1000"),
                Some(&mac),
                b"{ }",
                2000
            ),
            Err(AuthError::Mac)
        );
        assert_eq!(
            k.verify("GET", "/api/v1/agent/sync", Some("1000"), Some(&mac), b"{}", 2000),
            Err(AuthError::Mac)
        );
        assert_eq!(
            k.verify(
                "POST",
                "/api/v1/agent/sync",
                Some("1001"),
                Some(&mac),
                b"{}",
                2000
            ),
            Err(AuthError::Mac)
        );
        let other = Key::from_token("0123456789abcdef-other");
        assert_eq!(
            other.verify(
                "POST",
                "/api/v1/agent/sync",
                Some("1000"),
                Some(&mac),
                b"{}",
                2000
            ),
            Err(AuthError::Mac)
        );
        assert!(matches!(
            k.verify(
                "POST",
                "/api/v1/agent/sync",
                Some("1000"),
                Some(&mac),
                b"{}",
                1000 + MAX_SKEW + 1
            ),
            Err(AuthError::Skew { .. })
        ));
        assert_eq!(
            k.verify("POST", "/x", None, Some(&mac), b"", 0),
            Err(AuthError::Missing(TIME_HEADER))
        );
        assert_eq!(
            k.verify("POST", "/x", Some("0"), Some("zz"), b"", 0),
            Err(AuthError::Missing(MAC_HEADER))
        );
        assert!(check_token("short").is_err());
        assert_eq!(check_token(" 0123456789abcdef\n").unwrap(), "0123456789abcdef");
    }
}
