//! Alert evaluation (sans-IO): results and the time go in, alert changes come out, each once per
//! change. Per rule and pair: raised after `after` consecutive results beyond the raising threshold,
//! cleared after as many within the clearing threshold (hysteresis: a value between the two changes
//! nothing); a no-data alert is raised when a watched pair has had no result for `no_data` and
//! cleared by the next result.

use std::collections::HashMap;
use std::sync::Arc;

use crate::archive::AlertEvent;
use crate::config::{AlertRule, Config};
use crate::timespec::{rfc3339, Ms};

#[derive(Debug, Clone, Default)]
struct PairState {
    raised: bool,
    streak: u32,
    no_data: bool,
    last_result: Option<Ms>,
}

/// The alert engine.
pub struct Alerts {
    cfg: Arc<Config>,
    state: HashMap<(String, String, String), PairState>,
    started: Ms,
}

impl Alerts {
    /// An engine for `cfg`, started at `now` (no-data is counted from then for pairs never seen),
    /// with the alerts still active from the archive.
    pub fn new(cfg: Arc<Config>, now: Ms, active: &[AlertEvent]) -> Self {
        let mut state: HashMap<(String, String, String), PairState> = HashMap::new();
        for e in active {
            let s = state
                .entry((e.rule.clone(), e.src.clone(), e.dst.clone()))
                .or_default();
            if e.value.is_none() {
                s.no_data = true;
            } else {
                s.raised = true;
            }
        }
        Alerts {
            cfg,
            state,
            started: now,
        }
    }

    fn rules_for<'a>(cfg: &'a Config, src: &str, dst: &str) -> impl Iterator<Item = &'a AlertRule> + 'a {
        let (s, d) = (cfg.host_index(src), cfg.host_index(dst));
        cfg.alerts
            .iter()
            .filter(move |r| matches!((s, d), (Some(s), Some(d)) if r.pairs.contains(&(s, d))))
    }

    /// A result for a pair at time `t` with its metrics (name, value); returns the changes.
    pub fn result(&mut self, src: &str, dst: &str, t: Ms, metrics: &[(&str, f64)]) -> Vec<AlertEvent> {
        let cfg = self.cfg.clone();
        let mut out = Vec::new();
        for rule in Self::rules_for(&cfg, src, dst) {
            let Some(&(_, v)) = metrics.iter().find(|(m, _)| *m == rule.metric) else {
                continue;
            };
            if !v.is_finite() {
                continue;
            }
            let key = (rule.name.clone(), src.to_string(), dst.to_string());
            let s = self.state.entry(key).or_default();
            s.last_result = Some(s.last_result.map_or(t, |l| l.max(t)));
            if s.no_data {
                s.no_data = false;
                out.push(event(rule, src, dst, t, "cleared", None, "results again".into()));
            }
            let beyond = if rule.below {
                v < rule.raise
            } else {
                v > rule.raise
            };
            let within = if rule.below {
                v >= rule.clear
            } else {
                v <= rule.clear
            };
            let word = if rule.below { "below" } else { "above" };
            if !s.raised {
                s.streak = if beyond { s.streak + 1 } else { 0 };
                if s.streak >= rule.after {
                    s.raised = true;
                    s.streak = 0;
                    out.push(event(
                        rule,
                        src,
                        dst,
                        t,
                        "raised",
                        Some((v, rule.raise)),
                        format!(
                            "{} {src}->{dst}: {} {v:.3} {word} {}",
                            rule.name, rule.metric, rule.raise
                        ),
                    ));
                }
            } else {
                s.streak = if within { s.streak + 1 } else { 0 };
                if s.streak >= rule.after {
                    s.raised = false;
                    s.streak = 0;
                    let back = if rule.below { "at or above" } else { "at or below" };
                    out.push(event(
                        rule,
                        src,
                        dst,
                        t,
                        "cleared",
                        Some((v, rule.clear)),
                        format!(
                            "{} {src}->{dst}: {} {v:.3} back {back} {}",
                            rule.name, rule.metric, rule.clear
                        ),
                    ));
                }
            }
        }
        out
    }

    /// The time has come to `now`: no-data alerts.
    pub fn tick(&mut self, now: Ms) -> Vec<AlertEvent> {
        let cfg = self.cfg.clone();
        let mut out = Vec::new();
        for rule in &cfg.alerts {
            let Some(limit) = rule.no_data else { continue };
            for &(s, d) in &rule.pairs {
                let (src, dst) = (&cfg.hosts[s].name, &cfg.hosts[d].name);
                let st = self
                    .state
                    .entry((rule.name.clone(), src.clone(), dst.clone()))
                    .or_default();
                let since = st.last_result.unwrap_or(self.started);
                if !st.no_data && now - since > limit {
                    st.no_data = true;
                    out.push(event(
                        rule,
                        src,
                        dst,
                        now,
                        "raised",
                        None,
                        format!(
                            "{} {src}->{dst}: no {} result since {}",
                            rule.name,
                            rule.metric,
                            rfc3339(since)
                        ),
                    ));
                }
            }
        }
        out
    }
}

