//! Datastreams on the capture side: each stored frame's recording is found once, where the frame is
//! classified ([`Routing::tag`]: one [`Router`] table load once its thread has been seen, then one load
//! from the router-slot -> recording map), and noted in order beside the frames. Receiving is unchanged
//! (one destination block per stream); when a block is sealed its frames are split by recording
//! ([`StreamCapture::seal_routed`]): the frames of one recording without a block in progress are moved
//! down in place, and that block becomes the recording's; every other frame is copied into its
//! recording's block in progress (taken from the pool on its first frame), which is sealed, with the
//! recording's next chunk number, when full. No allocation, lock or format per frame: the cold path
//! (a thread's first frame, a new recording) expands a name and locks once.

use std::collections::VecDeque;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering::AcqRel;

use vlbiflow_scan::datastream::{Router, Rule, MAX_RECORDINGS};

use super::StreamCapture;
use crate::engine::Shared;
use crate::pool::Block;

/// [`Routing::global`] entry: the router slot has no recording index yet.
const UNMAPPED: u8 = u8::MAX;
/// Frames a stream may have kept before its block is sealed: a block plus one batch's spill, for the
/// note of their recordings (grown once if a batch brings more).
const TAGS_ROOM: usize = 1 << 16;

/// One stream's datastream routing.
pub(crate) struct Routing {
    router: Router,
    /// Router slot -> index in the scan's recordings ([`crate::datastreams::Recordings`]).
    global: [u8; MAX_RECORDINGS],
    /// The recording of every frame kept and not yet sealed, in order.
    pub(super) tags: VecDeque<u8>,
    /// By recording: its block in progress.
    staging: Vec<Option<Block>>,
    /// Some rule names a sender: the capture thread must read each datagram's source address.
    pub(super) by_sender: bool,
}

impl Routing {
    pub fn new(rules: Vec<Rule>) -> Self {
        let by_sender = rules
            .iter()
            .flat_map(|r| &r.specs)
            .any(|m| m.host.is_some() || m.port.is_some());
        Routing {
            router: Router::new(rules),
            global: [UNMAPPED; MAX_RECORDINGS],
            tags: VecDeque::with_capacity(TAGS_ROOM),
            staging: (0..MAX_RECORDINGS).map(|_| None).collect(),
            by_sender,
        }
    }

    /// The recording of a VDIF frame of `station`, `thread` from `sender`; `None`: no datastream takes it
    /// (or it would open more recordings than a scan may have).
    #[inline]
    pub(super) fn tag(
        &mut self,
        shared: &Shared,
        station: u16,
        thread: u16,
        sender: Option<SocketAddr>,
    ) -> Option<u8> {
        let sender = match sender {
            Some(SocketAddr::V4(a)) => Some(a),
            Some(SocketAddr::V6(a)) => a.ip().to_ipv4_mapped().map(|ip| SocketAddrV4::new(ip, a.port())),
            None => None,
        };
        let slot = self.router.slot(station, thread, sender)?;
        match self.global[usize::from(slot)] {
            UNMAPPED => self.map(shared, slot),
            g => Some(g),
        }
    }

    #[cold]
    fn map(&mut self, shared: &Shared, slot: u8) -> Option<u8> {
        let name = self.router.recording_name(&shared.config.scan, slot)?;
        let g = shared.recordings.index(&name)?;
        self.global[usize::from(slot)] = g;
        Some(g)
    }
}

/// The VDIF station id and thread id of a frame (header word 3).
#[inline]
pub(super) fn station_thread(frame: &[u8]) -> (u16, u16) {
    let w = u32::from_le_bytes([frame[12], frame[13], frame[14], frame[15]]);
    (w as u16, ((w >> 16) & 0x3ff) as u16)
}

impl StreamCapture {
    /// Splits the current block by recording (see the module) and seals the recordings' full blocks.
    pub(super) fn seal_routed(&mut self, shared: &Shared) {
        let Some(mut r) = self.route.take() else { return };
        if let Some(block) = self.current.take() {
            self.split(shared, &mut r, block);
        }
        self.route = Some(r);
    }

    fn split(&mut self, shared: &Shared, r: &mut Routing, mut block: Block) {
        let fs = self.spec.frame_size as usize;
        let fpb = self.frames_per_block;
        let mut land: Option<u8> = None;
        let mut kept = 0usize;
        for i in 0..block.frames as usize {
            let tag = r.tags.pop_front().unwrap_or(0);
            let t = usize::from(tag);
            let from = i * fs;
            if land == Some(tag) || (land.is_none() && r.staging[t].is_none()) {
                land = Some(tag);
                block.frame_area_mut().copy_within(from..from + fs, kept * fs);
                kept += 1;
                continue;
            }
            if r.staging[t].is_none() {
                r.staging[t] = self.take_free_block(shared);
            }
            let Some(dst) = r.staging[t].as_mut() else {
                // No free block: the frame is not stored after all.
                let (_, thread) = station_thread(&block.frame_area_mut()[from..from + fs]);
                self.unstored_at_seal(thread);
                continue;
            };
            let at = dst.frames as usize * fs;
            dst.frame_area_mut()[at..at + fs].copy_from_slice(&block.frame_area_mut()[from..from + fs]);
            dst.frames += 1;
            if dst.frames as usize == fpb {
                let full = r.staging[t].take();
                self.seal_recording(shared, full, tag);
            }
        }
        match land {
            Some(tag) if kept == fpb => {
                block.frames = kept as u32;
                self.seal_recording(shared, Some(block), tag);
            }
            Some(tag) => {
                block.frames = kept as u32;
                r.staging[usize::from(tag)] = Some(block);
            }
            None => {
                block.reset();
                shared.free.put(block);
            }
        }
    }

    /// Seals every recording's block in progress (the end of the scan).
    pub(super) fn flush_routed(&mut self, shared: &Shared) {
        self.seal_routed(shared);
        let Some(mut r) = self.route.take() else { return };
        for tag in 0..MAX_RECORDINGS as u8 {
            let b = r.staging[usize::from(tag)].take();
            self.seal_recording(shared, b, tag);
        }
        self.route = Some(r);
    }

    /// Queues `block` (frames of recording `tag`) for the writers with the recording's next chunk number.
    fn seal_recording(&mut self, shared: &Shared, block: Option<Block>, tag: u8) {
        let Some(mut block) = block else { return };
        if block.frames == 0 {
            block.reset();
            shared.free.put(block);
            return;
        }
        block.len = block.frames as usize * self.spec.frame_size as usize;
        block.stream = self.index;
        block.recording = tag;
        block.number = shared.recordings.sealed(tag, self.index, block.frames);
        shared.in_flight.fetch_add(1, AcqRel);
        let _ = shared.queue_tx.send(block);
    }

    /// A frame counted as stored that found no block in its recording: dropped for want of a buffer, and
    /// lost (its number was taken by the trackers as stored).
    #[cold]
    fn unstored_at_seal(&mut self, thread: u16) {
        let fs = u64::from(self.spec.frame_size);
        self.counters.packets = self.counters.packets.saturating_sub(1);
        self.counters.bytes = self.counters.bytes.saturating_sub(fs);
        self.counters.dropped_no_buffer += 1;
        let psn = self.psn.is_some();
        match self.threads[usize::from(thread)].as_mut() {
            Some(th) => {
                th.status.packets = th.status.packets.saturating_sub(1);
                th.status.bytes = th.status.bytes.saturating_sub(fs);
                if !psn {
                    th.unstored += 1;
                }
            }
            None if !psn => self.unstored += 1,
            None => {}
        }
        if psn {
            self.unstored += 1;
        }
    }
}
