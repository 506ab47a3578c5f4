//! The vlbiflow recorder data plane: capture VDIF or Mark5B UDP streams and write them as a Mark6
//! scatter-gather (version 2) or FlexBuff scan across many disks.
//!
//! ```text
//!  sockets ──epoll──► capture thread(s) ──recvmmsg into──► block (one stream's whole frames)
//!                          │ validate, count, loss state machines          │ sealed, numbered
//!                          ▼                                               ▼
//!                   status atomics                        shared queue ──► one writer per disk
//!                                                         (a free disk takes the next block)
//! ```
//!
//! [`Recorder::start`] checks the configuration, creates the scan on every disk, binds the sockets and
//! starts the threads; the returned [`RecorderHandle`] gives live [`RecorderStatus`] snapshots, an event
//! channel, [`RecorderHandle::stop`] and [`RecorderHandle::wait`], which returns the [`ScanSummary`]. The CLI
//! (`vlbiflow record`) and the control-plane daemon drive exactly this API.

pub mod capture;
pub mod config;
mod datastreams;
mod engine;
pub mod flow;
mod split;
/// Loss accounting: the workspace's one sequence tracker (re-exported from `vlbiflow-seq`).
pub mod loss {
    pub use vlbiflow_seq::*;
}
pub mod pool;
pub mod status;
pub mod tap;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use vlbiflow_formats::time::UtcTime;
use vlbiflow_scan::{DiskMeta, ScanFormat, ScanMetadata, StreamMeta, METADATA_VERSION};
use vlbiflow_udp::socket::{open_udp, UdpConfig};

pub use config::{ConfigError, FrameKind, RecorderConfig, StreamSpec};
pub use engine::{size_hint, RecorderEvent};

/// Events the recorder queues for its reader before it counts further ones as dropped
/// ([`RecorderStatus::events_dropped`]).
pub const EVENT_QUEUE: usize = 4096;
pub use status::{DiskStatus, FlowStatus, Phase, PoolStatus, RecorderStatus, StreamStatus, ThreadStatus};
pub use tap::FrameTap;
#[doc(hidden)]
pub use writer::bench_mark6_write;

use datastreams::recordings_metadata;
use engine::{Shared, PHASE_FINISHED, PHASE_FLUSHING, PHASE_RECORDING};
use pool::Block;
use status::{unpack_time, DiskShared, StreamShared};

/// Why a recording could not start (nothing is left running when `start` fails).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("disk {disk}: {reason}")]
    Disk { disk: PathBuf, reason: String },
    #[error("stream {stream}: cannot receive on {address}: {source}")]
    Socket {
        stream: String,
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start thread: {0}")]
    Thread(std::io::Error),
}

/// The outcome of a finished scan.
#[derive(Debug, Clone)]
pub struct ScanSummary {
    /// Final status (phase Finished).
    pub status: RecorderStatus,
    /// The metadata as written on the disks at the end.
    pub metadata: ScanMetadata,
    /// Set when the scan could not be completed (every disk failed, blocks lost).
    pub error: Option<String>,
    /// With datastreams: the metadata of each recording they made (`<scan>_ds<name>`), as written on the
    /// disks; `metadata` is then the whole scan's (every frame of every stream), written nowhere.
    pub recordings: Vec<ScanMetadata>,
}

/// What one stream's socket delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveCounts {
    /// Receive messages (a GRO super-datagram counts once).
    pub messages: u64,
    /// Datagrams they carried (GRO segments counted one by one).
    pub datagrams: u64,
    /// Messages that carried more than one datagram.
    pub coalesced: u64,
    /// Sockets and capture threads the stream is split over (1: not split).
    pub parts: u32,
    /// Split: datagrams that arrived at another run's socket (a coalesced train's tail) and were
    /// accounted by their own run's thread.
    pub handed_on: u64,
    /// Split: of those, numbers a full handoff queue refused (their frames were stored but count as
    /// lost: their own run's thread never heard of them).
    pub handoff_full: u64,
    /// Split: frames copied to a fresh block where a batch brought a later run of its thread (the end of
    /// a run was lost or came in a longer train than planned).
    pub cut_copied: u64,
}

impl ReceiveCounts {
    /// What a kernel drop count means for this stream: without coalesced messages each dropped socket
    /// buffer was one datagram; with them a buffer may have been a super-datagram, and the datagrams
    /// (frames) it held are estimated at the mean per message received. Returns (unit, estimated
    /// datagrams; None when the drops are datagrams already).
    pub fn kernel_drops_meaning(&self, drops: u64) -> (&'static str, Option<u64>) {
        if self.coalesced == 0 || self.messages == 0 {
            ("datagrams", None)
        } else {
            let per = self.datagrams as f64 / self.messages as f64;
            ("socket buffers", Some((drops as f64 * per).round() as u64))
        }
    }
}

