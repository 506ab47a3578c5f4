//! Who may read pages and the API: anyone without a token or with `public_read`, loopback clients, and
//! requests carrying the token (`Authorization: Bearer TOKEN`, or HTTP basic authentication with the
//! token as password, RFC 7617).

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

use super::state::Shared;

/// Standard base64 (RFC 4648 section 4) without padding, leftover bits ignored: what
/// [`b64_decode`] decodes after it has dropped the padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// The bytes of base64 text (surrounding space and padding ignored), or None if it is not base64.
fn b64_decode(s: &str) -> Option<Vec<u8>> {
    BASE64.decode(s.trim().trim_end_matches('=')).ok()
}

/// May this request read pages and the API?
pub(super) fn may_read(s: &Shared, peer: &SocketAddr, headers: &HeaderMap) -> bool {
    let Some(token) = &s.token else { return true };
    if s.public_read || peer.ip().is_loopback() {
        return true;
    }
    let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let given = if let Some(b) = auth.strip_prefix("Bearer ") {
        b.trim().to_string()
    } else if let Some(b) = auth.strip_prefix("Basic ") {
        match b64_decode(b).and_then(|v| String::from_utf8(v).ok()) {
            Some(up) => up.split_once(':').map(|(_, p)| p.to_string()).unwrap_or_default(),
            None => return false,
        }
    } else {
        return false;
    };
    // Compare as hashes: constant time.
    blake3::hash(given.as_bytes()) == blake3::hash(token.as_bytes())
}

pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"vlbiflow mesh\"")],
        "authentication required: Authorization: Bearer TOKEN, or basic authentication with the token as password",
    )
        .into_response()
}

/// Answers 401 from the handler unless the request may read ([`may_read`]).
macro_rules! guard {
    ($s:expr, $peer:expr, $headers:expr) => {
        if !$crate::hub::access::may_read(&$s, &$peer, &$headers) {
            return $crate::hub::access::unauthorized();
        }
    };
}
pub(super) use guard;

#[cfg(test)]
mod tests {
    #[test]
    fn base64() {
        assert_eq!(super::b64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(super::b64_decode("YQ==").unwrap(), b"a");
        assert!(super::b64_decode("a b").is_none());
    }
}
