//! The collect itself: discovers each station's scans (`ls` on its daemon), pulls them one station slot at
//! a time with the rate the [`Scheduler`] gives the station (sent to the station's daemon as the
//! receiver's `rate_cap`), follows scans still being recorded, retries failures with resume after a
//! back-off, and ends when every expected scan is verified here, or when what is left cannot be had.
//!
//! Every pull runs on its own thread; this loop only starts them, reads their progress and their ends,
//! and passes what it sees to the scheduler.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vlbiflow_xfer::client::{self, ClientConfig};
use vlbiflow_xfer::follow::{self, FollowConfig};
use vlbiflow_xfer::session::{Committed, Options, ScanEntry, ScanRequest};
use vlbiflow_xfer::share::RateCap;
use vlbiflow_xfer::{utc_now, Key, Progress, XferError};

use crate::config::CollectConfig;
use crate::sched::{Event, PullEnd, SchedConfig, Scheduler, StationId, StationSpec};
use crate::state::State;
use crate::status::{ScanStatus, StationStatus, Status, TimedError};

/// How to run, besides the experiment file.
pub struct RunOptions {
    /// The status file, rewritten atomically each second (default `dest/<experiment>/collect-status.json`).
    pub status_file: Option<PathBuf>,
    /// A listener for `/metrics` and the HTML page at `/`.
    pub metrics: Option<TcpListener>,
    /// Progress lines (to standard error in the CLI).
    pub log: Box<dyn Fn(&str) + Send + Sync>,
}

/// The default status file of an experiment.
pub fn default_status_file(cfg: &CollectConfig) -> PathBuf {
    cfg.dest.join(&cfg.experiment).join("collect-status.json")
}

/// What a pull or discovery thread reports at its end.
enum Done {
    Listed(Result<Vec<ScanEntry>, XferError>),
    Pulled(Result<(Vec<Committed>, u64), XferError>),
}

/// A running pull or discovery.
struct Job {
    serial: u64,
    /// The scan's index in its station's list; `None` for a discovery.
    scan: Option<usize>,
    progress: Arc<Progress>,
    cap: Arc<RateCap>,
    stop: Arc<AtomicBool>,
    /// Stopped on the scheduler's word (a stall).
    stalled: bool,
    /// When the counters were read last, and what they said then: bytes verified, bytes moved.
    seen: (Instant, u64, u64),
    rate_bps: f64,
}

/// One scan of a station, as the collect tracks it.
struct Scan {
    name: String,
    entry: Option<ScanEntry>,
    /// `pending`, `recording`, `pulling`, `following`, `retrying`, `verified`, `failed`.
    state: &'static str,
    bytes_verified: u64,
    retransmits: u64,
    rate_bps: f64,
    /// Why it failed for good.
    failed: Option<String>,
    errors: Vec<TimedError>,
    /// The station listed it as still being recorded: pulled by following it (a retry too), never as
    /// it happens to be on disk.
    recording: bool,
    /// Followed until it stopped growing without being marked complete (its recorder died): pulled as it
    /// is on disk, once.
    unfinished: bool,
}

impl Scan {
    fn new(name: &str) -> Scan {
        Scan {
            name: name.to_string(),
            entry: None,
            state: "pending",
            bytes_verified: 0,
            retransmits: 0,
            rate_bps: 0.0,
            failed: None,
            errors: Vec::new(),
            recording: false,
            unfinished: false,
        }
    }

    fn bytes(&self) -> u64 {
        self.entry.as_ref().map_or(0, |e| e.bytes)
    }

    fn to_do(&self, follow: bool) -> bool {
        match self.state {
            "pending" | "retrying" => true,
            "recording" => follow,
            _ => false,
        }
    }
}

struct Station {
    cfg: crate::config::Station,
    id: StationId,
    client: ClientConfig,
    dir: PathBuf,
    discovered: bool,
    scans: Vec<Scan>,
    jobs: Vec<Job>,
    /// Stopped for good (destination disk full, refused, given up): why.
    stopped: Option<String>,
    error: Option<TimedError>,
    /// Failing since (cleared by progress).
    trouble_since: Option<Instant>,
    /// When the first discovery succeeded (missing scans are looked for until `follow_timeout` after).
    first_listed: Option<Instant>,
    /// When the last discovery ended.
    last_listed: Option<Instant>,
}