/// Entry point of the engine.
pub struct Recorder;

/// Control of a running recording. `Send + Sync`: status and stop may be called from any thread.
pub struct RecorderHandle {
    shared: Arc<Shared>,
    events: Receiver<RecorderEvent>,
    wake: Sender<()>,
    supervisor: Mutex<Option<JoinHandle<ScanSummary>>>,
}

impl Recorder {
    /// Validates `config`, creates the scan on every disk (refusing to overwrite an existing one), binds
    /// every stream's socket, allocates the block pool and starts capture, writer and supervisor threads.
    /// It returns once every capture thread runs: from then on the streams are received (datagrams that
    /// arrived since the bind wait in the socket buffers), so a caller may say it is ready.
    pub fn start(config: RecorderConfig) -> Result<RecorderHandle, StartError> {
        Self::start_with_taps(config, Vec::new())
    }

    /// As [`start`](Self::start), with a [`FrameTap`] per stream (`taps[i]` for stream `i`; missing or
    /// `None` entries: no tap) that sees every frame the stream records, on its capture thread.
    pub fn start_with_taps(
        config: RecorderConfig,
        mut taps: Vec<Option<Box<dyn FrameTap>>>,
    ) -> Result<RecorderHandle, StartError> {
        config.validate()?;
        if let Some(s) = config
            .streams
            .iter()
            .zip(&taps)
            .find_map(|(s, t)| (s.split > 1 && t.is_some()).then_some(s))
        {
            return Err(StartError::Config(ConfigError::Invalid {
                field: "split",
                reason: format!(
                    "stream {} is split: forwarding passes frames on in arrival order, so it needs one socket",
                    s.label
                ),
            }));
        }
        let warnings = config.warnings();
        let mut config = config;
        if config.discard {
            // Capture only: no disk is touched, so none is part of the scan.
            config.disks.clear();
        }
        let first = &config.streams[0];
        let data_offset = match config.format {
            ScanFormat::Mark6 => vlbiflow_formats::mark6::BLOCK_HEADER_LEN_V2,
            ScanFormat::Flexbuff => 0,
        };
        let block_size = config.block_size as usize;
        let frames_per_block =
            move |frame_size: u32| ((block_size - data_offset) / frame_size as usize).max(1);
        let nominal_block_size = match config.format {
            ScanFormat::Mark6 => {
                (data_offset + frames_per_block(first.frame_size) * first.frame_size as usize) as u64
            }
            ScanFormat::Flexbuff => config.block_size,
        };
        let block_bytes = config
            .streams
            .iter()
            .map(|s| frames_per_block(s.frame_size) * s.frame_size as usize)
            .max()
            .unwrap_or(0);

        // Disks: usable, no scan of this name yet. Then create the data files.
        for disk in &config.disks {
            let err = |reason: String| StartError::Disk {
                disk: disk.clone(),
                reason,
            };
            let m = std::fs::metadata(disk).map_err(|e| err(e.to_string()))?;
            if !m.is_dir() {
                return Err(err("not a directory".into()));
            }
            let meta = vlbiflow_scan::metadata_path(disk, &config.scan);
            if meta.exists() {
                return Err(err(format!(
                    "scan {} already exists ({})",
                    config.scan,
                    meta.display()
                )));
            }
            if !config.datastreams.is_empty() {
                if let Some(name) = datastreams::existing(disk, &config.scan) {
                    return Err(err(format!(
                        "{name} exists: a datastream recording of scan {} could take its name",
                        config.scan
                    )));
                }
            }
        }
        let mut sinks = Vec::new();
        for disk in &config.disks {
            if !config.datastreams.is_empty() {
                // Each recording's chunk directory is made on its first chunk.
                sinks.push(writer::lazy_flexbuff_sink(disk, config.direct_io));
                continue;
            }
            match writer::open_sink(
                config.format,
                disk,
                &config.scan,
                first.kind,
                first.frame_size,
                nominal_block_size,
                config.direct_io,
            ) {
                Ok(s) => sinks.push(s),
                Err(e) => {
                    // Undo what was created so a retry is not refused as "exists".
                    drop(sinks);
                    remove_created(&config, config.disks.iter().take_while(|d| *d != disk));
                    let reason = if e.kind() == std::io::ErrorKind::AlreadyExists {
                        format!("scan {} already exists: {e}", config.scan)
                    } else {
                        e.to_string()
                    };
                    return Err(StartError::Disk {
                        disk: disk.clone(),
                        reason,
                    });
                }
            }
        }

        // Sockets.
        // Bounded: a stream that keeps teaching new frame rates, or a reader that stopped reading, must not
        // grow memory without limit. Events beyond it are counted (`events_dropped`), never waited for.
        let (events_tx, events_rx) = crossbeam_channel::bounded(EVENT_QUEUE);
        let mut sockets = Vec::new();
        for s in &config.streams {
            let mut udp = UdpConfig::receiver(s.address);
            udp.recv_buffer = Some(config.recv_buffer);
            udp.rxq_ovfl = true;
            udp.gro = config.gro;
            // Capture learns readiness from epoll and must never block on one socket.
            udp.nonblocking = true;
            let opened = if s.split > 1 {
                let shift = split::run_len(frames_per_block(s.frame_size)).trailing_zeros();
                vlbiflow_udp::steer::open_run_group(&udp, s.split, shift)
            } else {
                open_udp(&udp).map(|(sock, report)| (vec![sock], report))
            };
            match opened {
                Ok(x) => sockets.push(x),
                Err(e) => {
                    let source =
                        std::io::Error::new(e.source.kind(), format!("{} failed: {}", e.step, e.source));
                    drop(sinks);
                    remove_created(&config, config.disks.iter());
                    return Err(StartError::Socket {
                        stream: s.label.clone(),
                        address: s.address,
                        source,
                    });
                }
            }
        }

        // Pool. Mark6 blocks get a page of headroom for the O_DIRECT writer (see `pool`).
        let headroom = match config.format {
            ScanFormat::Mark6 => pool::ALIGN,
            ScanFormat::Flexbuff => 0,
        };
        let pool_total = config.effective_pool_blocks();
        let pool_limit =
            config.pool_limit_blocks(headroom + data_offset + block_bytes, pool::meminfo().map(|m| m.0));
        let free = pool::FreeList::with_capacity(pool_limit);
        for _ in 0..pool_total {
            free.put(Block::new(block_bytes, data_offset, headroom));
        }
        let (queue_tx, queue_rx) = crossbeam_channel::unbounded();

        let mut streams: Vec<StreamShared> = config.streams.iter().map(|_| StreamShared::default()).collect();
        for (s, shared) in config.streams.iter().zip(streams.iter_mut()) {
            if s.split > 1 {
                let runs =
                    vlbiflow_seq::split::Runs::new(s.split, split::run_len(frames_per_block(s.frame_size)))
                        .map_err(|e| {
                        StartError::Config(ConfigError::Invalid {
                            field: "split",
                            reason: e.to_string(),
                        })
                    })?;
                // Blocks wait for a silent part at most a quarter of the pool (then go out of order),
                // always leaving every socket a block to fill.
                let limit = (pool_total / 4)
                    .max(2 * s.split as usize)
                    .min(pool_total.saturating_sub(config.receiving_sockets() + 1))
                    .max(1);
                shared.split = Some(Box::new(split::SplitShared::new(runs, limit)));
                // The least of the parts' first numbers.
                shared.first_psn.store(u64::MAX, Relaxed);
            }
        }
        for (i, (s, (_, report))) in config.streams.iter().zip(&sockets).enumerate() {
            // The kernel reports double what it accepted (bookkeeping); status shows what it accepted.
            let granted = report.recv_buffer.as_ref().map_or(0, |b| b.granted / 2);
            streams[i].recv_buffer.store(granted as u64, Relaxed);
            if let Some(r) = s.frame_rate {
                streams[i].frame_rate.store(r, Relaxed);
            }
            if granted < config.recv_buffer {
                let _ = events_tx.try_send(RecorderEvent::SocketBufferCapped {
                    stream: s.label.clone(),
                    requested: config.recv_buffer,
                    granted,
                });
            }
        }
        for w in warnings {
            let _ = events_tx.try_send(RecorderEvent::ConfigWarning(w));
        }
        let gro_refused: Vec<i32> = sockets
            .iter()
            .filter_map(|(_, r)| match r.gro {
                vlbiflow_udp::Feature::Unsupported(e) => Some(e),
                _ => None,
            })
            .collect();
        if let Some(&e) = gro_refused.first() {
            let _ = events_tx.try_send(RecorderEvent::GroUnavailable {
                streams: gro_refused.len(),
                error: std::io::Error::from_raw_os_error(e).to_string(),
            });
        }
        let disks: Vec<DiskShared> = config.disks.iter().map(|_| DiskShared::default()).collect();
        for (d, s) in disks.iter().zip(&sinks) {
            d.direct.store(s.is_direct(), Relaxed);
        }
        let whole = config.streams.iter().filter(|s| s.split <= 1).count();
        let capture_threads = config.capture_threads.min(whole);
        let part_threads: usize = config
            .streams
            .iter()
            .filter(|s| s.split > 1)
            .map(|s| s.split as usize)
            .sum();
        let local_addrs = sockets
            .iter()
            .zip(&config.streams)
            .map(|((socks, _), s)| {
                socks
                    .first()
                    .and_then(|x| x.local_addr().ok())
                    .unwrap_or(s.address)
            })
            .collect();
        let shared = Arc::new(Shared {
            streams,
            disks,
            start: Instant::now(),
            start_utc: UtcTime::now().to_iso8601(),
            stop: AtomicBool::new(false),
            hold_writers: AtomicBool::new(false),
            phase: AtomicU8::new(PHASE_RECORDING),
            captures_running: AtomicUsize::new(capture_threads + part_threads),
            writers_alive: AtomicUsize::new(if config.discard { 1 } else { config.disks.len() }),
            in_flight: AtomicU64::new(0),
            lost_blocks: AtomicU64::new(0),
            discarded_bytes: AtomicU64::new(0),
            next_block: AtomicU32::new(0),
            free,
            queue_tx,
            queue_rx,
            pool_total: AtomicUsize::new(pool_total),
            pool_limit,
            pool_start: pool_total,
            block_bytes,
            block_layout: (data_offset, headroom),
            flow: Mutex::new(FlowStatus {
                pool_limit,
                ..Default::default()
            }),
            nominal_block_size,
            events: events_tx,
            events_dropped: AtomicU64::new(0),
            local_addrs,
            recordings: datastreams::Recordings::new(config.streams.len(), config.disks.len()),
            config,
        });

        // Initial metadata (complete: false) on every disk before the first datagram is taken.
        let initial = all_metadata(&shared, &snapshot(&shared), false);
        write_metadata(&shared, &initial);

        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(StartError::Thread)
        };
        let mut workers = Vec::new();
        if shared.config.discard {
            let sh = shared.clone();
            workers.push(spawn(
                "vf-discard".into(),
                Box::new(move || writer::run_discard(sh)),
            )?);
        }
        for (i, sink) in sinks.into_iter().enumerate() {
            let sh = shared.clone();
            workers.push(spawn(
                format!("vf-write{i}"),
                Box::new(move || writer::run_writer(sh, i, sink)),
            )?);
        }
        let mut groups: Vec<Vec<capture::StreamCapture>> = (0..capture_threads).map(|_| Vec::new()).collect();
        let mut whole_index = 0;
        for (i, (spec, (socks, report))) in shared.config.streams.iter().zip(sockets).enumerate() {
            let fpb = frames_per_block(spec.frame_size);
            let gro = report.gro == vlbiflow_udp::Feature::Enabled;
            if let Some(sp) = shared.streams[i].split.as_deref() {
                // One capture thread per part, each with the queues that hand numbers between them.
                let (txs, rxs): (Vec<_>, Vec<_>) = (0..socks.len())
                    .map(|_| crossbeam_channel::bounded::<u64>(vlbiflow_seq::split::HANDOFF_QUEUE))
                    .unzip();
                for (p, (socket, inbox)) in socks.into_iter().zip(rxs).enumerate() {
                    let mut capture =
                        capture::StreamCapture::new(i, spec.clone(), socket, fpb, data_offset, gro);
                    capture.set_part(capture::Part::new(sp.runs, p as u32, inbox, txs.clone()));
                    groups.push(vec![capture]);
                }
                continue;
            }
            let socket = socks.into_iter().next().expect("one socket per stream");
            let mut capture = capture::StreamCapture::new(i, spec.clone(), socket, fpb, data_offset, gro);
            capture.set_tap(taps.get_mut(i).and_then(Option::take));
            capture.set_datastreams(&shared.config.datastreams);
            groups[whole_index % capture_threads].push(capture);
            whole_index += 1;
        }
        // `start` returns once every capture thread runs, so a caller may say the recorder is receiving.
        let (running_tx, running_rx) = crossbeam_channel::bounded(groups.len());
        for (i, group) in groups.into_iter().enumerate() {
            let sh = shared.clone();
            let running = running_tx.clone();
            workers.push(spawn(
                format!("vf-capture{i}"),
                Box::new(move || {
                    let _ = running.send(());
                    drop(running);
                    capture::run_capture(sh, group)
                }),
            )?);
        }
        drop(running_tx);
        // Each thread says it runs once; a thread that could not (it panicked) closes its sender instead.
        while running_rx.recv().is_ok() {}
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let sh = shared.clone();
        let supervisor = std::thread::Builder::new()
            .name("vf-supervisor".into())
            .spawn(move || supervise(sh, wake_rx, workers))
            .map_err(StartError::Thread)?;
        Ok(RecorderHandle {
            shared,
            events: events_rx,
            wake: wake_tx,
            supervisor: Mutex::new(Some(supervisor)),
        })
    }
}

