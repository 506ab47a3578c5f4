//! Forwarding while recording (real-time e-VLBI) in the daemon: the destinations and their commands,
//! sans-IO like the rest of the controller. The data path is `vlbiflow-evlbi`'s (a tap on the recorder's
//! capture thread, a lock-free ring and a sender thread per destination); here is what the operator set
//! up and what a recording is started with.
//!
//! jive5ab's names where they fit: `net_protocol` and `net_port` set the protocol and port that
//! `in2net=connect:<host>` uses; `in2net=on|off` lets frames flow or not; `in2net=disconnect` drops that
//! destination. `forward=add|delete|on|off` and `forward?` manage any number of named destinations,
//! each with its own protocol, thread selection and pacing rate. Destinations are taken by a recording
//! when it starts; `on`/`off` act at once, also during a scan. Each destination's PSN continues from
//! scan to scan.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vlbiflow_evlbi::dest::{DestSpec, Protocol};
use vlbiflow_evlbi::forward::DestStatus;
use vlbiflow_udp::net::resolve;

use crate::proto::{Reply, ReturnCode as Rc, Statement};
use crate::stream::InputStream;

/// The label `in2net=connect` gives its destination.
pub const IN2NET_LABEL: &str = "in2net";
/// jive5ab's default data port.
pub const DEFAULT_NET_PORT: u16 = 2630;

/// What a recording forwards: destinations with the index of the stream they take, and the on/off gate.
#[derive(Debug, Clone, Default)]
pub struct ForwardPlan {
    pub dests: Vec<(usize, DestSpec)>,
    pub gate: Arc<AtomicBool>,
}

impl ForwardPlan {
    pub fn is_empty(&self) -> bool {
        self.dests.is_empty()
    }
}

/// One destination in the status report: its set-up and its counters (of the current scan while
/// recording, else of the last scan that forwarded to it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DestReport {
    pub label: String,
    pub protocol: String,
    pub address: String,
    /// Recorded stream it forwards (empty: the only one).
    pub stream: String,
    pub threads: Vec<u16>,
    pub rate_bps: Option<f64>,
    /// Counters: offered, sent, dropped by reason, queued, connection state.
    pub offered: u64,
    pub filtered: u64,
    pub sent: u64,
    pub sent_bytes: u64,
    pub dropped_queue_full: u64,
    pub dropped_send_error: u64,
    pub dropped_disconnected: u64,
    pub dropped_at_stop: u64,
    pub queued: u64,
    pub queue_capacity: u64,
    pub connected: bool,
    pub connects: u64,
    pub last_error: Option<String>,
    pub next_psn: u64,
    /// Positions of the stream skipped because their frames never reached the recorder, and because the
    /// recorder had no buffer for them (each frame's PSN is its position, so these are holes).
    #[serde(default)]
    pub skipped_captured_lost: u64,
    #[serde(default)]
    pub skipped_no_buffer: u64,
    /// Gap notices sent (udps).
    #[serde(default)]
    pub notices_sent: u64,
}

/// Forwarding in the status report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ForwardReport {
    /// Frames flow (`in2net=on` / `forward=on`).
    pub enabled: bool,
    /// `net_protocol` and `net_port` (what `in2net=connect` uses).
    pub net_protocol: String,
    pub net_port: u16,
    pub destinations: Vec<DestReport>,
}

/// Per destination, summed over scans (Prometheus counters never go backwards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestTotals {
    pub offered: u64,
    pub sent: u64,
    pub sent_bytes: u64,
    pub dropped_queue_full: u64,
    pub dropped_send_error: u64,
    pub dropped_disconnected: u64,
    pub dropped_at_stop: u64,
    #[serde(default)]
    pub skipped_captured_lost: u64,
    #[serde(default)]
    pub skipped_no_buffer: u64,
}

