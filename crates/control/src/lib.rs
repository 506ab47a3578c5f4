//! Control plane of the vlbiflow recorder daemon (`vlbiflow serve`): a Mark6-compatible command port,
//! live status as JSON, Prometheus metrics and a dashboard page.
//!
//! ```text
//!  TCP 14242 ──bytes──► Mark6Session (framer, token) ──Statement──► Controller (decides, under a lock)
//!                          ▲ reply lines                         │ state: streams, groups, record state
//!                          └───────────────── daemon ◄── Action ─┘ (pending/recording/flushing), scans, rates
//!                                             │ outside the lock: Engine::start (vlbiflow-recorder),
//!                                             └ Recording::stop, release; outcome fed back (Controller::started)
//!  HTTP 14280: GET / (dashboard) · /status (JSON) · /metrics (Prometheus) · /history (rates, 10 min)
//! ```
//!
//! [`proto`], [`session`] and [`controller`] are sans-IO (disks through [`disks::DiskProbe`], slow work
//! handed out as [`controller::Action`]s) and tested deterministically; [`daemon`] is the tokio/axum shell
//! around them and [`client`] the blocking client used by `vlbiflow ctl` and `status`.

#![forbid(unsafe_code)]

pub mod client;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod disks;
pub mod engine;
pub mod forward;
pub mod jive5ab;
pub mod metrics;
pub mod proto;
pub mod rates;
pub mod report;
pub mod session;
pub mod stream;

pub use config::DaemonConfig;
pub use controller::{Action, Answer, Controller};
pub use daemon::{
    serve, serve_notifying, serve_until, serve_watched, spawn, stop_channel, Alive, DaemonHandle, StopHandle,
    StopRequest,
};
pub use disks::{DiskProbe, MemDisks, SystemDisks};
pub use engine::{Engine, RecorderEngine, Recording};
pub use proto::{Reply, ReturnCode, Statement};
pub use report::StatusReport;
pub use session::Mark6Session;