/// Removes the data files/directories `start` created before it failed.
fn remove_created<'a>(config: &RecorderConfig, disks: impl Iterator<Item = &'a PathBuf>) {
    for disk in disks {
        match config.format {
            ScanFormat::Mark6 => {
                let _ = std::fs::remove_file(vlbiflow_formats::mark6::file_path(
                    disk,
                    &config.scan,
                    config.streams[0].kind,
                ));
            }
            ScanFormat::Flexbuff => {
                let _ = std::fs::remove_dir(vlbiflow_formats::flexbuff::chunk_dir(disk, &config.scan));
            }
        }
    }
}

impl RecorderHandle {
    /// A live snapshot. Cheap: atomics plus one short lock per stream and disk.
    pub fn status(&self) -> RecorderStatus {
        snapshot(&self.shared)
    }

    /// Operator events (disk failures, capped buffers, learned rates, ...). Each event is delivered once,
    /// to whichever receiver takes it.
    pub fn events(&self) -> Receiver<RecorderEvent> {
        self.events.clone()
    }

    /// The address each stream (in configuration order) is bound to; useful when a port of 0 was given.
    pub fn local_addrs(&self) -> &[std::net::SocketAddr] {
        &self.shared.local_addrs
    }

    /// Per stream: the PSN runs it is split by over sockets and capture threads (`None`: one socket).
    pub fn split_runs(&self) -> Vec<Option<vlbiflow_seq::split::Runs>> {
        self.shared
            .streams
            .iter()
            .map(|s| s.split.as_ref().map(|sp| sp.runs))
            .collect()
    }

