//! Random VDIF streams with damage, for property tests that check one stream two ways (one pass against
//! ranges, blocks or threads) and compare the reports: per VDIF thread, frames in order, gaps, frames
//! going back, fill, header changes, invalid frames, and runs of garbage between frames.
//!
//! The frames come from a [`Frames`]: [`VdifFrames`] (a frame length, a rate and a fill convention) for
//! the check tests, or a test's own.

use crate::vdif::Frame;
use proptest::prelude::*;

/// What the generator does next on one VDIF thread.
#[derive(Debug, Clone)]
pub enum Op {
    /// The thread's next frame.
    Next,
    /// Skips this many frames, then the next frame.
    Gap(u64),
    /// A frame this many before the thread's next (a frame going back, or a repeat at 0).
    Back(u64),
    /// A fill frame where the thread's next frame would be (the index does not advance).
    Fill,
    /// The thread's header changes shape (number of channels) from here on.
    HeaderChange,
    /// The thread's next frame, marked invalid.
    Invalid,
    /// This many bytes of garbage.
    Garbage(usize),
}

/// An op on one of threads 0..3 (folded onto the stream's thread count by [`build`]); garbage runs are
/// 1..`garbage_max` bytes.
pub fn op(garbage_max: usize) -> impl Strategy<Value = (u16, Op)> {
    let kind = prop_oneof![
        20 => Just(Op::Next),
        3 => (1u64..130).prop_map(Op::Gap),
        2 => (0u64..80).prop_map(Op::Back),
        2 => Just(Op::Fill),
        1 => Just(Op::HeaderChange),
        1 => Just(Op::Invalid),
        1 => (1usize..garbage_max.max(2)).prop_map(Op::Garbage),
    ];
    (0u16..3, kind)
}

/// How a test writes its frames.
pub trait Frames {
    /// Frame `index` of `thread`; `alt` the thread's changed header shape, `invalid` the invalid flag.
    fn frame(&self, thread: u16, index: u64, alt: bool, invalid: bool) -> Vec<u8>;
    /// A fill frame where frame `next` of `thread` would be.
    fn fill(&self, thread: u16, next: u64) -> Vec<u8>;
}

/// How fill frames look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillStyle {
    /// The fill pattern (0x11223344 words) throughout, where the header would be too.
    Bare,
    /// A header marked invalid, then the fill pattern (as jive5ab writes fill).
    WithHeader,
}

/// VDIF frames of `len` bytes at `rate` frames a second per thread from [`Frame`]'s default second and
/// epoch: version 1, station "Xx", one channel (four where the thread's header changed), payload bytes
/// that depend on the frame index.
#[derive(Debug, Clone, Copy)]
pub struct VdifFrames {
    pub len: usize,
    pub rate: u32,
    pub fill: FillStyle,
}

impl Frames for VdifFrames {
    fn frame(&self, thread: u16, index: u64, alt: bool, invalid: bool) -> Vec<u8> {
        Frame::new(self.len)
            .at(index, self.rate)
            .version(1)
            .thread(thread)
            .station(b"Xx")
            .channels_log2(if alt { 2 } else { 0 })
            .invalid(invalid)
            .build_with(|k| (index as usize * 7 + k) as u8)
    }

    fn fill(&self, thread: u16, next: u64) -> Vec<u8> {
        let pattern = 0x1122_3344u32.to_le_bytes();
        match self.fill {
            FillStyle::Bare => pattern.repeat(self.len / 4),
            FillStyle::WithHeader => {
                let mut f = self.frame(thread, next, false, true);
                for w in f[32..].chunks_exact_mut(4) {
                    w.copy_from_slice(&pattern);
                }
                f
            }
        }
    }
}

/// One piece of a built stream, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A VDIF frame (valid or marked invalid).
    Frame(Vec<u8>),
    /// A fill frame.
    Fill(Vec<u8>),
    /// Bytes that are no frame.
    Garbage(Vec<u8>),
}

impl Item {
    /// The item's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Item::Frame(b) | Item::Fill(b) | Item::Garbage(b) => b,
        }
    }

    /// The item's bytes, taken.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Item::Frame(b) | Item::Fill(b) | Item::Garbage(b) => b,
        }
    }
}

/// The stream the ops describe over `threads` VDIF threads (1..=3).
pub fn build(threads: u16, ops: &[(u16, Op)], frames: &impl Frames) -> Vec<Item> {
    assert!((1..=3).contains(&threads), "1 to 3 threads");
    let mut next = [0u64; 3];
    let mut alt = [false; 3];
    let mut out = Vec::with_capacity(ops.len());
    for (t, o) in ops {
        let t = *t % threads;
        let ti = usize::from(t);
        match o {
            Op::Next | Op::Invalid => {
                out.push(Item::Frame(frames.frame(
                    t,
                    next[ti],
                    alt[ti],
                    matches!(o, Op::Invalid),
                )));
                next[ti] += 1;
            }
            Op::Gap(k) => {
                next[ti] += k;
                out.push(Item::Frame(frames.frame(t, next[ti], alt[ti], false)));
                next[ti] += 1;
            }
            Op::Back(k) => out.push(Item::Frame(frames.frame(
                t,
                next[ti].saturating_sub(*k + 1),
                alt[ti],
                false,
            ))),
            Op::Fill => out.push(Item::Fill(frames.fill(t, next[ti]))),
            Op::HeaderChange => alt[ti] = !alt[ti],
            Op::Garbage(n) => out.push(Item::Garbage((0..*n).map(|k| (k * 37 + 5) as u8).collect())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tagged;
    impl Frames for Tagged {
        fn frame(&self, thread: u16, index: u64, alt: bool, invalid: bool) -> Vec<u8> {
            vec![thread as u8, index as u8, u8::from(alt), u8::from(invalid)]
        }
        fn fill(&self, thread: u16, next: u64) -> Vec<u8> {
            vec![0xff, thread as u8, next as u8]
        }
    }

    #[test]
    fn ops_become_frames_per_thread() {
        let ops = [
            (0, Op::Next),
            (1, Op::Next),
            (0, Op::Gap(3)),
            (0, Op::Back(1)),
            (1, Op::HeaderChange),
            (1, Op::Invalid),
            (0, Op::Fill),
            (2, Op::Garbage(2)),
        ];
        let items = build(2, &ops, &Tagged);
        assert_eq!(
            items,
            vec![
                Item::Frame(vec![0, 0, 0, 0]),
                Item::Frame(vec![1, 0, 0, 0]),
                Item::Frame(vec![0, 4, 0, 0]),
                Item::Frame(vec![0, 3, 0, 0]),
                Item::Frame(vec![1, 1, 1, 1]),
                Item::Fill(vec![0xff, 0, 5]),
                // thread 2 folds onto thread 0 of two; garbage is the same whichever thread
                Item::Garbage(vec![5, 42]),
            ]
        );
    }

    #[test]
    fn fill_frames_are_the_pattern_with_or_without_a_header() {
        let pattern = 0x1122_3344u32.to_le_bytes();
        let mut v = VdifFrames {
            len: 64,
            rate: 10,
            fill: FillStyle::Bare,
        };
        assert_eq!(v.fill(1, 5), pattern.repeat(16));
        v.fill = FillStyle::WithHeader;
        let f = v.fill(1, 5);
        assert_eq!(&f[..32], &v.frame(1, 5, false, true)[..32]);
        assert_eq!(f[3] & 0x80, 0x80, "the invalid bit");
        assert_eq!(&f[32..], &pattern.repeat(8)[..]);
    }
}
