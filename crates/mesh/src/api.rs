//! A client of the hub's read API (what `vlbiflow net mesh` uses).

use std::time::Duration;

use serde::de::DeserializeOwned;

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
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let url = format!("{}{path}", self.base);
        let mut r = self.http.get(&url);
        if let Some(t) = &self.token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        let mut resp = r.call().map_err(|e| format!("hub {}: {e}", self.base))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_vec()
            .map_err(|e| format!("hub {}: {e}", self.base))?;
        if status != 200 {
            return Err(format!(
                "hub {} answered {status} for {path}: {}",
                self.base,
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
        }
        serde_json::from_slice(&body).map_err(|e| format!("hub {}: bad answer for {path}: {e}", self.base))
    }
}