impl DestTotals {
    pub fn of(s: &DestStatus) -> Self {
        DestTotals {
            offered: s.offered,
            sent: s.sent,
            sent_bytes: s.sent_bytes,
            dropped_queue_full: s.dropped_queue_full,
            dropped_send_error: s.dropped_send_error,
            dropped_disconnected: s.dropped_disconnected,
            dropped_at_stop: s.dropped_at_stop,
            skipped_captured_lost: s.skipped_captured_lost,
            skipped_no_buffer: s.skipped_no_buffer,
        }
    }

    pub fn add(&mut self, o: &DestTotals) {
        self.offered += o.offered;
        self.sent += o.sent;
        self.sent_bytes += o.sent_bytes;
        self.dropped_queue_full += o.dropped_queue_full;
        self.dropped_send_error += o.dropped_send_error;
        self.dropped_disconnected += o.dropped_disconnected;
        self.dropped_at_stop += o.dropped_at_stop;
        self.skipped_captured_lost += o.skipped_captured_lost;
        self.skipped_no_buffer += o.skipped_no_buffer;
    }
}

/// The forwarding set-up and what is known about each destination.
#[derive(Debug)]
pub struct ForwardSettings {
    gate: Arc<AtomicBool>,
    protocol: Protocol,
    port: u16,
    dests: Vec<DestSpec>,
    /// Per label: the PSN the next scan starts at, and the last counters.
    next_psn: BTreeMap<String, u64>,
    last: BTreeMap<String, DestStatus>,
    /// Per label, over finished scans.
    pub totals: BTreeMap<String, DestTotals>,
}

impl Default for ForwardSettings {
    fn default() -> Self {
        ForwardSettings {
            gate: Arc::new(AtomicBool::new(false)),
            protocol: Protocol::Udps,
            port: DEFAULT_NET_PORT,
            dests: Vec::new(),
            next_psn: BTreeMap::new(),
            last: BTreeMap::new(),
            totals: BTreeMap::new(),
        }
    }
}

fn err(st: &Statement, code: Rc, why: impl Into<String>) -> Reply {
    Reply::reason(st, code, why)
}

impl ForwardSettings {
    /// Settings with these destinations (from the configuration), forwarding `enabled` or not.
    pub fn with(dests: Vec<DestSpec>, enabled: bool) -> Self {
        let s = ForwardSettings {
            dests,
            ..Default::default()
        };
        s.gate.store(enabled, Ordering::Relaxed);
        s
    }

    pub fn enabled(&self) -> bool {
        self.gate.load(Ordering::Relaxed)
    }

    pub fn destinations(&self) -> &[DestSpec] {
        &self.dests
    }

    /// The plan for a recording of `streams`: each destination resolved to its stream (by label, or the
    /// only stream) and starting at its next PSN. A destination naming a stream that is not recorded is
    /// left out and named in the second value.
    pub fn plan(&self, streams: &[InputStream]) -> (ForwardPlan, Vec<String>) {
        let mut dests = Vec::new();
        let mut skipped = Vec::new();
        for d in &self.dests {
            let i = match &d.stream {
                Some(l) => streams.iter().position(|s| &s.label == l),
                None if streams.len() == 1 => Some(0),
                None => None,
            };
            match i {
                Some(i) => {
                    let mut d = d.clone();
                    d.first_psn = self.next_psn.get(&d.label).copied().unwrap_or(d.first_psn);
                    dests.push((i, d));
                }
                None => skipped.push(d.label.clone()),
            }
        }
        (
            ForwardPlan {
                dests,
                gate: self.gate.clone(),
            },
            skipped,
        )
    }

    /// A scan that forwarded has finished with these final counters.
    pub fn finished(&mut self, statuses: &[DestStatus]) {
        for s in statuses {
            self.next_psn.insert(s.label.clone(), s.next_psn);
            self.totals
                .entry(s.label.clone())
                .or_default()
                .add(&DestTotals::of(s));
            self.last.insert(s.label.clone(), s.clone());
        }
    }

