//! The planner (sans-IO): which run of which test happens when, as a pure function of the
//! configuration and the cycle. The hub and every agent compute the same plan, so an agent that has
//! lost the hub keeps its schedule, and the hub can account for every planned run.
//!
//! Per cycle of a test:
//! - exclusive tests hold both hosts and every declared link their traffic crosses; the directed pairs
//!   are ordered in rounds by the circle method (every host in one run per round; the host order is a
//!   per-cycle random permutation) and placed first-fit into slots of `slot` + `guard`, so a full mesh
//!   of n hosts takes 2(n-1) slots (n even) or 2n (n odd), the fewest possible, and links add what
//!   they must;
//! - tests earlier in the configuration have priority: a cycle is placed around the exclusive runs of
//!   earlier tests that overlap it; a run that finds no free slot before the next cycle is planned as
//!   skipped for a conflict (and archived as such);
//! - a random slip, up to `slip` and at most what leaves the cycle room, delays the whole cycle;
//! - non-exclusive tests (latency) start all their runs at the cycle start plus slip.
//!
//! Randomness comes from a fixed generator seeded by the mesh seed, test name and cycle start, so the
//! plan is the same wherever and whenever it is computed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Kind};
use crate::timespec::Ms;

/// One planned run of a test between two hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    /// Unique id: `test/cycle-start-ms/src->dst`.
    pub id: String,
    /// Test name.
    pub test: String,
    /// Test kind.
    pub kind: Kind,
    /// Start of the test's cycle.
    pub cycle: Ms,
    /// Source host name (the agent that runs it).
    pub src: String,
    /// Destination host name (its responder).
    pub dst: String,
    /// Planned start.
    pub start: Ms,
    /// End of the run's slot: the run is stopped here.
    pub end: Ms,
    /// Whether it holds its resources exclusively.
    pub exclusive: bool,
    /// Hosts and links it holds (`host:NAME`, `link:NAME`).
    pub resources: Vec<String>,
    /// Slot within the cycle (0 for non-exclusive runs).
    pub slot: usize,
    /// Set when the run cannot happen: why (a conflict).
    pub skipped: Option<String>,
}

/// The plan of one cycle of one test.
#[derive(Debug, Clone, PartialEq)]
pub struct CyclePlan {
    /// Test index.
    pub test: usize,
    /// Cycle start.
    pub start: Ms,
    /// Next cycle's start (every run ends by then).
    pub deadline: Ms,
    /// The slip applied, ms.
    pub slip: Ms,
    /// Runs in slot order.
    pub runs: Vec<PlannedRun>,
    /// Slots used (exclusive tests).
    pub slots: usize,
    /// A lower bound on the slots any schedule needs for these runs.
    pub lower_bound: usize,
}

