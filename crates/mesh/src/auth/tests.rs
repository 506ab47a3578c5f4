use super::*;

const PATH: &str = "/api/v1/agent/sync";
const NONCE: &str = "000102030405060708090a0b0c0d0e0f";

fn signed(k: &Key, host: &str, time: Ms, nonce: &str, body: &[u8]) -> String {
    k.sign_request(&Request {
        method: "POST",
        path: PATH,
        host,
        time,
        nonce,
        body,
    })
    .to_hex()
    .to_string()
}

fn headers<'a>(host: &'a str, time: &'a str, nonce: &'a str, mac: &'a str) -> Headers<'a> {
    Headers {
        host: Some(host),
        time: Some(time),
        nonce: Some(nonce),
        mac: Some(mac),
    }
}

fn shared_verifier() -> (Key, Verifier) {
    let k = Key::from_token("0123456789abcdef-secret");
    (k.clone(), Verifier::new(Keyring::new(Some(k))))
}

#[test]
fn sign_and_verify() {
    let (k, mut v) = shared_verifier();
    let mac = signed(&k, "A", 1000, NONCE, b"{}");
    let got = v
        .verify("POST", PATH, &headers("A", "1000", NONCE, &mac), b"{}", 2000)
        .unwrap();
    assert_eq!(got.identity, Identity::Shared("A".into()));
    // Anything changed, or another token, fails.
    let (_, mut v) = shared_verifier();
    for (method, host, time, nonce, body) in [
        ("POST", "A", "1000", NONCE, &b"{ }"[..]),
        ("GET", "A", "1000", NONCE, b"{}"),
        ("POST", "B", "1000", NONCE, b"{}"),
        ("POST", "A", "1001", NONCE, b"{}"),
        ("POST", "A", "1000", "000102030405060708090a0b0c0d0e00", b"{}"),
    ] {
        assert_eq!(
            v.verify(method, PATH, &headers(host, time, nonce, &mac), body, 2000)
                .unwrap_err(),
            AuthError::Mac,
            "{method} {host} {time} {nonce}"
        );
    }
    let mut other = Verifier::new(Keyring::new(Some(Key::from_token("0123456789abcdef-other"))));
    assert_eq!(
        other
            .verify("POST", PATH, &headers("A", "1000", NONCE, &mac), b"{}", 2000)
            .unwrap_err(),
        AuthError::Mac
    );
    assert!(matches!(
        v.verify(
            "POST",
            PATH,
            &headers("A", "1000", NONCE, &mac),
            b"{}",
            1000 + MAX_SKEW + 1
        ),
        Err(AuthError::Skew { .. })
    ));
    let mut h = headers("A", "1000", NONCE, &mac);
    h.time = None;
    assert_eq!(
        v.verify("POST", PATH, &h, b"", 0).unwrap_err(),
        AuthError::Missing(TIME_HEADER)
    );
    let h = headers("A", "0", NONCE, "zz");
    assert_eq!(
        v.verify("POST", PATH, &h, b"", 0).unwrap_err(),
        AuthError::Missing(MAC_HEADER)
    );
    let h = headers("A", "0", "0011", &mac);
    assert_eq!(
        v.verify("POST", PATH, &h, b"", 0).unwrap_err(),
        AuthError::Missing(NONCE_HEADER)
    );
    let mut h = headers("A", "0", NONCE, &mac);
    h.host = None;
    assert_eq!(
        v.verify("POST", PATH, &h, b"", 0).unwrap_err(),
        AuthError::Missing(HOST_HEADER)
    );
    assert!(check_token("short").is_err());
    assert_eq!(check_token(" 0123456789abcdef\n").unwrap(), "0123456789abcdef");
}

#[test]
fn a_request_is_accepted_once() {
    let (k, mut v) = shared_verifier();
    let mac = signed(&k, "A", 1000, NONCE, b"{}");
    let h = headers("A", "1000", NONCE, &mac);
    assert!(v.verify("POST", PATH, &h, b"{}", 1000).is_ok());
    assert_eq!(
        v.verify("POST", PATH, &h, b"{}", 1001).unwrap_err(),
        AuthError::Replay
    );
    // Still refused at the very end of the window; past it the time check refuses it.
    assert_eq!(
        v.verify("POST", PATH, &h, b"{}", 1000 + MAX_SKEW).unwrap_err(),
        AuthError::Replay
    );
    assert!(matches!(
        v.verify("POST", PATH, &h, b"{}", 1001 + MAX_SKEW),
        Err(AuthError::Skew { .. })
    ));
    // A nonce may repeat with another time stamp (the pair is what counts).
    let mac2 = signed(&k, "A", 1500, NONCE, b"{}");
    assert!(v
        .verify("POST", PATH, &headers("A", "1500", NONCE, &mac2), b"{}", 1500)
        .is_ok());
}

