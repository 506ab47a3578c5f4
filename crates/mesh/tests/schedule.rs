//! The scheduling state machines in simulated time: four agents and a hub, hours of runs with random
//! run lengths, a run that overruns its slot, the hub away for a while, an agent killed and restarted.
//! Checked: no two exclusive runs overlap on any host or declared link (by their actual start and end),
//! every planned run ends with exactly one outcome, failures hit only the killed agent's pairs, a
//! full mesh takes the fewest slots, and the plan is the same wherever it is computed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use vlbiflow_mesh::config::Config;
use vlbiflow_mesh::plan::{lower_bound, Planner, SplitMix};
use vlbiflow_mesh::report::{Metrics, Outcome, Reason, RunReport};
use vlbiflow_mesh::schedule::{AgentAction, AgentMachine, Ledger, LedgerAction};
use vlbiflow_mesh::timespec::Ms;

fn mesh(hosts: &[(&str, &str)], links: &str, tests: &str) -> Arc<Config> {
    let mut t = String::from("[mesh]\nseed = 11\nguard = \"PT1S\"\ngrace = \"PT1M\"\n");
    for (i, (h, site)) in hosts.iter().enumerate() {
        t += &format!(
            "[[host]]\nname = \"{h}\"\naddress = \"10.9.0.{}\"\nsite = \"{site}\"\n",
            i + 1
        );
    }
    t += links;
    t += tests;
    Arc::new(Config::parse(&t).unwrap())
}

const TESTS: &str = r#"
[[test]]
name = "bw"
kind = "sweep"
interval = "PT2M"
slot = "PT8S"
slip = "PT30S"
[[test]]
name = "cap"
kind = "capacity"
interval = "PT10M"
slot = "PT15S"
[[test]]
name = "lat"
kind = "latency"
interval = "PT30S"
slot = "PT5S"
"#;

fn four() -> Arc<Config> {
    mesh(
        &[("A", "Ef"), ("B", "Wb"), ("C", "On"), ("J", "JIVE")],
        "[[link]]\nname = \"A-up\"\nhosts = [\"A\"]\n[[link]]\nname = \"J-in\"\nsites = [\"JIVE\"]\ndirection = \"in\"\n",
        TESTS,
    )
}

#[test]
fn full_mesh_takes_the_fewest_slots() {
    for n in 2..=9 {
        let names: Vec<String> = (0..n).map(|i| format!("H{i}")).collect();
        let hosts: Vec<(&str, &str)> = names.iter().map(|s| (s.as_str(), "s")).collect();
        let cfg = mesh(
            &hosts,
            "",
            "[[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT1H\"\nslot = \"PT10S\"\n",
        );
        let mut p = Planner::new(cfg.clone());
        for cycle in 0..5 {
            let c0 = 1_700_000_000_000 / 3_600_000 * 3_600_000 + cycle * 3_600_000;
            let plan = p.cycle(0, c0, c0 + 3_600_000);
            let optimum = if n % 2 == 0 { 2 * (n - 1) } else { 2 * n };
            assert_eq!(plan.runs.len(), n * (n - 1));
            assert!(plan.runs.iter().all(|r| r.skipped.is_none()));
            assert_eq!(plan.slots, optimum, "n = {n}");
            assert!(plan.lower_bound <= plan.slots);
        }
    }
}

#[test]
fn shared_uplink_serialises_its_site() {
    // Two hosts at one station behind one uplink: tests crossing it cannot run together.
    let cfg = mesh(
        &[("A1", "Ef"), ("A2", "Ef"), ("B", "Wb"), ("C", "On")],
        "[[link]]\nname = \"Ef-up\"\nsites = [\"Ef\"]\n",
        "[[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT1H\"\nslot = \"PT10S\"\n",
    );
    let mut p = Planner::new(cfg.clone());
    let plan = p.cycle(0, 0, 3_600_000);
    // 8 of the 12 pairs cross Ef-up and need 8 slots; each of them holds A1 or A2 and B or C, so
    // A1<->A2 and B<->C fit beside none of them: 2 more slots (A1->A2 with B->C, then reversed).
    assert_eq!(lower_bound(&cfg, &cfg.tests[0].pairs), 8);
    assert_eq!(plan.slots, 10, "{} slots", plan.slots);
    check_no_overlap(
        plan.runs
            .iter()
            .map(|r| (r.start, r.end, r.resources.clone(), r.id.clone())),
    );
}

