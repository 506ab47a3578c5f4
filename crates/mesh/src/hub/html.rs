//! The dashboard (matrix tables, alerts, run log, failures, agents) and the page of one pair.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};

use super::access::guard;
use super::http::{blocking, reply, PairQuery};
use super::matrix::{matrix, Matrix};
use super::state::{lock, Shared};
use crate::archive::{RunFilter, RunRow};
use crate::config::Config;
use crate::escape::esc;
use crate::timespec::{now_ms, rfc3339};

const STYLE: &str =
    "body{font-family:sans-serif;margin:1em;color:#222}table{border-collapse:collapse;margin:.5em 0}\
td,th{border:1px solid #bbb;padding:.3em .5em;text-align:center;font-size:.9em}th{background:#eee}\
td.good{background:#b8e6b8}td.warn{background:#ffe08a}td.bad{background:#f4a3a3}td.none{background:#fff}\
td.stale{background:#ddd;color:#777}td.empty{background:#f6f6f6;color:#aaa}td.self{background:#333}\
.failed{color:#b00}.raised{color:#b00;font-weight:bold}.small{font-size:.8em;color:#666}\
.wrap{overflow-x:auto;max-width:100%}a{color:#225}";

pub(super) fn fmt_metric(name: &str, v: f64) -> String {
    match name {
        "throughput_mbps" | "capacity_mbps" => format!("{v:.0} Mb/s"),
        "loss_percent" => format!("{v:.2} %"),
        "rtt_ms" => format!("{v:.2} ms"),
        _ => format!("{v}"),
    }
}

/// The matrix tables of the dashboard: one per metric, or one per test and metric where several
/// tests give the metric (a sweep's loss at rates above the path's and a latency test's loss are
/// different figures; one table would show whichever ran last).
fn matrix_tables(cfg: &Config, m: &Matrix) -> String {
    let mut h = String::new();
    for metric in ["throughput_mbps", "loss_percent", "rtt_ms", "capacity_mbps"] {
        let mut tests: Vec<&str> = m
            .cells
            .iter()
            .flat_map(|c| c.by_test.iter())
            .filter(|(_, ms)| ms.contains_key(metric))
            .map(|(t, _)| t.as_str())
            .collect();
        tests.sort_unstable();
        tests.dedup();
        if tests.is_empty() && cfg.threshold(metric).is_none() {
            continue;
        }
        let th = cfg
            .threshold(metric)
            .map(|t| format!(" (warn {} / bad {})", t.warn, t.bad))
            .unwrap_or_default();
        // One table per test giving the metric; a threshold's metric without results yet: one empty.
        let tables: Vec<Option<&str>> = match tests.len() {
            0 => vec![None],
            1 => vec![Some(tests[0])],
            _ => tests.iter().map(|t| Some(*t)).collect(),
        };
        for test in tables {
            let (title, attr) = match test {
                Some(t) if tests.len() > 1 => (
                    format!("{metric} &middot; {}{th}", esc(t)),
                    format!(" data-test=\"{}\"", esc(t)),
                ),
                Some(t) => (format!("{metric}{th}"), format!(" data-test=\"{}\"", esc(t))),
                None => (format!("{metric}{th}"), String::new()),
            };
            let _ = write!(
                h,
                "<h2>{title}</h2><div class=\"wrap\"><table class=\"matrix\" data-metric=\"{metric}\"{attr}><tr><th>from \\ to</th>"
            );
            for d in &m.hosts {
                let _ = write!(h, "<th>{}</th>", esc(d));
            }
            h += "</tr>";
            for src in &m.hosts {
                let _ = write!(h, "<tr><th>{}</th>", esc(src));
                for dst in &m.hosts {
                    if src == dst {
                        h += "<td class=\"self\"></td>";
                        continue;
                    }
                    let v = m
                        .cells
                        .iter()
                        .find(|c| &c.src == src && &c.dst == dst)
                        .and_then(|c| c.by_test.get(test?))
                        .and_then(|ms| ms.get(metric));
                    let pair = format!("{src}->{dst}");
                    match v {
                        Some(v) => {
                            let class = if v.stale { "stale" } else { v.class.as_str() };
                            let _ = write!(
                                h,
                                "<td class=\"{class}\" data-pair=\"{}\" data-class=\"{class}\" title=\"{} at {}\">\
                                 <a href=\"/pair?src={}&amp;dst={}\">{}</a></td>",
                                esc(&pair),
                                esc(&v.test),
                                rfc3339(v.t),
                                esc(src),
                                esc(dst),
                                fmt_metric(metric, v.value)
                            );
                        }
                        None => {
                            let _ = write!(
                                h,
                                "<td class=\"empty\" data-pair=\"{}\" data-class=\"empty\">&ndash;</td>",
                                esc(&pair)
                            );
                        }
                    }
                }
                h += "</tr>";
            }
            h += "</table></div>";
        }
    }
    h
}

