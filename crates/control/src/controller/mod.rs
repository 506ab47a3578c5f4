//! The command state machine: input streams (staged and committed), disk groups, the recording state
//! (off, pending, recording, flushing) and the scan list, driven by parsed statements and by the clock.
//!
//! Sans-IO: the time is passed in, the disks are probed through a [`DiskProbe`], and anything slow is not
//! done here but handed out as an [`Action`] ("start this recording", "stop that one", "release that one")
//! for the caller to carry out *outside* whatever lock guards the controller, feeding the outcome back
//! ([`Controller::started`]). Meanwhile the state says what is going on: a recording being started is
//! `pending`, one being stopped is `flushing`. A `record=on` that starts now is answered only once the
//! engine has started (or refused) the recording: [`Controller::handle`] returns [`Answer::Later`] and the
//! reply comes from [`Controller::started`].
//!
//! One controller is owned by the daemon; every connection's statements go through [`Controller::handle`],
//! and [`Controller::tick`] is called a few times a second (it starts pending recordings on their second,
//! collects finished ones into the scan list and samples the rates). [`Controller::execute_with`] drives
//! the whole cycle synchronously against an [`Engine`] (tests, embedding).

mod groups;
mod jive5ab;
mod queries;
mod record;
mod scan_list;
mod status;
mod streams;

pub use crate::disks::disk_space;
pub use scan_list::{parse_iso, scan_list, scan_list_from_disks, ScanEntry};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_formats::time::UtcTime;
use vlbiflow_formats::vex_time;
use vlbiflow_recorder::{Phase, RecorderConfig, RecorderStatus};

use crate::config::DaemonConfig;
use crate::disks::DiskProbe;
use crate::engine::{Engine, Recording};
use crate::proto::{Reply, ReturnCode as Rc, Statement};
pub use crate::rates::HISTORY_SECONDS;
use crate::rates::{RateSampler, Totals};
use crate::report::*;
pub use crate::stream::{parse_input_stream, InputStream, UDP_HEADER_OFFSET};

const MAX_EVENTS: usize = 50;

/// Mark6 time `yyyy'y'ddd'd'hh'h'mm'm'ss's'` to Unix seconds (see [`vex_time::parse`]).
pub fn parse_mark6_time(s: &str) -> Option<i64> {
    vex_time::parse(s)
}

/// Unix seconds as Mark6 time, e.g. `2025y190d12h00m00s` (see [`vex_time::format`]).
pub fn format_mark6_time(unix: i64) -> String {
    vex_time::format(unix)
}

/// Identifies a start handed out as [`Action::Start`], so its outcome can be matched to it.
pub type Ticket = u64;

/// Work the controller hands to its caller, to be carried out outside the controller's lock.
pub enum Action {
    /// Start a recording of `config` (allocates the block pool, opens sockets and files: may take
    /// seconds); report the outcome with [`Controller::started`].
    Start {
        ticket: Ticket,
        config: Box<RecorderConfig>,
        /// Destinations to forward the recording to (empty: record only).
        forward: crate::forward::ForwardPlan,
    },
    /// Stop capture of this recording (returns within about a second); the writers keep flushing and
    /// [`Controller::tick`] notices when the scan is complete.
    Stop(Arc<dyn Recording>),
    /// Let go of a finished recording (frees its block pool).
    Release(Arc<dyn Recording>),
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Start { ticket, config, .. } => write!(f, "Start({ticket}, {})", config.scan),
            Action::Stop(_) => f.write_str("Stop"),
            Action::Release(_) => f.write_str("Release"),
        }
    }
}

/// The answer to one statement.
#[derive(Debug)]
pub enum Answer {
    /// The reply.
    Now(Reply),
    /// The reply comes from [`Controller::started`] with this ticket, once the caller has carried out
    /// the [`Action::Start`] it takes from [`Controller::take_actions`].
    Later(Ticket),
}

impl Answer {
    /// The reply if there is one now.
    pub fn reply_now(self) -> Option<Reply> {
        match self {
            Answer::Now(r) => Some(r),
            Answer::Later(_) => None,
        }
    }
}

/// What a `record=on` asked for.
#[derive(Debug, Clone)]
struct Plan {
    scan: String,
    experiment: Option<String>,
    station: Option<String>,
    duration: Option<Duration>,
    group: String,
    disks: Vec<PathBuf>,
    streams: Vec<InputStream>,
}

enum RecordState {
    Off,
    /// Waiting for its start second.
    Pending {
        start: i64,
        plan: Plan,
    },
    /// Handed to the caller to start ([`Action::Start`]); `reply_to` is the `record=on` to answer.
    Starting {
        ticket: Ticket,
        plan: Plan,
        reply_to: Option<Statement>,
    },
    Active {
        rec: Arc<dyn Recording>,
        plan: Plan,
        started: UtcTime,
        /// `record=off` (or the duration's end, or shutdown) asked it to stop.
        stopping: bool,
    },
}

/// The command state machine. See the module documentation.
pub struct Controller {
    cfg: DaemonConfig,
    disks: Box<dyn DiskProbe>,
    staged: Vec<InputStream>,
    committed: Vec<InputStream>,
    open_group: Option<String>,
    nominal: std::collections::BTreeMap<String, usize>,
    state: RecordState,
    scans: Vec<ScanEntry>,
    last_error: Option<String>,
    events: VecDeque<String>,
    events_total: u64,
    cumulative: Cumulative,
    rates: RateSampler,
    last_sample_second: i64,
    actions: Vec<Action>,
    next_ticket: Ticket,
    shutting_down: bool,
    /// Forwarding while recording (`in2net`, `forward`, `net_protocol`, `net_port`).
    forward: crate::forward::ForwardSettings,
    /// The time of the latest event fed in (construction, statement, tick, start outcome): the controller
    /// never reads a clock itself, so event log stamps are the caller's times.
    now: UtcTime,
}

type Result = std::result::Result<Reply, Reply>;

