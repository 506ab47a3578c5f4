//! The per-frame paths allocate nothing: after construction, pushing and polling frames through the
//! Reorderer (with loss, reordering, duplicates, a jump and stamped fill), offering and sending through a
//! ForwardQueue and recording latencies make no heap allocation. Counted with a wrapping global allocator,
//! on the test's own thread only (the harness's threads allocate when they like).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_formats::time::{FrameClock, UtcTime};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::forward::{ForwardConfig, ForwardQueue};
use vlbiflow_realtime::latency::LatencyHistogram;
use vlbiflow_realtime::reorder::{FillMode, KeyMode, ReorderConfig, Reorderer};

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

const LEN: usize = 1032;
const RATE: u32 = 1000;

#[test]
fn per_frame_paths_do_not_allocate() {
    let key = KeyMode::VdifTime {
        frame_rate: RATE,
        threads: vec![0, 1],
    };
    let mut cfg = ReorderConfig::new(FrameKind::Vdif, LEN, key, 64, Duration::from_millis(5));
    cfg.fill = FillMode::Stamped;
    let mut r = Reorderer::new(cfg).unwrap();
    let mut q = ForwardQueue::new(ForwardConfig {
        max_len: LEN,
        capacity: 16,
        rate_bytes_per_s: Some(LEN as u64 * 500),
        burst_bytes: LEN as u64 * 2,
        threads: Some(vec![1]),
        header_offset: 0,
    })
    .unwrap();
    let mut lat = LatencyHistogram::new(0);
    let clock = FrameClock::new(RATE).unwrap();
    let mut frame = [0u8; LEN];
    let t0 = Instant::now();
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut out = 0u64;
    for i in 0..20_000u32 {
        // Index i / 2, thread i % 2; swap pairs, lose one in 50, duplicate one in 70, jump once.
        let mut n = if i % 10 == 4 {
            i + 1
        } else if i % 10 == 5 {
            i - 1
        } else {
            i
        };
        if i >= 10_000 {
            n += 500;
        }
        let index = n / 2;
        let now = t0 + Duration::from_micros(u64::from(i) * 500);
        {
            let mut h = VdifHeader::new_unchecked(&mut frame[..]);
            h.set_epoch(50);
            h.set_time(20_000_000 + index / RATE, index % RATE);
            h.set_frame_len(LEN);
            h.set_thread_id((n % 2) as u16);
        }
        q.offer(now, &frame);
        while let Some(f) = q.poll_send(now) {
            out += f.len() as u64;
        }
        let arrival = UtcTime::from_unix(1_700_000_000, (i % 1000) * 1_000_000);
        lat.record_index(&clock, i64::from(index), arrival);
        if i % 50 != 7 {
            let copies = if i % 70 == 3 { 2 } else { 1 };
            for _ in 0..copies {
                while r.push_vdif(now, &frame).is_err() {
                    while let Some(o) = r.poll_output(now) {
                        out += o.frame.len() as u64;
                    }
                }
            }
        }
        while let Some(o) = r.poll_output(now) {
            out += o.frame.len() as u64;
        }
    }
    r.flush();
    while let Some(o) = r.poll_output(t0 + Duration::from_secs(100)) {
        out += o.frame.len() as u64;
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    COUNTING.with(|c| c.set(false));
    let c = r.counters();
    assert!(c.filled > 500 && c.duplicate > 0 && c.out_of_order > 0, "{c:?}");
    assert!(q.counters().dropped_queue_full > 0 && q.counters().filtered > 0);
    assert!(out > 0);
    assert_eq!(allocations, 0, "allocations on the per-frame paths");
}

/// Placing frames at their positions (VDIF time keys, threads and rate learned; a loss, a duplicate),
/// logging the positions not sent, emitting notices and reading them back allocate nothing.
#[test]
fn positions_and_notices_do_not_allocate() {
    use vlbiflow_formats::notice::{Cause, GapNotice, MAX_LEN};
    use vlbiflow_formats::vdif::VdifHeaderRepr;
    use vlbiflow_realtime::position::{DeclaredGaps, FirstPsn, GapLog, Place, Positioner, SourceKey};

    let mut p = Positioner::new(
        SourceKey::VdifTime {
            frame_rate: None,
            threads: None,
        },
        FirstPsn::At(0),
    )
    .unwrap();
    let mut log = GapLog::default();
    let mut declared = DeclaredGaps::new(256);
    let mut notice = [0u8; MAX_LEN];
    let mut headers = Vec::new();
    for index in 0..5_000u32 {
        for thread in 0..2u16 {
            let mut h = [0u8; 32];
            VdifHeaderRepr {
                seconds: 100 + index / 1000,
                frame_number: index % 1000,
                thread_id: thread,
                frame_len: 8224,
                ..Default::default()
            }
            .emit(&mut h)
            .unwrap();
            headers.push(h);
        }
    }
    COUNTING.with(|c| c.set(true));
    let mut placed = 0u64;
    for (i, h) in headers.iter().enumerate() {
        if i % 97 == 50 {
            continue;
        }
        let key = p.key(None, h).unwrap();
        let take = if i % 101 == 7 { 2 } else { 1 };
        for _ in 0..take {
            match p.place(key) {
                Place::At { psn, skipped } => {
                    placed += 1;
                    if let Some((first, n)) = skipped {
                        log.add(first, n, Cause::CapturedLost);
                    }
                    if i % 13 == 0 {
                        log.add(psn, 1, Cause::QueueFull);
                    } else {
                        log.frame_queued();
                    }
                }
                Place::Duplicate | Place::Stray => {}
            }
        }
        if log.due(1) {
            let n = log.emit(&mut notice, 8232);
            declared.add_notice(&GapNotice::new_checked(&notice[..n]).unwrap());
            let _ = declared.take(i as u64);
        }
    }
    COUNTING.with(|c| c.set(false));
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(placed > 9_000 && p.counters().duplicates > 0 && p.counters().captured_lost > 0);
    assert!(log.notices() > 10);
    assert_eq!(allocations, 0, "allocations on the per-frame paths");
}