    /// The report, with `live` counters of the scan being recorded.
    pub fn report(&self, live: &[DestStatus]) -> ForwardReport {
        let destinations = self
            .dests
            .iter()
            .map(|d| {
                let s = live
                    .iter()
                    .find(|s| s.label == d.label)
                    .or_else(|| self.last.get(&d.label))
                    .cloned()
                    .unwrap_or_default();
                DestReport {
                    label: d.label.clone(),
                    protocol: d.protocol.name().into(),
                    address: d.address.to_string(),
                    stream: d.stream.clone().unwrap_or_default(),
                    threads: d.threads.clone(),
                    rate_bps: d.rate_bps,
                    offered: s.offered,
                    filtered: s.filtered,
                    sent: s.sent,
                    sent_bytes: s.sent_bytes,
                    dropped_queue_full: s.dropped_queue_full,
                    dropped_send_error: s.dropped_send_error,
                    dropped_disconnected: s.dropped_disconnected,
                    dropped_at_stop: s.dropped_at_stop,
                    queued: s.queued,
                    queue_capacity: s.queue_capacity,
                    connected: s.connected,
                    connects: s.connects,
                    last_error: s.last_error,
                    next_psn: if s.label.is_empty() {
                        self.next_psn.get(&d.label).copied().unwrap_or(d.first_psn)
                    } else {
                        s.next_psn
                    },
                    skipped_captured_lost: s.skipped_captured_lost,
                    skipped_no_buffer: s.skipped_no_buffer,
                    notices_sent: s.notices_sent,
                }
            })
            .collect();
        ForwardReport {
            enabled: self.enabled(),
            net_protocol: self.protocol.name().into(),
            net_port: self.port,
            destinations,
        }
    }

    fn add(&mut self, d: DestSpec) {
        self.dests.retain(|o| o.label != d.label);
        self.dests.push(d);
    }

    /// `net_protocol=<udps|udp|pudp|vdif|tcp>[:...]` and `net_protocol?`. (jive5ab's socket and block
    /// sizes are accepted and ignored: buffers are sized per destination.)
    pub fn net_protocol(&mut self, st: &Statement) -> Reply {
        if st.query {
            return Reply::to(st, Rc::Done, vec![self.protocol.name().into()]);
        }
        match Protocol::parse(st.arg(0)) {
            Some(p) => {
                self.protocol = p;
                Reply::to(st, Rc::Done, vec![p.name().into()])
            }
            None => err(
                st,
                Rc::Parameter,
                format!("protocol {:?}: udps (or udp), pudp (or vdif) or tcp", st.arg(0)),
            ),
        }
    }

    /// `net_port=<port>` and `net_port?`.
    pub fn net_port(&mut self, st: &Statement) -> Reply {
        if st.query {
            return Reply::to(st, Rc::Done, vec![self.port.to_string()]);
        }
        match st.arg(0).parse::<u16>() {
            Ok(p) if p > 0 => {
                self.port = p;
                Reply::to(st, Rc::Done, vec![p.to_string()])
            }
            _ => err(st, Rc::Parameter, format!("port {:?}: 1..65535", st.arg(0))),
        }
    }

    /// `in2net=connect:<host>`, `in2net=on|off`, `in2net=disconnect`, `in2net?`.
    pub fn in2net(&mut self, st: &Statement, recording: bool) -> Reply {
        if st.query {
            let d = self.dests.iter().find(|d| d.label == IN2NET_LABEL);
            let sent = d.and(self.last.get(IN2NET_LABEL)).map_or(0, |s| s.sent);
            return Reply::to(
                st,
                Rc::Done,
                vec![
                    match (d, self.enabled()) {
                        (None, _) => "inactive".into(),
                        (Some(_), true) => "on".into(),
                        (Some(_), false) => "off".into(),
                    },
                    d.map_or("none".into(), |d| format!("{}@{}", d.protocol.name(), d.address)),
                    sent.to_string(),
                ],
            );
        }
        match st.arg(0) {
            "connect" => {
                let host = st.arg(1);
                if host.is_empty() {
                    return err(st, Rc::Parameter, "in2net=connect:<host>");
                }
                let address = match resolve(&format!("{host}:{}", self.port)) {
                    Ok(a) => a,
                    Err(e) => return err(st, Rc::Parameter, e.to_string()),
                };
                let mut d = DestSpec::new(self.protocol, address);
                d.label = IN2NET_LABEL.into();
                d.host = host.into();
                let shown = format!("{}@{}", d.protocol.name(), d.address);
                self.add(d);
                Reply::to(
                    st,
                    Rc::Done,
                    next_scan(vec!["connected".into(), shown], recording),
                )
            }
            "disconnect" => {
                let had = self.dests.iter().any(|d| d.label == IN2NET_LABEL);
                self.dests.retain(|d| d.label != IN2NET_LABEL);
                if !had {
                    return err(st, Rc::NotNow, "not connected");
                }
                Reply::to(st, Rc::Done, next_scan(vec!["disconnected".into()], recording))
            }
            "on" | "off" => self.switch(st),
            other => err(
                st,
                Rc::Parameter,
                format!("{other:?}: connect:<host>, on, off or disconnect"),
            ),
        }
    }

