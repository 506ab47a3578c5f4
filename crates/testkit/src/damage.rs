//! Random VDIF streams with damage, for property tests that check one stream two ways (one pass against
//! ranges, blocks or threads) and compare the reports: per VDIF thread, frames in order, gaps, frames
//! going back, fill, header changes, invalid frames, and runs of garbage between frames.
//!
//! The frames themselves come from the caller ([`Frames`]), so each test keeps its own frame length,
//! rate and fill convention.

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
}
