//! Authentication between agents and the hub (sans-IO: the caller passes the clock and the headers).
//!
//! Every request carries the agent's host name, a time stamp, a random nonce and a MAC (keyed BLAKE3)
//! over all of them, the method, the path and the body. The key is the agent's own (per-host keys on
//! the hub, [`Keyring`]) or one derived from a token shared by the whole mesh (kept for migration: any
//! holder of a shared token can speak for any host without a key of its own). The token itself never
//! crosses the network. The hub refuses a request whose time stamp is more than [`MAX_SKEW`] away
//! from its clock, and one whose (time, nonce) it has seen ([`ReplayCache`], bounded per host). The
//! response's MAC covers the request's MAC, so an agent accepts only the answer to the request it
//! just sent: a recorded `{"accepted":true}` replayed to it is refused, and it keeps its results.

use std::collections::{BTreeSet, HashMap};

use crate::timespec::Ms;

/// The largest accepted difference between a request's time stamp and the receiver's clock, ms.
pub const MAX_SKEW: Ms = 300_000;
/// Header carrying the sender's time stamp (ms since the epoch).
pub const TIME_HEADER: &str = "x-vlbiflow-time";
/// Header carrying the MAC (hex).
pub const MAC_HEADER: &str = "x-vlbiflow-mac";
/// Header carrying the request's nonce (32 hex digits, random).
pub const NONCE_HEADER: &str = "x-vlbiflow-nonce";
/// Header carrying the name of the host that signs the request.
pub const HOST_HEADER: &str = "x-vlbiflow-host";
/// Requests remembered per host for replay detection: beyond this within [`MAX_SKEW`] of each other,
/// the host's further requests are refused until old ones expire (an agent syncing once a second
/// sends 600 in the window either side).
pub const REPLAY_PER_HOST: usize = 4096;

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
    /// No key for the named host.
    #[error("unauthenticated: no key for host {0:?}")]
    UnknownHost(String),
    /// The request was seen before.
    #[error("unauthenticated: replayed request (time stamp and nonce seen before)")]
    Replay,
    /// Too many requests from one host within the window.
    #[error("refused: more than {REPLAY_PER_HOST} requests from this host within {} s", MAX_SKEW / 1000)]
    Flood,
}

/// What a request's MAC covers.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path.
    pub path: &'a str,
    /// The signing host's name.
    pub host: &'a str,
    /// Time stamp, ms since the epoch.
    pub time: Ms,
    /// Nonce (hex).
    pub nonce: &'a str,
    /// Body.
    pub body: &'a [u8],
}

/// A request's authentication headers as received (None: absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    /// [`HOST_HEADER`].
    pub host: Option<&'a str>,
    /// [`TIME_HEADER`].
    pub time: Option<&'a str>,
    /// [`NONCE_HEADER`].
    pub nonce: Option<&'a str>,
    /// [`MAC_HEADER`].
    pub mac: Option<&'a str>,
}

