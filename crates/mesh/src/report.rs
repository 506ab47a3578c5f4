//! What agents send the hub: the outcome of every planned run (a result or a failure with its
//! reason) and passive counter samples.

use serde::{Deserialize, Serialize};

use crate::config::Kind;
use crate::plan::PlannedRun;
use crate::timespec::Ms;

/// Why a run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The destination could not be reached (no route, connect timed out).
    Unreachable,
    /// The destination refused (nothing listening, responder busy or refusing).
    Refused,
    /// The run did not finish within its slot, or an answer did not come in time.
    TimedOut,
    /// Skipped: its hosts or links were taken by another exclusive run.
    Conflict,
    /// The source agent was not running at the planned time (reported by the agent after a restart,
    /// or by the hub when the agent stays silent past the grace period).
    AgentDown,
    /// Anything else (the detail says what).
    Error,
}

impl Reason {
    /// The name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unreachable => "unreachable",
            Reason::Refused => "refused",
            Reason::TimedOut => "timed_out",
            Reason::Conflict => "conflict",
            Reason::AgentDown => "agent_down",
            Reason::Error => "error",
        }
    }
}

/// Headline figures of a result (those that apply).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Throughput, Mb/s (sweep: highest received rate; zero-loss: highest loss-free rate; tcp).
    pub throughput_mbps: Option<f64>,
    /// Loss, percent (sweep: at the lowest offered rate; latency: requests unanswered).
    pub loss_percent: Option<f64>,
    /// Round-trip time, ms (latency: median at the smallest size).
    pub rtt_ms: Option<f64>,
    /// Bottleneck capacity, Mb/s (capacity).
    pub capacity_mbps: Option<f64>,
}

impl Metrics {
    /// The value of a metric by name.
    pub fn get(&self, name: &str) -> Option<f64> {
        match name {
            "throughput_mbps" => self.throughput_mbps,
            "loss_percent" => self.loss_percent,
            "rtt_ms" => self.rtt_ms,
            "capacity_mbps" => self.capacity_mbps,
            _ => None,
        }
    }
}

/// One point of a throughput sweep, stored individually.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Frame size, bytes.
    pub size: usize,
    /// Spacing, µs.
    pub wait_us: f64,
    /// Offered UDP payload rate, Mb/s.
    pub offered_mbps: f64,
    /// Received UDP payload rate, Mb/s.
    pub recv_mbps: f64,
    /// Loss, percent.
    pub loss_percent: f64,
    /// RFC 3550 jitter, µs.
    pub jitter_us: f64,
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// It ran and measured.
    Ok {
        /// Headline figures.
        metrics: Metrics,
        /// Sweep points.
        #[serde(default)]
        points: Vec<Point>,
        /// The full result (JSON of the measurement).
        result: serde_json::Value,
    },
    /// It failed or did not run.
    Failed {
        /// Why.
        reason: Reason,
        /// In words.
        detail: String,
    },
}

/// An agent's (or the hub's) report of one planned run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run as planned.
    pub run: PlannedRun,
    /// When it actually started (None: it never did).
    pub started_at: Option<Ms>,
    /// When it actually ended.
    pub ended_at: Option<Ms>,
    /// Who reports it (agent name, or "hub").
    pub reported_by: String,
    /// What happened.
    pub outcome: Outcome,
}

impl RunReport {
    /// A failure that never started.
    pub fn failed(run: &PlannedRun, by: &str, reason: Reason, detail: impl Into<String>) -> Self {
        RunReport {
            run: run.clone(),
            started_at: None,
            ended_at: None,
            reported_by: by.into(),
            outcome: Outcome::Failed {
                reason,
                detail: detail.into(),
            },
        }
    }

    /// "ok" or "failed".
    pub fn status(&self) -> &'static str {
        match self.outcome {
            Outcome::Ok { .. } => "ok",
            Outcome::Failed { .. } => "failed",
        }
    }

    /// Precedence when two reports of one run meet: a result beats an agent's failure, which beats
    /// one the hub inferred, which beats none.
    pub fn rank(&self) -> i64 {
        match (&self.outcome, self.reported_by.as_str()) {
            (Outcome::Ok { .. }, _) => 3,
            (Outcome::Failed { .. }, "hub") => 1,
            (Outcome::Failed { .. }, _) => 2,
        }
    }

    /// The test kind.
    pub fn kind(&self) -> Kind {
        self.run.kind
    }
}

/// One sample of an interface's (or the UDP stack's) counters over `span_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterSample {
    /// Host name.
    pub host: String,
    /// Interface name, or "udp" for the stack's UDP counters.
    pub iface: String,
    /// End of the sampled span.
    pub t: Ms,
    /// Length of the span, ms.
    pub span_ms: Ms,
    /// Bytes received (udp: 0).
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets received (udp: InDatagrams).
    pub rx_packets: u64,
    /// Packets sent (udp: OutDatagrams).
    pub tx_packets: u64,
    /// Receive errors (udp: InErrors).
    pub rx_errors: u64,
    /// Send errors (udp: 0).
    pub tx_errors: u64,
    /// Receive drops (udp: RcvbufErrors).
    pub rx_drops: u64,
    /// Send drops (udp: SndbufErrors).
    pub tx_drops: u64,
}