impl Station {
    fn need(&self, follow: bool, follow_timeout: Duration, now: Instant) -> u64 {
        if self.stopped.is_some() {
            return 0;
        }
        if !self.discovered {
            return 1;
        }
        let mut n: u64 = self
            .scans
            .iter()
            .filter(|s| s.to_do(follow) || matches!(s.state, "pulling" | "following"))
            .map(|s| s.bytes().saturating_sub(s.bytes_verified).max(1))
            .sum();
        if self.looks_again(follow, follow_timeout, now) {
            n += 1;
        }
        n
    }

    /// Whether missing expected scans are still looked for (while following, until `follow_timeout`
    /// after the first discovery).
    fn looks_again(&self, follow: bool, follow_timeout: Duration, now: Instant) -> bool {
        follow
            && self.scans.iter().any(|s| s.state == "missing")
            && self.first_listed.is_some_and(|t| now < t + follow_timeout)
    }

    /// What could start now: a discovery (the first, or another every 2 s while scans are missing), or
    /// each scan ready and not being pulled.
    fn startable(&self, follow: bool, follow_timeout: Duration, now: Instant) -> usize {
        if self.stopped.is_some() {
            return 0;
        }
        let listing = self.jobs.iter().any(|j| j.scan.is_none());
        let busy: Vec<usize> = self.jobs.iter().filter_map(|j| j.scan).collect();
        let ready = self
            .scans
            .iter()
            .enumerate()
            .filter(|(k, s)| s.to_do(follow) && !busy.contains(k))
            .count();
        let again = !listing
            && (!self.discovered
                || (ready == 0
                    && self.looks_again(follow, follow_timeout, now)
                    && self.last_listed.is_none_or(|t| now >= t + Duration::from_secs(2))));
        ready + usize::from(again)
    }
}

/// Pulls a scan whose recorder never marked it complete as it is on the station's disks: the complete
/// blocks the station's daemon lists (a recording cut off mid-block ends in a block that is not whole),
/// verified chunk by chunk as any pull and kept here under the scan's name.
fn pull_as_it_is(
    client: &ClientConfig,
    req: &ScanRequest,
    dir: &std::path::Path,
    mut opts: Options,
    progress: &Arc<Progress>,
    stop: &Arc<AtomicBool>,
) -> Result<(Vec<Committed>, u64), XferError> {
    // a partial pull reads the complete-block prefix and leaves the files as `.part`
    opts.partial = true;
    let o = client::pull(client, &[], Some(req), dir, opts, progress, stop)?;
    for c in &o.committed {
        let part = dir.join(format!("{}{}", c.name, vlbiflow_xfer::dest::PART_SUFFIX));
        let done = dir.join(&c.name);
        // never over a file already here
        std::fs::hard_link(&part, &done)
            .and_then(|()| std::fs::remove_file(&part))
            .and_then(|()| std::fs::File::open(dir)?.sync_all())
            .map_err(|e| XferError::Io(format!("{}: keeping {}: {e}", dir.display(), c.name)))?;
    }
    Ok((o.committed, o.stats.duplicates))
}

/// The collect's state between loop turns.
struct Collect<'a> {
    cfg: &'a CollectConfig,
    sched: Scheduler,
    stations: Vec<Station>,
    state: State,
    tx: Sender<(usize, u64, Done)>,
    serial: u64,
    log: &'a (dyn Fn(&str) + Send + Sync),
    started: String,
}