impl Controller {
    /// A controller for `cfg` probing `disks`, made at `now`: streams of the configuration committed,
    /// `open_group` opened, the scan list read from every group's disks.
    pub fn new(cfg: DaemonConfig, disks: Box<dyn DiskProbe>, now: UtcTime) -> Self {
        let committed: Vec<InputStream> = cfg.streams.iter().map(InputStream::from_spec).collect();
        let nominal = cfg
            .groups
            .iter()
            .map(|(g, patterns)| (g.clone(), disks.expand(patterns).len()))
            .collect();
        let mut c = Controller {
            staged: committed.clone(),
            committed,
            open_group: None,
            nominal,
            state: RecordState::Off,
            scans: Vec::new(),
            last_error: None,
            events: VecDeque::new(),
            events_total: 0,
            cumulative: Cumulative::default(),
            rates: RateSampler::default(),
            last_sample_second: i64::MIN,
            actions: Vec::new(),
            next_ticket: 1,
            shutting_down: false,
            forward: crate::forward::ForwardSettings::with(cfg.forward.clone(), cfg.forward_enabled),
            now,
            disks,
            cfg,
        };
        c.scans = scan_list(&*c.disks, &c.all_disks());
        if let Some(g) = c.cfg.open_group.clone() {
            c.open_group = Some(g.clone());
            c.event(format!("group {g} opened (configuration)"));
        }
        let incomplete = c
            .scans
            .iter()
            .filter(|s| s.meta.as_ref().is_some_and(|m| !m.complete))
            .count();
        c.event(format!(
            "started: {} scan(s) on the disks, {} incomplete",
            c.scans.len(),
            incomplete
        ));
        c
    }

    /// The configuration in force.
    pub fn config(&self) -> &DaemonConfig {
        &self.cfg
    }

    /// Counts a statement received (for metrics).
    pub fn count_command(&mut self) {
        self.cumulative.commands += 1;
    }

    /// Counts a connection accepted or refused (for metrics).
    pub fn count_connection(&mut self, refused: bool) {
        if refused {
            self.cumulative.connections_refused += 1;
        } else {
            self.cumulative.connections += 1;
        }
    }

    /// Counters since start-up, for `/metrics`.
    pub fn cumulative(&self) -> Cumulative {
        let mut c = self.cumulative.clone();
        let mut forward = self.forward.totals.clone();
        if let RecordState::Active { rec, .. } = &self.state {
            let st = rec.status();
            add_scan_counters(&mut c, &st);
            for s in rec.forward_status() {
                forward
                    .entry(s.label.clone())
                    .or_default()
                    .add(&crate::forward::DestTotals::of(&s));
            }
        }
        c.forward = forward.into_iter().collect();
        c
    }

    /// The scan list, oldest first.
    pub fn scans(&self) -> &[ScanEntry] {
        &self.scans
    }