    fn switch(&mut self, st: &Statement) -> Reply {
        let on = st.arg(0) == "on";
        self.gate.store(on, Ordering::Relaxed);
        Reply::to(
            st,
            Rc::Done,
            vec![st.arg(0).into(), format!("{} destinations", self.dests.len())],
        )
    }

    /// `forward=add:<label>:<protocol>:<host>:<port>[:<threads>[:<rate>[:<stream>]]]`,
    /// `forward=delete:<label>`, `forward=on|off`, `forward?`.
    pub fn forward(&mut self, st: &Statement, recording: bool) -> Reply {
        if st.query {
            let mut f = vec![
                if self.enabled() { "on" } else { "off" }.to_string(),
                self.dests.len().to_string(),
            ];
            for d in self.report(&[]).destinations {
                f.extend([
                    d.label,
                    d.protocol,
                    d.address,
                    d.threads.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
                    d.rate_bps.map_or("unpaced".into(), |r| format!("{r}")),
                    d.sent.to_string(),
                    (d.dropped_queue_full
                        + d.dropped_send_error
                        + d.dropped_disconnected
                        + d.dropped_at_stop)
                        .to_string(),
                ]);
            }
            return Reply::to(st, Rc::Done, f);
        }
        match st.arg(0) {
            "add" => {
                let label = st.arg(1);
                let (proto, host, port) = (st.arg(2), st.arg(3), st.arg(4));
                let mut spec = format!("{label}={proto}@{host}:{port}");
                let threads = st.arg(5).trim();
                if !threads.is_empty() {
                    spec.push_str(&format!(",threads={}", threads.replace(',', "+")));
                }
                if !st.arg(6).trim().is_empty() {
                    spec.push_str(&format!(",rate={}", st.arg(6).trim()));
                }
                if !st.arg(7).trim().is_empty() {
                    spec.push_str(&format!(",stream={}", st.arg(7).trim()));
                }
                match DestSpec::parse(&spec) {
                    Ok(mut d) => {
                        d.host = host.into();
                        let shown = format!("{}@{}", d.protocol.name(), d.address);
                        let label = d.label.clone();
                        self.add(d);
                        Reply::to(st, Rc::Done, next_scan(vec!["added".into(), label, shown], recording))
                    }
                    Err(e) => err(st, Rc::Parameter, format!("{}: {}", e.field, e.reason)),
                }
            }
            "delete" => {
                let label = st.arg(1);
                if !self.dests.iter().any(|d| d.label == label) {
                    return err(st, Rc::Parameter, format!("no destination {label:?}"));
                }
                self.dests.retain(|d| d.label != label);
                Reply::to(st, Rc::Done, next_scan(vec!["deleted".into(), label.into()], recording))
            }
            "on" | "off" => self.switch(st),
            other => err(
                st,
                Rc::Parameter,
                format!("{other:?}: add:<label>:<protocol>:<host>:<port>[:<threads>[:<rate>[:<stream>]]], delete:<label>, on or off"),
            ),
        }
    }
}

/// A change made while recording applies from the next scan: say so.
fn next_scan(mut fields: Vec<String>, recording: bool) -> Vec<String> {
    if recording {
        fields.push("from the next scan".into());
    }
    fields
}
