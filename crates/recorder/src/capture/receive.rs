//! One capture thread's receive: laying a batch of messages out over the free part of a block (with
//! overflow areas for GRO super-datagrams), `recvmmsg` into it with every datagram's PSN split off into a
//! side array (one iovec pair per GRO segment, so the frames of a super-datagram land in their slots), and
//! moving the kept frames into consecutive slots.

use std::io;
use std::net::UdpSocket;
use std::time::Duration;

use vlbiflow_udp::{BatchReceiver, RecvMeta, MAX_RECV_PARTS};

use crate::pool::Block;

/// Spare bytes each message of a GRO socket gets behind its frame slots: a super-datagram carries at
/// most 64 KiB of UDP payload, so with this nothing is ever truncated, however many segments arrive.
pub(super) const OVERFLOW: usize = 1 << 16;

/// Most datagrams per message that get their own PSN slot and frame slot (two iovecs each, plus one for
/// the overflow area); further segments of a super-datagram go to the overflow area and are copied.
pub(super) const MAX_SPLIT: usize = (MAX_RECV_PARTS - 1) / 2;

/// How one receive lays messages out over the free part of a block.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Frame size (the block's slot size).
    pub(super) slot: usize,
    /// Bytes in front of every frame on the wire: 8 with a PSN, else 0.
    pub(super) prefix: usize,
    /// Datagrams expected per message: each message gets room for this many in the block.
    pub(super) span: usize,
    /// The socket has GRO: give every message an overflow area.
    pub(super) gro: bool,
}

/// Where one message's bytes went. Without a prefix: the first `main` bytes into the block area at
/// `base`, the rest into its overflow area. With one (`k` >= 1): each of the first `k` datagrams
/// (`prefix + slot` bytes) with its prefix into PSN slot `head + j` and its frame into the block area at
/// `base + j * slot` (`main` = `k * slot`), the rest into its overflow area. With one and `k` = 0 (less than
/// a frame of room): the first `prefix` bytes into PSN slot `head`, the next `main` into the area at `base`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Region {
    pub(super) base: usize,
    pub(super) main: usize,
    /// Datagrams with a slot of their own in the area (PSN streams).
    pub(super) k: usize,
    /// First PSN slot of this message.
    pub(super) head: usize,
}

/// Where a kept frame's bytes are after the receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Src {
    /// At this offset in the block area (may have to move down or up to its slot).
    Area(usize),
    /// At this offset in the overflow buffer (copied to its slot).
    Overflow(usize),
}

/// Where a message offset range lies, if it lies within one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Piece {
    /// In this PSN slot (the whole range).
    Head(usize),
    Area(usize),
    Overflow(usize),
}

impl Region {
    /// The piece holding message bytes `at..at + len` of message `msg` (None when they straddle two, or
    /// straddle a PSN slot and a frame slot). `slot` is the frame size.
    #[inline]
    pub(super) fn piece(
        &self,
        msg: usize,
        prefix: usize,
        slot: usize,
        at: usize,
        len: usize,
    ) -> Option<Piece> {
        // Message bytes before the overflow area.
        let front = if prefix == 0 || self.k == 0 {
            prefix + self.main
        } else {
            self.k * (slot + prefix)
        };
        if at + len <= front {
            if prefix == 0 || self.k == 0 {
                return if at + len <= prefix {
                    Some(Piece::Head(self.head))
                } else if at >= prefix {
                    Some(Piece::Area(self.base + at - prefix))
                } else {
                    None
                };
            }
            let wire = slot + prefix;
            let (q, r) = (at / wire, at % wire);
            if r + len <= prefix {
                Some(Piece::Head(self.head + q)).filter(|_| r == 0 && len == prefix)
            } else if r >= prefix && r + len <= wire {
                Some(Piece::Area(self.base + q * slot + r - prefix))
            } else {
                None
            }
        } else if at >= front && at + len - front <= OVERFLOW {
            Some(Piece::Overflow(msg * OVERFLOW + at - front))
        } else {
            None
        }
    }
}