fn dashboard_html(s: &Shared) -> Result<String, String> {
    let m = matrix(s)?;
    let (active, runs, failures, agents) = {
        let mut a = lock(&s.archive);
        (
            a.active_alerts().map_err(|e| e.to_string())?,
            a.runs(&RunFilter {
                limit: Some(30),
                until: Some(now_ms() + 1),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
            a.runs(&RunFilter {
                status: Some("failed".into()),
                limit: Some(30),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?,
            a.agents().map_err(|e| e.to_string())?,
        )
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <meta http-equiv=\"refresh\" content=\"15\"><title>vlbiflow mesh {}</title><style>{STYLE}</style></head><body>\
         <h1>Mesh {}</h1><p class=\"small\">updated {} &middot; {} hosts &middot; {} tests &middot; \
         <a href=\"/metrics\">metrics</a></p>",
        esc(&s.cfg.name),
        esc(&s.cfg.name),
        rfc3339(m.now),
        m.hosts.len(),
        s.cfg.tests.len()
    );
    let _ = write!(h, "<h2>Alerts</h2><ul id=\"alerts\">");
    if active.is_empty() {
        h += "<li class=\"small\">none active</li>";
    }
    for e in &active {
        let _ = write!(
            h,
            "<li class=\"raised\" data-alert=\"{}\">{} &middot; since {}</li>",
            esc(&format!("{}/{}->{}", e.rule, e.src, e.dst)),
            esc(&e.message),
            rfc3339(e.t)
        );
    }
    h += "</ul>";
    h += &matrix_tables(&s.cfg, &m);
    let run_table = |h: &mut String, rows: &[RunRow], id: &str| {
        let _ = write!(
            h,
            "<div class=\"wrap\"><table id=\"{id}\"><tr><th>planned</th><th>test</th><th>pair</th><th>status</th><th>figures or reason</th></tr>"
        );
        for r in rows {
            let what = if r.status == "failed" {
                format!(
                    "<span class=\"failed\">{}: {}</span>",
                    esc(r.reason.as_deref().unwrap_or("")),
                    esc(r.detail.as_deref().unwrap_or(""))
                )
            } else {
                [
                    ("throughput_mbps", r.throughput_mbps),
                    ("loss_percent", r.loss_percent),
                    ("rtt_ms", r.rtt_ms),
                    ("capacity_mbps", r.capacity_mbps),
                ]
                .iter()
                .filter_map(|(n, v)| v.map(|v| fmt_metric(n, v)))
                .collect::<Vec<_>>()
                .join(", ")
            };
            let _ = write!(
                h,
                "<tr data-run=\"{}\"><td>{}</td><td>{}</td><td>{}&rarr;{}</td><td>{}</td><td>{what}</td></tr>",
                esc(&r.id),
                rfc3339(r.planned_start),
                esc(&r.test),
                esc(&r.src),
                esc(&r.dst),
                esc(&r.status)
            );
        }
        h.push_str("</table></div>");
    };
    h += "<h2>Run log</h2>";
    run_table(&mut h, &runs, "runs");
    h += "<h2>Failures</h2>";
    run_table(&mut h, &failures, "failures");
    h += "<h2>Agents</h2><table id=\"agents\"><tr><th>agent</th><th>last contact</th><th>software</th></tr>";
    for (name, seen, sw, _) in &agents {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{} ({:.0} s ago)</td><td>{}</td></tr>",
            esc(name),
            rfc3339(*seen),
            (now_ms() - seen) as f64 / 1000.0,
            esc(sw)
        );
    }
    h += "</table></body></html>";
    Ok(h)
}

pub(super) async fn dashboard(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || dashboard_html(&s)).await, |h| {
        ([(header::CACHE_CONTROL, "no-store")], Html(h)).into_response()
    })
}

pub(super) async fn pair_page(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let runs = lock(&s.archive)
            .runs(&RunFilter {
                src: Some(q.src.clone()),
                dst: Some(q.dst.clone()),
                limit: Some(40),
                until: Some(now_ms() + 1),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        let (src, dst) = (esc(&q.src), esc(&q.dst));
        let mut h = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
             <title>{src} to {dst}</title><style>{STYLE}</style></head><body><p><a href=\"/\">&larr; matrix</a></p>\
             <h1>{src} &rarr; {dst}</h1>"
        );
        for m in ["throughput_mbps", "loss_percent", "rtt_ms", "capacity_mbps"] {
            if runs.iter().any(|r| match m {
                "throughput_mbps" => r.throughput_mbps.is_some(),
                "loss_percent" => r.loss_percent.is_some(),
                "rtt_ms" => r.rtt_ms.is_some(),
                _ => r.capacity_mbps.is_some(),
            }) {
                let _ = write!(
                    h,
                    "<div class=\"wrap\"><img alt=\"{m}\" src=\"/plot/series.svg?src={src}&amp;dst={dst}&amp;metric={m}\"></div>"
                );
            }
        }
        let _ = write!(
            h,
            "<h2>Latest sweep</h2><div class=\"wrap\"><img alt=\"sweep\" src=\"/plot/sweep.svg?src={src}&amp;dst={dst}\"></div><h2>Runs</h2><ul>"
        );
        for r in &runs {
            let _ = write!(
                h,
                "<li class=\"{}\">{} {} {}{}</li>",
                esc(&r.status),
                rfc3339(r.planned_start),
                esc(&r.test),
                esc(&r.status),
                r.reason
                    .as_deref()
                    .map(|x| format!(": {}: {}", esc(x), esc(r.detail.as_deref().unwrap_or(""))))
                    .unwrap_or_default()
            );
        }
        h += "</ul></body></html>";
        Ok(h)
    })
    .await;
    reply(res, |h| Html(h).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::matrix::matrix_of;
    use crate::timespec::Ms;

    fn row(test: &str, src: &str, dst: &str, t: Ms, thr: Option<f64>, loss: f64, rtt: Option<f64>) -> RunRow {
        RunRow {
            id: format!("{test}/{t}/{src}->{dst}"),
            test: test.into(),
            kind: if test == "lat" { "latency" } else { "sweep" }.into(),
            src: src.into(),
            dst: dst.into(),
            planned_start: t,
            planned_end: t + 5000,
            exclusive: test != "lat",
            status: "ok".into(),
            reason: None,
            detail: None,
            started_at: Some(t),
            ended_at: Some(t + 1000),
            throughput_mbps: thr,
            loss_percent: Some(loss),
            rtt_ms: rtt,
            capacity_mbps: None,
            reported_by: Some(src.into()),
        }
    }

    /// A sweep over a 100 Mb/s path at 300 Mb/s loses two thirds; the latency test after it loses
    /// nothing. The dashboard shows both losses in tables of their own (before, the loss table
    /// showed whichever ran last: 0 % for a path where the sweep had just lost 66 %); throughput,
    /// given by one test only, stays one table as it was; /metrics has a series per test.
    #[test]
    fn a_metric_of_two_tests_is_shown_per_test() {
        let cfg = Config::parse(
            "[mesh]\nname = \"t\"\n[[host]]\nname = \"A\"\naddress = \"10.0.0.1\"\n[[host]]\nname = \"J\"\naddress = \"10.0.0.2\"\n\
             [[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT2M\"\n[[test]]\nname = \"lat\"\nkind = \"latency\"\ninterval = \"PT30S\"\n\
             [[threshold]]\nmetric = \"throughput_mbps\"\nwarn = 250\nbad = 200\n",
        )
        .unwrap();
        let latest = [
            row("bw", "A", "J", 1_000_000, Some(97.0), 66.4, None),
            row("lat", "A", "J", 1_030_000, None, 0.0, Some(0.4)),
            row("lat", "J", "A", 1_030_000, None, 0.0, Some(0.5)),
        ];
        let m = matrix_of(&cfg, &latest, 1_040_000);
        let aj = m.cells.iter().find(|c| c.src == "A" && c.dst == "J").unwrap();
        assert_eq!(aj.by_test["bw"]["loss_percent"].value, 66.4);
        assert_eq!(aj.by_test["lat"]["loss_percent"].value, 0.0);
        assert_eq!(aj.by_test["bw"]["throughput_mbps"].class, "bad");
        // The newest of any test, as before.
        assert_eq!(aj.metrics["loss_percent"].test, "lat");

        let h = matrix_tables(&cfg, &m);
        let table = |attrs: &str| -> &str {
            let at = h.find(attrs).unwrap_or_else(|| panic!("no table {attrs}: {h}"));
            &h[at..at + h[at..].find("</table>").unwrap()]
        };
        assert_eq!(h.matches("data-metric=\"throughput_mbps\"").count(), 1, "{h}");
        assert!(table("data-metric=\"throughput_mbps\" data-test=\"bw\"").contains("97 Mb/s"));
        assert_eq!(h.matches("data-metric=\"loss_percent\"").count(), 2, "{h}");
        let bw_loss = table("data-metric=\"loss_percent\" data-test=\"bw\"");
        assert!(
            bw_loss.contains("66.40 %") && !bw_loss.contains("0.00 %"),
            "{bw_loss}"
        );
        let lat_loss = table("data-metric=\"loss_percent\" data-test=\"lat\"");
        assert!(
            lat_loss.contains("0.00 %") && !lat_loss.contains("66.40 %"),
            "{lat_loss}"
        );
        // J->A has no sweep result: an empty cell in the sweep's loss table.
        assert!(
            bw_loss.contains("data-pair=\"J-&gt;A\" data-class=\"empty\""),
            "{bw_loss}"
        );
        assert!(
            h.contains("<h2>loss_percent &middot; bw</h2>") && h.contains("<h2>rtt_ms</h2>"),
            "{h}"
        );
    }
}