fn event(
    rule: &AlertRule,
    src: &str,
    dst: &str,
    t: Ms,
    state: &str,
    v: Option<(f64, f64)>,
    message: String,
) -> AlertEvent {
    let kind = if v.is_some() { "value" } else { "no-data" };
    AlertEvent {
        id: format!("{}/{src}->{dst}/{kind}/{t}/{state}", rule.name),
        t,
        rule: rule.name.clone(),
        src: src.into(),
        dst: dst.into(),
        metric: rule.metric.clone(),
        state: state.into(),
        value: v.map(|x| x.0),
        threshold: v.map(|x| x.1),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(after: u32) -> Arc<Config> {
        Arc::new(
            Config::parse(&format!(
                r#"
[[host]]
name = "A"
address = "10.0.0.1"
[[host]]
name = "B"
address = "10.0.0.2"
[[test]]
name = "bw"
kind = "sweep"
interval = "PT1M"
[[alert]]
name = "slow"
metric = "throughput_mbps"
pairs = ["A->B"]
below = 300
clear = 350
after = {after}
no_data = "PT5M"
"#
            ))
            .unwrap(),
        )
    }

    #[test]
    fn hysteresis_once_per_change() {
        let mut a = Alerts::new(cfg(1), 0, &[]);
        let mut states = Vec::new();
        for (i, v) in [400.0, 290.0, 280.0, 320.0, 340.0, 299.0, 360.0, 370.0]
            .iter()
            .enumerate()
        {
            for e in a.result("A", "B", i as i64 * 60_000, &[("throughput_mbps", *v)]) {
                states.push((i, e.state));
            }
        }
        // Raised at 290; 320 and 340 are between the thresholds (no change); 299 is still raised;
        // cleared at 360; nothing more.
        assert_eq!(
            states,
            vec![(1, "raised".to_string()), (6, "cleared".to_string())]
        );
        // Another pair or metric changes nothing.
        assert!(a.result("B", "A", 0, &[("throughput_mbps", 1.0)]).is_empty());
        assert!(a.result("A", "B", 0, &[("rtt_ms", 1.0)]).is_empty());
    }

    #[test]
    fn consecutive_results_needed() {
        let mut a = Alerts::new(cfg(2), 0, &[]);
        assert!(a.result("A", "B", 1, &[("throughput_mbps", 100.0)]).is_empty());
        assert!(a.result("A", "B", 2, &[("throughput_mbps", 400.0)]).is_empty());
        assert!(a.result("A", "B", 3, &[("throughput_mbps", 100.0)]).is_empty());
        assert_eq!(a.result("A", "B", 4, &[("throughput_mbps", 100.0)]).len(), 1);
    }

    #[test]
    fn no_data_raises_and_clears() {
        let mut a = Alerts::new(cfg(1), 0, &[]);
        assert!(a.tick(299_000).is_empty());
        let e = a.tick(301_000);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].message.contains("no throughput_mbps result"),
            "{}",
            e[0].message
        );
        assert!(a.tick(400_000).is_empty(), "once per change");
        let e = a.result("A", "B", 410_000, &[("throughput_mbps", 500.0)]);
        assert_eq!((e.len(), e[0].state.as_str()), (1, "cleared"));
        // Restored from the archive: an active alert is not raised again.
        let mut b = Alerts::new(
            cfg(1),
            0,
            &a.result("A", "B", 420_000, &[("throughput_mbps", 1.0)]),
        );
        assert!(b
            .result("A", "B", 430_000, &[("throughput_mbps", 1.0)])
            .is_empty());
        assert_eq!(
            b.result("A", "B", 440_000, &[("throughput_mbps", 400.0)]).len(),
            1
        );
    }
}
