//! The two scheduling state machines (sans-IO, quinn-proto style): fed the time and events, they
//! say what to do; the drivers in [`crate::agent`] and [`crate::hub`] do the I/O.
//!
//! [`AgentMachine`]: one per agent, for the runs its host sources. At each run's planned start it
//! says start it (with the slot's end as a hard deadline), or report it failed: skipped for a conflict
//! (planned so, or the agent's previous exclusive run is still going), or missed because the agent was
//! not running at the time (after a restart).
//!
//! [`Ledger`]: the hub's account of every planned run: it plans ahead, takes reports, and records a
//! run as lost (`agent_down`) when its agent stays silent past the grace period after the run's end,
//! never before the hub itself has been up for the grace period (so agents can deliver what they
//! buffered while the hub was away).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Config;
use crate::plan::{PlannedRun, Planner};
use crate::report::{Reason, RunReport};
use crate::timespec::{rfc3339, Ms};

/// How late after its planned start a run may still be started, ms (beyond: missed).
pub const START_TOLERANCE: Ms = 2_000;

/// What an agent should do now.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentAction {
    /// Start this run now; stop it at `run.end`.
    Start(PlannedRun),
    /// Store and deliver this report (a run that will not be started).
    Report(RunReport),
}

/// The agent's schedule.
pub struct AgentMachine {
    planner: Planner,
    me: String,
    cursor: Ms,
    running: HashMap<String, PlannedRun>,
}

impl AgentMachine {
    /// The machine for host `me`, handling runs planned from `cursor` on (the persisted cursor of a
    /// previous life, or now).
    pub fn new(cfg: Arc<Config>, me: &str, cursor: Ms) -> Self {
        AgentMachine {
            planner: Planner::new(cfg),
            me: me.to_string(),
            cursor,
            running: HashMap::new(),
        }
    }

    /// Runs planned before this time have been handled (persist it).
    pub fn cursor(&self) -> Ms {
        self.cursor
    }

    /// The configuration in use.
    pub fn config(&self) -> &Arc<Config> {
        self.planner.config()
    }

    /// Replaces the configuration (runs already started go on).
    pub fn set_config(&mut self, cfg: Arc<Config>) {
        self.planner = Planner::new(cfg);
    }

    /// Runs in progress.
    pub fn running(&self) -> impl Iterator<Item = &PlannedRun> {
        self.running.values()
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Ms) -> Vec<AgentAction> {
        if now < self.cursor {
            return Vec::new();
        }
        let mut out = Vec::new();
        let runs = self.planner.runs_between(self.cursor, now + 1);
        self.cursor = now + 1;
        for r in runs.into_iter().filter(|r| r.src == self.me) {
            if let Some(why) = &r.skipped {
                out.push(AgentAction::Report(RunReport::failed(
                    &r,
                    &self.me,
                    Reason::Conflict,
                    why.clone(),
                )));
            } else if now - r.start > START_TOLERANCE {
                out.push(AgentAction::Report(RunReport::failed(
                    &r,
                    &self.me,
                    Reason::AgentDown,
                    format!(
                        "agent {} was not running at the planned start {} (handled {:.1} s late)",
                        self.me,
                        rfc3339(r.start),
                        (now - r.start) as f64 / 1000.0
                    ),
                )));
            } else if let Some(busy) = self
                .running
                .values()
                .find(|b| r.exclusive && b.exclusive && b.resources.iter().any(|x| r.resources.contains(x)))
            {
                out.push(AgentAction::Report(RunReport::failed(
                    &r,
                    &self.me,
                    Reason::Conflict,
                    format!(
                        "skipped: run {} still holds {} past its slot",
                        busy.id,
                        busy.resources.join(", ")
                    ),
                )));
            } else {
                self.running.insert(r.id.clone(), r.clone());
                out.push(AgentAction::Start(r));
            }
        }
        self.planner.prune(now - 86_400_000);
        out
    }

    /// A started run has ended (its report goes out through the driver).
    pub fn finished(&mut self, id: &str) {
        self.running.remove(id);
    }

    /// When `poll` next has something to do: the next planned start of this host's runs after the
    /// cursor (within `horizon`), or None.
    pub fn next_wake(&mut self, horizon: Ms) -> Option<Ms> {
        let from = self.cursor;
        let mut step = 60_000.min(horizon.max(1));
        let mut at = from;
        while at < from + horizon {
            let to = (at + step).min(from + horizon);
            if let Some(r) = self
                .planner
                .runs_between(at, to)
                .into_iter()
                .find(|r| r.src == self.me)
            {
                return Some(r.start);
            }
            at = to;
            step = (step * 2).min(3_600_000);
        }
        None
    }
}

