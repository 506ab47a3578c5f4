//! Correlator side: reorder frames within a window and deliver a continuous stream with fill frames where
//! data did not arrive in time.
//!
//! # Keys
//! Every frame has a 64-bit key; consecutive frames of the stream have consecutive keys (wrapping at
//! `u64::MAX`, as PSNs may). [`KeyMode::Psn`]: the key is the 8-byte packet sequence number in front of the
//! frame (`udps`). [`KeyMode::VdifTime`]: the key is `index x threads + position`, where `index` is the
//! frame's global time index ([`FrameClock`]: POSIX second x frame rate + frame number) and `position` is
//! the place of the frame's thread in the configured thread list. With several threads this one composite
//! key orders the output by time, and within one time stamp by the thread list, so one reorder ring serves
//! all threads (see `docs/realtime.md` for why this and not one lane per thread).
//!
//! # The fill rule
//! A key between the first key and the newest key seen is *opened* (known to be due) at the arrival time of
//! the first frame with a later key. Its frame is *in time* if it arrives strictly before
//! `opened + deadline` and before the window forced its release (a frame `window` or more keys ahead of it
//! arrived). Output key `k` is the real frame if and only if that frame arrived in time; otherwise it is a
//! fill frame. A frame arriving after that is dropped and counted `late`. The decision depends only on the
//! arrival times given to [`Reorderer::push`], never on when the caller polls.
//!
//! # Driving it
//! ```text
//! loop {
//!     wait for a datagram or until poll_timeout();
//!     if a datagram came: push_udps(now, datagram) / push_vdif(now, frame)
//!     while let Some(out) = poll_output(now) { write out.frame }
//! }
//! at end of stream: flush(); while let Some(out) = poll_output(now) { write out.frame }
//! ```
//! A frame so far ahead that older frames must leave the ring first is held in a one-frame staging slot
//! until `poll_output` has released them; a push before that drain returns [`Busy`] without consuming the
//! frame (a caller that drains after every push never sees it).

use std::time::{Duration, Instant};

use vlbiflow_formats::fill::write_fill;
use vlbiflow_formats::time::{epoch_start_unix, FrameClock};
use vlbiflow_formats::vdif::{self, VdifHeader, MAX_THREAD_ID};
use vlbiflow_formats::{psn, FrameKind};
use vlbiflow_seq::{DEFAULT_MAX_GAP, RESTART_AFTER};

/// How frames are keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMode {
    /// The 8-byte little-endian PSN in front of each frame (jive5ab `udps`, Mark6 d-plane).
    Psn,
    /// VDIF time stamps at `frame_rate` frames per second per thread; `threads` lists the thread ids of the
    /// stream in output order (frames of other threads are counted `unknown_thread` and dropped).
    VdifTime { frame_rate: u32, threads: Vec<u16> },
}

/// What a fill frame's VDIF header holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FillMode {
    /// jive5ab's layout ([`vlbiflow_formats::fill`]): invalid bit, frame length, all else zero; words 4 on
    /// the fill word. The position in the stream says which frame is missing.
    #[default]
    Jive5ab,
    /// As jive5ab, but words 0-3 carry the missing frame's time, thread and the stream's station and format
    /// (copied from the last real frame), with the invalid bit set. Needs [`KeyMode::VdifTime`]. Readers that
    /// recognise fill by the invalid bit and the fill words (DiFX, this workspace) see fill either way.
    Stamped,
}

/// Configuration of a [`Reorderer`].
#[derive(Debug, Clone)]
pub struct ReorderConfig {
    pub kind: FrameKind,
    /// Bytes per frame (without the PSN).
    pub frame_len: usize,
    pub key: KeyMode,
    /// Frames held for reordering; rounded up to a power of two. Memory is `window x frame_len`.
    pub window: usize,
    /// How long after a frame is known to be due it may still arrive.
    pub deadline: Duration,
    /// Largest forward jump in keys that is filled; a larger one is a stray (and, repeated, a restart).
    pub max_gap: u64,
    pub fill: FillMode,
}

impl ReorderConfig {
    /// A configuration with jive5ab fill and the workspace's default `max_gap`.
    pub fn new(kind: FrameKind, frame_len: usize, key: KeyMode, window: usize, deadline: Duration) -> Self {
        ReorderConfig {
            kind,
            frame_len,
            key,
            window,
            deadline,
            max_gap: DEFAULT_MAX_GAP,
            fill: FillMode::Jive5ab,
        }
    }
}