    /// Per stream (in configuration order): receive messages that carried more than one datagram, i.e.
    /// UDP GRO super-datagrams from a GSO sender or a coalescing NIC. Zero without GRO.
    pub fn coalesced_messages(&self) -> Vec<u64> {
        self.shared
            .streams
            .iter()
            .map(|s| s.coalesced.load(Relaxed))
            .collect()
    }

    /// Per stream (in configuration order): what the sockets delivered, for reading the kernel's drop
    /// count (SO_RXQ_OVFL counts socket buffers: with GRO one can be a super-datagram of several frames).
    pub fn receive_counts(&self) -> Vec<ReceiveCounts> {
        self.shared
            .streams
            .iter()
            .map(|s| ReceiveCounts {
                messages: s.messages.load(Relaxed),
                datagrams: s.datagrams.load(Relaxed),
                coalesced: s.coalesced.load(Relaxed),
                parts: s.split.as_ref().map_or(1, |sp| sp.runs.parts()),
                handed_on: s.split.as_ref().map_or(0, |sp| sp.handed_on()),
                handoff_full: s.split.as_ref().map_or(0, |sp| sp.handoff_full()),
                cut_copied: s.cut_copied.load(Relaxed),
            })
            .collect()
    }

    /// The configuration being recorded.
    pub fn config(&self) -> &RecorderConfig {
        &self.shared.config
    }