#[test]
fn overfull_cycle_skips_for_conflict_with_reason() {
    let cfg = mesh(
        &[("A", "a"), ("B", "b"), ("C", "c")],
        "",
        "[[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT30S\"\nslot = \"PT6S\"\n",
    );
    // 3 hosts need 6 slots of 6 s + 1 s guard = 41 s: only 4 fit in 30 s.
    let mut p = Planner::new(cfg);
    let plan = p.cycle(0, 0, 30_000);
    let skipped: Vec<_> = plan.runs.iter().filter(|r| r.skipped.is_some()).collect();
    assert_eq!(skipped.len(), 2);
    assert!(
        skipped[0].skipped.as_ref().unwrap().contains("no free slot"),
        "{:?}",
        skipped[0]
    );
}

#[test]
fn plan_is_deterministic_and_slips_vary() {
    let cfg = four();
    let (mut a, mut b) = (Planner::new(cfg.clone()), Planner::new(cfg.clone()));
    let t0 = 1_700_000_040_000;
    // b computes a later window first: the shared window must agree anyway.
    let late = b.runs_between(t0 + 3_600_000, t0 + 7_200_000);
    let ra = a.runs_between(t0, t0 + 7_200_000);
    let rb = b.runs_between(t0, t0 + 7_200_000);
    assert_eq!(ra, rb);
    assert!(late.iter().all(|r| ra.contains(r)));
    let mut slips = HashSet::new();
    let mut p = Planner::new(cfg.clone());
    for k in 0..20 {
        let c0 = (t0 / 120_000 + k) * 120_000;
        slips.insert(p.cycle(0, c0, c0 + 120_000).slip);
    }
    assert!(slips.len() > 5, "slips {slips:?}");
}

fn check_no_overlap(runs: impl Iterator<Item = (Ms, Ms, Vec<String>, String)>) {
    let mut by_res: BTreeMap<String, Vec<(Ms, Ms, String)>> = BTreeMap::new();
    for (s, e, res, id) in runs {
        for r in res {
            by_res.entry(r).or_default().push((s, e, id.clone()));
        }
    }
    for (res, mut v) in by_res {
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{res}: {} [{}, {}) overlaps {} [{}, {})",
                w[0].2,
                w[0].0,
                w[0].1,
                w[1].2,
                w[1].0,
                w[1].1
            );
        }
    }
}

/// One simulated run in progress.
struct Running {
    id: String,
    end: Ms,
    report: RunReport,
}

