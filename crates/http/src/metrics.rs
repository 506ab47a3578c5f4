//! `/metrics`: the daemon's families plus `vlbiflow_build_info` and the process metrics, encoded with
//! `prometheus-client` in the Prometheus text format (version 0.0.4), behind an optional read-only token.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// What `vlbiflow_build_info` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    /// The package version.
    pub version: &'static str,
    /// The source revision, when the build knew it.
    pub git: Option<&'static str>,
}

impl BuildInfo {
    /// This workspace's version; the revision from `VLBIFLOW_GIT_COMMIT` at build time, if set.
    pub const fn current() -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            git: option_env!("VLBIFLOW_GIT_COMMIT"),
        }
    }
}

impl Collector for BuildInfo {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut f = Families(encoder);
        let help = "Always 1; the labels name the build.";
        match self.git {
            Some(git) => f.gauge(
                "vlbiflow_build_info",
                help,
                [([("version", self.version), ("git", git)], 1u64)],
            ),
            None => f.gauge("vlbiflow_build_info", help, [([("version", self.version)], 1u64)]),
        }
    }
}

/// Writes metric families during one scrape: a family's help and type, then one sample per label set.
/// Counter names end in `_total` here, as they appear in the output.
pub struct Families<'a>(pub DescriptorEncoder<'a>);

impl Families<'_> {
    fn family<L, V>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        rows: impl IntoIterator<Item = (L, V)>,
        mut sample: impl FnMut(&mut prometheus_client::encoding::MetricEncoder<'_>, &V) -> fmt::Result,
    ) -> fmt::Result
    where
        L: EncodeLabelSet,
    {
        let help = help.strip_suffix('.').unwrap_or(help);
        let mut m = self.0.encode_descriptor(name, help, None, kind)?;
        for (labels, v) in rows {
            let mut s = m.encode_family(&labels)?;
            sample(&mut s, &v)?;
        }
        Ok(())
    }

    /// A gauge family.
    pub fn gauge<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        self.family(name, help, MetricType::Gauge, rows, |s, v| s.encode_gauge(v))
    }

    /// A gauge without labels.
    pub fn gauge1<V: prometheus_client::encoding::EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        v: V,
    ) -> fmt::Result {
        self.gauge(name, help, [(NoLabels, v)])
    }

    /// A counter family; `name` ends in `_total`.
    pub fn counter<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        debug_assert!(
            name.ends_with("_total"),
            "{name}: a counter's name ends in _total"
        );
        // The encoder appends `_total` to a counter's family name.
        let base = name.strip_suffix("_total").unwrap_or(name);
        self.family(base, help, MetricType::Counter, rows, |s, v| {
            s.encode_counter::<NoLabels, V, u64>(v, None)
        })
    }

    /// A counter without labels; `name` ends in `_total`.
    pub fn counter1<V: prometheus_client::encoding::EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        v: V,
    ) -> fmt::Result {
        self.counter(name, help, [(NoLabels, v)])
    }
}

/// The empty label set.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut prometheus_client::encoding::LabelSetEncoder) -> fmt::Result {
        Ok(())
    }
}

/// Encodes `daemon` with the build and process metrics in the text format.
pub fn render(build: BuildInfo, daemon: Box<dyn Collector>) -> String {
    let mut r = Registry::default();
    r.register_collector(Box::new(build));
    r.register_collector(Box::new(crate::process::Process));
    r.register_collector(daemon);
    let mut out = String::with_capacity(8192);
    // Writing to a String cannot fail; a collector's error leaves what was written before it.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &r);
    out
}

/// The `/metrics` route of a daemon.
pub struct MetricsEndpoint {
    build: BuildInfo,
    token: Option<Arc<str>>,
}

impl MetricsEndpoint {
    /// An endpoint for this build; with `token`, requests carrying `Authorization: Bearer <token>` pass.
    pub fn new(token: Option<String>) -> MetricsEndpoint {
        MetricsEndpoint {
            build: BuildInfo::current(),
            token: token.map(Arc::from),
        }
    }

    /// The router with `GET /metrics`: `allowed` decides for a request that does not carry the metrics
    /// token (when one is set, a request that carries it is allowed without asking); `collect` takes the
    /// daemon's snapshot for one scrape.
    pub fn router<A, C, Fut>(self, allowed: A, collect: C) -> Router
    where
        A: Fn(&Asker<'_>) -> bool + Clone + Send + Sync + 'static,
        C: Fn() -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Box<dyn Collector>> + Send + 'static,
    {
        let build = self.build;
        let token = self.token;
        let handler = move |ConnectInfo(peer): ConnectInfo<SocketAddr>,
                            Query(query): Query<HashMap<String, String>>,
                            headers: HeaderMap| async move {
            let asker = Asker {
                peer,
                headers: &headers,
                query: &query,
            };
            let ok = token.as_deref().is_some_and(|t| bearer_is(&headers, t)) || allowed(&asker);
            if !ok {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "token required: Authorization: Bearer <token>\n",
                )
                    .into_response();
            }
            let daemon = collect().await;
            ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(build, daemon)).into_response()
        };
        Router::new().route("/metrics", get(handler))
    }
}

/// A request for `/metrics` that does not carry the metrics token, for the daemon's own rule.
#[derive(Debug)]
pub struct Asker<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    pub headers: &'a HeaderMap,
    /// The query string's parameters.
    pub query: &'a HashMap<String, String>,
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared in constant time).
pub fn bearer_is(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