/// Runs the collect of `cfg` with `key` until every expected scan is verified here (`Status::complete`),
/// nothing more can be had, or `stop` is set. The status it ends with says which scans did not arrive and
/// why.
pub fn run(cfg: &CollectConfig, key: Key, opts: RunOptions, stop: &AtomicBool) -> Result<Status, String> {
    let state = State::open(&cfg.state)?;
    let t0 = Instant::now();
    let mut sc = SchedConfig::new(cfg.total_bps);
    sc.stall_after = cfg.stall_timeout;
    sc.backoff_max = cfg.backoff_max;
    let mut sched = Scheduler::new(sc);
    let mut stations = Vec::new();
    for s in &cfg.stations {
        let id = sched.add_station(
            StationSpec {
                name: s.name.clone(),
                weight: s.weight,
                limit_bps: s.rate_limit_bps,
                concurrency: s.concurrency,
            },
            t0,
        );
        sched.set_need(id, 1, t0);
        let dir = cfg.station_dir(&s.name);
        let stopped = std::fs::create_dir_all(&dir)
            .err()
            .map(|e| format!("destination {}: {e}", dir.display()));
        stations.push(Station {
            cfg: s.clone(),
            id,
            client: ClientConfig::new(s.server.clone(), key.clone()),
            dir,
            discovered: false,
            scans: Vec::new(),
            jobs: Vec::new(),
            stopped,
            error: None,
            trouble_since: None,
            first_listed: None,
            last_listed: None,
        });
    }
    let (tx, rx) = channel();
    let status_file = opts
        .status_file
        .clone()
        .unwrap_or_else(|| default_status_file(cfg));
    let mut c = Collect {
        cfg,
        sched,
        stations,
        state,
        tx,
        serial: 0,
        log: &*opts.log,
        started: utc_now(),
    };
    let shared = Arc::new(Mutex::new(c.status(false)));
    let http_stop = Arc::new(AtomicBool::new(false));
    let http = match opts.metrics {
        Some(l) => {
            let (s, st) = (shared.clone(), http_stop.clone());
            Some(
                std::thread::Builder::new()
                    .name("collect-http".into())
                    .spawn(move || {
                        let _ = crate::status::serve(l, s, st);
                    })
                    .map_err(|e| e.to_string())?,
            )
        }
        None => None,
    };
    let end = c.drive(&rx, stop, &shared, &status_file);
    http_stop.store(true, Relaxed);
    if let Some(h) = http {
        let _ = h.join();
    }
    end
}

