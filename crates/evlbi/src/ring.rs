//! A bounded single-producer single-consumer ring of fixed-size slots: how a data-plane thread (the
//! recorder's capture thread, a relay's receive thread) hands datagrams to a sender thread without a lock,
//! an allocation or a system call per datagram.
//!
//! The producer copies a datagram into the next free slot and publishes it with one release store; the
//! consumer reads the published slots in place (a sender points `sendmmsg`'s iovecs straight at them) and
//! gives them back with one release store. A full ring makes [`Producer::try_push_with`] return `false` at
//! once: the producer never waits (the caller counts the drop). The consumer sleeps in
//! [`Consumer::wait`] (`park` with a timeout) and the producer wakes it with [`Producer::notify`] once per
//! batch, which costs an atomic swap, and a futex wake only if the consumer is actually asleep.
//!
//! Slot memory is allocated and touched once at construction, so neither side takes a page fault later.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Pads a value to its own cache line so the producer's and consumer's indexes do not share one.
#[repr(align(128))]
struct Padded<T>(T);

struct Shared {
    /// `slots x slot_len` bytes, owned (freed in Drop).
    ptr: *mut u8,
    bytes: usize,
    slot_len: usize,
    slots: usize,
    lens: Box<[AtomicU32]>,
    /// Slots published by the producer (monotonic).
    head: Padded<AtomicU64>,
    /// Slots released by the consumer (monotonic).
    tail: Padded<AtomicU64>,
    producer_gone: AtomicBool,
    consumer_gone: AtomicBool,
    waker: OnceLock<Thread>,
}

// SAFETY: the slot memory is only reached through the Producer (slots in [head, tail + slots), which the
// consumer does not read) and the Consumer (slots in [tail, head), which the producer does not write); the
// acquire/release pairs on head and tail order those accesses. Everything else is atomics or immutable.
unsafe impl Send for Shared {}
// SAFETY: as above: shared access is partitioned by the head/tail protocol.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `bytes` came from a leaked boxed slice of exactly this length in `ring`, and
        // both halves are gone (this is the last Arc), so nothing refers to the memory any more.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.bytes,
            )));
        }
    }
}

impl Shared {
    /// The bytes of slot `index` (modulo the ring).
    ///
    /// # Safety
    /// The caller must own the slot under the head/tail protocol (producer: a free slot; consumer: a
    /// published, unreleased one) and hold no other reference to it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, index: u64) -> &mut [u8] {
        let i = (index % self.slots as u64) as usize;
        // SAFETY: i < slots, so the range lies inside the allocation; exclusivity is the caller's duty.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.slot_len), self.slot_len) }
    }
}

/// Creates a ring of `slots` slots of `slot_len` bytes each (both at least 1).
pub fn ring(slots: usize, slot_len: usize) -> (Producer, Consumer) {
    let slots = slots.max(1);
    let slot_len = slot_len.max(1);
    let bytes = slots
        .checked_mul(slot_len)
        .expect("ring size overflows the address space");
    let mut mem = vec![0u8; bytes].into_boxed_slice();
    // calloc'd memory is mapped lazily: touch every page now rather than fault on the data path.
    for page in mem.chunks_mut(4096) {
        page[0] = 1;
        page[0] = std::hint::black_box(page[0]) - 1;
    }
    let ptr = Box::into_raw(mem) as *mut u8;
    let shared = Arc::new(Shared {
        ptr,
        bytes,
        slot_len,
        slots,
        lens: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        head: Padded(AtomicU64::new(0)),
        tail: Padded(AtomicU64::new(0)),
        producer_gone: AtomicBool::new(false),
        consumer_gone: AtomicBool::new(false),
        waker: OnceLock::new(),
    });
    (
        Producer {
            shared: shared.clone(),
            head: 0,
            tail_seen: 0,
        },
        Consumer {
            shared,
            tail: 0,
            head_seen: 0,
        },
    )
}

/// The writing half. `Send`, not `Clone`.
pub struct Producer {
    shared: Arc<Shared>,
    head: u64,
    /// The consumer's tail as last read (refreshed only when the ring looks full).
    tail_seen: u64,
}