#[test]
fn the_replay_cache_is_bounded_per_host_and_forgets_expired_requests() {
    let mut c = ReplayCache::new(3);
    for i in 0..3u8 {
        c.check_and_insert("A", 1000, [i; 16], 1000).unwrap();
    }
    assert_eq!(
        c.check_and_insert("A", 1000, [9; 16], 1000),
        Err(AuthError::Flood)
    );
    // Another host has its own share.
    c.check_and_insert("B", 1000, [9; 16], 1000).unwrap();
    assert_eq!(c.len(), 4);
    // Once the first ones are older than the window they are dropped and room is made.
    c.check_and_insert("A", 1000 + MAX_SKEW + 1, [9; 16], 1001 + MAX_SKEW)
        .unwrap();
    assert_eq!(c.len(), 2);
}

#[test]
fn per_host_keys_speak_only_for_their_host() {
    let shared = Key::from_token("0123456789abcdef-shared");
    let ka = Key::from_token("0123456789abcdef-host-a");
    let mut ring = Keyring::new(Some(shared.clone()));
    ring.insert("A", ka.clone());
    let mut v = Verifier::new(ring);
    // A with its key: Host(A).
    let mac = signed(&ka, "A", 10, NONCE, b"x");
    let got = v
        .verify("POST", PATH, &headers("A", "10", NONCE, &mac), b"x", 10)
        .unwrap();
    assert_eq!(got.identity, Identity::Host("A".into()));
    assert_eq!(got.identity.host(), "A");
    // A's key cannot speak for B (B has no key: the shared key would).
    let mac = signed(&ka, "B", 11, NONCE, b"x");
    assert_eq!(
        v.verify("POST", PATH, &headers("B", "11", NONCE, &mac), b"x", 11)
            .unwrap_err(),
        AuthError::Mac
    );
    // The shared key no longer speaks for A.
    let mac = signed(&shared, "A", 12, NONCE, b"x");
    assert_eq!(
        v.verify("POST", PATH, &headers("A", "12", NONCE, &mac), b"x", 12)
            .unwrap_err(),
        AuthError::Mac
    );
    // But still for B, as shared.
    let mac = signed(&shared, "B", 13, NONCE, b"x");
    let got = v
        .verify("POST", PATH, &headers("B", "13", NONCE, &mac), b"x", 13)
        .unwrap();
    assert_eq!(got.identity, Identity::Shared("B".into()));
    // Without a shared key, an unknown host is refused by name.
    let mut only = Keyring::new(None);
    only.insert("A", ka);
    let mut v = Verifier::new(only);
    assert_eq!(
        v.verify("POST", PATH, &headers("B", "13", NONCE, &mac), b"x", 13)
            .unwrap_err(),
        AuthError::UnknownHost("B".into())
    );
}

#[test]
fn the_response_is_bound_to_its_request() {
    let k = Key::from_token("0123456789abcdef-secret");
    let req1 = blake3::hash(b"one");
    let req2 = blake3::hash(b"two");
    let body = br#"{"accepted":true}"#;
    let mac = k.sign_response(PATH, &req1, 5000, body).to_hex().to_string();
    assert!(k
        .verify_response(PATH, &req1, Some("5000"), Some(&mac), body, 5000)
        .is_ok());
    // The same answer, replayed to a later request, is refused; so is a changed one.
    assert_eq!(
        k.verify_response(PATH, &req2, Some("5000"), Some(&mac), body, 5000),
        Err(AuthError::Mac)
    );
    assert_eq!(
        k.verify_response(
            PATH,
            &req1,
            Some("5000"),
            Some(&mac),
            br#"{"accepted":false}"#,
            5000
        ),
        Err(AuthError::Mac)
    );
    let other = Key::from_token("0123456789abcdef-other");
    assert_eq!(
        other.verify_response(PATH, &req1, Some("5000"), Some(&mac), body, 5000),
        Err(AuthError::Mac)
    );
}

#[test]
fn keys_files() {
    let keys =
        Keyring::parse_keys_file("# mesh keys\nA 0123456789abcdef-a\n\n B  0123456789abcdef-b \n").unwrap();
    assert_eq!(
        keys.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["A", "B"]
    );
    assert!(Keyring::parse_keys_file("A short")
        .unwrap_err()
        .contains("line 1 (A)"));
    assert!(Keyring::parse_keys_file("A").unwrap_err().contains("HOST TOKEN"));
    assert!(
        Keyring::parse_keys_file("A 0123456789abcdef-a\nA 0123456789abcdef-b")
            .unwrap_err()
            .contains("twice")
    );
}

#[test]
fn nonces_differ() {
    let (a, b) = (nonce(), nonce());
    assert_eq!(a.len(), 32);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}