    /// Stops capture: returns once every capture thread has sealed its partial blocks (well under a second;
    /// bounded at 1 s). Writers then flush the queue; [`wait`](Self::wait) returns when that is done.
    pub fn stop(&self) {
        self.shared.request_stop();
        let _ = self.wake.try_send(());
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.shared.captures_running.load(Relaxed) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Holds the writers (`true`: they take no block from the queue, so the pool drains as if the disks had
    /// stalled) or lets them go on. For tests of the starved-pool paths; a held recorder must be released
    /// before [`stop`](Self::stop) for the scan to finish.
    #[doc(hidden)]
    pub fn hold_writers(&self, hold: bool) {
        self.shared.hold_writers.store(hold, Relaxed);
    }

    /// True once the recording has ended by itself (duration reached, all disks failed) or after `stop`.
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping()
    }

    /// Waits for the scan to finish (duration, stop or failure) and returns its summary. A second call
    /// (from another clone of the handle's owner) returns `None`.
    pub fn wait(&self) -> Option<ScanSummary> {
        let handle = self.supervisor.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        match handle.join() {
            Ok(s) => Some(s),
            Err(_) => {
                let status = snapshot(&self.shared);
                let metadata = build_metadata(&self.shared, &status, false);
                let recordings = recordings_metadata(&self.shared, &status, &metadata);
                Some(ScanSummary {
                    status,
                    metadata,
                    error: Some("recorder supervisor panicked".into()),
                    recordings,
                })
            }
        }
    }
}

impl Drop for RecorderHandle {
    fn drop(&mut self) {
        // Never leave threads running behind a dropped handle: stop and finish the scan cleanly.
        if self.supervisor.lock().map(|s| s.is_some()).unwrap_or(false) {
            self.hold_writers(false);
            self.stop();
            let _ = self.wait();
        }
    }
}

fn snapshot(shared: &Shared) -> RecorderStatus {
    let phase = match shared.phase.load(Relaxed) {
        PHASE_RECORDING => Phase::Recording,
        PHASE_FLUSHING => Phase::Flushing,
        _ => Phase::Finished,
    };
    let streams = shared
        .config
        .streams
        .iter()
        .zip(&shared.streams)
        .map(|(spec, s)| {
            let (counters, restarts) = s.counters_and_restarts();
            (spec, s, counters, restarts)
        })
        .map(|(spec, s, mut c, restarts)| StreamStatus {
            label: spec.label.clone(),
            counters: {
                // Frames in blocks no disk could write were not stored after all: lost, not packets.
                let unwritten = s.unwritten.load(Relaxed);
                c.packets -= unwritten.min(c.packets);
                c.bytes -= (unwritten * u64::from(spec.frame_size)).min(c.bytes);
                c.lost += unwritten;
                c
            },
            restarts,
            threads: match &s.split {
                Some(sp) => sp.threads(),
                None => s.threads.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            },
            frame_rate: Some(s.frame_rate.load(Relaxed)).filter(|&r| r > 0),
            first_time: unpack_time(s.first_time.load(Relaxed)),
            last_time: unpack_time(s.last_time.load(Relaxed)),
            recv_buffer: s.recv_buffer.load(Relaxed) as usize,
            active: Duration::from_nanos(s.last_ns.load(Relaxed).saturating_sub(s.first_ns.load(Relaxed))),
            first_psn: s.has_first_psn.load(Relaxed).then(|| s.first_psn.load(Relaxed)),
        })
        .collect();
    let disks = shared
        .config
        .disks
        .iter()
        .zip(&shared.disks)
        .map(|(p, d)| d.snapshot(p.clone()))
        .collect();
    RecorderStatus {
        phase,
        elapsed: shared.start.elapsed(),
        streams,
        disks,
        pool: PoolStatus {
            total: shared.pool_total.load(Relaxed),
            free: shared.free.len(),
            queued: shared.queue_rx.len(),
            block_bytes: shared.block_bytes,
        },
        blocks: u64::from(shared.next_block.load(Relaxed)),
        flow: *shared.flow.lock().unwrap_or_else(|e| e.into_inner()),
        events_dropped: shared.events_dropped.load(Relaxed),
    }
}

/// Estimates the flow (input against write rate) through a [`flow::FlowAlarm`] and how many blocks the
/// pool thread should keep free. Runs on the supervisor a few times a second; nothing here touches the
/// capture path.
struct FlowMonitor {
    alarm: flow::FlowAlarm,
    /// Below this MemAvailable the pool stops growing (bytes).
    reserve: u64,
}

impl FlowMonitor {
    fn new(shared: &Shared) -> Self {
        // Leave the system at least 1 GiB or 1/16 of its memory, whichever is more.
        let reserve = pool::meminfo().map_or(1 << 30, |(_, total)| (total / 16).max(1 << 30));
        // What the writers may hold unconfirmed (as `writer::run_writer` sizes it) is not a backlog.
        let disks = shared.config.disks.len().max(1);
        let pending = (shared.pool_start / (4 * disks)).max(1);
        let slack = flow::slack_blocks(shared.config.streams.len(), disks, pending) as u64
            * shared.block_bytes as u64;
        FlowMonitor {
            alarm: flow::FlowAlarm::new(slack),
            reserve,
        }
    }

