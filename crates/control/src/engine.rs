//! The seam between the command state machine and the recorder engine. The daemon uses
//! [`RecorderEngine`], which drives `vlbiflow_recorder` exactly as `vlbiflow record` does; the controller's
//! unit tests use a scripted engine so that every command's effect is checked deterministically.

use vlbiflow_recorder::{Phase, Recorder, RecorderConfig, RecorderHandle, RecorderStatus, ScanSummary};

/// Starts recordings.
pub trait Engine: Send {
    /// Starts a recording of `config` (validated, disks and sockets opened) or says why not.
    fn start(&mut self, config: RecorderConfig) -> Result<Box<dyn Recording>, String>;
}

/// A running (or finishing) recording.
pub trait Recording: Send + Sync {
    /// A live snapshot.
    fn status(&self) -> RecorderStatus;
    /// Stops capture; returns within about a second. Writers keep flushing afterwards.
    fn stop(&self);
    /// The summary once the scan is completely flushed; `None` while it is still running or flushing.
    fn finished(&self) -> Option<ScanSummary>;
    /// Operator events since the last call, as text.
    fn events(&self) -> Vec<String>;
    /// Addresses the streams are bound to (the real port when 0 was configured).
    fn local_addrs(&self) -> Vec<std::net::SocketAddr>;
}

/// The real engine: `vlbiflow_recorder::Recorder`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RecorderEngine;

impl Engine for RecorderEngine {
    fn start(&mut self, config: RecorderConfig) -> Result<Box<dyn Recording>, String> {
        Recorder::start(config)
            .map(|h| Box::new(h) as Box<dyn Recording>)
            .map_err(|e| e.to_string())
    }
}

impl Recording for RecorderHandle {
    fn status(&self) -> RecorderStatus {
        RecorderHandle::status(self)
    }

    fn stop(&self) {
        RecorderHandle::stop(self)
    }

    fn finished(&self) -> Option<ScanSummary> {
        // The supervisor sets Finished only after joining every worker, so wait() returns at once here.
        if RecorderHandle::status(self).phase == Phase::Finished {
            self.wait()
        } else {
            None
        }
    }

    fn events(&self) -> Vec<String> {
        RecorderHandle::events(self)
            .try_iter()
            .map(|e| e.to_string())
            .collect()
    }

    fn local_addrs(&self) -> Vec<std::net::SocketAddr> {
        RecorderHandle::local_addrs(self).to_vec()
    }
}