/// A configuration that cannot work; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("frame length {0}: {1}")]
    FrameLen(usize, &'static str),
    #[error("window {0}: must be 1..=2^24 frames and window x frame length must fit in memory")]
    Window(usize),
    #[error("frame rate {0}: must be 1..=2^24 frames per second")]
    FrameRate(u32),
    #[error("thread list: {0}")]
    Threads(&'static str),
    #[error("stamped fill needs VDIF frames keyed by VDIF time")]
    StampedNeedsVdifTime,
}

/// Largest window accepted (frames).
pub const MAX_WINDOW: usize = 1 << 24;

/// What one pushed frame was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The first frame, which starts the stream.
    Start,
    /// The next key after the newest.
    InOrder,
    /// Ahead of the newest key by `missing + 1`: `missing` keys are now due.
    Gap { missing: u64 },
    /// A due key arriving in time after a later one: stored.
    OutOfOrder,
    /// Arrived after its slot was released (as fill) or after its deadline: dropped.
    Late,
    /// A key already held or delivered: dropped.
    Duplicate,
    /// Far outside the stream (more than `2 x window` behind the newest key or more than `max_gap` ahead of
    /// it): dropped; [`RESTART_AFTER`] in a row that continue each other are a [`Arrival::Restart`].
    Stray,
    /// The last of a run of strays continuing each other: the stream restarts on this frame after the held
    /// frames are flushed. The earlier frames of the run stay counted stray and are not delivered.
    Restart,
    /// Wrong length or no PSN: dropped.
    Malformed,
    /// A VDIF thread not in the configured list: dropped.
    UnknownThread,
}

/// A push that must wait: drain [`Reorderer::poll_output`] first. The frame was not consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("reorderer busy: drain poll_output before pushing again")]
pub struct Busy;

/// Counters of a [`Reorderer`]. Every pushed frame is counted once in `received` and, at any time, is in
/// exactly one of `delivered`, `late`, `duplicate`, `stray`, `malformed`, `unknown_thread` or held
/// ([`Reorderer::held`]). `out_of_order` counts the in-time frames that came after a later key (they are
/// also delivered). `delivered + filled` is the length of the output stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReorderCounters {
    pub received: u64,
    pub delivered: u64,
    pub filled: u64,
    pub late: u64,
    pub duplicate: u64,
    pub out_of_order: u64,
    pub stray: u64,
    pub restarts: u64,
    pub malformed: u64,
    pub unknown_thread: u64,
}

/// Whether an output frame is data or fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    Real,
    Fill,
}

/// One frame of the output stream, borrowed from the reorderer until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output<'a> {
    pub key: u64,
    pub kind: OutputKind,
    pub frame: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
struct Staged {
    key: u64,
    at: u64,
    restart: bool,
}

#[derive(Debug, Clone)]
struct VdifKeys {
    clock: FrameClock,
    threads: Vec<u16>,
    /// Position + 1 of each thread id in `threads`, 0 if absent.
    position: Vec<u16>,
    cached_epoch: Option<(u8, i64)>,
}

/// The correlator-side reorder state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct Reorderer {
    kind: FrameKind,
    frame_len: usize,
    vdif: Option<VdifKeys>,
    stamped: bool,
    deadline: u64,
    max_gap: u64,
    window: u64,
    mask: u64,
    /// `window` slots of `frame_len` bytes; key `k` lives in slot `k & mask`.
    ring: Vec<u8>,
    /// Bit per slot: the frame of the slot's key is held.
    present: Vec<u64>,
    /// Per slot: when the slot's key was opened (ns since `origin`).
    opened: Vec<u64>,
    /// Bit per key in `2 x window`: the key was released as a real frame (late vs duplicate for keys in
    /// `[head - 2 x window, base)`).
    history: Vec<u64>,
    started: bool,
    /// Next key to output.
    base: u64,
    /// One past the newest key held or opened.
    head: u64,
    /// Keys from `base` that must be released whatever their deadline.
    forced: u64,
    staged: Option<Staged>,
    staged_frame: Vec<u8>,
    fill_frame: Vec<u8>,
    /// Words 0-3 of the last real frame (stamped fill).
    template: Option<[u8; 16]>,
    run_last: u64,
    run_len: usize,
    origin: Option<Instant>,
    counters: ReorderCounters,
}

fn bit(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] & (1 << (i % 64)) != 0
}