    /// off | pending | recording | flushing
    pub fn state_name(&self) -> &'static str {
        match &self.state {
            RecordState::Off => "off",
            RecordState::Pending { .. } | RecordState::Starting { .. } => "pending",
            RecordState::Active { stopping: true, .. } => "flushing",
            RecordState::Active { rec, .. } => match rec.status().phase {
                Phase::Recording => "recording",
                _ => "flushing",
            },
        }
    }

    /// True while a start time is pending (the daemon ticks faster then).
    pub fn waiting_for_start(&self) -> bool {
        matches!(self.state, RecordState::Pending { .. })
    }

    /// Addresses the current recording's streams are bound to.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        match &self.state {
            RecordState::Active { rec, .. } => rec.local_addrs(),
            _ => Vec::new(),
        }
    }

    /// Rate history, oldest first.
    pub fn history(&self) -> Vec<Sample> {
        self.rates.history()
    }

    fn event(&mut self, e: String) {
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        let now = self.now.to_iso8601();
        self.events
            .push_back(format!("{} {e}", &now[..now.len().min(19)]));
        self.events_total += 1;
    }

    /// Events after the first `seen` ever logged (as many as are still kept) and the new count to pass next.
    pub fn events_since(&self, seen: u64) -> (Vec<String>, u64) {
        let n = (self.events_total.saturating_sub(seen) as usize).min(self.events.len());
        (
            self.events.iter().skip(self.events.len() - n).cloned().collect(),
            self.events_total,
        )
    }

    /// The work handed out since the last call, to be carried out in order outside the controller's lock.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Advances the clock: hands out the start of a pending recording whose second has come, collects a
    /// finished one, drains engine events and samples the rates once per second.
    pub fn tick(&mut self, now: UtcTime) {
        self.now = now;
        if let RecordState::Pending { start, .. } = &self.state {
            if now.unix_seconds >= *start {
                let RecordState::Pending { plan, .. } = std::mem::replace(&mut self.state, RecordState::Off)
                else {
                    unreachable!()
                };
                self.begin_start(plan, None);
            }
        }
        if let RecordState::Active { rec, .. } = &self.state {
            let (events, finished) = (rec.events(), rec.finished());
            for e in events {
                self.event(e);
            }
            if let Some(summary) = finished {
                let RecordState::Active { plan, rec, .. } =
                    std::mem::replace(&mut self.state, RecordState::Off)
                else {
                    unreachable!()
                };
                let forwarded = rec.forward_status();
                self.forward.finished(&forwarded);
                self.actions.push(Action::Release(rec));
                add_scan_counters(&mut self.cumulative, &summary.status);
                self.cumulative.scans_recorded += 1;
                let t = summary.metadata.totals();
                self.event(format!(
                    "scan {} finished: {} frames, {} bytes, {} lost{}",
                    plan.scan,
                    t.packets,
                    t.bytes,
                    t.lost,
                    summary
                        .error
                        .as_deref()
                        .map(|e| format!("; ERROR: {e}"))
                        .unwrap_or_default()
                ));
                self.last_error = summary.error.clone();
                if summary.recordings.is_empty() {
                    self.scans.retain(|s| s.name != plan.scan);
                    self.scans.push(ScanEntry {
                        name: plan.scan,
                        meta: Some(summary.metadata),
                        error: summary.error,
                    });
                } else {
                    // Datastreams: the scan is the recordings they made (`<scan>_ds<name>`), each listed.
                    for m in summary.recordings {
                        self.scans.retain(|s| s.name != m.scan);
                        self.scans.push(ScanEntry {
                            name: m.scan.clone(),
                            meta: Some(m),
                            error: summary.error.clone(),
                        });
                    }
                }
            }
        }
        if now.unix_seconds != self.last_sample_second {
            self.last_sample_second = now.unix_seconds;
            let totals = Totals::of(&self.cumulative(), now.as_f64());
            self.rates.sample(totals);
        }
    }

    /// Executes one statement. A `record=on` that starts now answers [`Answer::Later`].
    pub fn handle(&mut self, st: &Statement, now: UtcTime) -> Answer {
        self.now = now;
        if st.keyword == "record" && !st.query {
            return match self.record(st, now) {
                Ok(Some(r)) | Err(r) => Answer::Now(r),
                Ok(None) => match &self.state {
                    RecordState::Starting { ticket, .. } => Answer::Later(*ticket),
                    _ => unreachable!("record=on without a reply starts a recording"),
                },
            };
        }
        Answer::Now(self.execute(st, now))
    }

    /// Executes one statement that is answered at once (every one but a `record=on` that starts now,
    /// which [`Controller::handle`] takes).
    fn execute(&mut self, st: &Statement, _now: UtcTime) -> Reply {
        let r = match (st.keyword.as_str(), st.query) {
            ("input_stream", false) => self.input_stream(st),
            ("input_stream", true) => Ok(self.input_stream_query(st)),
            ("group", false) => self.group(st),
            ("group", true) => Ok(self.group_query(st)),
            ("mstat", true) => self.mstat(st),
            ("record", true) => Ok(self.record_query(st)),
            ("scan_check", true) => self.scan_check(st),
            ("rtime", true) => Ok(self.rtime(st)),
            ("status", true) => Ok(self.status_query(st)),
            ("evlbi", true) => Ok(self.evlbi(st)),
            ("net_protocol", _) => Ok(self.forward.net_protocol(st)),
            ("net_port", _) => Ok(self.forward.net_port(st)),
            ("in2net", _) => Ok({
                let busy = self.busy();
                self.forward.in2net(st, busy)
            }),
            ("forward", _) => Ok({
                let busy = self.busy();
                self.forward.forward(st, busy)
            }),
            ("help", true) => Ok(Reply::to(
                st,
                Rc::Done,
                [
                    "input_stream",
                    "group",
                    "mstat?",
                    "record",
                    "scan_check?",
                    "rtime?",
                    "status?",
                    "evlbi?",
                    "net_protocol",
                    "net_port",
                    "in2net",
                    "forward",
                    "help?",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            )),
            ("mstat" | "scan_check" | "rtime" | "status" | "evlbi" | "help", q) => Err(Reply::reason(
                st,
                Rc::NoSuchKeyword,
                format!(
                    "{} has no {} form",
                    st.keyword,
                    if q { "query" } else { "command" }
                ),
            )),
            _ => Err(Reply::reason(st, Rc::NoSuchKeyword, "no such keyword")),
        };
        r.unwrap_or_else(|e| e)
    }

    fn busy(&self) -> bool {
        !matches!(self.state, RecordState::Off)
    }

    /// Begins shutdown: a pending start is cancelled, a recording is stopped (an [`Action::Stop`] to
    /// carry out; one still starting is stopped once it has). The caller then ticks until
    /// [`Controller::is_idle`].
    pub fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        match &mut self.state {
            RecordState::Pending { .. } => self.state = RecordState::Off,
            RecordState::Active { rec, stopping, .. } if !*stopping => {
                *stopping = true;
                self.actions.push(Action::Stop(rec.clone()));
            }
            _ => {}
        }
    }

    /// True when nothing is recording, starting or flushing.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, RecordState::Off)
    }

    /// Executes `st` and carries out every action synchronously against `engine` (stops and releases
    /// inline); for tests and embedding without a daemon.
    pub fn execute_with(&mut self, st: &Statement, now: UtcTime, engine: &mut dyn Engine) -> Reply {
        let answer = self.handle(st, now);
        let replies = self.run_actions(engine, now);
        match answer {
            Answer::Now(r) => r,
            Answer::Later(t) => replies
                .into_iter()
                .find(|(k, _)| *k == t)
                .map(|(_, r)| r)
                .expect("a start's reply comes with its action"),
        }
    }

    /// Carries out pending actions synchronously against `engine`; returns the replies of starts.
    pub fn run_actions(&mut self, engine: &mut dyn Engine, now: UtcTime) -> Vec<(Ticket, Reply)> {
        let mut replies = Vec::new();
        loop {
            let actions = self.take_actions();
            if actions.is_empty() {
                return replies;
            }
            for a in actions {
                match a {
                    Action::Start {
                        ticket,
                        config,
                        forward,
                    } => {
                        let outcome = engine.start_forwarding(*config, forward);
                        if let Some(r) = self.started(ticket, outcome, now) {
                            replies.push((ticket, r));
                        }
                    }
                    Action::Stop(rec) => rec.stop(),
                    Action::Release(rec) => drop(rec),
                }
            }
        }
    }
}

fn add_scan_counters(c: &mut Cumulative, st: &RecorderStatus) {
    for s in &st.streams {
        let k = &s.counters;
        let add = StreamTotals {
            packets: k.packets,
            bytes: k.bytes,
            lost: k.lost,
            out_of_order: k.out_of_order,
            rejected: k.rejected,
            dropped: k.dropped_no_buffer + k.kernel_drops,
            wrong_source: k.wrong_source,
        };
        match c.streams.iter_mut().find(|(l, _)| *l == s.label) {
            Some((_, v)) => v.add(&add),
            None => c.streams.push((s.label.clone(), add)),
        }
    }
    for d in &st.disks {
        let key = d.path.display().to_string();
        match c.disks.iter_mut().find(|(p, _)| *p == key) {
            Some((_, v)) => *v += d.bytes,
            None => c.disks.push((key, d.bytes)),
        }
    }
}

