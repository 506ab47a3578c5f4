//! The producer's side of forwarding allocates nothing per frame: after `Forwarder::start`, offering
//! frames to two destinations (one with a thread filter, one that drops for a full queue) and publishing
//! makes no heap allocation on the producer's thread. Counted with a wrapping global allocator, on the
//! test's own thread only.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use vlbiflow_evlbi::dest::DestSpec;
use vlbiflow_evlbi::{ForwardSource, Forwarder};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the thread under test; const-initialised, so reading it never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed unchanged to the system allocator, which upholds GlobalAlloc's contract;
// counting touches only a thread-local and an atomic (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from the system allocator, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is the system allocator's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn offering_and_publishing_do_not_allocate() {
    let (_a, a_addr) = common::listener();
    let (_b, b_addr) = common::listener();
    let dests = vec![
        DestSpec::parse(&format!("a=udps@{a_addr},queue=64,rate=10Mbps")).unwrap(),
        DestSpec::parse(&format!("b=vdif@{b_addr},threads=1")).unwrap(),
    ];
    let (fwd, mut tap) = Forwarder::start(dests, common::LEN, &ForwardSource::vdif_psn()).unwrap();
    let frames: Vec<Vec<u8>> = (0..64).map(|i| common::frame((i % 2) as u16, i)).collect();
    COUNTING.with(|c| c.set(true));
    for round in 0..200u64 {
        for (i, f) in frames.iter().enumerate() {
            let psn = round * 64 + i as u64;
            // One frame without a buffer, six lost before the forwarder: declared holes.
            match i {
                3 => tap.unstored(Some(psn), &f[..16]),
                _ if i % 10 == 3 => {}
                _ => tap.offer(Some(psn), f),
            }
        }
        if round % 3 == 0 {
            tap.publish();
        }
    }
    tap.publish();
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
    drop(tap);
    let st = fwd.finish(Duration::from_millis(100));
    assert_eq!(st[0].offered, 200 * 57);
    // The last round's last hole is never revealed by a later frame.
    assert_eq!(
        (st[0].skipped_no_buffer, st[0].skipped_captured_lost),
        (200, 200 * 6 - 1)
    );
    assert!(st[0].dropped_queue_full > 0);
    assert_eq!(st[1].filtered, 100 * 64);
}