impl Producer {
    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.shared.slot_len
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.shared.slots
    }

    /// Slots published and not yet released by the consumer (as far as the producer knows).
    pub fn queued(&mut self) -> usize {
        self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
        (self.head - self.tail_seen) as usize
    }

    /// Fills the next free slot with `fill` (which returns how many bytes of the slot it used, at most
    /// [`slot_len`](Self::slot_len)) and publishes it; `false` at once if the ring is full (`fill` is not
    /// called).
    #[inline]
    pub fn try_push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let slots = self.shared.slots as u64;
        if self.head - self.tail_seen >= slots {
            self.tail_seen = self.shared.tail.0.load(Ordering::Acquire);
            if self.head - self.tail_seen >= slots {
                return false;
            }
        }
        // SAFETY: head - tail < slots, so slot `head` is free: the consumer has released it and reads only
        // [tail, head). The acquire load of `tail` above (or an earlier one) ordered its last read of this
        // slot before our writes.
        let slot = unsafe { self.shared.slot(self.head) };
        let len = fill(slot).min(self.shared.slot_len);
        let i = (self.head % slots) as usize;
        self.shared.lens[i].store(len as u32, Ordering::Relaxed);
        self.head += 1;
        self.shared.head.0.store(self.head, Ordering::Release);
        true
    }

    /// Copies `parts` one after the other into the next free slot; `false` if the ring is full or they do
    /// not fit in a slot.
    #[inline]
    pub fn try_push(&mut self, parts: &[&[u8]]) -> bool {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > self.shared.slot_len {
            return false;
        }
        self.try_push_with(|slot| {
            let mut at = 0;
            for p in parts {
                slot[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            at
        })
    }

    /// Wakes the consumer if it sleeps in [`Consumer::wait`]. Call once per batch of pushes.
    #[inline]
    pub fn notify(&self) {
        if let Some(t) = self.shared.waker.get() {
            t.unpark();
        }
    }

    /// The consumer was dropped: nothing pushed will be read.
    pub fn consumer_gone(&self) -> bool {
        self.shared.consumer_gone.load(Ordering::Acquire)
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shared.producer_gone.store(true, Ordering::Release);
        self.notify();
    }
}

/// The reading half. `Send`, not `Clone`; [`wait`](Self::wait) must always be called from the same thread.
pub struct Consumer {
    shared: Arc<Shared>,
    tail: u64,
    /// The producer's head as last read.
    head_seen: u64,
}

impl Consumer {
    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.shared.slot_len
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.shared.slots
    }

    /// Published slots ready to read (looks at the producer's index).
    #[inline]
    pub fn available(&mut self) -> usize {
        self.head_seen = self.shared.head.0.load(Ordering::Acquire);
        (self.head_seen - self.tail) as usize
    }

    /// The `i`-th ready datagram (`i` below the last [`available`](Self::available)).
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        assert!(
            (i as u64) < self.head_seen - self.tail,
            "slot {i} is not published"
        );
        let index = self.tail + i as u64;
        let len = self.shared.lens[(index % self.shared.slots as u64) as usize].load(Ordering::Relaxed);
        // SAFETY: tail <= index < head (as read with acquire in `available`), so the slot is published and
        // the producer does not write it until we release it, which needs `&mut self` and so ends this
        // borrow first.
        let slot = unsafe { self.shared.slot(index) };
        &slot[..len as usize]
    }

    /// Gives the first `n` ready slots back to the producer.
    #[inline]
    pub fn release(&mut self, n: usize) {
        assert!(
            (n as u64) <= self.head_seen - self.tail,
            "releasing unpublished slots"
        );
        self.tail += n as u64;
        self.shared.tail.0.store(self.tail, Ordering::Release);
    }

    /// The producer was dropped: once [`available`](Self::available) is 0 nothing more will come.
    pub fn producer_gone(&self) -> bool {
        self.shared.producer_gone.load(Ordering::Acquire)
    }

    /// Waits until a slot is ready, the producer is gone or `timeout` passed; returns
    /// [`available`](Self::available).
    pub fn wait(&mut self, timeout: Duration) -> usize {
        let n = self.available();
        if n > 0 {
            return n;
        }
        let _ = self.shared.waker.set(std::thread::current());
        let end = Instant::now() + timeout;
        loop {
            let n = self.available();
            if n > 0 || self.producer_gone() {
                return n;
            }
            let now = Instant::now();
            if now >= end {
                return 0;
            }
            std::thread::park_timeout(end - now);
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shared.consumer_gone.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_drops_when_full_and_wraps() {
        let (mut p, mut c) = ring(4, 16);
        for i in 0..4u8 {
            assert!(p.try_push(&[&[i], &[i; 3]]));
        }
        assert!(!p.try_push(&[&[9]]), "full");
        assert!(!p.try_push(&[&[0u8; 17]]), "larger than a slot");
        assert_eq!(c.available(), 4);
        assert_eq!(c.get(0), &[0, 0, 0, 0]);
        assert_eq!(c.get(3), &[3, 3, 3, 3]);
        c.release(2);
        assert!(p.try_push(&[&[7; 16]]));
        assert!(p.try_push(&[&[8]]));
        assert!(!p.try_push(&[&[9]]));
        assert_eq!(c.available(), 4);
        let got: Vec<Vec<u8>> = (0..4).map(|i| c.get(i).to_vec()).collect();
        assert_eq!(got, [vec![2; 4], vec![3; 4], vec![7; 16], vec![8]]);
        c.release(4);
        assert_eq!(c.available(), 0);
        assert_eq!(p.queued(), 0);
    }

    #[test]
    fn a_consumer_thread_sees_every_datagram_in_order() {
        let (mut p, mut c) = ring(64, 8);
        let n = 200_000u64;
        let reader = std::thread::spawn(move || {
            let mut next = 0u64;
            loop {
                let k = c.wait(Duration::from_millis(100));
                if k == 0 && c.producer_gone() && c.available() == 0 {
                    return next;
                }
                for i in 0..k {
                    let v = u64::from_le_bytes(c.get(i).try_into().unwrap());
                    assert_eq!(v, next);
                    next += 1;
                }
                c.release(k);
            }
        });
        let mut i = 0u64;
        while i < n {
            if p.try_push(&[&i.to_le_bytes()]) {
                i += 1;
                if i % 16 == 0 {
                    p.notify();
                }
            } else {
                p.notify();
                std::thread::yield_now();
            }
        }
        drop(p);
        assert_eq!(reader.join().unwrap(), n);
    }

    #[test]
    fn wait_returns_when_the_producer_goes() {
        let (p, mut c) = ring(2, 2);
        let t = std::thread::spawn(move || c.wait(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        drop(p);
        assert_eq!(t.join().unwrap(), 0);
    }
}