fn hash_parts(key: &[u8; 32], label: &str, parts: &[&[u8]]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(label.as_bytes());
    for part in parts {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()
}

fn parse_mac(mac: Option<&str>) -> Result<blake3::Hash, AuthError> {
    mac.map(str::trim)
        .filter(|m| m.len() == 64)
        .and_then(|m| blake3::Hash::from_hex(m).ok())
        .ok_or(AuthError::Missing(MAC_HEADER))
}

fn parse_time(time: Option<&str>) -> Result<Ms, AuthError> {
    time.and_then(|t| t.trim().parse().ok())
        .ok_or(AuthError::Missing(TIME_HEADER))
}

fn check_skew(time: Ms, now: Ms) -> Result<(), AuthError> {
    if now.saturating_sub(time).abs() > MAX_SKEW {
        return Err(AuthError::Skew {
            skew_s: now.saturating_sub(time) as f64 / 1000.0,
        });
    }
    Ok(())
}

/// A fresh nonce: 16 bytes from the operating system's generator, as 32 hex digits.
pub fn nonce() -> String {
    let mut b = [0u8; 16];
    // A nonce need only be unique: without the OS generator, the clock and a counter are.
    if getrandom::getrandom(&mut b).is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = crate::timespec::now_ms() as u64;
        b[..8].copy_from_slice(&t.to_le_bytes());
        b[8..].copy_from_slice(&(n ^ u64::from(std::process::id()) << 32).to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Key {
    /// The key for a token (at least 16 characters, checked by the caller's configuration).
    pub fn from_token(token: &str) -> Key {
        Key(blake3::derive_key(
            "vlbiflow mesh agent-hub v1",
            token.trim().as_bytes(),
        ))
    }

    /// The MAC of a request.
    pub fn sign_request(&self, r: &Request<'_>) -> blake3::Hash {
        hash_parts(
            &self.0,
            "request v2",
            &[
                r.method.as_bytes(),
                r.path.as_bytes(),
                r.host.as_bytes(),
                r.time.to_string().as_bytes(),
                r.nonce.as_bytes(),
                r.body,
            ],
        )
    }

    /// The MAC of the response to the request whose MAC is `request_mac`.
    pub fn sign_response(
        &self,
        path: &str,
        request_mac: &blake3::Hash,
        time: Ms,
        body: &[u8],
    ) -> blake3::Hash {
        hash_parts(
            &self.0,
            "response v2",
            &[
                path.as_bytes(),
                request_mac.as_bytes(),
                time.to_string().as_bytes(),
                body,
            ],
        )
    }

    /// Checks a response's headers against the request it answers and our clock `now`.
    pub fn verify_response(
        &self,
        path: &str,
        request_mac: &blake3::Hash,
        time: Option<&str>,
        mac: Option<&str>,
        body: &[u8],
        now: Ms,
    ) -> Result<(), AuthError> {
        let time = parse_time(time)?;
        let mac = parse_mac(mac)?;
        check_skew(time, now)?;
        // blake3::Hash equality is constant time.
        if self.sign_response(path, request_mac, time, body) == mac {
            Ok(())
        } else {
            Err(AuthError::Mac)
        }
    }
}

/// Which key authenticated a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Identity {
    /// The host's own key: the request speaks for this host.
    Host(String),
    /// The mesh's shared token: the request names this host, but any holder of the token could.
    Shared(String),
}

impl Identity {
    /// The host the request speaks for.
    pub fn host(&self) -> &str {
        match self {
            Identity::Host(h) | Identity::Shared(h) => h,
        }
    }
}

/// A request that passed [`Verifier::verify`].
#[derive(Debug, Clone)]
pub struct Verified {
    /// Who signed it.
    pub identity: Identity,
    /// Its MAC, which the response's MAC covers ([`Key::sign_response`]).
    pub mac: blake3::Hash,
}

/// The hub's keys: per-host keys, and optionally the mesh's shared key for hosts without one.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    hosts: HashMap<String, Key>,
    shared: Option<Key>,
}

impl Keyring {
    /// A keyring with the shared key (None: per-host keys only) and no host keys yet.
    pub fn new(shared: Option<Key>) -> Keyring {
        Keyring {
            hosts: HashMap::new(),
            shared,
        }
    }

    /// Adds (replacing) a host's own key; the shared key no longer speaks for that host.
    pub fn insert(&mut self, host: &str, key: Key) {
        self.hosts.insert(host.to_string(), key);
    }

    /// The key that speaks for `host`, and whether it is the host's own.
    pub fn key_for(&self, host: &str) -> Option<(&Key, bool)> {
        match self.hosts.get(host) {
            Some(k) => Some((k, true)),
            None => self.shared.as_ref().map(|k| (k, false)),
        }
    }

    /// True when no key at all is configured.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.shared.is_none()
    }

    /// Hosts with their own key.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }

    /// True when a shared key is configured.
    pub fn has_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Parses a keys file: one `NAME TOKEN` a line (blank lines and `#` comments ignored), each token
    /// checked with [`check_token`].
    pub fn parse_keys_file(text: &str) -> Result<Vec<(String, Key)>, String> {
        let mut out: Vec<(String, Key)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(name), Some(token), None) = (it.next(), it.next(), it.next()) else {
                return Err(format!("line {}: expected `HOST TOKEN`", i + 1));
            };
            check_token(token).map_err(|e| format!("line {} ({name}): {e}", i + 1))?;
            if out.iter().any(|(n, _)| n == name) {
                return Err(format!("line {}: host {name} given twice", i + 1));
            }
            out.push((name.to_string(), Key::from_token(token)));
        }
        Ok(out)
    }
}