/// Used by the daemon's start-up log.
pub fn describe(cfg: &DaemonConfig) -> String {
    format!(
        "{} group(s), {} configured stream(s), {} disk(s)",
        cfg.groups.len(),
        cfg.streams.len(),
        cfg.all_disks().len()
    )
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::DiskProbe;
    use crate::proto::{parse_statement, ReturnCode};
    use std::path::Path;
    use std::sync::{Arc, Mutex};
    use vlbiflow_recorder::{DiskStatus, PoolStatus, ScanSummary, StreamStatus};
    use vlbiflow_scan::{DiskMeta, ScanMetadata, StreamCounters, StreamMeta, METADATA_VERSION};

    /// What the scripted engine was asked and what its recording reports.
    #[derive(Default)]
    struct Script {
        started: Vec<RecorderConfig>,
        fail_start: Option<String>,
        stopped: bool,
        /// The recording has flushed (finished() returns a summary).
        flushed: bool,
        packets: u64,
        lost: u64,
    }

    struct ScriptedEngine(Arc<Mutex<Script>>);
    struct ScriptedRecording(Arc<Mutex<Script>>, RecorderConfig);

    impl Engine for ScriptedEngine {
        fn start(&mut self, config: RecorderConfig) -> std::result::Result<Box<dyn Recording>, String> {
            let mut s = self.0.lock().unwrap();
            if let Some(e) = s.fail_start.clone() {
                return Err(e);
            }
            s.started.push(config.clone());
            Ok(Box::new(ScriptedRecording(self.0.clone(), config)))
        }
    }

    impl ScriptedRecording {
        fn snapshot(&self) -> RecorderStatus {
            let s = self.0.lock().unwrap();
            RecorderStatus {
                phase: if s.flushed {
                    Phase::Finished
                } else if s.stopped {
                    Phase::Flushing
                } else {
                    Phase::Recording
                },
                elapsed: Duration::from_secs(2),
                streams: self
                    .1
                    .streams
                    .iter()
                    .map(|sp| StreamStatus {
                        label: sp.label.clone(),
                        counters: StreamCounters {
                            packets: s.packets,
                            bytes: s.packets * u64::from(sp.frame_size),
                            lost: s.lost,
                            ..Default::default()
                        },
                        restarts: 0,
                        threads: vec![],
                        frame_rate: Some(1000),
                        // Frames of 2025-07-09T12:00:00 to 12:00:01.999: 2 s of data.
                        first_time: vlbiflow_formats::time::VdifTime::from_unix_second(T0).ok(),
                        last_time: vlbiflow_formats::time::VdifTime::from_unix_second(T0 + 1)
                            .ok()
                            .map(|t| vlbiflow_formats::time::VdifTime { frame: 999, ..t }),
                        recv_buffer: 0,
                        active: Duration::from_secs(1),
                        first_psn: None,
                    })
                    .collect(),
                disks: self
                    .1
                    .disks
                    .iter()
                    .map(|d| DiskStatus {
                        path: d.clone(),
                        bytes: 100,
                        blocks: 1,
                        busy: Duration::from_millis(1),
                        failed: None,
                        direct: false,
                    })
                    .collect(),
                pool: PoolStatus {
                    total: 8,
                    free: 7,
                    queued: 0,
                    block_bytes: 1000,
                },
                blocks: 1,
                flow: Default::default(),
                events_dropped: 0,
            }
        }
    }

    impl Recording for ScriptedRecording {
        fn status(&self) -> RecorderStatus {
            self.snapshot()
        }
        fn stop(&self) {
            self.0.lock().unwrap().stopped = true;
        }
        fn finished(&self) -> Option<ScanSummary> {
            if !self.0.lock().unwrap().flushed {
                return None;
            }
            let status = self.snapshot();
            let c = &self.1;
            let metadata = ScanMetadata {
                metadata_version: METADATA_VERSION,
                writer: "test".into(),
                scan: c.scan.clone(),
                experiment: c.experiment.clone(),
                station: c.station.clone(),
                format: c.format,
                block_size: c.block_size,
                start_utc: "2025-07-09T12:00:00Z".into(),
                // The recording ran 3.2 s of wall clock; its data span 2 s (first to last time stamp).
                end_utc: Some("2025-07-09T12:00:03.2Z".into()),
                blocks: 1,
                complete: true,
                streams: c
                    .streams
                    .iter()
                    .zip(&status.streams)
                    .map(|(sp, ss)| StreamMeta {
                        label: sp.label.clone(),
                        kind: sp.kind,
                        address: sp.address.to_string(),
                        psn: sp.psn,
                        frame_size: sp.frame_size,
                        frame_rate: Some(1000),
                        threads: sp.threads.clone(),
                        first_frame_utc: Some("2025-07-09T12:00:00Z".into()),
                        last_frame_utc: Some("2025-07-09T12:00:01.999Z".into()),
                        counters: ss.counters,
                        blocks: Default::default(),
                    })
                    .collect(),
                disks: c
                    .disks
                    .iter()
                    .map(|d| DiskMeta {
                        path: d.display().to_string(),
                        bytes: 100,
                        blocks: 1,
                        failed: None,
                    })
                    .collect(),
            };
            Some(ScanSummary {
                status,
                metadata,
                error: None,
                recordings: Vec::new(),
            })
        }
        fn events(&self) -> Vec<String> {
            Vec::new()
        }
        fn local_addrs(&self) -> Vec<SocketAddr> {
            self.1.streams.iter().map(|s| s.address).collect()
        }
    }

    struct Fixture {
        ctl: Controller,
        engine: ScriptedEngine,
        script: Arc<Mutex<Script>>,
        _dir: tempfile::TempDir,
        now: UtcTime,
    }

    /// 2025-07-09T12:00:00Z = 2025y190d12h00m00s.
    const T0: i64 = 1_752_062_400;

    fn fixture(extra: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let text = format!("{extra}\n[groups]\ng1 = [\"{d}/0\", \"{d}/1\"]\ng2 = [\"{d}/x/*\"]\n");
        std::fs::create_dir_all(dir.path().join("0")).unwrap();
        std::fs::create_dir_all(dir.path().join("1")).unwrap();
        let cfg = DaemonConfig::from_toml(&text).unwrap();
        let script = Arc::new(Mutex::new(Script {
            packets: 1000,
            ..Default::default()
        }));
        let ctl = Controller::new(
            cfg,
            Box::new(crate::disks::SystemDisks),
            UtcTime::from_unix(T0, 0),
        );
        Fixture {
            ctl,
            engine: ScriptedEngine(script.clone()),
            script,
            _dir: dir,
            now: UtcTime::from_unix(T0, 0),
        }
    }

    impl Fixture {
        fn cmd(&mut self, line: &str) -> String {
            let st = parse_statement(line.as_bytes()).unwrap();
            self.ctl.execute_with(&st, self.now, &mut self.engine).format()
        }
        fn code(&mut self, line: &str) -> u8 {
            let st = parse_statement(line.as_bytes()).unwrap();
            self.ctl.execute_with(&st, self.now, &mut self.engine).code.code()
        }
        /// Ticks at `now` and carries out what the tick handed out.
        fn tick(&mut self, now: UtcTime) {
            self.ctl.tick(now);
            self.ctl.run_actions(&mut self.engine, now);
        }
        fn ready(&mut self) {
            assert_eq!(
                self.cmd("input_stream=add:RDBE1:vdif:8224:50:42:dev2:127.0.0.1:4001:1234:0,1"),
                "!input_stream = 0 : added : RDBE1 ;"
            );
            assert_eq!(
                self.cmd("input_stream=commit"),
                "!input_stream = 0 : committed : 1 ;"
            );
            assert_eq!(self.cmd("group=open:g1"), "!group = 0 : g1 : 2 disks ;");
        }
    }

    #[test]
    fn mark6_times_parse_and_format() {
        assert_eq!(parse_mark6_time("2025y190d12h00m00s"), Some(T0));
        assert_eq!(parse_mark6_time("2025Y190D12H00M00.5S"), Some(T0));
        assert_eq!(format_mark6_time(T0), "2025y190d12h00m00s");
        for bad in [
            "2025y000d12h00m00s",
            "2025y190d25h00m00s",
            "60",
            "on",
            "y190d12h00m00s",
        ] {
            assert_eq!(parse_mark6_time(bad), None, "{bad}");
        }
        assert_eq!(parse_iso("2025-07-09T12:00:01.5Z"), Some(T0 as f64 + 1.5));
    }

    #[test]
    fn input_stream_add_delete_commit_and_query() {
        let mut f = fixture("");
        assert_eq!(f.cmd("input_stream?"), "!input_stream? 0 : 0 ;");
        f.ready();
        assert_eq!(
            f.cmd("input_stream?"),
            "!input_stream? 0 : 1 : RDBE1 : vdif : 8224 : 50 : 42 : dev2 : 127.0.0.1 : 4001 : 0,1 ;"
        );
        let spec = f.ctl.committed[0].spec();
        assert!(spec.psn);
        assert_eq!(spec.threads, vec![0, 1]);
        // Without PSN, port defaulted, all threads.
        assert_eq!(f.code("input_stream=add:b:vdif:8032:42:0:eth0:0.0.0.0"), 0);
        assert_eq!(f.ctl.staged[1].address.to_string(), "0.0.0.0:4001");
        assert!(f.cmd("input_stream?").ends_with(": uncommitted changes ;"));
        // Mark6 scans hold one frame size: the commit is refused and names the problem.
        let r = f.cmd("input_stream=commit");
        assert!(
            r.starts_with("!input_stream = 8 : ") && r.contains("flexbuff"),
            "{r}"
        );
        assert_eq!(
            f.cmd("input_stream=delete:b"),
            "!input_stream = 0 : deleted : b ;"
        );
        assert_eq!(f.code("input_stream=delete:b"), 8);
        assert_eq!(
            f.code("input_stream=add:RDBE1:vdif:8224:50:42:dev2:127.0.0.1:4002"),
            6
        );
        assert_eq!(
            f.code("input_stream=add:c:vdif:8224:50:42:dev2:127.0.0.1:4001"),
            6
        );
        for bad in [
            "input_stream=add:x:vdif:8224:46:42:dev2:127.0.0.1:4003",
            "input_stream=add:x:udp:8224:50:42:dev2:127.0.0.1:4003",
            "input_stream=add:x:vdif:100:50:42:dev2:127.0.0.1:4003",
            "input_stream=add:x:vdif:8224:50:42:dev2:localhost:4003",
            "input_stream=add:x:vdif:8224:50:42:dev2:127.0.0.1:99999",
            "input_stream=add:x:vdif:8224:50:42:dev2:127.0.0.1:4003:5000",
            "input_stream=add:x/y:vdif:8224:50:42:dev2:127.0.0.1:4003",
            "input_stream=add:x:vdif",
            "input_stream=frobnicate",
            "input_stream=",
        ] {
            assert_eq!(f.code(bad), 8, "{bad}");
        }
    }

    #[test]
    fn groups_new_open_close_and_query() {
        let mut f = fixture("");
        assert_eq!(f.cmd("group?"), "!group? 0 : none : g1 : g2 ;");
        assert_eq!(f.code("group=open:nope"), 8);
        // g2 is a glob matching nothing yet.
        assert_eq!(f.code("group=open:g2"), 3);
        assert_eq!(f.cmd("group=new:g1"), "!group = 0 : g1 : 2 disks : 0 created ;");
        assert_eq!(f.cmd("group=close"), "!group = 2 : no group is open ;");
        assert_eq!(f.code("group=open:g1"), 0);
        assert_eq!(f.cmd("group?"), "!group? 0 : g1 : g1 : g2 ;");
        assert_eq!(f.code("group=close:g2"), 8);
        assert_eq!(f.code("group=mount:g1"), 2);
        assert_eq!(f.code("group=explode:g1"), 8);
        assert_eq!(f.cmd("group=close:g1"), "!group = 0 : g1 ;");
    }

    #[test]
    fn group_new_creates_plain_directories() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("new/0");
        let cfg = DaemonConfig::from_toml(&format!("[groups]\nn = [\"{}\"]", d.display())).unwrap();
        let mut ctl = Controller::new(
            cfg,
            Box::new(crate::disks::SystemDisks),
            UtcTime::from_unix(T0, 0),
        );
        let st = parse_statement(b"group=new:n").unwrap();
        let mut engine = ScriptedEngine(Default::default());
        assert_eq!(
            ctl.execute_with(&st, UtcTime::now(), &mut engine).format(),
            "!group = 0 : n : 1 disks : 1 created ;"
        );
        assert!(d.is_dir());
    }

    #[test]
    fn disks_are_probed_through_the_trait() {
        let disks = crate::disks::MemDisks::default();
        disks.add_dir("/m/0", 1);
        disks.add_dir("/m/1", 1);
        disks.add_dir("/n/a", 2);
        disks.set_space(1, 4_000_000_000, 10_000_000_000);
        disks.set_space(2, 1_000_000_000, 2_000_000_000);
        let cfg = DaemonConfig::from_toml("[groups]\nm = [\"/m/0\", \"/m/1\", \"/n/*\"]\nnew = [\"/p/q\"]")
            .unwrap();
        let mut ctl = Controller::new(cfg, Box::new(disks.clone()), UtcTime::from_unix(T0, 0));
        let mut engine = ScriptedEngine(Default::default());
        let mut cmd = |c: &mut Controller, line: &str| {
            c.execute_with(
                &parse_statement(line.as_bytes()).unwrap(),
                UtcTime::from_unix(T0, 0),
                &mut engine,
            )
            .format()
        };
        // Two file systems: /m/0 and /m/1 share device 1 and count once.
        assert_eq!(
            cmd(&mut ctl, "mstat?m"),
            "!mstat? 0 : m : 1 : m : 3 : 3 : 5.000 : 12.000 : closed : ready : sg ;"
        );
        disks.remove_dir(Path::new("/m/1"));
        assert_eq!(
            cmd(&mut ctl, "mstat?m"),
            "!mstat? 0 : m : 1 : m : 2 : 3 : 5.000 : 12.000 : closed : disks missing : sg ;"
        );
        assert_eq!(
            cmd(&mut ctl, "group=new:new"),
            "!group = 0 : new : 1 disks : 1 created ;"
        );
        assert!(disks.is_dir(Path::new("/p/q")));
        disks.fail_create("/r");
        let cfg = DaemonConfig::from_toml("[groups]\nr = [\"/r/0\"]").unwrap();
        let mut ctl = Controller::new(cfg, Box::new(disks.clone()), UtcTime::from_unix(T0, 0));
        assert_eq!(
            cmd(&mut ctl, "group=new:r"),
            "!group = 3 : /r/0: permission denied ;"
        );
    }

    #[test]
    fn a_configured_frame_rate_is_not_overridden_by_a_learned_one() {
        let mut f = fixture("streams = [\"a=vdif@127.0.0.1:0,psn,frame-size=8224,frame-rate=2000\"]");
        assert_eq!(f.code("group=open:g1"), 0);
        assert_eq!(f.code("record=on:30:scan1:exp:st"), 0);
        // The scripted recording reports a learned rate of 1000 frames/s.
        assert_eq!(f.ctl.report(f.now).streams[0].frame_rate, Some(2000));
    }

    #[test]
    fn mstat_reports_each_group() {
        let mut f = fixture("");
        f.ready();
        let r = f.cmd("mstat?");
        let p = crate::proto::parse_reply(&r).unwrap();
        assert_eq!(p.code, 0);
        assert_eq!(p.fields.len(), 20, "{r}");
        assert_eq!(&p.fields[..5], ["g1", "1", "g1", "2", "2"]);
        assert_eq!(&p.fields[7..10], ["open", "ready", "sg"]);
        assert!(p.fields[5].parse::<f64>().unwrap() > 0.0);
        assert_eq!(&p.fields[10..15], ["g2", "2", "g2", "0", "0"]);
        assert_eq!(f.cmd("mstat?g2").matches(':').count(), 10);
        assert_eq!(f.code("mstat?nope"), 8);
        assert_eq!(f.code("mstat=all"), 7);
    }

    #[test]
    fn record_needs_streams_and_group_and_valid_names() {
        let mut f = fixture("");
        assert_eq!(f.cmd("record?"), "!record? 0 : off : - : 0 : - ;");
        assert_eq!(f.code("record=on:30:scan1:exp:st"), 2);
        f.ready();
        for bad in [
            "record=on:30:../x:exp:st",
            "record=on:30:sc/an:exp:st",
            "record=on:30:scan1:e\tx:st",
            "record=on:-5:scan1:exp:st",
            "record=on:abc:scan1:exp:st",
            "record=on:30:x:scan1:exp:st:extra",
            "record=sideways",
            "record=2025y190d11h00m00s:30:scan1:exp:st",
        ] {
            assert_eq!(f.code(bad), 8, "{bad}");
        }
        assert_eq!(f.code("record=on:30:1e9:scan1:exp:st"), 3, "more GB than free");
        assert!(f.script.lock().unwrap().started.is_empty());
        assert_eq!(f.cmd("record=off"), "!record = 2 : not recording ;");
    }

    #[test]
    fn full_recording_cycle_and_scan_queries() {
        let mut f = fixture("");
        f.ready();
        assert_eq!(f.cmd("scan_check?"), "!scan_check? 2 : no scan recorded yet ;");
        assert_eq!(
            f.cmd("record=on:30:scan1:exp:st"),
            "!record = 0 : recording : exp_st_scan1 ;"
        );
        {
            let s = f.script.lock().unwrap();
            let c = &s.started[0];
            assert_eq!(c.scan, "exp_st_scan1");
            assert_eq!(c.duration, Some(Duration::from_secs(30)));
            assert_eq!(c.disks.len(), 2);
            assert!(c.streams[0].psn);
        }
        assert_eq!(
            f.cmd("record?"),
            "!record? 0 : recording : g1 : 1 : exp_st_scan1 ;"
        );
        assert_eq!(f.code("record=on:30:scan2:exp:st"), 6);
        assert_eq!(f.code("input_stream=commit"), 6);
        assert_eq!(f.code("group=close"), 6);
        assert_eq!(f.code("group=open:g1"), 6);
        assert_eq!(
            f.cmd("status?"),
            "!status? 0 : recording : g1 : 1 streams : 0 scans : ok ;"
        );
        assert_eq!(
            f.cmd("evlbi?"),
            "!evlbi? 0 : total : 1000 : loss : 0 (0.00%) : out-of-order : 0 (0.00%) : extent : n/a seqnr/pkt ;"
        );
        // While recording: the data rate of the scan so far (1000 frames of 8224 B in 2 s of time stamps).
        let rt = crate::proto::parse_reply(&f.cmd("rtime?")).unwrap();
        assert_eq!((rt.code, rt.fields[0].as_str()), (0, "g1"));
        assert_eq!(rt.fields[4], "0.0329");
        let rep = f.ctl.report(f.now);
        assert_eq!(rep.record.state, "recording");
        assert_eq!(rep.scans.last().unwrap().name, "exp_st_scan1");

        assert_eq!(f.cmd("record=off"), "!record = 0 : flushing : exp_st_scan1 ;");
        assert!(f.script.lock().unwrap().stopped);
        assert_eq!(
            f.cmd("record?"),
            "!record? 0 : flushing : g1 : 1 : exp_st_scan1 ;"
        );
        f.tick(f.now);
        assert_eq!(f.ctl.state_name(), "flushing");
        f.script.lock().unwrap().flushed = true;
        f.tick(f.now);
        assert_eq!(f.cmd("record?"), "!record? 0 : off : g1 : 1 : exp_st_scan1 ;");
        assert_eq!(
            f.cmd("scan_check?"),
            "!scan_check? 0 : 1 : exp_st_scan1 : complete : RDBE1 : OK : vdif : 2025y190d12h00m00s : 2.000 : 0.008224 : 0.0329 : 0 ;"
        );
        // Idle: rtime? answers at the rate scan_check? reports (the data's), not bytes over the 3.2 s the
        // recording ran, and its seconds are the free bytes at that rate.
        let rt = crate::proto::parse_reply(&f.cmd("rtime?")).unwrap();
        assert_eq!(rt.fields[4], "0.0329", "{rt:?}");
        let secs: f64 = rt.fields[1].parse().unwrap();
        let gb: f64 = rt.fields[2].parse().unwrap();
        let want = gb * 8.0 / (1000.0 * 8224.0 * 8.0 / 2.0 / 1e9);
        assert!((secs - want).abs() <= 1.0 + 1e-3 * want, "{secs} vs {want}");
        assert_eq!(f.code("scan_check?exp_st_scan1"), 0);
        assert_eq!(f.code("scan_check?1"), 0);
        assert_eq!(f.code("scan_check?2"), 8);
        assert_eq!(f.code("record=on:30:scan1:exp:st"), 6, "scan exists");
        let c = f.ctl.cumulative();
        assert_eq!(c.streams[0].1.packets, 1000);
        assert_eq!(c.scans_recorded, 1);
    }

    #[test]
    fn scan_check_is_busy_until_the_latest_scan_is_complete() {
        let mut f = fixture("");
        f.ready();
        f.cmd("record=on:30:scan1:exp:st");
        f.cmd("record=off");
        f.script.lock().unwrap().flushed = true;
        f.tick(f.now);
        assert_eq!(f.code("scan_check?"), 0);
        *f.script.lock().unwrap() = Script {
            packets: 500,
            ..Default::default()
        };
        assert_eq!(
            f.cmd("record=on:30:scan2:exp:st"),
            "!record = 0 : recording : exp_st_scan2 ;"
        );
        assert_eq!(
            f.cmd("scan_check?"),
            "!scan_check? 5 : scan exp_st_scan2 is recording: retry when record? says off ;"
        );
        assert_eq!(f.cmd("record=off"), "!record = 0 : flushing : exp_st_scan2 ;");
        // Still flushing: not the previous scan's answer, which a script would take for this one.
        for q in ["scan_check?", "scan_check?exp_st_scan2", "scan_check?2"] {
            assert_eq!(
                f.cmd(q),
                "!scan_check? 5 : scan exp_st_scan2 is flushing: retry when record? says off ;",
                "{q}"
            );
        }
        // Earlier scans still answer.
        assert!(f
            .cmd("scan_check?1")
            .starts_with("!scan_check? 0 : 1 : exp_st_scan1 :"));
        f.tick(f.now);
        assert_eq!(f.code("scan_check?"), 5);
        f.script.lock().unwrap().flushed = true;
        f.tick(f.now);
        assert!(
            f.cmd("scan_check?")
                .starts_with("!scan_check? 0 : 2 : exp_st_scan2 : complete :"),
            "complete: answered"
        );
    }

    #[test]
    fn a_start_in_progress_is_pending_and_its_reply_comes_with_the_outcome() {
        let mut f = fixture("");
        f.ready();
        let st = parse_statement(b"record=on:30:scan1:exp:st").unwrap();
        let Answer::Later(ticket) = f.ctl.handle(&st, f.now) else {
            panic!("record=on answered before the recording started")
        };
        let actions = f.ctl.take_actions();
        assert!(
            matches!(&actions[..], [Action::Start { ticket: t, config, .. }] if *t == ticket && config.scan == "exp_st_scan1")
        );
        // While the caller starts it (outside the lock), the controller answers and says pending.
        assert_eq!(f.cmd("record?"), "!record? 0 : pending : g1 : 1 : exp_st_scan1 ;");
        assert_eq!(f.ctl.report(f.now).record.state, "pending");
        assert_eq!(
            f.cmd("record=off"),
            "!record = 5 : scan exp_st_scan1 is starting: retry when record? says recording ;"
        );
        assert_eq!(f.code("record=on:30:scan2:exp:st"), 6);
        let Action::Start { config, .. } = actions.into_iter().next().unwrap() else {
            unreachable!()
        };
        let rec = f.engine.start(*config);
        let reply = f.ctl.started(ticket, rec, f.now).unwrap();
        assert_eq!(reply.format(), "!record = 0 : recording : exp_st_scan1 ;");
        assert_eq!(f.ctl.state_name(), "recording");
        // A stale outcome (not the current ticket) is stopped and released, never adopted.
        let again = f.script.lock().unwrap().started[0].clone();
        let stale = f.engine.start(again);
        assert!(f.ctl.started(ticket + 7, stale, f.now).is_none());
        assert!(matches!(
            &f.ctl.take_actions()[..],
            [Action::Stop(_), Action::Release(_)]
        ));
        // record=off hands out the stop; the state is flushing before the recorder even knows.
        assert_eq!(
            f.ctl
                .handle(&parse_statement(b"record=off").unwrap(), f.now)
                .reply_now()
                .unwrap()
                .format(),
            "!record = 0 : flushing : exp_st_scan1 ;"
        );
        assert!(!f.script.lock().unwrap().stopped);
        assert_eq!(f.ctl.state_name(), "flushing");
        assert!(matches!(&f.ctl.take_actions()[..], [Action::Stop(_)]));
    }

    #[test]
    fn a_start_that_fails_answers_failed_and_leaves_off() {
        let mut f = fixture("");
        f.ready();
        let st = parse_statement(b"record=on:30:scan1:exp:st").unwrap();
        let Answer::Later(ticket) = f.ctl.handle(&st, f.now) else {
            panic!()
        };
        f.ctl.take_actions();
        let r = f
            .ctl
            .started(ticket, Err("cannot bind 127.0.0.1:4001".into()), f.now)
            .unwrap();
        assert_eq!(r.format(), "!record = 3 : cannot bind 127.0.0.1:4001 ;");
        assert_eq!(f.ctl.state_name(), "off");
        assert!(f.cmd("status?").contains("cannot bind"));
    }

    #[test]
    fn future_start_is_pending_until_its_second() {
        let mut f = fixture("");
        f.ready();
        assert_eq!(
            f.cmd("record=on:2025y190d12h00m05s:10:scan1:exp:st"),
            "!record = 1 : pending : exp_st_scan1 : 2025y190d12h00m05s ;"
        );
        assert_eq!(f.cmd("record?"), "!record? 0 : pending : g1 : 1 : exp_st_scan1 ;");
        f.tick(UtcTime::from_unix(T0 + 4, 999_000_000));
        assert!(f.script.lock().unwrap().started.is_empty());
        f.tick(UtcTime::from_unix(T0 + 5, 1_000_000));
        assert_eq!(f.script.lock().unwrap().started.len(), 1);
        assert_eq!(f.ctl.state_name(), "recording");
        // The start time may also take the place of "on".
        let mut g = fixture("");
        g.ready();
        assert_eq!(g.code("record=2025y190d12h01m00s:10:scan1:exp:st"), 1);
        assert_eq!(g.cmd("record=off"), "!record = 0 : cancelled : exp_st_scan1 ;");
        assert_eq!(g.ctl.state_name(), "off");
    }

    #[test]
    fn start_failure_is_reported_and_leaves_off() {
        let mut f = fixture("station = \"Xx\"");
        f.ready();
        f.script.lock().unwrap().fail_start = Some("address in use".into());
        assert_eq!(f.cmd("record=on:10"), "!record = 3 : address in use ;");
        assert_eq!(f.ctl.state_name(), "off");
        assert!(f.cmd("status?").contains("address in use"));
        f.script.lock().unwrap().fail_start = None;
        // No scan name: the next free number, prefixed by the configured station.
        assert_eq!(f.cmd("record=on"), "!record = 0 : recording : Xx_scan0001 ;");
        assert_eq!(f.script.lock().unwrap().started[0].duration, None);
    }

    #[test]
    fn unknown_keywords_and_wrong_forms() {
        let mut f = fixture("");
        assert_eq!(f.cmd("frobnicate=1"), "!frobnicate = 7 : no such keyword ;");
        assert_eq!(f.cmd("mstat=1"), "!mstat = 7 : mstat has no command form ;");
        assert_eq!(f.code("help?"), 0);
        assert_eq!(f.code("rtime?"), 2);
    }

    #[test]
    fn scan_list_is_rebuilt_from_disk_metadata() {
        let mut f = fixture("");
        f.ready();
        f.cmd("record=on:30:scan1:exp:st");
        f.script.lock().unwrap().flushed = true;
        f.tick(f.now);
        let summary_meta = f.ctl.scans()[0].meta.clone().unwrap();
        for d in &f.script.lock().unwrap().started[0].disks {
            summary_meta
                .write_atomic(&vlbiflow_scan::metadata_path(d, "exp_st_scan1"))
                .unwrap();
        }
        // An unreadable copy of another scan still lists it.
        std::fs::write(f._dir.path().join("0/bad.vlbiflow.json"), b"{").unwrap();
        let cfg = f.ctl.config().clone();
        let again = Controller::new(
            cfg,
            Box::new(crate::disks::SystemDisks),
            UtcTime::from_unix(T0, 0),
        );
        let names: Vec<_> = again.scans().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["bad", "exp_st_scan1"]);
        assert!(again.scans()[0].meta.is_none());
        let rep = again.report(f.now);
        assert_eq!(rep.scans[0].state, "unreadable");
        assert_eq!(rep.scans[1].state, "complete");
    }

    #[test]
    fn rates_are_sampled_once_per_second() {
        let mut f = fixture("");
        f.ready();
        f.cmd("record=on:30:scan1:exp:st");
        f.tick(UtcTime::from_unix(T0, 0));
        f.script.lock().unwrap().packets = 2000;
        f.tick(UtcTime::from_unix(T0 + 1, 0));
        let h = f.ctl.history();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].rx_bps, 1000.0 * 8224.0 * 8.0);
        assert_eq!(f.ctl.report(f.now).streams[0].rate_bps, 1000.0 * 8224.0 * 8.0);
        // A second tick within the same second adds nothing.
        f.tick(UtcTime::from_unix(T0 + 1, 500_000_000));
        assert_eq!(f.ctl.history().len(), 1);
    }

    #[test]
    fn session_requires_the_token_when_configured() {
        let mut f = fixture("");
        let mut s = crate::session::Mark6Session::new(Some("abcdefgh".into()));
        let inputs = s.frame(b"record?;auth=wrong;auth=abcdefgh;record?;auth=x;\n");
        let out = s.process(
            inputs,
            &mut crate::session::WithEngine(&mut f.ctl, &mut f.engine),
            f.now,
        );
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "!record? 4 : authentication required: send auth=<token>  first ;",
                "!auth = 4 : wrong token ;",
                "!auth = 0 ;",
                "!record? 0 : off : - : 0 : - ;",
                "!auth = 4 : wrong token ;",
            ]
        );
        assert!(!s.should_close());
        let inputs = s.frame(b"auth=y;auth=z;record?\n");
        let out = s.process(
            inputs,
            &mut crate::session::WithEngine(&mut f.ctl, &mut f.engine),
            f.now,
        );
        assert_eq!(
            out, "!auth = 4 : wrong token ;\n",
            "closes after the third wrong token"
        );
        assert!(s.should_close());
        let _ = ReturnCode::Done;
    }
}
