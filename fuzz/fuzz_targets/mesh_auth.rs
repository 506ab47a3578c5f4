//! Any headers and body on the mesh hub's agent exchange: the request authentication never panics,
//! refuses what its key did not sign, and accepts a request its key signed exactly once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_mesh::auth::{AuthError, Headers, Key, Keyring, Request, Verifier};

const NOW: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    // Fields separated by newlines: host, time, nonce, MAC, then the body.
    let mut parts = data.splitn(5, |&b| b == b'\n');
    let mut field = || parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let (host, time, nonce, mac, body) = (field(), field(), field(), field(), parts_rest(data));
    let key = Key::from_token("fuzz-shared-token-0123");
    let mut ring = Keyring::new(Some(key.clone()));
    ring.insert("A", Key::from_token("fuzz-host-a-key-0123"));
    let mut v = Verifier::new(ring);
    let h = Headers { host, time, nonce, mac };
    // Arbitrary headers: whatever the outcome, no panic; an accepted request is refused the second time.
    if v.verify("POST", "/api/v1/agent/sync", &h, body, NOW).is_ok() {
        assert_eq!(
            v.verify("POST", "/api/v1/agent/sync", &h, body, NOW).unwrap_err(),
            AuthError::Replay
        );
    }
    // The same fields signed with the key that speaks for the host: accepted once when well formed.
    if let (Some(host), Some(nonce)) = (host, nonce) {
        let time = NOW + i64::from(body.first().copied().unwrap_or(0)) - 128;
        let mac = key
            .sign_request(&Request {
                method: "POST",
                path: "/api/v1/agent/sync",
                host,
                time,
                nonce,
                body,
            })
            .to_hex();
        let t = time.to_string();
        let h = Headers {
            host: Some(host),
            time: Some(&t),
            nonce: Some(nonce),
            mac: Some(mac.as_str()),
        };
        let mut v = Verifier::new(Keyring::new(Some(key)));
        let well_formed = !host.trim().is_empty()
            && host.trim().len() <= 253
            && nonce.trim().len() == 32
            && nonce.trim().bytes().all(|b| b.is_ascii_hexdigit());
        let first = v.verify("POST", "/api/v1/agent/sync", &h, body, NOW);
        if well_formed && host == host.trim() && nonce == nonce.trim() {
            assert!(first.is_ok(), "{first:?}");
            assert_eq!(
                v.verify("POST", "/api/v1/agent/sync", &h, body, NOW).unwrap_err(),
                AuthError::Replay
            );
        }
    }
    let _ = Keyring::parse_keys_file(&String::from_utf8_lossy(data));
});

/// The body: what follows the fourth newline (empty without one).
fn parts_rest(data: &[u8]) -> &[u8] {
    let mut at = 0;
    for _ in 0..4 {
        match data[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => return &[],
        }
    }
    &data[at..]
}