impl Collect<'_> {
    /// The loop: start what the scheduler allows, apply its events, take the threads' ends and progress,
    /// write the status each second.
    fn drive(
        &mut self,
        rx: &Receiver<(usize, u64, Done)>,
        stop: &AtomicBool,
        shared: &Mutex<Status>,
        status_file: &std::path::Path,
    ) -> Result<Status, String> {
        let mut last_status = Instant::now() - Duration::from_secs(10);
        let mut last_line = Instant::now();
        loop {
            let now = Instant::now();
            if stop.load(Relaxed) {
                for j in self.stations.iter().flat_map(|s| &s.jobs) {
                    j.stop.store(true, Relaxed);
                }
            } else {
                self.give_up(now);
                for i in 0..self.stations.len() {
                    self.refresh_need(i, now);
                }
                while let Some(id) = self.sched.poll_start(now) {
                    self.start(id, now);
                }
            }
            while let Some(ev) = self.sched.poll_event() {
                self.event(ev);
            }
            let running = self.stations.iter().map(|s| s.jobs.len()).sum::<usize>();
            let need: u64 = self
                .stations
                .iter()
                .map(|s| s.need(self.cfg.follow, self.cfg.follow_timeout, now))
                .sum();
            if running == 0 && (need == 0 || stop.load(Relaxed)) {
                let st = self.status(true);
                st.write_atomic(status_file)?;
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = st.clone();
                return Ok(st);
            }
            let wait = self
                .sched
                .poll_timeout(now)
                .map_or(Duration::from_millis(200), |t| t.saturating_duration_since(now))
                .clamp(Duration::from_millis(1), Duration::from_millis(200));
            if let Ok((si, serial, done)) = rx.recv_timeout(wait) {
                self.ended(si, serial, done, stop);
            }
            let now = Instant::now();
            self.sched.handle_timeout(now);
            if now.duration_since(last_status) >= Duration::from_secs(1) {
                self.measure(now);
                let st = self.status(false);
                if let Err(e) = st.write_atomic(status_file) {
                    (self.log)(&format!("status file: {e}"));
                }
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = st;
                last_status = now;
            }
            if now.duration_since(last_line) >= Duration::from_secs(10) {
                (self.log)(&self.summary_line());
                last_line = now;
            }
        }
    }

    fn refresh_need(&mut self, i: usize, now: Instant) {
        let (f, ft) = (self.cfg.follow, self.cfg.follow_timeout);
        let st = &self.stations[i];
        let (id, n, ready) = (st.id, st.need(f, ft, now), st.startable(f, ft, now));
        self.sched.set_startable(id, ready);
        self.sched.set_need(id, n, now);
    }

    /// Starts a discovery or the station's next scan on a slot the scheduler gave it.
    fn start(&mut self, id: StationId, now: Instant) {
        let i = id.0;
        let follow = self.cfg.follow;
        let st = &self.stations[i];
        let busy: Vec<usize> = st.jobs.iter().filter_map(|j| j.scan).collect();
        // complete scans first, then those still being recorded
        let next = st
            .scans
            .iter()
            .enumerate()
            .filter(|(k, s)| s.to_do(follow) && !busy.contains(k))
            .min_by_key(|(_, s)| (s.state == "recording", s.name.clone()))
            .map(|(k, _)| k);
        // the scheduler hands out only what `startable` said could start: a scan, or else a discovery
        let discover = !st.discovered || next.is_none();
        self.serial += 1;
        let serial = self.serial;
        let progress = Arc::new(Progress::default());
        let cap = Arc::new(RateCap::new());
        let running = st.jobs.len() + 1;
        cap.set(Some(self.sched.share(id) / running as f64).filter(|&b| b > 0.0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut client = st.client.clone();
        client.rate_cap = Some(cap.clone());
        let tx = self.tx.clone();
        let disks = st.cfg.disks.clone();
        let job = Job {
            serial,
            scan: if discover { None } else { next },
            progress: progress.clone(),
            cap,
            stop: stop.clone(),
            stalled: false,
            seen: (now, 0, 0),
            rate_bps: 0.0,
        };
        let spawned = if discover {
            std::thread::Builder::new()
                .name("collect-ls".into())
                .spawn(move || {
                    let r = client::ls(&client, &disks, Some("*"));
                    let _ = tx.send((i, serial, Done::Listed(r)));
                })
        } else {
            let k = next.expect("a scan to pull");
            let stn = &mut self.stations[i];
            let s = &mut stn.scans[k];
            // a scan listed as being recorded is followed, on a retry too (its recorder marks it
            // complete, or it is found unfinished and then pulled as it is)
            let recording = (s.state == "recording" || s.recording) && !s.unfinished;
            let unfinished = s.unfinished;
            s.state = if recording { "following" } else { "pulling" };
            let _ = self.state.set(&stn.cfg.name, &s.name, s.state, s.bytes(), None);
            (self.log)(&format!(
                "{}: {} {} ({})",
                stn.cfg.name,
                if recording { "following" } else { "pulling" },
                s.name,
                vlbiflow_units::fmt_bytes(s.bytes())
            ));
            let req = ScanRequest {
                name: s.name.clone(),
                disks,
                layout: "gather".into(),
            };
            let dir = self.stations[i].dir.clone();
            let opts = Options {
                chunk_size: self.cfg.chunk_size,
                block_size: self.cfg.block_size,
                overwrite: false,
                encrypt: false,
                rate_bps: None,
                partial: false,
                verify_written: self.cfg.verify_written,
            };
            let fcfg = FollowConfig {
                poll: Duration::from_millis(500),
                min_new: self.cfg.follow_min_new,
                stall_timeout: self.cfg.follow_timeout,
            };
            std::thread::Builder::new()
                .name("collect-pull".into())
                .spawn(move || {
                    let r = if recording {
                        follow::pull_follow(&client, &req, &dir, opts, &fcfg, (&progress, &stop), &|_, _| {})
                            .map(|run| (run.last.committed, run.retransmits))
                    } else if unfinished {
                        pull_as_it_is(&client, &req, &dir, opts, &progress, &stop)
                    } else {
                        client::pull(&client, &[], Some(&req), &dir, opts, &progress, &stop)
                            .map(|o| (o.committed, o.stats.duplicates))
                    };
                    let _ = tx.send((i, serial, Done::Pulled(r)));
                })
        };
        match spawned {
            Ok(_) => self.stations[i].jobs.push(job),
            Err(e) => {
                (self.log)(&format!(
                    "{}: cannot start a thread: {e}",
                    self.stations[i].cfg.name
                ));
                self.sched.pull_ended(id, PullEnd::Failed, now);
            }
        }
    }

    /// Applies a scheduler event.
    fn event(&mut self, ev: Event) {
        match ev {
            Event::Share { station, bps } => {
                let st = &self.stations[station.0];
                let n = st.jobs.len().max(1) as f64;
                for j in &st.jobs {
                    j.cap.set(Some(bps / n).filter(|&b| b > 0.0).or(Some(1.0)));
                }
            }
            Event::Stop { station, retry_in } => {
                let st = &mut self.stations[station.0];
                for j in &mut st.jobs {
                    j.stalled = true;
                    j.stop.store(true, Relaxed);
                }
                let why = format!(
                    "no progress for {:.0} s: stopped, retried in {:.0} s",
                    self.cfg.stall_timeout.as_secs_f64(),
                    retry_in.as_secs_f64()
                );
                (self.log)(&format!("{}: {why}", st.cfg.name));
                st.error = Some(timed(&why));
            }
            Event::Away {
                station,
                failures,
                retry_in,
            } => {
                let st = &mut self.stations[station.0];
                let why = st.error.as_ref().map_or(String::new(), |e| e.error.clone());
                (self.log)(&format!(
                    "{}: failed {failures} time(s) in a row, retrying in {:.0} s: {why}",
                    st.cfg.name,
                    retry_in.as_secs_f64()
                ));
                st.trouble_since.get_or_insert_with(Instant::now);
            }
            Event::Back { station } => {
                let st = &mut self.stations[station.0];
                (self.log)(&format!("{}: back, moving again", st.cfg.name));
                st.error = None;
                st.trouble_since = None;
            }
        }
    }

    /// A station failing for longer than `give_up_after` is stopped: its scans left fail.
    fn give_up(&mut self, now: Instant) {
        for i in 0..self.stations.len() {
            let st = &mut self.stations[i];
            let Some(t) = st.trouble_since else { continue };
            if st.stopped.is_none() && st.jobs.is_empty() && now.duration_since(t) > self.cfg.give_up_after {
                let why = format!(
                    "given up after {:.0} s of failures: {}",
                    self.cfg.give_up_after.as_secs_f64(),
                    st.error.as_ref().map_or("", |e| e.error.as_str())
                );
                (self.log)(&format!("{}: {why}", st.cfg.name));
                st.stopped = Some(why);
                self.refresh_need(i, now);
            }
        }
    }

    /// A thread ended.
    fn ended(&mut self, i: usize, serial: u64, done: Done, stop: &AtomicBool) {
        let now = Instant::now();
        let Some(pos) = self.stations[i].jobs.iter().position(|j| j.serial == serial) else {
            return;
        };
        let job = self.stations[i].jobs.remove(pos);
        let id = self.stations[i].id;
        let end = match done {
            Done::Listed(r) => self.listed(i, r, now),
            Done::Pulled(r) => self.pulled(i, &job, r, stop.load(Relaxed)),
        };
        self.sched.pull_ended(id, end, now);
        self.refresh_need(i, now);
    }

    /// A discovery's answer: the station's scans of the experiment.
    fn listed(&mut self, i: usize, r: Result<Vec<ScanEntry>, XferError>, now: Instant) -> PullEnd {
        let (cfg, follow) = (self.cfg, self.cfg.follow);
        let st = &mut self.stations[i];
        let found = match r {
            Ok(f) => f,
            Err(e) => return self.failure(i, None, e),
        };
        st.discovered = true;
        st.first_listed.get_or_insert(now);
        st.last_listed = Some(now);
        let mut matched = Vec::new();
        for e in found {
            let Some(entry) = cfg.expected_entry(&st.cfg.name, &e.name) else {
                continue;
            };
            matched.push(entry);
            let k = match st.scans.iter().position(|s| s.name == e.name) {
                Some(k) => k,
                None => {
                    st.scans.push(Scan::new(&e.name));
                    st.scans.len() - 1
                }
            };
            let s = &mut st.scans[k];
            if matches!(s.state, "pulling" | "following" | "verified" | "failed") {
                continue;
            }
            if let Some(err) = &e.error {
                s.state = "failed";
                s.failed = Some(format!("the station cannot read it: {err}"));
            } else if self
                .state
                .still_verified(&st.cfg.name, &e.name, &st.dir)
                .unwrap_or(false)
            {
                s.state = "verified";
                s.bytes_verified = e.bytes;
                (self.log)(&format!(
                    "{}: {} verified before, not pulled again",
                    st.cfg.name, e.name
                ));
            } else if e.complete == Some(false) && !s.unfinished {
                s.state = "recording";
                s.recording = true;
                if !follow {
                    s.failed =
                        Some("still being recorded (run with --follow, or when it is complete)".into());
                }
            } else if s.state != "retrying" {
                s.state = "pending";
            }
            s.entry = Some(e);
        }
        // expected scans the station does not have (yet)
        for want in &cfg.scans {
            if !matched.iter().any(|m| m == want) && !st.scans.iter().any(|s| s.name == *want) {
                st.scans.push(Scan {
                    state: "missing",
                    ..Scan::new(want)
                });
            }
        }
        st.scans
            .retain(|s| !(s.state == "missing" && matched.contains(&s.name)));
        st.scans.sort_by(|a, b| a.name.cmp(&b.name));
        st.error = None;
        PullEnd::Done
    }

    /// A pull's end.
    fn pulled(
        &mut self,
        i: usize,
        job: &Job,
        r: Result<(Vec<Committed>, u64), XferError>,
        stopping: bool,
    ) -> PullEnd {
        let k = job.scan.expect("a pull has a scan");
        let st = &mut self.stations[i];
        let name = st.cfg.name.clone();
        match r {
            Ok((files, retransmits)) => {
                let s = &mut st.scans[k];
                let bytes: u64 = files.iter().map(|f| f.size).sum();
                s.state = "verified";
                s.bytes_verified = bytes;
                s.retransmits += retransmits;
                s.rate_bps = 0.0;
                if let Some(e) = &mut s.entry {
                    e.bytes = bytes;
                }
                let list: Vec<String> = files
                    .iter()
                    .map(|f| format!("{} {} {}", f.name, f.size, f.blake3))
                    .collect();
                if let Err(e) = self.state.verified(&name, &s.name, bytes, &list.join("\n")) {
                    (self.log)(&e);
                }
                (self.log)(&format!(
                    "{name}: {} verified ({}, {})",
                    s.name,
                    vlbiflow_units::fmt_bytes(bytes),
                    files
                        .iter()
                        .map(|f| &f.blake3[..16])
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
                st.trouble_since = None;
                PullEnd::Done
            }
            Err(_) if stopping => {
                st.scans[k].state = "retrying";
                PullEnd::Stopped
            }
            Err(XferError::Unfinished(msg)) => {
                let s = &mut st.scans[k];
                s.unfinished = true;
                s.state = "pending";
                let why = format!("never completed at the station ({msg}): pulled as it is");
                (self.log)(&format!("{name}: {}: {why}", s.name));
                s.errors.push(timed(&why));
                PullEnd::Done
            }
            Err(e) if job.stalled => {
                let s = &mut st.scans[k];
                s.state = "retrying";
                s.errors.push(timed(&format!("stalled: {e}")));
                PullEnd::Stopped
            }
            Err(e) => self.failure(i, Some(k), e),
        }
    }

    /// A failed discovery (`scan` None) or pull: retried after a back-off, or failed for good.
    fn failure(&mut self, i: usize, scan: Option<usize>, e: XferError) -> PullEnd {
        let st = &mut self.stations[i];
        let msg = e.to_string();
        let t = timed(&msg);
        st.error = Some(t.clone());
        if let Some(k) = scan {
            st.scans[k].errors.push(t);
        }
        let disk_full = msg.contains("No space left") || msg.contains("not enough space");
        match (&e, disk_full) {
            (_, true) => {
                let why = format!("destination disk full: {msg}");
                (self.log)(&format!("{}: stopped: {why}", st.cfg.name));
                st.stopped = Some(why);
                if let Some(k) = scan {
                    st.scans[k].state = "retrying";
                }
                PullEnd::Done
            }
            (XferError::Io(_), _) => {
                if let Some(k) = scan {
                    st.scans[k].state = "retrying";
                }
                PullEnd::Unreachable
            }
            (XferError::Refused(_) | XferError::Usage(_), _) => match scan {
                // this scan cannot be had (rerunning gets the same answer); the others go on
                Some(k) => {
                    let s = &mut st.scans[k];
                    s.state = "failed";
                    s.failed = Some(msg.clone());
                    let _ = self
                        .state
                        .set(&st.cfg.name, &s.name, "failed", s.bytes(), Some(&msg));
                    (self.log)(&format!("{}: {} failed: {msg}", st.cfg.name, s.name));
                    PullEnd::Done
                }
                None => {
                    (self.log)(&format!("{}: stopped: {msg}", st.cfg.name));
                    st.stopped = Some(msg);
                    PullEnd::Done
                }
            },
            _ => {
                if let Some(k) = scan {
                    st.scans[k].state = "retrying";
                }
                PullEnd::Failed
            }
        }
    }

    /// Reads each running pull's progress: tells the scheduler of any, and measures the rates.
    fn measure(&mut self, now: Instant) {
        for st in &mut self.stations {
            for j in &mut st.jobs {
                let (verified, arrived) = (
                    Progress::get(&j.progress.bytes_verified),
                    Progress::get(&j.progress.bytes_moved),
                );
                let dt = now.duration_since(j.seen.0).as_secs_f64();
                // What arrived, each counter apart: a resumed round reports the prefix already verified
                // while the bytes it moves count from zero below it, so the larger of the two would stand
                // still. Verified bytes grow a chunk at a time; they count only when nothing arrived (a
                // round that re-verifies what is already here).
                let moved = match grown(arrived, j.seen.2) {
                    0 => grown(verified, j.seen.1),
                    n => n,
                };
                if dt > 0.0 {
                    j.rate_bps = moved as f64 * 8.0 / dt;
                }
                // a followed scan waits between rounds for the recorder (its own follow_timeout ends that)
                let following = j.scan.is_some_and(|k| st.scans[k].state == "following");
                if moved > 0 || following {
                    self.sched.progress(st.id, now);
                }
                j.seen = (now, verified, arrived);
                if let Some(k) = j.scan {
                    let s = &mut st.scans[k];
                    s.bytes_verified = Progress::get(&j.progress.bytes_verified);
                    s.rate_bps = j.rate_bps;
                    s.retransmits = Progress::get(&j.progress.duplicates);
                    if let Some(e) = &mut s.entry {
                        e.bytes = e.bytes.max(Progress::get(&j.progress.bytes_total));
                    }
                }
            }
            // what the station uses of its share: the scheduler gives the rest to the others
            let rate: f64 = st.jobs.iter().map(|j| j.rate_bps).sum();
            self.sched.measured(st.id, rate.max(0.0), now);
        }
    }

    fn scan_state(&self, s: &Scan) -> &'static str {
        if s.failed.is_some() && s.state != "verified" {
            "failed"
        } else if s.state == "missing" {
            "pending"
        } else {
            s.state
        }
    }

    /// The status now; `ended`: the collect has ended, so every scan not verified has failed.
    fn status(&self, ended: bool) -> Status {
        let now = Instant::now();
        let mut stations = Vec::new();
        let (mut expected, mut verified, mut bytes) = (0, 0, 0);
        for st in &self.stations {
            let mut scans = Vec::new();
            for s in &st.scans {
                let mut state = self.scan_state(s);
                let mut errors = s.errors.clone();
                if ended && state != "verified" {
                    let why = s
                        .failed
                        .clone()
                        .or_else(|| st.stopped.clone())
                        .or_else(|| (s.state == "missing").then(|| "not on the station's disks".to_string()))
                        .or_else(|| s.errors.last().map(|e| e.error.clone()))
                        .unwrap_or_else(|| "the collect was stopped".into());
                    if errors.last().is_none_or(|e| e.error != why) {
                        errors.push(timed(&why));
                    }
                    state = "failed";
                } else if let Some(f) = &s.failed {
                    if errors.last().is_none_or(|e| e.error != *f) {
                        errors.push(timed(f));
                    }
                }
                expected += 1;
                let ok = state == "verified";
                verified += usize::from(ok);
                bytes += s.bytes_verified;
                let left = s.bytes().saturating_sub(s.bytes_verified);
                scans.push(ScanStatus {
                    name: s.name.clone(),
                    state: state.to_string(),
                    bytes: s.bytes(),
                    bytes_verified: s.bytes_verified,
                    verified: ok,
                    rate_bps: s.rate_bps,
                    eta_s: (s.rate_bps > 0.0 && !ok).then(|| left as f64 * 8.0 / s.rate_bps),
                    retransmits: s.retransmits,
                    errors,
                });
            }
            let all_done = st.discovered && scans.iter().all(|s| s.verified);
            let state = if st.stopped.is_some() {
                "stopped"
            } else if !st.discovered {
                "discovering"
            } else if all_done {
                "done"
            } else if ended {
                "failed"
            } else if self.sched.held_until(st.id, now).is_some() {
                "waiting"
            } else {
                "active"
            };
            stations.push(StationStatus {
                name: st.cfg.name.clone(),
                daemon: st.cfg.server.clone(),
                state: state.into(),
                share_bps: self.sched.share(st.id),
                rate_bps: st.jobs.iter().map(|j| j.rate_bps).sum::<f64>().max(0.0),
                failures: self.sched.failures(st.id),
                error: st.stopped.as_ref().map(|s| timed(s)).or_else(|| st.error.clone()),
                scans,
            });
        }
        let complete = stations.iter().all(|s| s.state == "done");
        Status {
            experiment: self.cfg.experiment.clone(),
            started: self.started.clone(),
            updated: utc_now(),
            total_rate_bps: self.sched.total(),
            complete,
            ended,
            scans_expected: expected,
            scans_verified: verified,
            bytes_verified: bytes,
            stations,
        }
    }

    /// One progress line for standard error.
    fn summary_line(&self) -> String {
        let st = self.status(false);
        let per: Vec<String> = st
            .stations
            .iter()
            .map(|s| {
                format!(
                    "{} {} {}/{} {}",
                    s.name,
                    s.state,
                    s.scans.iter().filter(|c| c.verified).count(),
                    s.scans.len(),
                    vlbiflow_units::fmt_bit_rate(s.rate_bps)
                )
            })
            .collect();
        format!(
            "collect {}: {}/{} scans verified, {}; {}",
            st.experiment,
            st.scans_verified,
            st.scans_expected,
            vlbiflow_units::fmt_bytes(st.bytes_verified),
            per.join("; ")
        )
    }
}

fn timed(e: &str) -> TimedError {
    TimedError {
        time: utc_now(),
        error: e.to_string(),
    }
}

/// What went wrong on the way, per station, whether or not its scans arrived in the end: the number of
/// failed attempts with the first and the last error (for the end of the run: a station daemon that
/// restarted, a path that went down, a disk that filled up are named here even when every scan arrived).
pub fn faults(st: &Status) -> Vec<String> {
    let mut out = Vec::new();
    for s in &st.stations {
        let mut errs: Vec<&TimedError> = s.scans.iter().flat_map(|c| c.errors.iter()).collect();
        errs.extend(s.error.iter());
        if errs.is_empty() {
            continue;
        }
        errs.sort_by(|a, b| a.time.cmp(&b.time));
        errs.dedup_by(|a, b| a.time == b.time && a.error == b.error);
        let (first, last) = (errs[0], errs[errs.len() - 1]);
        let outcome = if s.scans.iter().all(|c| c.verified) {
            "every scan verified after all"
        } else {
            "not every scan verified"
        };
        let mut line = format!(
            "{}: {} error{} ({outcome}); first {} {}",
            s.name,
            errs.len(),
            if errs.len() == 1 { "" } else { "s" },
            first.time,
            first.error
        );
        if errs.len() > 1 {
            line.push_str(&format!("; last {} {}", last.time, last.error));
        }
        out.push(line);
    }
    out
}

/// What did not arrive, per station and scan, one line each (for the exit message).
pub fn not_arrived(st: &Status) -> Vec<String> {
    let mut out = Vec::new();
    for s in &st.stations {
        if s.scans.is_empty() {
            let why = s
                .error
                .as_ref()
                .map_or("no scans of the experiment found", |e| e.error.as_str());
            out.push(format!("{}: {}", s.name, why));
        }
        for c in s.scans.iter().filter(|c| !c.verified) {
            let why = c.errors.last().map_or("not pulled", |e| e.error.as_str());
            out.push(format!("{} {}: {}", s.name, c.name, why));
        }
    }
    out
}

/// Bytes a pull's counter grew by since it read `before`. A followed scan is pulled in rounds, each a
/// new transfer whose counters start again from zero: a count below the last one is a new round, and
/// all of it is new. (Reading the drop as no progress held a follow's measured rate at 0, so the
/// scheduler cut its share to the floor for the rest of the scan.)
fn grown(now: u64, before: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

#[cfg(test)]
mod tests {
    use super::grown;

    #[test]
    fn a_new_follow_round_counts_from_zero() {
        assert_eq!(grown(300, 100), 200);
        assert_eq!(grown(100, 100), 0);
        // the next round's transfer has moved 5 MB: that is what moved, not nothing
        assert_eq!(grown(5_000_000, 973_078_528), 5_000_000);
    }
}