/// Lays up to `capacity` messages out over `area_len` bytes (into `regions`, cleared first): consecutive
/// regions from offset 0, each with room for `span` frames (the last maybe fewer), at least one region.
/// Message `i`'s PSN slots start at `i * MAX_SPLIT`. Pure arithmetic, tested against a model below.
pub(super) fn plan_regions(area_len: usize, layout: Layout, capacity: usize, regions: &mut Vec<Region>) {
    let Layout { slot, span, .. } = layout;
    regions.clear();
    let mut base = 0;
    while regions.len() < capacity {
        let k = span.min((area_len - base) / slot);
        if k == 0 {
            break;
        }
        regions.push(Region {
            base,
            main: k * slot,
            k,
            head: regions.len() * MAX_SPLIT,
        });
        base += k * slot;
    }
    if regions.is_empty() {
        // Less than one frame of room (only a scratch area): still take one message.
        regions.push(Region {
            base: 0,
            main: area_len,
            k: 0,
            head: 0,
        });
    }
}

/// Moves kept frames to consecutive `slot`-byte slots: frame `k` to `area[k * slot..]` for `k < cap`, the
/// rest to the frame areas of `spill` (`fpb` frames each). Sources only ever lie in order in `area` (or in
/// `overflow`), so frames moving down are moved first, front to back, then the spilled ones are copied
/// out, then frames moving up (behind an earlier message's overflow) back to front: no frame overwrites a
/// frame not yet moved. One `memmove` per frame that is not already in its slot.
pub(super) fn place_frames(
    kept: &[Src],
    area: &mut [u8],
    overflow: &[u8],
    slot: usize,
    cap: usize,
    spill: &mut [Block],
    fpb: usize,
) {
    for (k, src) in kept.iter().enumerate().take(cap) {
        if let Src::Area(o) = *src {
            if o > k * slot {
                area.copy_within(o..o + slot, k * slot);
            }
        }
    }
    if kept.len() > cap {
        for (k, src) in kept.iter().enumerate().skip(cap) {
            let n = k - cap;
            let dst = &mut spill[n / fpb].frame_area_mut()[(n % fpb) * slot..][..slot];
            match *src {
                Src::Area(o) => dst.copy_from_slice(&area[o..o + slot]),
                Src::Overflow(o) => dst.copy_from_slice(&overflow[o..o + slot]),
            }
        }
    }
    for (k, src) in kept.iter().enumerate().take(cap).rev() {
        match *src {
            Src::Area(o) if o < k * slot => area.copy_within(o..o + slot, k * slot),
            Src::Overflow(o) => area[k * slot..(k + 1) * slot].copy_from_slice(&overflow[o..o + slot]),
            _ => {}
        }
    }
}

/// One capture thread's receive state, shared by all its sockets: the batch receiver, the side array
/// that takes each message's 8-byte PSN prefix, the per-message overflow areas for GRO sockets and the
/// per-batch layout and frame lists (allocated once, reused).
pub(crate) struct Receiver {
    rx: BatchReceiver,
    /// `MAX_SPLIT` PSN slots per message.
    psn: Box<[[u8; 8]]>,
    /// `capacity * OVERFLOW` bytes, allocated zeroed so pages are only backed once a message uses them.
    overflow: Vec<u8>,
    regions: Vec<Region>,
    kept: Vec<Src>,
}

impl Receiver {
    pub fn new(capacity: usize, gro: bool) -> Self {
        let rx = BatchReceiver::with_parts(capacity.clamp(1, 1024), MAX_RECV_PARTS);
        let psn = vec![[0u8; 8]; rx.capacity() * MAX_SPLIT].into_boxed_slice();
        let overflow = if gro {
            vec![0u8; rx.capacity() * OVERFLOW]
        } else {
            Vec::new()
        };
        Receiver {
            regions: Vec::with_capacity(rx.capacity()),
            kept: Vec::with_capacity(rx.capacity() * 8),
            rx,
            psn,
            overflow,
        }
    }

    pub fn capacity(&self) -> usize {
        self.rx.capacity()
    }

    /// Also read each message's source address (for streams with a source filter).
    pub fn with_source(mut self, want: bool) -> Self {
        self.rx = self.rx.with_source(want);
        self
    }

