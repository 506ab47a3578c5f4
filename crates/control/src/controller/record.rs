//! `record`: planning a recording, starting it (now or on its second), its outcome, stopping it, and
//! `record?`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_formats::time::UtcTime;
use vlbiflow_recorder::RecorderConfig;

use super::{format_mark6_time, parse_mark6_time, Action, Controller, Plan, RecordState, Ticket};
use crate::engine::Recording;
use crate::proto::{Reply, ReturnCode as Rc, Statement};
use crate::stream::InputStream;

impl Controller {
    /// `record=...`: `Ok(None)` when an [`Action::Start`] was handed out and the reply comes later.
    pub(super) fn record(
        &mut self,
        st: &Statement,
        now: UtcTime,
    ) -> std::result::Result<Option<Reply>, Reply> {
        let a0 = st.arg(0).to_ascii_lowercase();
        if a0 == "off" {
            return Ok(Some(self.record_off(st)));
        }
        let bad = |reason: String| Err(Reply::reason(st, Rc::Parameter, reason));
        let (start, rest) = if a0 == "on" {
            match st.args.get(1) {
                Some(t) if parse_mark6_time(t).is_some() => (parse_mark6_time(t), &st.args[2..]),
                _ => (None, &st.args[1..]),
            }
        } else if let Some(t) = parse_mark6_time(&a0) {
            (Some(t), &st.args[1..])
        } else {
            return bad(format!(
                "{:?}: expected on, off or a start time such as 2025y190d12h00m00s",
                st.arg(0)
            ));
        };
        let (duration, _size, scan, exp, stn) = match rest.len() {
            0 => ("", "", "", "", ""),
            1 => (rest[0].as_str(), "", "", "", ""),
            2 => (rest[0].as_str(), "", rest[1].as_str(), "", ""),
            4 => (
                rest[0].as_str(),
                "",
                rest[1].as_str(),
                rest[2].as_str(),
                rest[3].as_str(),
            ),
            5 => (
                rest[0].as_str(),
                rest[1].as_str(),
                rest[2].as_str(),
                rest[3].as_str(),
                rest[4].as_str(),
            ),
            n => {
                return bad(format!(
                    "{n} fields after the start: expected <duration>[:<size GB>]:<scan>:<exp>:<stn>"
                ))
            }
        };
        if self.busy() {
            return Err(Reply::reason(
                st,
                Rc::Conflict,
                format!("{}: record=off first", self.state_name()),
            ));
        }
        let duration = if duration.is_empty() {
            None
        } else {
            match duration.parse::<f64>() {
                Ok(d) if d > 0.0 && d <= 1e7 => Some(Duration::from_secs_f64(d)),
                _ => return bad(format!("duration {duration:?} is not seconds (0 < d <= 1e7)")),
            }
        };
        let size_gb = if _size.is_empty() {
            None
        } else {
            match _size.parse::<f64>() {
                Ok(s) if s >= 0.0 && s.is_finite() => Some(s),
                _ => return bad(format!("size {_size:?} is not GB")),
            }
        };
        let exp = if exp.is_empty() {
            self.cfg.experiment.clone()
        } else {
            Some(exp.to_string())
        };
        let stn = if stn.is_empty() {
            self.cfg.station.clone()
        } else {
            Some(stn.to_string())
        };
        for (what, v) in [
            ("scan", Some(scan)),
            ("experiment", exp.as_deref()),
            ("station", stn.as_deref()),
        ] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                if let Err(e) = vlbiflow_formats::names::validate_scan_name(v) {
                    return bad(format!("{what} name {v:?}: {e}"));
                }
            }
        }
        // d-plane names files <exp>_<stn>_<scan>; a missing scan name gets the next free number.
        let scan = if scan.is_empty() {
            let mut n = self.scans.len() + 1;
            while self
                .scans
                .iter()
                .any(|s| s.name.ends_with(&format!("scan{n:04}")))
            {
                n += 1;
            }
            format!("scan{n:04}")
        } else {
            scan.to_string()
        };
        let full: String = [exp.as_deref(), stn.as_deref(), Some(scan.as_str())]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("_");
        if let Err(e) = vlbiflow_formats::names::validate_scan_name(&full) {
            return bad(format!("scan name {full:?}: {e}"));
        }
        if self.scans.iter().any(|s| s.name == full) {
            return Err(Reply::reason(
                st,
                Rc::Conflict,
                format!("scan {full} already exists"),
            ));
        }
        if self.committed.is_empty() {
            return Err(Reply::reason(
                st,
                Rc::NotNow,
                "no input stream committed (input_stream=add:... then input_stream=commit)",
            ));
        }
        let Some(group) = self.open_group.clone() else {
            return Err(Reply::reason(st, Rc::NotNow, "no group open (group=open:<name>)"));
        };
        let disks: Vec<PathBuf> = self
            .cfg
            .group_disks(&group)
            .into_iter()
            .filter(|d| self.disks.is_dir(d))
            .collect();
        if disks.is_empty() {
            return Err(Reply::reason(
                st,
                Rc::Failed,
                format!("group {group}: no disk found"),
            ));
        }
        if let Some(gb) = size_gb {
            let free = self.space_of(&disks).0 as f64 / 1e9;
            if gb > free {
                return Err(Reply::reason(
                    st,
                    Rc::Failed,
                    format!("{gb} GB asked, {free:.3} GB free on group {group}"),
                ));
            }
        }
        let plan = Plan {
            scan: full.clone(),
            experiment: exp,
            station: stn,
            duration,
            group,
            disks,
            streams: self.committed.clone(),
        };
        match start {
            Some(t) if t > now.unix_seconds => {
                self.event(format!("scan {full} pending until {}", format_mark6_time(t)));
                self.state = RecordState::Pending { start: t, plan };
                Ok(Some(Reply::to(
                    st,
                    Rc::Initiated,
                    vec!["pending".into(), full, format_mark6_time(t)],
                )))
            }
            // A start time within the current second starts now; an earlier one is an error.
            Some(t) if t < now.unix_seconds => {
                bad(format!("start time {} is in the past", format_mark6_time(t)))
            }
            _ => {
                self.begin_start(plan, Some(st.clone()));
                Ok(None)
            }
        }
    }

    /// Hands out the start of `plan`; the state is `pending` until [`Controller::started`].
    pub(super) fn begin_start(&mut self, plan: Plan, reply_to: Option<Statement>) {
        let mut c: RecorderConfig = self.cfg.recorder.clone();
        c.streams = plan.streams.iter().map(InputStream::spec).collect();
        c.disks = plan.disks.clone();
        c.scan = plan.scan.clone();
        c.experiment = plan.experiment.clone();
        c.station = plan.station.clone();
        c.duration = plan.duration;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let (forward, skipped) = self.forward.plan(&plan.streams);
        for label in skipped {
            self.event(format!(
                "forward {label}: its stream is not recorded in scan {} (name it with forward=add:...:<stream>)",
                plan.scan
            ));
        }
        self.actions.push(Action::Start {
            ticket,
            config: Box::new(c),
            forward,
        });
        self.state = RecordState::Starting {
            ticket,
            plan,
            reply_to,
        };
    }

    /// The outcome of [`Action::Start`] `ticket`, carried out at `now`; returns the reply to the
    /// `record=on` that asked for it (`None` for a start time that came, or a ticket not current).
    pub fn started(
        &mut self,
        ticket: Ticket,
        outcome: std::result::Result<Box<dyn Recording>, String>,
        now: UtcTime,
    ) -> Option<Reply> {
        self.now = now;
        let current = matches!(&self.state, RecordState::Starting { ticket: t, .. } if *t == ticket);
        if !current {
            // Not asked for any more (cannot happen today: record=off answers busy while starting).
            if let Ok(rec) = outcome {
                let rec: Arc<dyn Recording> = Arc::from(rec);
                self.actions.push(Action::Stop(rec.clone()));
                self.actions.push(Action::Release(rec));
            }
            return None;
        }
        let RecordState::Starting { plan, reply_to, .. } =
            std::mem::replace(&mut self.state, RecordState::Off)
        else {
            unreachable!()
        };
        match outcome {
            Ok(rec) => {
                let rec: Arc<dyn Recording> = Arc::from(rec);
                self.last_error = None;
                self.event(format!("scan {} recording on group {}", plan.scan, plan.group));
                let name = plan.scan.clone();
                let stopping = self.shutting_down;
                if stopping {
                    self.actions.push(Action::Stop(rec.clone()));
                }
                self.state = RecordState::Active {
                    rec,
                    plan,
                    started: now,
                    stopping,
                };
                reply_to.map(|st| Reply::to(&st, Rc::Done, vec!["recording".into(), name]))
            }
            Err(e) => {
                self.last_error = Some(e.clone());
                if reply_to.is_none() {
                    self.event(format!("pending recording could not start: {e}"));
                }
                reply_to.map(|st| Reply::reason(&st, Rc::Failed, e))
            }
        }
    }

    pub(super) fn record_off(&mut self, st: &Statement) -> Reply {
        match std::mem::replace(&mut self.state, RecordState::Off) {
            RecordState::Off => Reply::reason(st, Rc::NotNow, "not recording"),
            RecordState::Pending { plan, .. } => {
                self.event(format!("pending scan {} cancelled", plan.scan));
                Reply::to(st, Rc::Done, vec!["cancelled".into(), plan.scan])
            }
            RecordState::Starting {
                ticket,
                plan,
                reply_to,
            } => {
                let reply = Reply::reason(
                    st,
                    Rc::Busy,
                    format!(
                        "scan {} is starting: retry when record? says recording",
                        plan.scan
                    ),
                );
                self.state = RecordState::Starting {
                    ticket,
                    plan,
                    reply_to,
                };
                reply
            }
            RecordState::Active {
                rec,
                plan,
                started,
                stopping,
            } => {
                // The caller stops capture outside the lock; flushing continues in the background.
                let name = plan.scan.clone();
                if !stopping {
                    self.actions.push(Action::Stop(rec.clone()));
                    self.event(format!("scan {name}: record=off, flushing"));
                }
                self.state = RecordState::Active {
                    rec,
                    plan,
                    started,
                    stopping: true,
                };
                Reply::to(st, Rc::Done, vec!["flushing".into(), name])
            }
        }
    }

    pub(super) fn record_query(&self, st: &Statement) -> Reply {
        let (group, number, name) = match &self.state {
            RecordState::Off => (
                self.open_group.clone().unwrap_or_else(|| "-".into()),
                self.scans.len(),
                self.scans
                    .last()
                    .map(|s| s.name.clone())
                    .unwrap_or_else(|| "-".into()),
            ),
            RecordState::Pending { plan, .. }
            | RecordState::Starting { plan, .. }
            | RecordState::Active { plan, .. } => {
                (plan.group.clone(), self.scans.len() + 1, plan.scan.clone())
            }
        };
        Reply::to(
            st,
            Rc::Done,
            vec![self.state_name().into(), group, number.to_string(), name],
        )
    }
}
