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

    /// Starts a recording that also forwards its frames as `forward` says (real-time e-VLBI). An engine
    /// that cannot forward records only (the default).
    fn start_forwarding(
        &mut self,
        config: RecorderConfig,
        forward: crate::forward::ForwardPlan,
    ) -> Result<Box<dyn Recording>, String> {
        let _ = forward;
        self.start(config)
    }
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
    /// Live counters of each forwarding destination (none when not forwarding).
    fn forward_status(&self) -> Vec<vlbiflow_evlbi::DestStatus> {
        Vec::new()
    }
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

    fn start_forwarding(
        &mut self,
        config: RecorderConfig,
        forward: crate::forward::ForwardPlan,
    ) -> Result<Box<dyn Recording>, String> {
        if forward.is_empty() {
            return self.start(config);
        }
        Self::start_with_forward(config, forward).map(|r| Box::new(r) as Box<dyn Recording>)
    }
}

impl RecorderEngine {
    /// Starts a forwarder per stream that has destinations, then the recorder with their taps.
    fn start_with_forward(
        config: RecorderConfig,
        forward: crate::forward::ForwardPlan,
    ) -> Result<ForwardingRecording, String> {
        let mut forwarders = Vec::new();
        let mut taps: Vec<Option<Box<dyn vlbiflow_recorder::FrameTap>>> = Vec::new();
        for (i, spec) in config.streams.iter().enumerate() {
            let dests: Vec<_> = forward
                .dests
                .iter()
                .filter(|(s, _)| *s == i)
                .map(|(_, d)| d.clone())
                .collect();
            if dests.is_empty() {
                taps.push(None);
                continue;
            }
            let frame_len = spec.frame_size as usize;
            let source = vlbiflow_evlbi::ForwardSource::for_stream(spec);
            let (f, tap) =
                vlbiflow_evlbi::Forwarder::start(dests, frame_len, &source).map_err(|e| e.to_string())?;
            forwarders.push(f);
            taps.push(Some(
                tap.with_gate(forward.gate.clone()).into_recorder_tap(frame_len),
            ));
        }
        let handle = Recorder::start_with_taps(config, taps).map_err(|e| e.to_string())?;
        Ok(ForwardingRecording {
            handle,
            forwarders: std::sync::Mutex::new(forwarders),
        })
    }
}

/// A recording that forwards: the recorder and its forwarders (whose senders end by themselves once
/// capture has stopped and their queues are empty).
pub struct ForwardingRecording {
    handle: RecorderHandle,
    forwarders: std::sync::Mutex<Vec<vlbiflow_evlbi::Forwarder>>,
}

impl Recording for ForwardingRecording {
    fn status(&self) -> RecorderStatus {
        self.handle.status()
    }
    fn stop(&self) {
        Recording::stop(&self.handle)
    }
    fn finished(&self) -> Option<ScanSummary> {
        Recording::finished(&self.handle)
    }
    fn events(&self) -> Vec<String> {
        Recording::events(&self.handle)
    }
    fn local_addrs(&self) -> Vec<std::net::SocketAddr> {
        Recording::local_addrs(&self.handle)
    }
    fn forward_status(&self) -> Vec<vlbiflow_evlbi::DestStatus> {
        self.forwarders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|f| f.status())
            .collect()
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