    /// Plans one receive into `area_len` bytes: as many messages as fit with room for `span` datagrams
    /// each (the last one maybe fewer), at least one. Returns the number of messages.
    /// `one`: a single message (GRO messages of varying segment counts, see `StreamCapture::one_by_one`).
    pub(super) fn plan(&mut self, area_len: usize, layout: Layout, one: bool) -> usize {
        let capacity = if one { 1 } else { self.rx.capacity() };
        plan_regions(area_len, layout, capacity, &mut self.regions);
        self.regions.len()
    }

    /// Receives without waiting as planned by [`plan`](Self::plan), message `i` scattered as
    /// `regions[i]` says (the overflow area, GRO sockets only, is overflow area `i`).
    pub(super) fn recv(
        &mut self,
        sock: &UdpSocket,
        area: &mut [u8],
        layout: Layout,
    ) -> io::Result<Received<'_>> {
        let mut rest = area;
        let mut heads = self.psn.chunks_exact_mut(MAX_SPLIT);
        let mut spare = self.overflow.chunks_exact_mut(OVERFLOW);
        let Layout {
            slot, prefix, gro, ..
        } = layout;
        let parts = self.regions.iter().map(|r| {
            let taken = std::mem::take(&mut rest);
            let (main, tail) = taken.split_at_mut(r.main);
            rest = tail;
            let mut head = heads.next().unwrap_or_default().iter_mut();
            // Without a PSN: the region whole. With one and no split: the PSN to its slot, then the region.
            // Split in `k`: each datagram's PSN to its own slot, its frame to its own slot in the block.
            // Chained options and pairs, not an array of MAX_RECV_PARTS filled per message.
            let (first_head, whole, split): (Option<&mut [u8]>, Option<&mut [u8]>, &mut [u8]) = if prefix == 0
            {
                (None, Some(main), &mut [])
            } else if r.k == 0 {
                (head.next().map(|h| &mut h[..prefix]), Some(main), &mut [])
            } else {
                (None, None, main)
            };
            let pairs = split
                .chunks_exact_mut(slot)
                .take(r.k)
                .zip(head)
                .flat_map(move |(frame, h)| [&mut h[..prefix], frame]);
            let spare_part = if gro {
                Some(spare.next().unwrap_or_default())
            } else {
                None
            };
            first_head.into_iter().chain(whole).chain(pairs).chain(spare_part)
        });
        let batch = self.rx.recv_vectored(sock, parts, Duration::ZERO)?;
        Ok(Received {
            msgs: batch.messages(),
            drop_counter: batch.drop_counter(),
            psn: &self.psn,
            overflow: &self.overflow,
            regions: &self.regions,
            kept: &mut self.kept,
        })
    }
}

