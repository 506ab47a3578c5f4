//! The correlator side: receive a station's `udps` or plain VDIF stream, reorder it within a window and
//! deliver one continuous stream with a fill frame wherever a frame did not arrive in time
//! ([`vlbiflow_realtime::Reorderer`], whose rule is exact: a frame is filled if and only if it did not
//! arrive before its deadline).
//!
//! One thread: `recvmmsg` batches (waiting at most until the reorderer's next deadline), every datagram
//! pushed with the time the batch was read as its arrival time, the output drained after every batch and
//! at every deadline. Bad datagrams (wrong size, no VDIF header or Mark5B sync word, a thread not asked
//! for, far outside the stream) are counted and dropped, never fatal. End-to-end latency is taken per
//! frame from the kernel's receive time stamp (SO_TIMESTAMPNS) against the frame's VDIF time, with the
//! clock offset the operator states.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_formats::mark5b::SYNC_WORD as MARK5B_SYNC;
use vlbiflow_formats::notice::GapNotice;
use vlbiflow_formats::psn::PSN_LEN;
use vlbiflow_formats::time::{epoch_start_unix, FrameClock, UtcTime};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::position::{DeclaredGaps, DeclaredSummary};
use vlbiflow_realtime::reorder::{
    Arrival, FillMode, KeyMode, OutputKind, ReorderConfig, ReorderCounters, Reorderer,
};
use vlbiflow_realtime::{LatencyHistogram, LatencySummary};
use vlbiflow_seq::FrameIndexer;
use vlbiflow_udp::recv::BatchReceiver;
use vlbiflow_udp::socket::{open_udp, UdpConfig};

use crate::output::{Output, OutputSpec, OutputWriter};

/// What arrives on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputProtocol {
    /// 8-byte PSN + frame.
    Udps,
    /// The frame alone.
    Vdif,
}

/// How frames are put in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyChoice {
    /// By packet sequence number (udps only).
    Psn,
    /// By VDIF time stamp and thread (needs the frame rate and the thread list).
    VdifTime,
}

impl KeyChoice {
    /// The order used when none is asked for: the PSN where datagrams carry one, else the VDIF time.
    pub fn default_for(protocol: InputProtocol) -> KeyChoice {
        match protocol {
            InputProtocol::Udps => KeyChoice::Psn,
            InputProtocol::Vdif => KeyChoice::VdifTime,
        }
    }
}

/// The frame length assumed when none is given: 8224 bytes for VDIF (8192 of payload, the e-EVN's
/// frames), a Mark5B frame's fixed length for Mark5B.
pub fn default_frame_len(kind: FrameKind) -> usize {
    match kind {
        FrameKind::Vdif => 8224,
        FrameKind::M5b => vlbiflow_formats::mark5b::FRAME_LEN,
    }
}

/// A correlator-side receiver's configuration.
#[derive(Debug, Clone)]
pub struct ReceiveConfig {
    pub listen: SocketAddr,
    pub protocol: InputProtocol,
    pub kind: FrameKind,
    /// Bytes per frame (PSN excluded).
    pub frame_len: usize,
    pub key: KeyChoice,
    /// Thread order of the output with VDIF-time keys.
    pub threads: Vec<u16>,
    /// Frames per second per thread (VDIF-time keys need it; latency learns it otherwise).
    pub frame_rate: Option<u32>,
    pub window: usize,
    pub deadline: Duration,
    pub fill: FillMode,
    /// The key the stream starts at (e.g. the sender's first PSN): losing the first frames is then filled.
    pub first_key: Option<u64>,
    /// Stop after this many output frames (with `first_key`, frames lost at the very end are filled).
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// End the stream after this long without a datagram, once it started.
    pub idle: Option<Duration>,
    pub recv_buffer: usize,
    /// Host clock minus backend clock, ns.
    pub clock_offset_ns: i64,
    pub output: OutputSpec,
    pub overwrite: bool,
    /// How long to wait for a FIFO's or Unix socket's reader.
    pub output_wait: Duration,
    /// Write the key of every fill frame, one per line.
    pub fill_log: Option<PathBuf>,
    /// Memory between the receiving thread and the output's thread.
    pub output_buffer: usize,
    /// Sources to accept (`--from`); datagrams from others are dropped and counted as
    /// `wrong_source` before they reach the reorder window. Empty: any source.
    pub from: vlbiflow_guard::net::AllowList,
}

