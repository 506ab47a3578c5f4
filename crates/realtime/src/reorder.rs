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
    /// Set by [`Reorderer::flush_until`]: the stream ends just before this key, so keys up to it that
    /// never arrived are filled once everything held is out.
    tail_end: Option<u64>,
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
            tail_end: None,
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

    /// A VDIF frame keyed by its time stamp and thread ([`KeyMode::VdifTime`]). With [`KeyMode::Psn`], a
    /// wrong length or a frame number at or above the frame rate the frame is counted malformed.
    pub fn push_vdif(&mut self, now: Instant, frame: &[u8]) -> Result<Arrival, Busy> {
        if self.staged.is_some() {
            return Err(Busy);
        }
        match self.classify_vdif(frame) {
            Ok(key) => self.push(now, key, frame),
            Err(arrival) => {
                self.counters.received += 1;
                match arrival {
                    Arrival::UnknownThread => self.counters.unknown_thread += 1,
                    _ => self.counters.malformed += 1,
                }
                Ok(arrival)
            }
        }
    }

    /// The key of a VDIF frame, `None` if [`Reorderer::push_vdif`] would not take it.
    pub fn vdif_key(&mut self, frame: &[u8]) -> Option<u64> {
        self.classify_vdif(frame).ok()
    }

    fn classify_vdif(&mut self, frame: &[u8]) -> Result<u64, Arrival> {
        let Some(keys) = self.vdif.as_mut() else {
            return Err(Arrival::Malformed);
        };
        if frame.len() != self.frame_len {
            return Err(Arrival::Malformed);
        }
        let h = VdifHeader::new_unchecked(frame);
        let position = keys.position[usize::from(h.thread_id())];
        if position == 0 {
            return Err(Arrival::UnknownThread);
        }
        let frame_number = h.frame_number();
        if frame_number >= keys.clock.frame_rate() {
            // A wrong configured rate or a corrupt header: it would alias a frame of the next second.
            return Err(Arrival::Malformed);
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
        let index = keys.clock.index_of(start, h.seconds(), frame_number) as u64;
        let n = keys.threads.len() as u64;
        Ok(index.wrapping_mul(n).wrapping_add(u64::from(position - 1)))
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

    /// End of a stream whose last key is known to be `end - 1` (e.g. a transfer of a known number of
    /// frames): like [`flush`](Self::flush), and then the keys from the newest seen up to `end` are
    /// filled too, since they did not arrive either. An `end` at or behind the newest key adds nothing.
    /// Before any frame arrived there is no stream to end, unless [`start_at`](Self::start_at) set its
    /// start: then every key from there to `end` is filled.
    pub fn flush_until(&mut self, end: u64) {
        self.flush();
        if self.started && Self::ahead(end, self.head) {
            self.tail_end = Some(end);
        }
    }

    /// `a` is ahead of `b` (modulo 2^64, by less than half the key space).
    fn ahead(a: u64, b: u64) -> bool {
        let d = a.wrapping_sub(b);
        d != 0 && d < 1 << 63
    }

    /// Starts the stream at `key` before any frame arrived: keys from `key` up to the first frame that
    /// does arrive are then missing (filled once that frame shows they are due), instead of the stream
    /// starting at whatever arrives first. For a receiver that knows where the stream starts (a
    /// sender's first PSN), so that losing the very first frames is filled like any other loss. Has no
    /// effect once a frame was pushed.
    pub fn start_at(&mut self, key: u64) {
        if !self.started {
            self.started = true;
            self.base = key;
            self.head = key;
        }
    }

    /// When [`Reorderer::poll_output`] has something to give without a push: `None` if nothing will be
    /// ready without another push, a time at or before `now` if output is ready now.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let origin = self.origin?;
        if self.staged.is_some() || self.forced > 0 {
            return Some(origin);
        }
        if self.head == self.base {
            return match self.tail_end {
                Some(end) if Self::ahead(end, self.base) => Some(origin),
                _ => None,
            };
        }
        let s = self.slot(self.base);
        if bit(&self.present, s as u64) {
            return Some(origin);
        }
        // A deadline beyond what `Instant` can hold is never: no timer.
        origin.checked_add(Duration::from_nanos(self.opened[s].saturating_add(self.deadline)))
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
            // Past the newest key: only a known end of stream makes these due (and only fill).
            match self.tail_end {
                Some(end) if Self::ahead(end, key) => self.head = key.wrapping_add(1),
                _ => return None,
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use vlbiflow_formats::fill::{is_mark5b_fill, is_vdif_fill};
    use vlbiflow_formats::time::VdifTime;

    const LEN: usize = 64;
    const D: Duration = Duration::from_millis(200);

    fn psn_reorderer(window: usize) -> Reorderer {
        Reorderer::new(ReorderConfig::new(FrameKind::Vdif, LEN, KeyMode::Psn, window, D)).unwrap()
    }

    /// A frame whose payload names its key.
    fn frame(key: u64) -> [u8; LEN] {
        let mut f = [0u8; LEN];
        f[32..40].copy_from_slice(&key.to_le_bytes());
        f
    }

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    /// Drains the output: (key, real?) pairs, checking real frames carry their key and fill is fill.
    fn drain(r: &mut Reorderer, now: Instant) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        while let Some(o) = r.poll_output(now) {
            match o.kind {
                OutputKind::Real => assert_eq!(o.frame, &frame(o.key)[..]),
                OutputKind::Fill => assert!(is_vdif_fill(o.frame)),
            }
            out.push((o.key, o.kind == OutputKind::Real));
        }
        out
    }

    #[test]
    fn in_order_frames_go_out_at_once() {
        let mut r = psn_reorderer(16);
        let t0 = Instant::now();
        assert_eq!(r.push(t0, 10, &frame(10)), Ok(Arrival::Start));
        assert_eq!(drain(&mut r, t0), [(10, true)]);
        assert_eq!(r.push(t0, 11, &frame(11)), Ok(Arrival::InOrder));
        assert_eq!(drain(&mut r, t0), [(11, true)]);
        assert_eq!(r.poll_timeout(), None);
        assert_eq!(r.counters().delivered, 2);
    }

    #[test]
    fn a_hole_is_filled_when_its_deadline_passes_counted_from_the_successor() {
        let mut r = psn_reorderer(16);
        let t0 = Instant::now();
        r.push(t0, 0, &frame(0)).unwrap();
        r.push(ms(t0, 1), 1, &frame(1)).unwrap();
        assert_eq!(r.push(ms(t0, 5), 3, &frame(3)), Ok(Arrival::Gap { missing: 1 }));
        r.push(ms(t0, 6), 4, &frame(4)).unwrap();
        assert_eq!(drain(&mut r, ms(t0, 6)), [(0, true), (1, true)]);
        // Key 2 became due when 3 arrived at 5 ms: released at 205 ms, not before.
        assert_eq!(r.poll_timeout(), Some(ms(t0, 205)));
        assert_eq!(drain(&mut r, ms(t0, 204)), []);
        assert_eq!(drain(&mut r, ms(t0, 205)), [(2, false), (3, true), (4, true)]);
        // Key 2 now is late, and a copy of 3 a duplicate.
        assert_eq!(r.push(ms(t0, 206), 2, &frame(2)), Ok(Arrival::Late));
        assert_eq!(r.push(ms(t0, 206), 3, &frame(3)), Ok(Arrival::Duplicate));
        let c = r.counters();
        assert_eq!((c.delivered, c.filled, c.late, c.duplicate), (4, 1, 1, 1));
    }

    #[test]
    fn arrival_at_the_deadline_is_late_before_it_in_time_whenever_the_caller_polls() {
        for (arrive, expect) in [
            (
                Duration::from_millis(205) - Duration::from_nanos(1),
                Arrival::OutOfOrder,
            ),
            (Duration::from_millis(205), Arrival::Late),
        ] {
            let mut r = psn_reorderer(16);
            let t0 = Instant::now();
            r.push(t0, 0, &frame(0)).unwrap();
            r.push(ms(t0, 5), 2, &frame(2)).unwrap();
            // No poll in between: the decision rests on arrival times only.
            assert_eq!(r.push(t0 + arrive, 1, &frame(1)), Ok(expect));
            let out = drain(&mut r, ms(t0, 1000));
            let real = expect == Arrival::OutOfOrder;
            assert_eq!(out, [(0, true), (1, real), (2, true)]);
        }
    }

    #[test]
    fn duplicates_held_or_delivered_and_late_copies() {
        let mut r = psn_reorderer(16);
        let t0 = Instant::now();
        r.push(t0, 0, &frame(0)).unwrap();
        r.push(t0, 2, &frame(2)).unwrap();
        assert_eq!(r.push(t0, 2, &frame(2)), Ok(Arrival::Duplicate), "held");
        assert_eq!(drain(&mut r, t0), [(0, true)]);
        assert_eq!(r.push(t0, 0, &frame(0)), Ok(Arrival::Duplicate), "delivered");
        assert_eq!(drain(&mut r, ms(t0, 200)), [(1, false), (2, true)]);
        assert_eq!(r.push(ms(t0, 300), 1, &frame(1)), Ok(Arrival::Late));
        assert_eq!(r.push(ms(t0, 300), 1, &frame(1)), Ok(Arrival::Late));
        assert_eq!(r.counters().duplicate, 2);
        assert_eq!(r.counters().late, 2);
    }

    #[test]
    fn a_full_window_forces_the_oldest_hole_out_before_its_deadline() {
        let mut r = psn_reorderer(4);
        let t0 = Instant::now();
        r.push(t0, 0, &frame(0)).unwrap();
        for k in 2..=4 {
            r.push(t0, k, &frame(k)).unwrap();
        }
        assert_eq!(drain(&mut r, t0), [(0, true)]);
        // Key 5 is 4 ahead of the hole at 1: the hole must go, as fill, at once.
        assert_eq!(r.push(ms(t0, 1), 5, &frame(5)), Ok(Arrival::InOrder));
        assert_eq!(r.push(ms(t0, 1), 6, &frame(6)), Err(Busy));
        assert_eq!(r.push(ms(t0, 1), 1, &frame(1)), Err(Busy));
        assert_eq!(
            drain(&mut r, ms(t0, 1)),
            [(1, false), (2, true), (3, true), (4, true), (5, true)]
        );
        assert_eq!(r.push(ms(t0, 2), 1, &frame(1)), Ok(Arrival::Late));
        let c = r.counters();
        assert_eq!((c.delivered, c.filled, c.late, c.received), (5, 1, 1, 6));
    }

    #[test]
    fn a_jump_beyond_the_window_fills_the_gap_and_waits_for_the_last_window() {
        let mut r = psn_reorderer(4);
        let t0 = Instant::now();
        r.push(t0, 0, &frame(0)).unwrap();
        assert_eq!(
            r.push(ms(t0, 1), 100, &frame(100)),
            Ok(Arrival::Gap { missing: 99 })
        );
        let out = drain(&mut r, ms(t0, 1));
        assert_eq!(out.len(), 97, "0 and the fill of 1..=96");
        assert!(out[1..]
            .iter()
            .enumerate()
            .all(|(i, &(k, real))| k == i as u64 + 1 && !real));
        // 97..=99 may still come until 201 ms.
        assert_eq!(r.push(ms(t0, 2), 98, &frame(98)), Ok(Arrival::OutOfOrder));
        assert_eq!(r.push(ms(t0, 2), 96, &frame(96)), Ok(Arrival::Late));
        // More than two windows behind the newest key: a stray, as in vlbiflow-seq.
        assert_eq!(r.push(ms(t0, 2), 50, &frame(50)), Ok(Arrival::Stray));
        assert_eq!(drain(&mut r, ms(t0, 200)), []);
        assert_eq!(
            drain(&mut r, ms(t0, 201)),
            [(97, false), (98, true), (99, false), (100, true)]
        );
        assert_eq!(r.counters().filled, 98);
    }

    #[test]
    fn strays_are_dropped_and_a_run_of_them_restarts_the_stream() {
        let mut cfg = ReorderConfig::new(FrameKind::Vdif, LEN, KeyMode::Psn, 16, D);
        cfg.max_gap = 1000;
        let mut r = Reorderer::new(cfg).unwrap();
        let t0 = Instant::now();
        for k in 0..5 {
            r.push(t0, k, &frame(k)).unwrap();
        }
        r.push(t0, 6, &frame(6)).unwrap();
        assert_eq!(r.push(t0, 1 << 40, &frame(1 << 40)), Ok(Arrival::Stray));
        assert_eq!(r.push(t0, 7, &frame(7)), Ok(Arrival::InOrder));
        let start = 1u64 << 50;
        for k in start..start + RESTART_AFTER as u64 - 1 {
            assert_eq!(r.push(t0, k, &frame(k)), Ok(Arrival::Stray));
        }
        let last = start + RESTART_AFTER as u64 - 1;
        assert_eq!(r.push(t0, last, &frame(last)), Ok(Arrival::Restart));
        // The old stream is flushed (its hole at 5 filled), then the new one starts at the last stray.
        let out = drain(&mut r, t0);
        let mut want: Vec<(u64, bool)> = (0..8).map(|k| (k, k != 5)).collect();
        want.push((last, true));
        assert_eq!(out, want);
        assert_eq!(r.push(t0, last + 1, &frame(last + 1)), Ok(Arrival::InOrder));
        let c = r.counters();
        assert_eq!((c.stray, c.restarts), (RESTART_AFTER as u64, 1));
        // Far behind the new stream: stray, not late.
        assert_eq!(r.push(t0, 3, &frame(3)), Ok(Arrival::Stray));
    }

    #[test]
    fn a_known_start_and_end_fill_the_lost_first_and_last_frames() {
        let mut r = psn_reorderer(16);
        let t0 = Instant::now();
        r.start_at(100);
        assert_eq!(r.poll_timeout(), None);
        assert!(r.poll_output(t0).is_none());
        // 100 and 101 were lost: 102 opens them.
        assert_eq!(r.push(t0, 102, &frame(102)), Ok(Arrival::Gap { missing: 2 }));
        assert_eq!(drain(&mut r, t0), []);
        assert_eq!(
            drain(&mut r, ms(t0, 200)),
            [(100, false), (101, false), (102, true)]
        );
        r.push(ms(t0, 201), 103, &frame(103)).unwrap();
        // The stream was 100..=106: 104 to 106 never came.
        r.flush_until(107);
        assert_eq!(r.poll_timeout(), Some(t0));
        assert_eq!(
            drain(&mut r, ms(t0, 201)),
            [(103, true), (104, false), (105, false), (106, false)]
        );
        assert_eq!(r.poll_timeout(), None);
        let c = r.counters();
        assert_eq!((c.delivered, c.filled), (2, 5));
        // An end behind the newest key adds nothing; a start after the first push changes nothing.
        let mut r = psn_reorderer(16);
        r.push(t0, 5, &frame(5)).unwrap();
        r.start_at(0);
        r.push(t0, 6, &frame(6)).unwrap();
        r.flush_until(3);
        assert_eq!(drain(&mut r, t0), [(5, true), (6, true)]);
        // Started, nothing arrived: the whole range is fill.
        let mut r = psn_reorderer(16);
        r.start_at(10);
        r.flush_until(13);
        assert_eq!(drain(&mut r, t0), [(10, false), (11, false), (12, false)]);
    }

    #[test]
    fn psn_wraps_past_u64_max() {
        let mut r = psn_reorderer(8);
        let t0 = Instant::now();
        let keys = [u64::MAX - 1, 0, u64::MAX, 1];
        for k in keys {
            r.push(t0, k, &frame(k)).unwrap();
        }
        assert_eq!(
            drain(&mut r, t0),
            [(u64::MAX - 1, true), (u64::MAX, true), (0, true), (1, true)]
        );
        assert_eq!(r.counters().out_of_order, 1);
    }

    #[test]
    fn udps_datagrams_and_malformed_input() {
        let mut r = psn_reorderer(8);
        let t0 = Instant::now();
        let mut d = [0u8; 8 + LEN];
        d[..8].copy_from_slice(&psn::to_bytes(42));
        d[8..].copy_from_slice(&frame(42));
        assert_eq!(r.push_udps(t0, &d), Ok(Arrival::Start));
        assert_eq!(r.push_udps(t0, &d[..5]), Ok(Arrival::Malformed));
        assert_eq!(r.push_udps(t0, &d[..20]), Ok(Arrival::Malformed));
        assert_eq!(r.push_vdif(t0, &frame(1)), Ok(Arrival::Malformed), "PSN mode");
        assert_eq!(drain(&mut r, t0), [(42, true)]);
        assert_eq!(r.counters().malformed, 3);
        assert_eq!(r.counters().received, 4);
    }

    #[test]
    fn mark5b_fill_is_jive5abs() {
        let len = vlbiflow_formats::mark5b::FRAME_LEN;
        let cfg = ReorderConfig::new(FrameKind::M5b, len, KeyMode::Psn, 8, D);
        let mut r = Reorderer::new(cfg).unwrap();
        let t0 = Instant::now();
        let f = vec![0u8; len];
        r.push(t0, 0, &f).unwrap();
        r.push(t0, 2, &f).unwrap();
        r.flush();
        let kinds: Vec<OutputKind> = std::iter::from_fn(|| {
            r.poll_output(t0).map(|o| {
                assert_eq!(o.kind == OutputKind::Fill, is_mark5b_fill(o.frame));
                o.kind
            })
        })
        .collect();
        assert_eq!(kinds, [OutputKind::Real, OutputKind::Fill, OutputKind::Real]);
    }

    const RATE: u32 = 100;
    const SECOND: u32 = 5_000_000;

    fn vdif_frame(thread: u16, index: u32) -> [u8; LEN] {
        let mut f = [0u8; LEN];
        vlbiflow_testkit::vdif::Frame::new(LEN)
            .seconds(SECOND)
            .at(u64::from(index), RATE)
            .thread(thread)
            .station(b"AB")
            .write(&mut f);
        f[40] = 0xee; // payload
        f
    }

    fn vdif_reorderer(threads: Vec<u16>, fill: FillMode) -> Reorderer {
        let key = KeyMode::VdifTime {
            frame_rate: RATE,
            threads,
        };
        let mut cfg = ReorderConfig::new(FrameKind::Vdif, LEN, key, 64, D);
        cfg.fill = fill;
        Reorderer::new(cfg).unwrap()
    }

    /// (thread, index in the test's second count, real?) of each output frame.
    fn drain_vdif(r: &mut Reorderer, now: Instant) -> Vec<(u16, u32, bool)> {
        std::iter::from_fn(|| {
            r.poll_output(now).map(|o| {
                let h = VdifHeader::new_unchecked(o.frame);
                let real = o.kind == OutputKind::Real;
                assert_eq!(real, !is_vdif_fill(o.frame));
                let index = (h.seconds() - SECOND) * RATE + h.frame_number();
                (h.thread_id(), index, real)
            })
        })
        .collect()
    }

    #[test]
    fn vdif_threads_interleave_in_time_order_with_stamped_fill() {
        let mut r = vdif_reorderer(vec![3, 0, 7], FillMode::Stamped);
        let t0 = Instant::now();
        // Index 99 and 100 (across a second), threads arriving in any order; (0, 100) lost.
        let arrivals = [(3, 99), (7, 99), (0, 99), (7, 100), (3, 100), (3, 101)];
        for (thread, index) in arrivals {
            r.push_vdif(t0, &vdif_frame(thread, index)).unwrap();
        }
        assert_eq!(r.push_vdif(t0, &vdif_frame(5, 100)), Ok(Arrival::UnknownThread));
        let mut too_high = vdif_frame(3, 101);
        VdifHeader::new_unchecked(&mut too_high[..]).set_frame_number(RATE);
        assert_eq!(r.push_vdif(t0, &too_high), Ok(Arrival::Malformed));
        assert_eq!(r.push_vdif(t0, &too_high[..32]), Ok(Arrival::Malformed));
        r.flush();
        let out = drain_vdif(&mut r, t0);
        assert_eq!(
            out,
            [
                (3, 99, true),
                (0, 99, true),
                (7, 99, true),
                (3, 100, true),
                (0, 100, false),
                (7, 100, true),
                (3, 101, true)
            ]
        );
        let c = r.counters();
        assert_eq!(
            (c.delivered, c.filled, c.unknown_thread, c.malformed),
            (6, 1, 1, 2)
        );
        assert_eq!(
            c.out_of_order, 2,
            "(0, 99) after (7, 99); (3, 100) after (7, 100)"
        );
        // A frame older than the first one is late (the stream starts at its first frame).
        let mut r = vdif_reorderer(vec![3, 0, 7], FillMode::Stamped);
        r.push_vdif(t0, &vdif_frame(0, 99)).unwrap();
        assert_eq!(r.push_vdif(t0, &vdif_frame(3, 99)), Ok(Arrival::Late));
    }

    #[test]
    fn stamped_fill_header_names_the_missing_frame_and_jive5ab_fill_does_not() {
        for mode in [FillMode::Stamped, FillMode::Jive5ab] {
            let mut r = vdif_reorderer(vec![1], mode);
            let t0 = Instant::now();
            r.push_vdif(t0, &vdif_frame(1, 5)).unwrap();
            r.push_vdif(t0, &vdif_frame(1, 7)).unwrap();
            r.flush();
            let mut frames = Vec::new();
            while let Some(o) = r.poll_output(t0) {
                frames.push(o.frame.to_vec());
            }
            let fill = &frames[1];
            assert!(is_vdif_fill(fill));
            let h = VdifHeader::new_unchecked(&fill[..]);
            assert!(h.invalid());
            assert_eq!(h.frame_len(), LEN);
            if mode == FillMode::Stamped {
                let t = VdifTime {
                    epoch: h.epoch(),
                    seconds: h.seconds(),
                    frame: h.frame_number(),
                };
                assert_eq!(
                    t,
                    VdifTime {
                        epoch: 48,
                        seconds: SECOND,
                        frame: 6
                    }
                );
                assert_eq!(
                    (h.thread_id(), h.station_id(), h.bits_per_sample()),
                    (1, 0x4142, 2)
                );
            } else {
                let mut jive = vec![0u8; LEN];
                write_fill(FrameKind::Vdif, &mut jive);
                assert_eq!(fill, &jive);
            }
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok = ReorderConfig::new(FrameKind::Vdif, LEN, KeyMode::Psn, 8, D);
        let bad = |f: &dyn Fn(&mut ReorderConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            Reorderer::new(c).unwrap_err()
        };
        assert!(matches!(bad(&|c| c.frame_len = 60), ConfigError::FrameLen(60, _)));
        assert!(matches!(
            bad(&|c| c.kind = FrameKind::M5b),
            ConfigError::FrameLen(..)
        ));
        assert_eq!(bad(&|c| c.window = 0), ConfigError::Window(0));
        assert_eq!(
            bad(&|c| c.fill = FillMode::Stamped),
            ConfigError::StampedNeedsVdifTime
        );
        let threads = |t: Vec<u16>| KeyMode::VdifTime {
            frame_rate: 10,
            threads: t,
        };
        assert!(matches!(
            bad(&|c| c.key = threads(vec![])),
            ConfigError::Threads(_)
        ));
        assert!(matches!(
            bad(&|c| c.key = threads(vec![1, 1])),
            ConfigError::Threads(_)
        ));
        assert!(matches!(
            bad(&|c| c.key = threads(vec![1024])),
            ConfigError::Threads(_)
        ));
        let rate0 = KeyMode::VdifTime {
            frame_rate: 0,
            threads: vec![0],
        };
        assert_eq!(bad(&|c| c.key = rate0.clone()), ConfigError::FrameRate(0));
        assert_eq!(
            Reorderer::new(ReorderConfig { window: 5, ..ok })
                .unwrap()
                .window(),
            8
        );
    }
}

#[cfg(test)]
mod timeout_tests {
    use super::*;

    #[test]
    fn an_unrepresentable_deadline_means_no_timer_not_a_panic() {
        let cfg = ReorderConfig::new(FrameKind::Vdif, 32, KeyMode::Psn, 4, Duration::MAX);
        let mut r = Reorderer::new(cfg).unwrap();
        let t0 = Instant::now();
        r.push(t0, 0, &[0; 32]).unwrap();
        r.push(t0, 2, &[0; 32]).unwrap();
        assert!(r.poll_output(t0).is_some());
        // Saturated at u64::MAX ns (584 years): a timer that far ahead, or none.
        let later = t0 + Duration::from_secs(1 << 30);
        assert!(r.poll_timeout().is_none_or(|t| t > later));
        assert!(r.poll_output(later).is_none());
    }
}
