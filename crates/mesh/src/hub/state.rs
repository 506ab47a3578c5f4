//! What the hub's threads and handlers share: the configuration, the archive, the ledger and the alerts.

use std::sync::{Arc, Mutex};

use crate::alerts::Alerts;
use crate::archive::{AlertEvent, Archive};
use crate::auth::Verifier;
use crate::config::Config;
use crate::schedule::Ledger;
use crate::timespec::Ms;

/// The state the HTTP handlers, the ticker and the webhook thread share.
pub(super) struct Shared {
    pub(super) cfg: Arc<Config>,
    /// The agents' request authentication (None: no key configured, loopback only).
    pub(super) verifier: Option<Mutex<Verifier>>,
    /// Hashes of the tokens readers may present (the shared token, the read token).
    pub(super) read_tokens: Vec<blake3::Hash>,
    pub(super) public_read: bool,
    /// The configuration sent to agents ([`Config::for_agents`]).
    pub(super) agent_cfg: Arc<Config>,
    pub(super) archive: Mutex<Archive>,
    pub(super) ledger: Mutex<Ledger>,
    pub(super) alerts: Mutex<Alerts>,
    pub(super) started: Ms,
}

/// Locks `m`; a lock poisoned by a panicking holder is taken as it is.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Logs and archives alert changes.
pub(super) fn store_alerts(a: &mut Archive, events: &[AlertEvent]) {
    for e in events {
        tracing::info!(target: "vlbiflow::mesh", alert = %e.state, "alert {}: {}", e.state, e.message);
        if let Err(err) = a.alert_event(e) {
            tracing::warn!(target: "vlbiflow::mesh", error = %err, "archive: {err}");
        }
    }
}
