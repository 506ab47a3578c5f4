//! Who may read pages and the API, and which requests may change state.
//!
//! Reading: with no credential configured (the hub then listens on loopback only), requests naming
//! the hub by a loopback address or `localhost` (a page of another site that a DNS name pointing at
//! 127.0.0.1 brought here names that site instead); with `public_read`, anyone; otherwise only requests
//! carrying the shared or the read token (`Authorization: Bearer TOKEN`, or HTTP basic authentication
//! with the token as password, RFC 7617), from loopback too.
//!
//! Changing state (the agents' exchange): `Content-Type: application/json` only (a form or a
//! `text/plain` POST is what a web page can send without asking), and no `Origin` header (browsers
//! send one with every cross-origin POST; agents never do).

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

/// True when the `Host` header names a loopback address or `localhost` (with or without a port).
pub(super) fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(h) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let h = h.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        h.rsplit_once(':').map_or(h, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The token a request presents, if any.
fn presented(headers: &HeaderMap) -> Option<String> {
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())?;
    if let Some(b) = auth.strip_prefix("Bearer ") {
        Some(b.trim().to_string())
    } else if let Some(b) = auth.strip_prefix("Basic ") {
        let up = String::from_utf8(b64_decode(b)?).ok()?;
        up.split_once(':').map(|(_, p)| p.to_string())
    } else {
        None
    }
}

/// May this request read pages and the API?
pub(super) fn may_read(s: &Shared, _peer: &SocketAddr, headers: &HeaderMap) -> bool {
    if s.verifier.is_none() && s.read_tokens.is_empty() {
        return host_is_loopback(headers);
    }
    if s.public_read {
        return true;
    }
    let Some(given) = presented(headers) else {
        return false;
    };
    // Compare as hashes: constant time.
    let given = blake3::hash(given.as_bytes());
    s.read_tokens.contains(&given)
}

/// Why a state-changing request is refused before authentication, if it is.
pub(super) fn write_refusal(headers: &HeaderMap) -> Option<&'static str> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Some("only Content-Type: application/json is accepted");
    }
    if headers.contains_key(header::ORIGIN) {
        return Some("requests from web pages (with an Origin header) are refused");
    }
    None
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
    use axum::http::{header, HeaderMap, HeaderValue};

    #[test]
    fn base64() {
        assert_eq!(super::b64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(super::b64_decode("YQ==").unwrap(), b"a");
        assert!(super::b64_decode("a b").is_none());
    }

    fn with(name: header::HeaderName, v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn loopback_host_names() {
        for h in [
            "127.0.0.1:8090",
            "localhost",
            "LOCALHOST:80",
            "[::1]:8090",
            "127.1.2.3",
        ] {
            assert!(super::host_is_loopback(&with(header::HOST, h)), "{h}");
        }
        for h in [
            "evil.example.org",
            "evil.example.org:8090",
            "10.0.0.1:8090",
            "[::2]:1",
        ] {
            assert!(!super::host_is_loopback(&with(header::HOST, h)), "{h}");
        }
        assert!(!super::host_is_loopback(&HeaderMap::new()));
    }

    #[test]
    fn writes_need_json_and_no_origin() {
        assert!(super::write_refusal(&with(header::CONTENT_TYPE, "text/plain")).is_some());
        assert!(super::write_refusal(&HeaderMap::new()).is_some());
        let mut h = with(header::CONTENT_TYPE, "application/json; charset=utf-8");
        assert!(super::write_refusal(&h).is_none());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example.org"),
        );
        assert!(super::write_refusal(&h).is_some());
    }
}