fn set_bit(bits: &mut [u64], i: u64, value: bool) {
    let w = &mut bits[(i / 64) as usize];
    if value {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
}

impl Reorderer {
    pub fn new(config: ReorderConfig) -> Result<Self, ConfigError> {
        let len = config.frame_len;
        match config.kind {
            FrameKind::Vdif => {
                if len < vdif::HEADER_LEN || len % 8 != 0 || len > vdif::MAX_FRAME_LEN {
                    return Err(ConfigError::FrameLen(
                        len,
                        "a VDIF frame is a multiple of 8 bytes, 32 or more",
                    ));
                }
            }
            FrameKind::M5b => {
                if len != vlbiflow_formats::mark5b::FRAME_LEN {
                    return Err(ConfigError::FrameLen(len, "a Mark5B frame is 10016 bytes"));
                }
            }
        }
        if config.window == 0 || config.window > MAX_WINDOW {
            return Err(ConfigError::Window(config.window));
        }
        let window = config.window.next_power_of_two();
        let ring_len = window
            .checked_mul(len)
            .filter(|&n| n <= isize::MAX as usize / 2)
            .ok_or(ConfigError::Window(config.window))?;
        let vdif = match &config.key {
            KeyMode::Psn => None,
            KeyMode::VdifTime { frame_rate, threads } => {
                let clock = FrameClock::new(*frame_rate).map_err(|_| ConfigError::FrameRate(*frame_rate))?;
                if threads.is_empty() {
                    return Err(ConfigError::Threads("at least one thread is needed"));
                }
                let mut position = vec![0u16; usize::from(MAX_THREAD_ID) + 1];
                for (i, &t) in threads.iter().enumerate() {
                    if t > MAX_THREAD_ID {
                        return Err(ConfigError::Threads("thread ids are 0..=1023"));
                    }
                    if position[usize::from(t)] != 0 {
                        return Err(ConfigError::Threads("a thread is listed twice"));
                    }
                    position[usize::from(t)] = i as u16 + 1;
                }
                Some(VdifKeys {
                    clock,
                    threads: threads.clone(),
                    position,
                    cached_epoch: None,
                })
            }
        };
        let stamped = config.fill == FillMode::Stamped;
        if stamped && (vdif.is_none() || config.kind != FrameKind::Vdif) {
            return Err(ConfigError::StampedNeedsVdifTime);
        }
        let mut fill_frame = vec![0u8; len];
        write_fill(config.kind, &mut fill_frame);
        let w = window as u64;
        Ok(Reorderer {
            kind: config.kind,
            frame_len: len,
            vdif,
            stamped,
            deadline: u64::try_from(config.deadline.as_nanos()).unwrap_or(u64::MAX),
            max_gap: config.max_gap.max(w),
            window: w,
            mask: w - 1,
            ring: vec![0; ring_len],
            present: vec![0; window.div_ceil(64)],
            opened: vec![0; window],
            history: vec![0; (2 * window).div_ceil(64)],
            started: false,
            base: 0,
            head: 0,
            forced: 0,
            staged: None,
            staged_frame: vec![0; len],
            fill_frame,
            template: None,
            run_last: 0,
            run_len: 0,
            origin: None,
            counters: ReorderCounters::default(),
        })
    }

    pub fn counters(&self) -> ReorderCounters {
        self.counters
    }

    /// The window in frames (the configured one rounded up to a power of two).
    pub fn window(&self) -> u64 {
        self.window
    }

    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    pub fn kind(&self) -> FrameKind {
        self.kind
    }

    /// Next key to be output, once the stream started.
    pub fn next_key(&self) -> Option<u64> {
        self.started.then_some(self.base)
    }

    /// Frames received and not yet output (held in the ring or staged).
    pub fn held(&self) -> u64 {
        let ring: u64 = self.present.iter().map(|w| u64::from(w.count_ones())).sum();
        ring + u64::from(self.staged.is_some())
    }

    fn ns(&mut self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
    }

    #[inline]
    fn slot(&self, key: u64) -> usize {
        (key & self.mask) as usize
    }

    fn store(&mut self, key: u64, frame: &[u8]) {
        let s = self.slot(key);
        self.ring[s * self.frame_len..(s + 1) * self.frame_len].copy_from_slice(frame);
        set_bit(&mut self.present, s as u64, true);
    }

    /// Marks keys `[head, to)` due since `at`; `to - head < window`.
    fn open_to(&mut self, to: u64, at: u64) {
        let mut k = self.head;
        while k != to {
            let s = self.slot(k);
            self.opened[s] = at;
            k = k.wrapping_add(1);
        }
    }

    fn history_index(&self, key: u64) -> u64 {
        key & (2 * self.window - 1)
    }

    /// A frame with the PSN in front (`udps`).
    pub fn push_udps(&mut self, now: Instant, datagram: &[u8]) -> Result<Arrival, Busy> {
        if self.staged.is_some() {
            return Err(Busy);
        }
        match psn::read_prefix(datagram) {
            Some(key) => self.push(now, key, &datagram[psn::PSN_LEN..]),
            None => {
                self.counters.received += 1;
                self.counters.malformed += 1;
                Ok(Arrival::Malformed)
            }
        }
    }

    /// A VDIF frame keyed by its time stamp and thread ([`KeyMode::VdifTime`]). With [`KeyMode::Psn`] the
    /// frame is counted malformed.
    pub fn push_vdif(&mut self, now: Instant, frame: &[u8]) -> Result<Arrival, Busy> {
        if self.staged.is_some() {
            return Err(Busy);
        }
        let Some(key) = self.vdif_key(frame) else {
            self.counters.received += 1;
            if self.vdif.is_some() && frame.len() == self.frame_len {
                self.counters.unknown_thread += 1;
                return Ok(Arrival::UnknownThread);
            }
            self.counters.malformed += 1;
            return Ok(Arrival::Malformed);
        };
        self.push(now, key, frame)
    }

    /// The key of a VDIF frame of the right length, `None` for a wrong length or an unknown thread.
    pub fn vdif_key(&mut self, frame: &[u8]) -> Option<u64> {
        let keys = self.vdif.as_mut()?;
        if frame.len() != self.frame_len {
            return None;
        }
        let h = VdifHeader::new_unchecked(frame);
        let position = keys.position[usize::from(h.thread_id())];
        if position == 0 {
            return None;
        }
        let epoch = h.epoch();
        let start = match keys.cached_epoch {
            Some((e, start)) if e == epoch => start,
            _ => {
                let start = epoch_start_unix(epoch);
                keys.cached_epoch = Some((epoch, start));
                start
            }
        };
        let index = keys.clock.index_of(start, h.seconds(), h.frame_number()) as u64;
        let n = keys.threads.len() as u64;
        Some(index.wrapping_mul(n).wrapping_add(u64::from(position - 1)))
    }

    /// Accounts for and (if it belongs in the output) stores frame `key` arriving at `now`.
    pub fn push(&mut self, now: Instant, key: u64, frame: &[u8]) -> Result<Arrival, Busy> {
        if self.staged.is_some() {
            return Err(Busy);
        }
        self.counters.received += 1;
        if frame.len() != self.frame_len {
            self.counters.malformed += 1;
            return Ok(Arrival::Malformed);
        }
        let now = self.ns(now);
        if !self.started {
            self.started = true;
            self.base = key;
            self.head = key.wrapping_add(1);
            self.store(key, frame);
            return Ok(Arrival::Start);
        }
        let off = key.wrapping_sub(self.base);
        let span = self.head.wrapping_sub(self.base);
        if off < span {
            self.run_len = 0;
            let s = self.slot(key);
            if bit(&self.present, s as u64) {
                self.counters.duplicate += 1;
                return Ok(Arrival::Duplicate);
            }
            if off < self.forced || now >= self.opened[s].saturating_add(self.deadline) {
                self.counters.late += 1;
                return Ok(Arrival::Late);
            }
            self.store(key, frame);
            self.counters.out_of_order += 1;
            return Ok(Arrival::OutOfOrder);
        }
        // Released keys: those in the `2 x window` before `head` have a history bit. Measured from `head`
        // (set by arrivals only), so the classification does not depend on when the caller polled.
        let behind_head = self.head.wrapping_sub(key);
        if behind_head > span && behind_head <= 2 * self.window {
            self.run_len = 0;
            if bit(&self.history, self.history_index(key)) {
                self.counters.duplicate += 1;
                return Ok(Arrival::Duplicate);
            }
            self.counters.late += 1;
            return Ok(Arrival::Late);
        }
        let missing = key.wrapping_sub(self.head);
        if missing <= self.max_gap {
            self.run_len = 0;
            if off < self.window {
                self.open_to(key, now);
                self.store(key, frame);
                self.head = key.wrapping_add(1);
            } else {
                // Older keys must leave the ring first: everything before `key - window + 1`.
                self.forced = self.forced.max(off - self.window + 1);
                self.stage(key, now, frame, false);
            }
            return Ok(if missing == 0 {
                Arrival::InOrder
            } else {
                Arrival::Gap { missing }
            });
        }
        // Far outside: a stray, or a run of them that is a new stream (vlbiflow-seq semantics).
        let continues = self.run_len > 0 && {
            let step = key.wrapping_sub(self.run_last);
            step != 0 && step <= self.max_gap
        };
        if !continues {
            self.run_len = 0;
        }
        self.run_last = key;
        self.run_len += 1;
        if self.run_len < RESTART_AFTER {
            self.counters.stray += 1;
            return Ok(Arrival::Stray);
        }
        self.run_len = 0;
        self.counters.restarts += 1;
        self.forced = span;
        self.stage(key, now, frame, true);
        Ok(Arrival::Restart)
    }

    fn stage(&mut self, key: u64, at: u64, frame: &[u8], restart: bool) {
        self.staged_frame.copy_from_slice(frame);
        self.staged = Some(Staged { key, at, restart });
    }

    fn commit_staged(&mut self, st: Staged) {
        if st.restart {
            self.base = st.key;
            self.head = st.key;
            self.history.iter_mut().for_each(|w| *w = 0);
        }
        self.open_to(st.key, st.at);
        let s = self.slot(st.key);
        let len = self.frame_len;
        self.ring[s * len..(s + 1) * len].copy_from_slice(&self.staged_frame);
        set_bit(&mut self.present, s as u64, true);
        self.head = st.key.wrapping_add(1);
    }

    /// End of stream: everything held is released (missing keys up to the newest as fill).
    pub fn flush(&mut self) {
        self.forced = self.head.wrapping_sub(self.base);
    }

    /// When [`Reorderer::poll_output`] has something to give without a push: `None` if nothing is pending,
    /// a time at or before `now` if output is ready now.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let origin = self.origin?;
        if self.staged.is_some() || self.forced > 0 {
            return Some(origin);
        }
        if self.head == self.base {
            return None;
        }
        let s = self.slot(self.base);
        if bit(&self.present, s as u64) {
            return Some(origin);
        }
        Some(origin + Duration::from_nanos(self.opened[s].saturating_add(self.deadline)))
    }

    /// The next frame of the output stream, if one is ready at `now`.
    pub fn poll_output(&mut self, now: Instant) -> Option<Output<'_>> {
        if !self.started {
            return None;
        }
        let now = self.ns(now);
        if self.forced == 0 {
            if let Some(st) = self.staged.take() {
                self.commit_staged(st);
            }
        }
        let key = self.base;
        let hi = self.history_index(key);
        if self.head != key {
            let s = self.slot(key);
            if bit(&self.present, s as u64) {
                set_bit(&mut self.present, s as u64, false);
                set_bit(&mut self.history, hi, true);
                self.advance();
                self.counters.delivered += 1;
                let frame = &self.ring[s * self.frame_len..(s + 1) * self.frame_len];
                if self.stamped {
                    let mut t = [0u8; 16];
                    t.copy_from_slice(&frame[..16]);
                    self.template = Some(t);
                }
                let frame = &self.ring[s * self.frame_len..(s + 1) * self.frame_len];
                return Some(Output {
                    key,
                    kind: OutputKind::Real,
                    frame,
                });
            }
            if self.forced == 0 && now < self.opened[s].saturating_add(self.deadline) {
                return None;
            }
        } else if self.forced == 0 {
            return None;
        } else {
            // Keys skipped by a jump beyond the window: never held, pure fill.
            self.head = key.wrapping_add(1);
        }
        set_bit(&mut self.history, hi, false);
        self.advance();
        self.counters.filled += 1;
        if self.stamped {
            self.stamp_fill(key);
        }
        Some(Output {
            key,
            kind: OutputKind::Fill,
            frame: &self.fill_frame,
        })
    }

    fn advance(&mut self) {
        self.base = self.base.wrapping_add(1);
        self.forced = self.forced.saturating_sub(1);
    }

    /// Writes the missing frame's time and thread into the fill frame's header (stamped mode).
    fn stamp_fill(&mut self, key: u64) {
        let (Some(keys), Some(t)) = (&self.vdif, self.template) else {
            return;
        };
        let n = keys.threads.len() as u64;
        let thread = keys.threads[(key % n) as usize];
        let template = VdifHeader::new_unchecked(&t[..]);
        let Ok(time) = keys.clock.time_of((key / n) as i64, template.epoch()) else {
            write_fill(self.kind, &mut self.fill_frame);
            return;
        };
        let legacy = template.legacy();
        let mut h = VdifHeader::new_unchecked(&mut self.fill_frame[..]);
        h.set_raw_word(2, template.raw_word(2));
        h.set_raw_word(3, template.raw_word(3));
        h.set_raw_word(0, 0);
        h.set_raw_word(1, 0);
        h.set_invalid(true);
        h.set_legacy(legacy);
        h.set_epoch(time.epoch);
        h.set_time(time.seconds, time.frame);
        h.set_thread_id(thread);
    }
}