impl ReceiveConfig {
    /// Defaults: udps with PSN keys, 8224-byte VDIF frames, window 4096, deadline 200 ms, jive5ab fill.
    pub fn new(listen: SocketAddr, output: OutputSpec) -> Self {
        ReceiveConfig {
            listen,
            protocol: InputProtocol::Udps,
            kind: FrameKind::Vdif,
            frame_len: 8224,
            key: KeyChoice::Psn,
            threads: vec![0],
            frame_rate: None,
            window: 4096,
            deadline: Duration::from_millis(200),
            fill: FillMode::Jive5ab,
            first_key: None,
            count: None,
            duration: None,
            idle: None,
            recv_buffer: 256 << 20,
            clock_offset_ns: 0,
            output,
            overwrite: false,
            output_wait: Duration::from_secs(30),
            fill_log: None,
            output_buffer: 256 << 20,
            from: Default::default(),
        }
    }

    fn reorder_config(&self) -> Result<ReorderConfig, ReceiveError> {
        let key = match (self.key, self.protocol) {
            (KeyChoice::Psn, InputProtocol::Udps) => KeyMode::Psn,
            (KeyChoice::Psn, InputProtocol::Vdif) => {
                return Err(ReceiveError::Config(
                    "plain VDIF datagrams carry no PSN: order them by VDIF time (--key vdif-time)".into(),
                ))
            }
            (KeyChoice::VdifTime, _) => {
                if self.kind != FrameKind::Vdif {
                    return Err(ReceiveError::Config(
                        "only VDIF frames can be ordered by time stamp; Mark5B needs udps with PSN".into(),
                    ));
                }
                let Some(frame_rate) = self.frame_rate else {
                    return Err(ReceiveError::Config(
                        "ordering by VDIF time needs the frame rate (--frame-rate, frames/s per thread)"
                            .into(),
                    ));
                };
                KeyMode::VdifTime {
                    frame_rate,
                    threads: self.threads.clone(),
                }
            }
        };
        let mut c = ReorderConfig::new(self.kind, self.frame_len, key, self.window, self.deadline);
        c.fill = self.fill;
        Ok(c)
    }
}

/// Why the receiver could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("{0}")]
    Config(String),
    #[error("cannot receive on {0}: {1}")]
    Socket(SocketAddr, String),
    #[error("output {0}: {1}")]
    Output(String, io::Error),
    #[error("receive on {0}: {1}")]
    Recv(SocketAddr, io::Error),
}

/// Counts of one run, live and final.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReceiveStatus {
    pub listen: String,
    pub protocol: String,
    pub key: String,
    pub output: String,
    pub window: u64,
    pub deadline_ms: f64,
    /// Datagrams read (every one, good or bad).
    pub datagrams: u64,
    pub bytes: u64,
    /// Datagrams of the right size that are not frames (no VDIF header, wrong length field, no Mark5B sync).
    pub rejected: u64,
    /// Datagrams from sources outside `--from`: dropped.
    pub wrong_source: u64,
    /// The reorderer's counters: received, delivered, filled, late, duplicate, out_of_order, stray,
    /// restarts, malformed, unknown_thread.
    pub reorder: ReorderCounters,
    /// Frames written (delivered + filled).
    pub output_frames: u64,
    pub output_bytes: u64,
    /// Fill frames at positions the forwarder declared it never sent (lost before or inside the station,
    /// or dropped by its queue), from its gap notices (`udps` ordered by PSN only).
    pub fill_declared: u64,
    /// The other fill frames: positions the path lost (or whose notice was lost with them).
    pub fill_path: u64,
    /// What the forwarder's notices said: notices, notices missing, and its own totals by cause.
    pub forwarder: DeclaredSummary,
    /// Datagrams that looked like gap notices and were not well formed.
    pub bad_notices: u64,
    /// Frames that waited for the output (slower than the stream; the socket buffer took up the slack).
    pub output_stalls: u64,
    /// Datagrams the kernel dropped on the socket (SO_RXQ_OVFL).
    pub kernel_drops: u64,
    pub first_key: Option<u64>,
    /// Key of the next output frame.
    pub next_key: Option<u64>,
    pub frame_rate: Option<u32>,
    pub latency: LatencySummary,
    /// The latency histogram: bins doubling from 100 us (final status only).
    pub latency_bins: Vec<vlbiflow_realtime::LatencyBin>,
    pub elapsed_s: f64,
    /// Output frame bits per second over the run.
    pub output_bps: f64,
    /// Why it stopped (final status only).
    pub stopped: Option<String>,
}