    /// Frame bytes arrived (stored + dropped for want of a buffer) and bytes written, so far.
    fn totals(shared: &Shared) -> (u64, u64) {
        let input = shared
            .config
            .streams
            .iter()
            .zip(&shared.streams)
            .map(|(spec, s)| {
                (s.packets.load(Relaxed) + s.dropped_no_buffer.load(Relaxed)) * u64::from(spec.frame_size)
            })
            .sum();
        let written = shared.disks.iter().map(|d| d.bytes.load(Relaxed)).sum::<u64>()
            + shared.discarded_bytes.load(Relaxed);
        (input, written)
    }

    fn update(&mut self, shared: &Shared) {
        let (input, written) = Self::totals(shared);
        let change = self.alarm.update(shared.start.elapsed(), input, written);
        let total = shared.pool_total.load(Relaxed);
        let free = shared.free.len();
        let limit = shared.pool_limit;
        let in_use = total.saturating_sub(free);
        let room = (limit - in_use.min(limit)) as f64 * shared.block_bytes as f64;
        let time_to_full = self.alarm.time_to_full(room);
        let (input_rate, write_rate) = (self.alarm.input_rate(), self.alarm.write_rate());
        match change {
            Some(flow::AlarmChange::Raised) => shared.event(RecorderEvent::DisksBehind {
                input_rate: input_rate as u64,
                write_rate: write_rate as u64,
                time_to_full: time_to_full.map(|t| t as u64),
            }),
            Some(flow::AlarmChange::Cleared) => shared.event(RecorderEvent::DisksCaughtUp {
                input_rate: input_rate as u64,
                write_rate: write_rate as u64,
                pool: status::pool_text(free, total, limit, shared.block_bytes),
            }),
            None => {}
        }
        *shared.flow.lock().unwrap_or_else(|e| e.into_inner()) = FlowStatus {
            input_rate,
            write_rate,
            pool_limit: limit,
            pool_fill: in_use as f64 / limit.max(1) as f64,
            time_to_full,
            behind: self.alarm.behind(),
        };
    }