/// What one receive returned.
pub(super) struct Received<'a> {
    pub(super) msgs: &'a [RecvMeta],
    /// The socket's raw SO_RXQ_OVFL counter, if a message carried it.
    pub(super) drop_counter: Option<u32>,
    pub(super) psn: &'a [[u8; 8]],
    pub(super) overflow: &'a [u8],
    pub(super) regions: &'a [Region],
    /// Filled by processing: where each stored frame's bytes are, in arrival order.
    pub(super) kept: &'a mut Vec<Src>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Block;

    /// Fills `slot` bytes with a pattern naming frame `id`.
    fn stamp(dst: &mut [u8], id: u32) {
        for (n, c) in dst.chunks_mut(4).enumerate() {
            let w = id.wrapping_mul(0x9e37_79b9) ^ n as u32;
            c.copy_from_slice(&w.to_le_bytes()[..c.len()]);
        }
    }

    proptest::proptest! {
        /// The receive plan against its definition: consecutive regions from 0, each for 1..=span frames
        /// (their PSNs go to the side array, `MAX_SPLIT` slots per message), within the area, at most
        /// `capacity`, stopping only when full or out of room.
        #[test]
        fn plan_lays_out_consecutive_regions(
            slot8 in 4usize..40, psn: bool, span in 1usize..6, capacity in 1usize..20, area in 0usize..20_000,
        ) {
            let slot = slot8 * 8;
            let prefix = if psn { 8 } else { 0 };
            let layout = Layout { slot, prefix, span, gro: true };
            let mut regions = Vec::new();
            plan_regions(area, layout, capacity, &mut regions);
            proptest::prop_assert!(!regions.is_empty() && regions.len() <= capacity);
            if area < slot {
                // Not one frame of room: one message into whatever there is.
                proptest::prop_assert_eq!(regions.len(), 1);
                proptest::prop_assert_eq!((regions[0].base, regions[0].main), (0, area));
                return Ok(());
            }
            let mut base = 0;
            for (i, r) in regions.iter().enumerate() {
                proptest::prop_assert_eq!(r.base, base);
                proptest::prop_assert_eq!(r.head, i * MAX_SPLIT);
                let k = r.k;
                proptest::prop_assert!(k >= 1 && k <= span && k * slot == r.main);
                base += r.main;
            }
            proptest::prop_assert!(base <= area);
            if regions.len() < capacity {
                proptest::prop_assert!(area - base < slot, "room for another frame left");
            }
        }

        /// GRO placement against a model: messages of random segment counts (some beyond the span, so into the
        /// overflow areas), some segments rejected; every kept frame ends up in its slot in arrival order,
        /// in the area or the spill blocks, and `Region::piece` finds each frame where the receive put it.
        #[test]
        fn gro_placement_puts_every_kept_frame_in_its_slot(
            slot8 in 4usize..40, psn: bool, span in 1usize..5, capacity in 1usize..8, area_frames in 1usize..24,
            fpb in 1usize..6, segs in proptest::collection::vec(1usize..8, 8), keep in proptest::collection::vec(proptest::bool::weighted(0.8), 64),
        ) {
            let slot = slot8 * 8;
            let prefix = if psn { 8 } else { 0 };
            let wire = slot + prefix;
            let layout = Layout { slot, prefix, span, gro: true };
            let mut area = vec![0xeeu8; area_frames * slot];
            let mut overflow = vec![0xddu8; capacity * OVERFLOW];
            let mut regions = Vec::new();
            plan_regions(area.len(), layout, capacity, &mut regions);
            let mut kept = Vec::new();
            let mut ids = Vec::new();
            let mut id = 0u32;
            for (i, region) in regions.iter().enumerate() {
                let segments = segs[i % segs.len()];
                for j in 0..segments {
                    id += 1;
                    let at = j * wire;
                    let piece = region
                        .piece(i, prefix, slot, at + prefix, slot)
                        .filter(|_| prefix == 0 || region.piece(i, prefix, slot, at, 8).is_some());
                    // Where datagram j landed, by the receive's own rule: the first `k` each with its prefix
                    // to PSN slot `head + j` and its frame to slot j of the region, the rest of the message
                    // (from byte k * wire) to the overflow area.
                    let expect = if j < region.k {
                        Some(Src::Area(region.base + j * slot))
                    } else {
                        Some(Src::Overflow(i * OVERFLOW + (j - region.k) * wire + prefix))
                    };
                    if prefix > 0 && j < region.k {
                        proptest::prop_assert_eq!(
                            region.piece(i, prefix, slot, at, 8),
                            Some(Piece::Head(region.head + j))
                        );
                    }
                    let src = match piece {
                        Some(Piece::Area(o)) => Some(Src::Area(o)),
                        Some(Piece::Overflow(o)) => Some(Src::Overflow(o)),
                        _ => None,
                    };
                    proptest::prop_assert_eq!(src, expect);
                    let Some(src) = src else { continue };
                    match src {
                        Src::Area(o) => stamp(&mut area[o..o + slot], id),
                        Src::Overflow(o) => stamp(&mut overflow[o..o + slot], id),
                    }
                    if keep[(id as usize) % keep.len()] {
                        kept.push(src);
                        ids.push(id);
                    }
                }
            }
            let cap = area_frames;
            let spills = kept.len().saturating_sub(cap).div_ceil(fpb);
            let mut spill: Vec<Block> = (0..spills).map(|_| Block::new(fpb * slot, 0, 0)).collect();
            place_frames(&kept, &mut area, &overflow, slot, cap, &mut spill, fpb);
            let mut want = vec![0u8; slot];
            for (k, &id) in ids.iter().enumerate() {
                stamp(&mut want, id);
                let got = if k < cap {
                    &area[k * slot..(k + 1) * slot]
                } else {
                    let n = k - cap;
                    &spill[n / fpb].frame_area_mut()[(n % fpb) * slot..][..slot]
                };
                proptest::prop_assert_eq!(got, &want[..], "frame {} (id {})", k, id);
            }
        }
    }
}