/// A small deterministic generator (SplitMix64): the plan must not change with a library version.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn seed_for(cfg: &Config, test: &str, cycle: Ms) -> u64 {
    let h = blake3::hash(format!("{}/{}/{}", cfg.seed, test, cycle).as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Orders the directed pairs of `pairs` in rounds (circle method over the hosts they involve, in
/// the order given): all pairs of one round are host-disjoint. Pairs not in `pairs` are left out.
pub fn rounds(hosts: &[usize], pairs: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    let wanted: HashSet<(usize, usize)> = pairs.iter().copied().collect();
    let mut circle: Vec<Option<usize>> = hosts.iter().copied().map(Some).collect();
    if circle.len() % 2 == 1 {
        circle.push(None);
    }
    let n = circle.len();
    if n < 2 {
        return Vec::new();
    }
    let mut undirected: Vec<Vec<(usize, usize)>> = Vec::new();
    for r in 0..n - 1 {
        let mut round = Vec::new();
        for i in 0..n / 2 {
            let (a, b) = (circle[i], circle[n - 1 - i]);
            if let (Some(a), Some(b)) = (a, b) {
                // Alternate orientation by round so each host sends about as often as it receives.
                round.push(if (r + i) % 2 == 0 { (a, b) } else { (b, a) });
            }
        }
        undirected.push(round);
        // Rotate all but the first.
        let last = circle.pop().expect("n >= 2");
        circle.insert(1, last);
    }
    let mut out = Vec::new();
    for flip in [false, true] {
        for round in &undirected {
            let r: Vec<(usize, usize)> = round
                .iter()
                .map(|&(a, b)| if flip { (b, a) } else { (a, b) })
                .filter(|p| wanted.contains(p))
                .collect();
            if !r.is_empty() {
                out.push(r);
            }
        }
    }
    out
}

/// Computes and caches cycle plans.
pub struct Planner {
    cfg: Arc<Config>,
    cache: HashMap<(usize, Ms), Arc<CyclePlan>>,
}

impl Planner {
    /// A planner for `cfg`.
    pub fn new(cfg: Arc<Config>) -> Self {
        Planner {
            cfg,
            cache: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Config> {
        &self.cfg
    }

    /// Forgets cached cycles that ended before `t`.
    pub fn prune(&mut self, t: Ms) {
        self.cache.retain(|_, c| c.deadline >= t);
    }

    /// Every run (of every test) whose planned start lies in `[from, to)`, ordered by start then id.
    pub fn runs_between(&mut self, from: Ms, to: Ms) -> Vec<PlannedRun> {
        let mut out = Vec::new();
        for ti in 0..self.cfg.tests.len() {
            let repeat = self.cfg.tests[ti].repeat.clone();
            let Some((mut c0, mut c1)) = repeat.cycle_at(from) else {
                continue;
            };
            while c0 < to {
                let plan = self.cycle(ti, c0, c1);
                out.extend(
                    plan.runs
                        .iter()
                        .filter(|r| r.start >= from && r.start < to)
                        .cloned(),
                );
                match repeat.next_cycle(c0) {
                    Some((a, b)) => (c0, c1) = (a, b),
                    None => break,
                }
            }
        }
        out.sort_by(|a, b| (a.start, &a.id).cmp(&(b.start, &b.id)));
        out
    }

    /// The plan of the cycle of test `ti` starting at `c0` (next one at `c1`).
    pub fn cycle(&mut self, ti: usize, c0: Ms, c1: Ms) -> Arc<CyclePlan> {
        if let Some(p) = self.cache.get(&(ti, c0)) {
            return p.clone();
        }
        let plan = Arc::new(self.compute(ti, c0, c1));
        self.cache.insert((ti, c0), plan.clone());
        plan
    }

    /// Exclusive runs of tests before `ti` that overlap `[from, to)`: per resource, (start, end, test).
    fn reservations(&mut self, ti: usize, from: Ms, to: Ms) -> HashMap<String, Vec<(Ms, Ms, String)>> {
        let mut busy: HashMap<String, Vec<(Ms, Ms, String)>> = HashMap::new();
        for tj in 0..ti {
            if !self.cfg.tests[tj].exclusive {
                continue;
            }
            let repeat = self.cfg.tests[tj].repeat.clone();
            let Some((mut c0, mut c1)) = repeat.cycle_at(from) else {
                continue;
            };
            while c0 < to {
                let plan = self.cycle(tj, c0, c1);
                for r in plan.runs.iter().filter(|r| r.skipped.is_none()) {
                    if r.start < to && r.end > from {
                        for res in &r.resources {
                            busy.entry(res.clone())
                                .or_default()
                                .push((r.start, r.end, r.test.clone()));
                        }
                    }
                }
                match repeat.next_cycle(c0) {
                    Some((a, b)) => (c0, c1) = (a, b),
                    None => break,
                }
            }
        }
        busy
    }

    fn compute(&mut self, ti: usize, c0: Ms, c1: Ms) -> CyclePlan {
        let cfg = self.cfg.clone();
        let test = &cfg.tests[ti];
        let mut rng = SplitMix::new(seed_for(&cfg, &test.name, c0));
        let make =
            |src: usize, dst: usize, start: Ms, end: Ms, slot: usize, skipped: Option<String>| PlannedRun {
                id: format!(
                    "{}/{}/{}->{}",
                    test.name, c0, cfg.hosts[src].name, cfg.hosts[dst].name
                ),
                test: test.name.clone(),
                kind: test.kind,
                cycle: c0,
                src: cfg.hosts[src].name.clone(),
                dst: cfg.hosts[dst].name.clone(),
                start,
                end,
                exclusive: test.exclusive,
                resources: cfg.resources(src, dst),
                slot,
                skipped,
            };
        let span = c1 - c0;
        if !test.exclusive {
            let slot = test.slot.min(span);
            let room = span - slot;
            let slip = if test.slip > 0 && room > 0 {
                rng.below(test.slip.min(room) as u64 + 1) as Ms
            } else {
                0
            };
            let runs = test
                .pairs
                .iter()
                .map(|&(s, d)| make(s, d, c0 + slip, c0 + slip + slot, 0, None))
                .collect();
            return CyclePlan {
                test: ti,
                start: c0,
                deadline: c1,
                slip,
                runs,
                slots: 1,
                lower_bound: 1,
            };
        }
        // Hosts in a random order for this cycle, then rounds.
        let mut hosts: Vec<usize> = {
            let mut set: Vec<usize> = test.pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
            set.sort_unstable();
            set.dedup();
            set
        };
        for i in (1..hosts.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            hosts.swap(i, j);
        }
        let mut order: Vec<(usize, usize)> = rounds(&hosts, &test.pairs).into_iter().flatten().collect();
        // Most constrained first: runs over the busiest resource (a shared link) are placed before
        // the others, which then fill the gaps; with hosts alone this keeps the round order.
        let mut degree: HashMap<String, usize> = HashMap::new();
        for &(s, d) in &order {
            for r in cfg.resources(s, d) {
                *degree.entry(r).or_default() += 1;
            }
        }
        let busiest =
            |&(s, d): &(usize, usize)| cfg.resources(s, d).iter().map(|r| degree[r]).max().unwrap_or(0);
        order.sort_by_key(|p| std::cmp::Reverse(busiest(p)));
        let slip_draw = rng.next_u64();
        let reserved = self.reservations(ti, c0, c1);
        let place = |base: Ms| -> Vec<(usize, usize, Option<usize>, String)> {
            let step = test.slot + cfg.guard;
            let mut used: Vec<HashSet<String>> = Vec::new();
            let mut out = Vec::new();
            for &(s, d) in &order {
                let res = cfg.resources(s, d);
                let mut j = 0usize;
                let mut blockers: Vec<String> = Vec::new();
                let placed = loop {
                    let start = base + j as Ms * step;
                    let end = start + test.slot;
                    if end > c1 {
                        break None;
                    }
                    if used.len() <= j {
                        used.push(HashSet::new());
                    }
                    let mine = res.iter().any(|r| used[j].contains(r));
                    let theirs: Vec<&String> = res
                        .iter()
                        .flat_map(|r| reserved.get(r).into_iter().flatten())
                        .filter(|(rs, re, _)| start < re + cfg.guard && *rs < end + cfg.guard)
                        .map(|(_, _, t)| t)
                        .collect();
                    if !mine && theirs.is_empty() {
                        for r in &res {
                            used[j].insert(r.clone());
                        }
                        break Some(j);
                    }
                    for t in theirs {
                        if !blockers.contains(t) {
                            blockers.push(t.clone());
                        }
                    }
                    j += 1;
                };
                let why = if blockers.is_empty() {
                    format!(
                        "no free slot before the next cycle at {}: the cycle has room for {} slots of {} ms",
                        crate::timespec::rfc3339(c1),
                        (span + cfg.guard) / step.max(1),
                        test.slot
                    )
                } else {
                    format!(
                        "no free slot before the next cycle: hosts or links busy with test {}",
                        blockers.join(", ")
                    )
                };
                out.push((s, d, placed, why));
            }
            out
        };
        let first = place(c0);
        let last_end = first
            .iter()
            .filter_map(|(_, _, j, _)| j.map(|j| c0 + j as Ms * (test.slot + cfg.guard) + test.slot))
            .max()
            .unwrap_or(c0);
        let room = (c1 - last_end).max(0);
        let mut slip = if test.slip > 0 && room > 0 {
            (slip_draw % (test.slip.min(room) as u64 + 1)) as Ms
        } else {
            0
        };
        let mut placed = if slip > 0 { place(c0 + slip) } else { first.clone() };
        // A slip must never cost a run: fall back to none if the shifted placement skips more.
        let skipped =
            |p: &[(usize, usize, Option<usize>, String)]| p.iter().filter(|x| x.2.is_none()).count();
        if skipped(&placed) > skipped(&first) {
            placed = first;
            slip = 0;
        }
        let step = test.slot + cfg.guard;
        let mut runs: Vec<PlannedRun> = placed
            .into_iter()
            .map(|(s, d, j, why)| match j {
                Some(j) => {
                    let start = c0 + slip + j as Ms * step;
                    make(s, d, start, start + test.slot, j, None)
                }
                None => make(s, d, c0 + slip, c0 + slip + test.slot.min(span), 0, Some(why)),
            })
            .collect();
        runs.sort_by(|a, b| (a.start, &a.id).cmp(&(b.start, &b.id)));
        let slots = runs
            .iter()
            .filter(|r| r.skipped.is_none())
            .map(|r| r.slot + 1)
            .max()
            .unwrap_or(0);
        CyclePlan {
            test: ti,
            start: c0,
            deadline: c1,
            slip,
            lower_bound: lower_bound(&cfg, &test.pairs),
            runs,
            slots,
        }
    }
}

/// A lower bound on the slots needed for `pairs` run exclusively: the most runs any one host or link
/// takes part in, and the runs divided by the most that can run at once (half the hosts).
pub fn lower_bound(cfg: &Config, pairs: &[(usize, usize)]) -> usize {
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    let mut hosts = HashSet::new();
    for &(s, d) in pairs {
        hosts.insert(s);
        hosts.insert(d);
        for r in cfg.resources(s, d) {
            *per.entry(r).or_default() += 1;
        }
    }
    let degree = per.values().copied().max().unwrap_or(0);
    let parallel = (hosts.len() / 2).max(1);
    degree.max(pairs.len().div_ceil(parallel))
}