    /// How many blocks should be free: about a second of input (at least 16). The pool thread allocates
    /// towards it (see [`grow_pool`]).
    fn want_free(&self, shared: &Shared) -> usize {
        ((self.alarm.input_rate() / shared.block_bytes.max(1) as f64).ceil() as usize).max(16)
    }
}

/// Niceness of the thread that grows the block pool: it runs on what the capture and writer threads leave.
const POOL_NICENESS: i32 = 19;

/// Lowers the calling thread's scheduling priority by `by` nice steps (best effort: a failure leaves it).
/// Data-plane helpers use it so that the threads that take frames from the network win the CPU.
pub fn be_nicer(by: i32) {
    let tid = rustix::thread::gettid();
    if let Ok(now) = rustix::process::getpriority_process(Some(tid)) {
        let _ = rustix::process::setpriority_process(Some(tid), (now + by).min(19));
    }
}

/// The pool thread: allocates blocks one at a time while fewer than the supervisor's latest target are
/// free, up to the pool's limit and never below the memory `reserve`. Allocating (the kernel clears every
/// page) costs about as much CPU per byte as receiving it, so it runs at [`POOL_NICENESS`], on what the
/// capture threads leave: a recorder growing its pool at the start of a fast stream does not lose frames to
/// it. Returns when the supervisor drops `targets`.
fn grow_pool(shared: &Shared, targets: &Receiver<usize>, reserve: u64) {
    be_nicer(POOL_NICENESS);
    loop {
        match targets.recv_timeout(Duration::from_millis(200)) {
            Ok(want) => grow_to(shared, want, reserve),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Allocates blocks one at a time while fewer than `want` are free (see [`grow_pool`]).
fn grow_to(shared: &Shared, want: usize, reserve: u64) {
    let (data_offset, headroom) = shared.block_layout;
    while !shared.stopping()
        && shared.pool_total.load(Relaxed) < shared.pool_limit
        && shared.free.len() < want
        && pool::meminfo().is_none_or(|(avail, _)| avail >= reserve)
    {
        let Some(b) = Block::try_new(shared.block_bytes, data_offset, headroom) else {
            break;
        };
        shared.pool_total.fetch_add(1, Relaxed);
        shared.free.put(b);
    }
}

fn time_utc(t: Option<vlbiflow_formats::time::VdifTime>, rate: Option<u32>) -> Option<String> {
    let t = t?;
    let utc = match rate {
        Some(r) if t.frame < r => t.to_utc(r).ok()?,
        _ => UtcTime::from_unix(t.unix_second(), 0),
    };
    Some(utc.to_iso8601())
}

fn build_metadata(shared: &Shared, status: &RecorderStatus, complete: bool) -> ScanMetadata {
    let c = &shared.config;
    ScanMetadata {
        metadata_version: METADATA_VERSION,
        writer: format!("vlbiflow {}", env!("CARGO_PKG_VERSION")),
        scan: c.scan.clone(),
        experiment: c.experiment.clone(),
        station: c.station.clone(),
        format: c.format,
        block_size: shared.nominal_block_size,
        start_utc: shared.start_utc.clone(),
        end_utc: complete.then(|| UtcTime::now().to_iso8601()),
        blocks: status.disks.iter().map(|d| d.blocks).sum(),
        complete,
        streams: c
            .streams
            .iter()
            .zip(&status.streams)
            .zip(&shared.streams)
            .map(|((spec, s), sh)| StreamMeta {
                label: spec.label.clone(),
                kind: spec.kind,
                address: spec.address.to_string(),
                psn: spec.psn,
                frame_size: spec.frame_size,
                frame_rate: s.frame_rate,
                threads: spec.threads.clone(),
                first_frame_utc: time_utc(s.first_time, s.frame_rate),
                last_frame_utc: time_utc(s.last_time, s.frame_rate),
                counters: s.counters,
                blocks: sh.blocks.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            })
            .collect(),
        disks: status
            .disks
            .iter()
            .map(|d| DiskMeta {
                path: d.path.display().to_string(),
                bytes: d.bytes,
                blocks: d.blocks,
                failed: d.failed.clone(),
            })
            .collect(),
    }
}

/// The metadata files of the scan: the scan's own, or with datastreams one per recording they opened.
fn all_metadata(shared: &Shared, status: &RecorderStatus, complete: bool) -> Vec<ScanMetadata> {
    let meta = build_metadata(shared, status, complete);
    if shared.config.datastreams.is_empty() {
        vec![meta]
    } else {
        recordings_metadata(shared, status, &meta)
    }
}

/// Writes each metadata file (named by its scan) on every disk still in the scan (failed disks are tried
/// quietly: it may still help).
fn write_metadata(shared: &Shared, metas: &[ScanMetadata]) {
    for meta in metas {
        for (disk, d) in shared.config.disks.iter().zip(&shared.disks) {
            let failed = d.failed.lock().unwrap_or_else(|e| e.into_inner()).is_some();
            if let Err(e) = meta.write_atomic(&vlbiflow_scan::metadata_path(disk, &meta.scan)) {
                if !failed {
                    shared.event(RecorderEvent::MetadataFailed {
                        disk: disk.clone(),
                        error: e.to_string(),
                    });
                }
            }
        }
    }
}

/// Supervisor: ends the scan on duration, refreshes metadata, joins the workers and writes the final state.
fn supervise(shared: Arc<Shared>, wake: Receiver<()>, workers: Vec<JoinHandle<()>>) -> ScanSummary {
    let deadline = shared.config.duration.map(|d| shared.start + d);
    let mut next_meta = Instant::now() + shared.config.metadata_interval;
    let mut flow = FlowMonitor::new(&shared);
    // Periodic metadata is written on a thread of its own: a metadata write (synced) waits behind the
    // data writes of a slow disk, and the supervisor must go on watching the flow and growing the pool
    // exactly then. A write not yet taken when the next is due is skipped.
    let (meta_tx, meta_rx) = crossbeam_channel::bounded::<Vec<ScanMetadata>>(1);
    let meta_writer = {
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("vf-metadata".into())
            .spawn(move || {
                for m in meta_rx {
                    write_metadata(&sh, &m);
                }
            })
            .ok()
    };
    // The pool grows on a thread of its own at low priority (see `grow_pool`); the supervisor tells it how
    // many blocks should be free after every flow update. Not at all where its limit is its start
    // (`pool_blocks`, or capture only: no disk can fall behind).
    let (grow_tx, grow_rx) = crossbeam_channel::bounded::<usize>(1);
    let grows = shared.pool_limit > shared.pool_start;
    let grower = if !grows {
        None
    } else {
        let sh = shared.clone();
        let reserve = flow.reserve;
        std::thread::Builder::new()
            .name("vf-pool".into())
            .spawn(move || grow_pool(&sh, &grow_rx, reserve))
            .ok()
    };
    loop {
        flow.update(&shared);
        if !shared.stopping() && shared.pool_total.load(Relaxed) < shared.pool_limit {
            let want = flow.want_free(&shared);
            match &grower {
                Some(_) => {
                    let _ = grow_tx.try_send(want);
                }
                // No thread for it: grow here, as fast as the supervisor may.
                None => grow_to(&shared, want, flow.reserve),
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            shared.request_stop();
        }
        if shared.stopping() {
            break;
        }
        if now >= next_meta {
            next_meta = now + shared.config.metadata_interval;
            let m = all_metadata(&shared, &snapshot(&shared), false);
            match &meta_writer {
                Some(_) => {
                    let _ = meta_tx.try_send(m);
                }
                None => write_metadata(&shared, &m),
            }
        }
        let mut wait = Duration::from_millis(50);
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        let _ = wake.recv_timeout(wait);
    }
    shared.phase.store(PHASE_FLUSHING, Relaxed);
    drop(grow_tx);
    if let Some(t) = grower {
        let _ = t.join();
    }
    for w in workers {
        let _ = w.join();
    }
    // No periodic write may land after the final one.
    drop(meta_tx);
    if let Some(t) = meta_writer {
        let _ = t.join();
    }
    shared.phase.store(PHASE_FINISHED, Relaxed);
    flow.update(&shared);
    // Blocks still queued now had no disk left to take them.
    let mut leftover = 0;
    for b in shared.queue_rx.try_iter() {
        leftover += 1;
        shared.streams[b.stream]
            .unwritten
            .fetch_add(u64::from(b.frames), Relaxed);
    }
    let lost_blocks = shared.lost_blocks.load(Relaxed) + leftover;
    let status = snapshot(&shared);
    let alive = status.disks.iter().filter(|d| d.failed.is_none()).count();
    let error = if lost_blocks > 0 || (alive == 0 && !shared.config.discard) {
        Some(format!(
            "every disk failed; {lost_blocks} block(s) could not be written"
        ))
    } else {
        None
    };
    let metadata = build_metadata(&shared, &status, error.is_none());
    let recordings = recordings_metadata(&shared, &status, &metadata);
    if shared.config.datastreams.is_empty() {
        write_metadata(&shared, std::slice::from_ref(&metadata));
    } else {
        write_metadata(&shared, &recordings);
    }
    ScanSummary {
        status,
        metadata,
        error,
        recordings,
    }
}