/// Runs the receiver until `stop`, the duration, the frame count or the idle timeout; `progress` is
/// called once when the socket is bound (`elapsed_s` 0, `listen` the bound address), then about once a
/// second with the live status. Returns the final status.
pub fn run_receive(
    config: &ReceiveConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&ReceiveStatus),
) -> Result<ReceiveStatus, ReceiveError> {
    let mut reorderer =
        Reorderer::new(config.reorder_config()?).map_err(|e| ReceiveError::Config(e.to_string()))?;
    if let Some(k) = config.first_key {
        reorderer.start_at(k);
    }
    let mut udp = UdpConfig::receiver(config.listen);
    udp.recv_buffer = Some(config.recv_buffer);
    udp.rxq_ovfl = true;
    udp.timestamps = true;
    udp.nonblocking = true;
    let (sock, report) = open_udp(&udp).map_err(|e| ReceiveError::Socket(config.listen, e.to_string()))?;
    let listen = report.local;
    let output = Output::open(
        &config.output,
        config.frame_len,
        config.output_wait,
        config.overwrite,
    )
    .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
    let mut output = OutputWriter::start(output, config.frame_len, config.output_buffer)
        .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
    let mut fill_log = match &config.fill_log {
        None => None,
        Some(p) => {
            Some(io::BufWriter::new(std::fs::File::create(p).map_err(|e| {
                ReceiveError::Output(format!("fill log {}", p.display()), e)
            })?))
        }
    };

    let prefix = match config.protocol {
        InputProtocol::Udps => PSN_LEN,
        InputProtocol::Vdif => 0,
    };
    // One byte more than a good datagram, so a longer one shows as wrong-sized even when cut.
    let slot = prefix + config.frame_len + 1;
    let mut rx = BatchReceiver::new(64).with_source(!config.from.is_empty());
    let mut bufs = vec![0u8; rx.capacity() * slot];
    let mut st = ReceiveStatus {
        listen: listen.to_string(),
        protocol: format!("{:?}", config.protocol).to_lowercase(),
        key: match config.key {
            KeyChoice::Psn => "psn".into(),
            KeyChoice::VdifTime => "vdif-time".into(),
        },
        output: config.output.describe(),
        window: reorderer.window(),
        deadline_ms: config.deadline.as_secs_f64() * 1e3,
        first_key: config.first_key,
        frame_rate: config.frame_rate,
        ..Default::default()
    };
    let mut latency = LatencyHistogram::new(config.clock_offset_ns);
    let mut rate = FrameIndexer::new(config.frame_rate);
    let mut clock = config.frame_rate.and_then(|r| FrameClock::new(r).ok());
    let mut learn_thread: Option<u16> = None;
    // Gap notices mean something only where keys are the forwarder's PSNs.
    let notices = config.protocol == InputProtocol::Udps && config.key == KeyChoice::Psn;
    let mut declared = DeclaredGaps::new(if notices { 1 << 16 } else { 1 });
    let end_key = match (config.first_key, config.count) {
        (Some(first), Some(n)) => Some(first.wrapping_add(n)),
        _ => None,
    };

    // Listening: the caller may say so (scripts wait for it before starting a sender).
    progress(&st);
    let start = Instant::now();
    let end = config.duration.map(|d| start + d);
    let mut last_datagram: Option<Instant> = None;
    let mut next_progress = start + Duration::from_secs(1);
    let mut kernel_drops = 0u64;
    let stopped: String = loop {
        if stop.load(Ordering::Relaxed) {
            break "stopped".into();
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break "duration reached".into();
        }
        if let Some(n) = config.count.filter(|&n| st.output_frames >= n) {
            break format!("{n} frames delivered");
        }
        if let (Some(idle), Some(last)) = (config.idle, last_datagram) {
            if now.duration_since(last) >= idle {
                break format!("nothing received for {:.1} s", idle.as_secs_f64());
            }
        }
        let mut wait = Duration::from_millis(100);
        if let Some(t) = reorderer.poll_timeout() {
            wait = wait.min(t.saturating_duration_since(now));
        }
        if let Some(e) = end {
            wait = wait.min(e.saturating_duration_since(now));
        }
        let batch = rx
            .recv(&sock, bufs.chunks_exact_mut(slot), wait)
            .map_err(|e| ReceiveError::Recv(listen, e))?;
        let now = Instant::now();
        let wall = UtcTime::now();
        let metas = batch.messages();
        kernel_drops = batch.kernel_drops();
        if !metas.is_empty() {
            last_datagram = Some(now);
        }
        for (i, m) in metas.iter().enumerate() {
            st.datagrams += 1;
            st.bytes += m.wire_len as u64;
            if !config.from.is_empty() && !m.source.is_some_and(|a| config.from.allows(a.ip())) {
                st.wrong_source += 1;
                continue;
            }
            let d = &bufs[i * slot..i * slot + m.len];
            let frame = d.get(prefix..).unwrap_or(&[]);
            if m.wire_len == prefix + config.frame_len && !is_frame(config.kind, frame) {
                st.rejected += 1;
                continue;
            }
            if notices && m.wire_len != prefix + config.frame_len && GapNotice::<&[u8]>::looks_like(d) {
                match GapNotice::new_checked(d) {
                    Ok(n) => declared.add_notice(&n),
                    Err(_) => st.bad_notices += 1,
                }
                continue;
            }
            let arrival = loop {
                let r = match (config.protocol, config.key) {
                    (InputProtocol::Udps, KeyChoice::Psn) => reorderer.push_udps(now, d),
                    _ => reorderer.push_vdif(now, frame),
                };
                match r {
                    Ok(a) => break a,
                    // Never with the drain below after every push; drain and push again if it happens.
                    Err(_) => {
                        drain_until(
                            &mut reorderer,
                            now,
                            &mut output,
                            &mut st,
                            &mut fill_log,
                            &mut declared,
                            config.count,
                        )
                        .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
                        if config.count.is_some_and(|n| st.output_frames >= n) {
                            // The output is complete; the rest of the stream is not wanted.
                            break Arrival::Stray;
                        }
                    }
                }
            };
            if config.kind == FrameKind::Vdif
                && matches!(
                    arrival,
                    Arrival::Start
                        | Arrival::InOrder
                        | Arrival::Gap { .. }
                        | Arrival::OutOfOrder
                        | Arrival::Restart
                )
            {
                let h = VdifHeader::new_unchecked(frame);
                if clock.is_none() {
                    // Learn the frame rate from one thread's frame numbers.
                    let t = *learn_thread.get_or_insert(h.thread_id());
                    if t == h.thread_id() {
                        let second = epoch_start_unix(h.epoch()) + i64::from(h.seconds());
                        let _ = rate.index(second, h.frame_number());
                        if let Some(r) = rate.rate() {
                            let r = corrected_rate(r, &h);
                            clock = FrameClock::new(r).ok();
                            st.frame_rate = Some(r);
                        }
                    }
                }
                if let Some(c) = &clock {
                    let arrived = m
                        .timestamp_ns
                        .map(|ns| {
                            UtcTime::from_unix((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as u32)
                        })
                        .unwrap_or(wall);
                    latency.record_vdif(c, frame, arrived);
                }
            }
            drain_until(
                &mut reorderer,
                now,
                &mut output,
                &mut st,
                &mut fill_log,
                &mut declared,
                config.count,
            )
            .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
        }
        drain_until(
            &mut reorderer,
            now,
            &mut output,
            &mut st,
            &mut fill_log,
            &mut declared,
            config.count,
        )
        .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
        output.publish();
        if now >= next_progress {
            next_progress += Duration::from_secs(1);
            st.reorder = reorderer.counters();
            st.next_key = reorderer.next_key();
            st.kernel_drops = kernel_drops;
            st.latency = latency.summary();
            st.elapsed_s = start.elapsed().as_secs_f64();
            st.output_stalls = output.stalls();
            st.forwarder = declared.summary();
            progress(&st);
        }
    };
    // End of stream: everything held goes out, holes up to the newest key (or the known end) filled.
    match end_key {
        Some(k) => reorderer.flush_until(k),
        None => reorderer.flush(),
    }
    let now = Instant::now();
    drain_until(
        &mut reorderer,
        now,
        &mut output,
        &mut st,
        &mut fill_log,
        &mut declared,
        config.count,
    )
    .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
    st.output_stalls = output.stalls();
    output
        .finish()
        .map_err(|e| ReceiveError::Output(config.output.describe(), e))?;
    if let Some(w) = &mut fill_log {
        w.flush()
            .map_err(|e| ReceiveError::Output("fill log".into(), e))?;
    }
    st.reorder = reorderer.counters();
    st.next_key = reorderer.next_key();
    st.kernel_drops = kernel_drops;
    st.forwarder = declared.summary();
    st.latency = latency.summary();
    st.latency_bins = latency.bins();
    st.elapsed_s = start.elapsed().as_secs_f64();
    st.output_bps = st.output_bytes as f64 * 8.0 / st.elapsed_s.max(1e-9);
    st.stopped = Some(stopped);
    Ok(st)
}

/// A rate learned as the highest frame number + 1 is one short when the last frame of the first second
/// was lost: one more is taken when it makes the sample rate a round number (as `check` does).
fn corrected_rate(learned: u32, h: &VdifHeader<&[u8]>) -> u32 {
    let payload = h.frame_len().saturating_sub(h.header_len());
    vlbiflow_formats::vdif::samples_per_frame(payload, h.bits_per_sample(), h.channels(), h.complex())
        .ok()
        .and_then(|spf| vlbiflow_formats::vdif::corrected_learned_rate(learned, spf))
        .unwrap_or(learned)
}

/// A datagram of the right size: is it a frame of this kind at all?
#[inline]
pub(crate) fn is_frame(kind: FrameKind, frame: &[u8]) -> bool {
    match kind {
        FrameKind::Vdif => {
            let h = VdifHeader::new_unchecked(frame);
            // jive5ab fill frames (invalid bit, frame length, zero time) pass: they are frames.
            h.check().is_ok() && h.frame_len() == frame.len()
        }
        FrameKind::M5b => {
            frame.len() >= 4 && frame[..4] == MARK5B_SYNC.to_le_bytes()
                || vlbiflow_formats::fill::is_mark5b_fill(frame)
        }
    }
}

/// Writes every frame the reorderer has ready (at most up to `limit` output frames in all).
fn drain_until(
    r: &mut Reorderer,
    now: Instant,
    out: &mut OutputWriter,
    st: &mut ReceiveStatus,
    fill_log: &mut Option<io::BufWriter<std::fs::File>>,
    declared: &mut DeclaredGaps,
    limit: Option<u64>,
) -> io::Result<()> {
    while limit.is_none_or(|n| st.output_frames < n) {
        let Some(o) = r.poll_output(now) else { break };
        if st.first_key.is_none() {
            st.first_key = Some(o.key);
        }
        out.write_frame(o.frame)?;
        st.output_frames += 1;
        st.output_bytes += o.frame.len() as u64;
        if o.kind == OutputKind::Fill {
            if declared.take(o.key) {
                st.fill_declared += 1;
            } else {
                st.fill_path += 1;
            }
            if let Some(w) = fill_log {
                writeln!(w, "{}", o.key)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_protocol_and_the_format() {
        assert_eq!(KeyChoice::default_for(InputProtocol::Udps), KeyChoice::Psn);
        assert_eq!(KeyChoice::default_for(InputProtocol::Vdif), KeyChoice::VdifTime);
        assert_eq!(default_frame_len(FrameKind::Vdif), 8224);
        assert_eq!(default_frame_len(FrameKind::M5b), 10016);
    }
}
