//! Delivery of alert changes to the configured webhook, each once, retried with backoff.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::state::{lock, Shared};
use crate::archive::redact_path;
use crate::timespec::rfc3339;

/// An error message with every occurrence of the webhook's URL (and its path) redacted.
fn redact_error(msg: &str, url: &str) -> String {
    let mut m = msg.replace(url, &redact_path(url));
    if let Some(path) = url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| &url[i + 3 + j..]))
    {
        if path.len() > 1 {
            m = m.replace(path, "/***");
        }
    }
    m
}

/// Delivers alert changes to the webhook, each once (retried until the receiver answers 2xx). A TLS
/// failure (the receiver's certificate refused, its CA file unreadable) ends delivery until the
/// hub restarts: trying again would not help, and the alerts stay in the archive and on the pages.
pub(super) fn webhook_loop(s: &Shared, stop: &AtomicBool) {
    let ca = match s.cfg.webhook.as_ref().and_then(|w| w.ca_file.as_ref()) {
        Some(p) => match crate::tls::read_ca_file(p) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(target: "vlbiflow::mesh", error = %e, "webhook: {e}; not delivering alerts to the webhook");
                return;
            }
        },
        None => None,
    };
    let http = crate::tls::http_agent(Duration::from_secs(5), ca.as_deref());
    let mut backoff = Duration::from_millis(500);
    while !stop.load(Ordering::Relaxed) {
        let pending = lock(&s.archive).undelivered_alerts().unwrap_or_default();
        let mut failed = false;
        for e in pending {
            let Some(w) = &s.cfg.webhook else {
                let _ = lock(&s.archive).alert_delivered(&e.id);
                continue;
            };
            let body = serde_json::json!({
                "mesh": s.cfg.name,
                "id": e.id,
                "state": e.state,
                "rule": e.rule,
                "src": e.src,
                "dst": e.dst,
                "metric": e.metric,
                "value": e.value,
                "threshold": e.threshold,
                "time": rfc3339(e.t),
                "message": e.message,
            });
            match http
                .post(&w.url)
                .header("content-type", "application/json")
                .send(body.to_string())
            {
                Ok(r) if r.status().is_success() => {
                    let _ = lock(&s.archive).alert_delivered(&e.id);
                }
                Ok(r) => {
                    let url = redact_path(&w.url);
                    let status = r.status();
                    tracing::warn!(
                        target: "vlbiflow::mesh",
                        url = %url,
                        status = %status,
                        "webhook {url}: answered {status}; will retry"
                    );
                    failed = true;
                    break;
                }
                Err(err) => {
                    if let Some(t) = crate::tls::tls_failure(&err) {
                        let url = redact_path(&w.url);
                        let err = redact_error(&t, &w.url);
                        tracing::error!(
                            target: "vlbiflow::mesh",
                            url = %url,
                            error = %err,
                            "webhook {url}: TLS: {err}; giving up on the webhook until the hub restarts \
                             (alerts stay in the archive; check the receiver's certificate and \
                             [webhook] ca_file)"
                        );
                        return;
                    }
                    // ureq's errors may quote the URL: only its kind is logged.
                    let err = redact_error(&err.to_string(), &w.url);
                    let url = redact_path(&w.url);
                    tracing::warn!(target: "vlbiflow::mesh", url = %url, error = %err, "webhook {url}: {err}; will retry");
                    failed = true;
                    break;
                }
            }
        }
        backoff = if failed {
            (backoff * 2).min(Duration::from_secs(60))
        } else {
            Duration::from_millis(500)
        };
        let until = std::time::Instant::now() + backoff;
        while std::time::Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
