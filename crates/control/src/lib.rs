//! Control plane of the vlbiflow recorder daemon (`vlbiflow serve`): a Mark6-compatible command port,
//! live status as JSON, Prometheus metrics and a dashboard page.
//!
//! ```text
//!  TCP 14242 ──bytes──► Mark6Session (framer, token) ──Statement──► Controller ──RecorderConfig──► Engine
//!                          ▲ reply lines                         │ state: streams, groups,          (vlbiflow-recorder)
//!                          └─────────────────────────────────────┘ record state, scan list, rates
//!  HTTP 14280: GET / (dashboard) · /status (JSON) · /metrics (Prometheus) · /history (rates, 10 min)
//! ```
//!
//! [`proto`], [`session`] and [`controller`] are sans-IO and tested deterministically; [`daemon`] is the
//! tokio/axum shell around them and [`client`] the blocking client used by `vlbiflow ctl` and `status`.

pub mod client;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod disks;
pub mod engine;
pub mod proto;
pub mod rates;
pub mod report;
pub mod session;
pub mod stream;

pub use config::DaemonConfig;
pub use controller::{Action, Answer, Controller};
pub use daemon::{serve, spawn, DaemonHandle};
pub use disks::{DiskProbe, MemDisks, SystemDisks};
pub use engine::{Engine, RecorderEngine, Recording};
pub use proto::{Reply, ReturnCode, Statement};
pub use report::StatusReport;
pub use session::Mark6Session;
