//! TLS of the mesh's HTTP clients (agent to hub, hub to webhook): rustls with the ring provider.
//! Without a CA file the roots are Mozilla's (webpki-roots, built in); with one, the certificates in
//! that file are the only roots: a private mesh trusts its own CA and nothing else.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

/// The hub's listener TLS (certificate and key), re-exported for the command line.
pub use vlbiflow_http::Tls;

/// The CA certificates of a PEM file (at least one).
pub fn read_ca_file(path: &Path) -> Result<Vec<Certificate<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("CA file {}: {e}", path.display()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item.map_err(|e| format!("CA file {}: {e}", path.display()))? {
            PemItem::Certificate(c) => certs.push(c),
            _ => continue,
        }
    }
    if certs.is_empty() {
        return Err(format!(
            "CA file {}: no CERTIFICATE in it (PEM expected)",
            path.display()
        ));
    }
    Ok(certs)
}

/// An HTTP client for http:// and https:// URLs with a global `timeout`; 4xx and 5xx are answers, not
/// errors. `ca`: the only roots trusted (else Mozilla's).
pub fn http_agent(timeout: Duration, ca: Option<&[Certificate<'static>]>) -> ureq::Agent {
    let roots = match ca {
        Some(c) => RootCerts::Specific(Arc::new(c.to_vec())),
        None => RootCerts::WebPki,
    };
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .provider(TlsProvider::Rustls)
                .root_certs(roots)
                .build(),
        )
        .build()
        .into()
}

/// The TLS failure in a client error (a certificate refused, a handshake failed), if that is what it
/// is: such a failure does not go away by trying again.
pub fn tls_failure(e: &ureq::Error) -> Option<String> {
    match e {
        ureq::Error::Rustls(r) => Some(r.to_string()),
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|i| i.downcast_ref::<rustls::Error>())
            .map(|r| r.to_string()),
        _ => None,
    }
}
