//! TLS to PostgreSQL with libpq's `sslmode` and `sslrootcert` URL parameters (PostgreSQL
//! documentation, "SSL Support", table "SSL Mode Descriptions"), on rustls with the ring provider:
//!
//! - `disable`: no TLS.
//! - `prefer` (libpq's default): TLS when the server offers it, its certificate not checked; plain
//!   otherwise (always on a Unix-domain socket, where the server never offers TLS).
//! - `require`: TLS or no connection, the certificate not checked; with `sslrootcert`, as `verify-ca`
//!   (libpq does the same for compatibility).
//! - `verify-ca`: TLS, the certificate chain checked against the roots, the host name not.
//! - `verify-full`: TLS, the chain and the host name checked.
//!
//! Roots: the PEM file `sslrootcert` names; without it, Mozilla's (webpki-roots).
//! The postgres crate knows neither `verify-ca`, `verify-full` nor `sslrootcert`: [`split_url`]
//! takes them out of the URL and the connection is set up here.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if offered, unchecked.
    Prefer,
    /// TLS, unchecked.
    Require,
    /// TLS, chain checked.
    VerifyCa,
    /// TLS, chain and host name checked.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // allow: libpq's "allow" tries plain first; not offered here
            other => {
                return Err(format!(
                    "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                ))
            }
        })
    }
}

/// The TLS settings taken out of a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTls {
    /// `sslmode` (default `prefer`).
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of the CA certificates trusted.
    pub root_cert: Option<PathBuf>,
}

/// Decodes `%XX` escapes of a URL query value.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h * 16 + l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` without its `sslmode` and `sslrootcert` parameters, and what they say.
pub fn split_url(url: &str) -> Result<(String, PgTls), String> {
    let mut tls = PgTls {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), tls));
    };
    let mut keep = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match k {
            "sslmode" => tls.mode = SslMode::parse(&percent_decode(v))?,
            "sslrootcert" => tls.root_cert = Some(PathBuf::from(percent_decode(v))),
            _ => keep.push(part),
        }
    }
    if tls.mode == SslMode::Require && tls.root_cert.is_some() {
        tls.mode = SslMode::VerifyCa;
    }
    let rest = if keep.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", keep.join("&"))
    };
    Ok((rest, tls))
}

impl PgTls {
    /// The postgres crate's mode for these settings.
    pub fn postgres_mode(&self) -> postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }

    /// The rustls connector for these settings (None for `disable`).
    pub fn connector(&self) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let verify = |full: bool| -> Result<Arc<dyn ServerCertVerifier>, String> {
            let mut roots = rustls::RootCertStore::empty();
            match &self.root_cert {
                Some(p) => {
                    use rustls::pki_types::pem::PemObject;
                    let text = std::fs::read(p).map_err(|e| format!("sslrootcert {}: {e}", p.display()))?;
                    for c in CertificateDer::pem_slice_iter(&text) {
                        let c = c.map_err(|e| format!("sslrootcert {}: {e}", p.display()))?;
                        roots
                            .add(c)
                            .map_err(|e| format!("sslrootcert {}: {e}", p.display()))?;
                    }
                    if roots.is_empty() {
                        return Err(format!("sslrootcert {}: no CERTIFICATE in it", p.display()));
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| e.to_string())?;
            Ok(if full { inner } else { Arc::new(ChainOnly(inner)) })
        };
        let verifier: Arc<dyn ServerCertVerifier> = match self.mode {
            SslMode::Disable => return Ok(None),
            SslMode::Prefer | SslMode::Require => Arc::new(Unchecked(provider.clone())),
            SslMode::VerifyCa => verify(false)?,
            SslMode::VerifyFull => verify(true)?,
        };
        let cfg = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(cfg)))
    }
}

/// `verify-ca`: the chain checked as web PKI does, a name mismatch accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: encryption without checking who answers (libpq's meaning of these
/// modes); the handshake signatures are still verified.
struct Unchecked(Arc<CryptoProvider>);

impl fmt::Debug for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Unchecked")
    }
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        let (u, t) = split_url(
            "postgresql://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(u, "postgresql://u@h/db?application_name=x");
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        let (u, t) = split_url("postgresql://u@h/db").unwrap();
        assert_eq!((u.as_str(), t.mode), ("postgresql://u@h/db", SslMode::Prefer));
        let (u, t) = split_url("postgresql://u@h/db?sslmode=require&sslrootcert=ca.pem").unwrap();
        assert_eq!((u.as_str(), t.mode), ("postgresql://u@h/db", SslMode::VerifyCa));
        assert!(split_url("postgresql://u@h/db?sslmode=allow")
            .unwrap_err()
            .contains("expected disable"));
    }
}
