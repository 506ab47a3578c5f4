//! The seam between the command state machine and the recorder engine. The daemon uses
//! [`RecorderEngine`], which drives `vlbiflow_recorder` exactly as `vlbiflow record` does; the controller's
//! unit tests use a scripted engine so that every command's effect is checked deterministically.

use vlbiflow_recorder::{
    Phase, Recorder, RecorderConfig, RecorderEvent, RecorderHandle, RecorderStatus, ScanSummary,
};

/// Most recorder events taken per call of [`Recording::events`]; the rest wait for the next call.
pub const MAX_EVENTS_PER_CALL: usize = 256;

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
        coalesce_events(RecorderHandle::events(self).try_iter())
    }

    fn local_addrs(&self) -> Vec<std::net::SocketAddr> {
        RecorderHandle::local_addrs(self).to_vec()
    }
}

/// Takes at most [`MAX_EVENTS_PER_CALL`] events as text, keeping only the latest learned frame rate per
/// stream and thread, so a stream whose rate keeps being re-learned cannot flood the daemon's event list.
pub fn coalesce_events(events: impl Iterator<Item = RecorderEvent>) -> Vec<String> {
    let mut out: Vec<(Option<(String, u16)>, String)> = Vec::new();
    let mut repeated = 0u64;
    for e in events.take(MAX_EVENTS_PER_CALL) {
        let key = match &e {
            RecorderEvent::RateLearned { stream, thread, .. } => Some((stream.clone(), *thread)),
            _ => None,
        };
        if let Some(k) = &key {
            if let Some(i) = out.iter().position(|(x, _)| x.as_ref() == Some(k)) {
                out.remove(i);
                repeated += 1;
            }
        }
        out.push((key, e.to_string()));
    }
    let mut text: Vec<String> = out.into_iter().map(|(_, t)| t).collect();
    if repeated > 0 {
        text.push(format!(
            "({repeated} earlier frame-rate changes of the same threads not shown)"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_rates_are_coalesced_and_events_bounded() {
        let flood = (0..100_000u32).map(|i| RecorderEvent::RateLearned {
            stream: "a".into(),
            thread: (i % 2) as u16,
            rate: 1000 + i,
        });
        let out = coalesce_events(flood);
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].contains("thread 0: frame rate 1254"), "{out:?}");
        assert!(out[1].contains("thread 1: frame rate 1255"), "{out:?}");
        assert!(out[2].starts_with("(254 earlier"), "{out:?}");
    }
}