/// What the hub should do now.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerAction {
    /// Archive this run as planned (and, when skipped, its conflict report follows).
    Plan(PlannedRun),
    /// Archive this report (a skipped run, or one lost with its silent agent).
    Record(RunReport),
}

#[derive(Debug, Clone, Default)]
struct AgentSeen {
    last: Option<Ms>,
}

/// The hub's account of planned runs.
pub struct Ledger {
    planner: Planner,
    planned_through: Ms,
    lookahead: Ms,
    up_since: Ms,
    pending: HashMap<String, (Ms, PlannedRun)>,
    agents: HashMap<String, AgentSeen>,
}

impl Ledger {
    /// A ledger that plans from `planned_through` on (persisted, or the hub's first start), started
    /// at `now`, planning `lookahead` ms ahead.
    pub fn new(cfg: Arc<Config>, planned_through: Ms, now: Ms, lookahead: Ms) -> Self {
        Ledger {
            planner: Planner::new(cfg),
            planned_through,
            lookahead,
            up_since: now,
            pending: HashMap::new(),
            agents: HashMap::new(),
        }
    }

    /// Runs planned before this time are archived (persist it).
    pub fn planned_through(&self) -> Ms {
        self.planned_through
    }

    /// The configuration.
    pub fn config(&self) -> &Arc<Config> {
        self.planner.config()
    }

    /// Adds runs archived as planned but without an outcome (after a restart).
    pub fn restore_pending(&mut self, runs: impl IntoIterator<Item = PlannedRun>) {
        for r in runs {
            self.pending.insert(r.id.clone(), (r.end, r));
        }
    }

    /// An agent was heard from (it last contacted at `at`, the hub's clock).
    pub fn contact(&mut self, agent: &str, at: Ms) {
        let a = self.agents.entry(agent.to_string()).or_default();
        a.last = Some(a.last.map_or(at, |l| l.max(at)));
    }

    /// A report came in: the run is accounted for.
    pub fn reported(&mut self, run: &PlannedRun) {
        self.pending.remove(&run.id);
    }

    /// Runs awaiting an outcome.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// What to do at `now`.
    pub fn poll(&mut self, now: Ms) -> Vec<LedgerAction> {
        let mut out = Vec::new();
        let until = now + self.lookahead;
        if until > self.planned_through {
            for r in self.planner.runs_between(self.planned_through, until) {
                out.push(LedgerAction::Plan(r.clone()));
                if let Some(why) = &r.skipped {
                    out.push(LedgerAction::Record(RunReport::failed(
                        &r,
                        "hub",
                        Reason::Conflict,
                        why.clone(),
                    )));
                } else {
                    self.pending.insert(r.id.clone(), (r.end, r));
                }
            }
            self.planned_through = until;
        }
        let grace = self.planner.config().grace;
        if now >= self.up_since + grace {
            let mut due: Vec<(Ms, String)> = self
                .pending
                .iter()
                .filter(|(_, (d, _))| *d < now - grace)
                .map(|(id, (d, _))| (*d, id.clone()))
                .collect();
            due.sort();
            for (_, id) in due {
                let (d, r) = self.pending.remove(&id).expect("id from the map");
                let last = self.agents.get(&r.src).and_then(|a| a.last);
                let report = match last {
                    Some(l) if l >= r.end + grace => {
                        // The agent has been talking since, long enough to have delivered it.
                        RunReport::failed(
                            &r,
                            "hub",
                            Reason::Error,
                            format!(
                                "agent {} has been in contact since the run ended but delivered no outcome for it",
                                r.src
                            ),
                        )
                    }
                    Some(l) if l >= r.end && l > d => {
                        // In contact, maybe still delivering a backlog: wait until a grace period
                        // after that contact.
                        self.pending.insert(id, (l, r));
                        continue;
                    }
                    _ => RunReport::failed(
                        &r,
                        "hub",
                        Reason::AgentDown,
                        format!(
                            "agent {} did not report: last contact {}",
                            r.src,
                            last.map(rfc3339)
                                .unwrap_or_else(|| "never (since the hub started)".into())
                        ),
                    ),
                };
                out.push(LedgerAction::Record(report));
            }
        }
        self.planner.prune(now - 86_400_000);
        out
    }
}