#[test]
fn simulated_network_accounts_for_every_run() {
    let cfg = four();
    let start: Ms = 1_700_000_000_000;
    let hours = 3;
    let stop = start + hours * 3_600_000;
    let hub_away = (start + 3_600_000, start + 3_600_000 + 180_000);
    let (victim, victim_down) = ("C", (start + 7_200_000, start + 7_200_000 + 600_000));
    let mut rng = SplitMix::new(5);
    let names = ["A", "B", "C", "J"];
    let mut agents: HashMap<&str, AgentMachine> = names
        .iter()
        .map(|&n| (n, AgentMachine::new(cfg.clone(), n, start)))
        .collect();
    let mut outbox: HashMap<&str, Vec<RunReport>> = HashMap::new();
    let mut running: HashMap<&str, Vec<Running>> = HashMap::new();
    let mut ledger = Ledger::new(cfg.clone(), start, start, 60_000);
    let mut planned: HashMap<String, vlbiflow_mesh::plan::PlannedRun> = HashMap::new();
    let mut archive: HashMap<String, RunReport> = HashMap::new();
    let mut executed: Vec<(Ms, Ms, Vec<String>, String)> = Vec::new();
    let mut persisted_cursor: Option<Ms> = None;
    let mut overran = false;
    let store = |archive: &mut HashMap<String, RunReport>, r: RunReport| {
        let keep = archive.get(&r.run.id).is_some_and(|old| old.rank() >= r.rank());
        if !keep {
            archive.insert(r.run.id.clone(), r);
        }
    };
    let mut now = start;
    while now < stop + 10 * 60_000 {
        let hub_up = !(hub_away.0..hub_away.1).contains(&now);
        let victim_up = !(victim_down.0..victim_down.1).contains(&now);
        // The victim dies: its machine and running runs are gone; it restarts from its persisted cursor.
        if !victim_up && agents.contains_key(victim) {
            persisted_cursor = Some(agents[victim].cursor());
            agents.remove(victim);
            running.remove(victim);
        }
        if victim_up && !agents.contains_key(victim) {
            agents.insert(
                victim,
                AgentMachine::new(cfg.clone(), victim, persisted_cursor.unwrap()),
            );
        }
        for &n in &names {
            // Finish runs whose time has come.
            if let Some(list) = running.get_mut(n) {
                let (done, keep): (Vec<Running>, Vec<Running>) = list.drain(..).partition(|r| r.end <= now);
                *list = keep;
                for r in done {
                    agents.get_mut(n).unwrap().finished(&r.id);
                    outbox.entry(n).or_default().push(r.report);
                }
            }
            let Some(m) = agents.get_mut(n) else { continue };
            if now >= stop + 60_000 {
                continue;
            }
            for a in m.poll(now) {
                match a {
                    AgentAction::Report(r) => outbox.entry(n).or_default().push(r),
                    AgentAction::Start(run) => {
                        let dst_up = run.dst != victim || victim_up;
                        // Most runs take part of their slot. One bw run of A hangs: the runner stops
                        // its traffic at the end of the slot (the hard deadline) and reports it timed
                        // out, but its thread winds down only 130 s later; meanwhile A's agent must
                        // skip its next exclusive runs rather than start them beside it.
                        let len = (run.end - run.start) * (30 + rng.below(60) as i64) / 100;
                        let mut end = now + len;
                        let mut traffic_end = end;
                        let mut outcome = if dst_up {
                            Outcome::Ok {
                                metrics: Metrics {
                                    throughput_mbps: Some(500.0),
                                    ..Metrics::default()
                                },
                                points: vec![],
                                result: serde_json::Value::Null,
                            }
                        } else {
                            Outcome::Failed {
                                reason: Reason::Refused,
                                detail: "connection refused".into(),
                            }
                        };
                        if !overran && n == "A" && run.test == "bw" && now > start + 600_000 {
                            overran = true;
                            traffic_end = run.end;
                            end = run.end + 130_000;
                            outcome = Outcome::Failed {
                                reason: Reason::TimedOut,
                                detail: "stopped at the end of its slot".into(),
                            };
                        }
                        if run.exclusive {
                            executed.push((now, traffic_end, run.resources.clone(), run.id.clone()));
                        }
                        let report = RunReport {
                            run: run.clone(),
                            started_at: Some(now),
                            ended_at: Some(end),
                            reported_by: n.into(),
                            outcome,
                        };
                        running.entry(n).or_default().push(Running {
                            id: run.id,
                            end,
                            report,
                        });
                    }
                }
            }
            // Deliver when the hub is up.
            if hub_up {
                ledger.contact(n, now);
                for r in outbox.remove(n).unwrap_or_default() {
                    ledger.reported(&r.run);
                    store(&mut archive, r);
                }
            }
        }
        if hub_up {
            for a in ledger.poll(now.min(stop)) {
                match a {
                    LedgerAction::Plan(r) => {
                        planned.insert(r.id.clone(), r);
                    }
                    LedgerAction::Record(r) => store(&mut archive, r),
                }
            }
        }
        now += 250;
    }
    assert!(overran);
    // Exclusive runs never overlapped on a host or link, by their actual times.
    check_no_overlap(executed.into_iter());
    // Every planned run has exactly one outcome; nothing else was archived.
    let planned_ids: HashSet<&String> = planned.keys().collect();
    let archived_ids: HashSet<&String> = archive.keys().collect();
    let missing: Vec<_> = planned_ids.difference(&archived_ids).take(5).collect();
    let extra: Vec<_> = archived_ids.difference(&planned_ids).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} planned, {} archived; planned without outcome: {missing:?}; archived but not planned: {extra:?}",
        planned_ids.len(),
        archived_ids.len()
    );
    assert_eq!(ledger.pending(), 0);
    let n_planned = planned.len();
    assert!(n_planned > 1000, "{n_planned} planned");
    // Failures: conflicts (the overrun), and the victim's pairs while it was down; nothing else.
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for r in archive.values() {
        if let Outcome::Failed { reason, detail } = &r.outcome {
            *reasons.entry(reason.as_str().into()).or_default() += 1;
            match reason {
                Reason::Conflict => assert!(detail.contains("still holds"), "{detail}"),
                Reason::TimedOut => assert_eq!(r.run.src, "A"),
                Reason::AgentDown | Reason::Refused => {
                    assert!(r.run.src == victim || r.run.dst == victim, "{r:?}");
                    let t = r.run.start;
                    assert!(t >= victim_down.0 - 30_000 && t < victim_down.1 + 30_000, "{r:?}");
                }
                _ => panic!("unexpected failure {r:?}"),
            }
        }
    }
    eprintln!("{n_planned} planned runs; failures by reason: {reasons:?}");
    assert!(
        reasons.get("agent_down").copied().unwrap_or(0) > 10,
        "{reasons:?}"
    );
    assert!(reasons.get("refused").copied().unwrap_or(0) > 10, "{reasons:?}");
    assert!(reasons.get("conflict").copied().unwrap_or(0) >= 1, "{reasons:?}");
    // The hub's absence cost nothing: every run planned during it has its agent's outcome.
    for r in archive.values() {
        if (hub_away.0..hub_away.1).contains(&r.run.start) && r.run.src != victim {
            assert_ne!(r.reported_by, "hub", "{r:?}");
        }
    }
}