/// The (time, nonce) pairs of accepted requests, per host, kept while their time stamp is within
/// [`MAX_SKEW`] of the clock (older ones are refused by the time check anyway); at most `per_host`
/// each, so memory stays bounded by hosts x `per_host`.
#[derive(Debug, Clone)]
pub struct ReplayCache {
    per_host: usize,
    seen: HashMap<String, BTreeSet<(Ms, [u8; 16])>>,
}

impl ReplayCache {
    /// A cache keeping at most `per_host` requests per host.
    pub fn new(per_host: usize) -> ReplayCache {
        ReplayCache {
            per_host,
            seen: HashMap::new(),
        }
    }

    /// Records a request, or refuses it as a replay (or when the host's share is full).
    pub fn check_and_insert(
        &mut self,
        host: &str,
        time: Ms,
        nonce: [u8; 16],
        now: Ms,
    ) -> Result<(), AuthError> {
        let set = match self.seen.get_mut(host) {
            Some(s) => s,
            None => self.seen.entry(host.to_string()).or_default(),
        };
        while let Some(&first) = set.first() {
            if first.0 >= now - MAX_SKEW {
                break;
            }
            set.pop_first();
        }
        if set.contains(&(time, nonce)) {
            return Err(AuthError::Replay);
        }
        if set.len() >= self.per_host {
            return Err(AuthError::Flood);
        }
        set.insert((time, nonce));
        Ok(())
    }

    /// Requests remembered in all.
    pub fn len(&self) -> usize {
        self.seen.values().map(BTreeSet::len).sum()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn parse_nonce(nonce: Option<&str>) -> Result<[u8; 16], AuthError> {
    let s = nonce
        .map(str::trim)
        .filter(|s| s.len() == 32)
        .ok_or(AuthError::Missing(NONCE_HEADER))?;
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(
            s.get(2 * i..2 * i + 2).ok_or(AuthError::Missing(NONCE_HEADER))?,
            16,
        )
        .map_err(|_| AuthError::Missing(NONCE_HEADER))?;
    }
    Ok(out)
}

/// The hub's request authentication: keys and replay cache.
#[derive(Debug, Clone)]
pub struct Verifier {
    /// The keys.
    pub keys: Keyring,
    /// Accepted requests within the window.
    pub cache: ReplayCache,
}

impl Verifier {
    /// A verifier with `keys` and a cache of [`REPLAY_PER_HOST`] per host.
    pub fn new(keys: Keyring) -> Verifier {
        Verifier {
            keys,
            cache: ReplayCache::new(REPLAY_PER_HOST),
        }
    }

    /// Checks a request (headers `h`, `method`, `path`, `body`) at our clock `now`; a request that
    /// passes is remembered, so the same one is refused the second time.
    pub fn verify(
        &mut self,
        method: &str,
        path: &str,
        h: &Headers<'_>,
        body: &[u8],
        now: Ms,
    ) -> Result<Verified, AuthError> {
        let host = h
            .host
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 253)
            .ok_or(AuthError::Missing(HOST_HEADER))?;
        let time = parse_time(h.time)?;
        let nonce_bytes = parse_nonce(h.nonce)?;
        let mac = parse_mac(h.mac)?;
        check_skew(time, now)?;
        let (key, own) = self
            .keys
            .key_for(host)
            .ok_or_else(|| AuthError::UnknownHost(host.to_string()))?;
        let want = key.sign_request(&Request {
            method,
            path,
            host,
            time,
            nonce: h.nonce.map(str::trim).unwrap_or_default(),
            body,
        });
        // blake3::Hash equality is constant time.
        if want != mac {
            return Err(AuthError::Mac);
        }
        self.cache.check_and_insert(host, time, nonce_bytes, now)?;
        Ok(Verified {
            identity: if own {
                Identity::Host(host.to_string())
            } else {
                Identity::Shared(host.to_string())
            },
            mac,
        })
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
mod tests;
