//! A client of the hub's read API (what `vlbiflow net mesh` uses).

use std::time::Duration;

use serde::de::DeserializeOwned;

/// Why a read of the hub's API failed, by what the user should do about it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The hub could not be reached or the answer not read (network).
    #[error("{0}")]
    Unreachable(String),
    /// The hub refused: no or a wrong token (HTTP 401 or 403).
    #[error("{0}")]
    Refused(String),
    /// The hub answered something else than the data asked for.
    #[error("{0}")]
    Answer(String),
}

/// The hub's read API.
pub struct MeshApi {
    base: String,
    token: Option<String>,
    http: ureq::Agent,
}

impl MeshApi {
    /// For the hub at `base` (http://host:port), with the token when the hub is not on loopback.
    pub fn new(base: &str, token: Option<String>) -> MeshApi {
        let http: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(15)))
            .http_status_as_error(false)
            .build()
            .into();
        MeshApi {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        }
    }

    /// GETs `path` (with its query) and parses the JSON answer.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let url = format!("{}{path}", self.base);
        let mut r = self.http.get(&url);
        if let Some(t) = &self.token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        let unreachable = |e: ureq::Error| ApiError::Unreachable(format!("hub {}: {e}", self.base));
        let mut resp = r.call().map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_vec()
            .map_err(unreachable)?;
        if status != 200 {
            let m = format!(
                "hub {} answered {status} for {path}: {}",
                self.base,
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            );
            return Err(match status {
                401 | 403 => ApiError::Refused(m),
                _ => ApiError::Answer(m),
            });
        }
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::Answer(format!("hub {}: bad answer for {path}: {e}", self.base)))
    }
}
