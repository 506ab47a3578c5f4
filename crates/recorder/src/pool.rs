//! Preallocated, page-aligned block buffers. A block holds whole frames of one stream; in Mark6 scans 8
//! bytes in front of the frames are reserved for the block header so the writer emits header and frames in
//! one write, and a page of headroom in front of that lets an O_DIRECT writer shift the block so that it
//! starts at its file offset's phase within a page, with the unaligned tail of the previous write (the
//! "carry") copied in front of it, and write the whole span from an aligned address.

use rustix::mm::{madvise, mmap_anonymous, munmap, Advice, MapFlags, ProtFlags};

/// Buffer alignment: a page, which satisfies O_DIRECT on every common filesystem and device.
pub const ALIGN: usize = 4096;

/// A heap buffer aligned to [`ALIGN`], length a multiple of it.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is uniquely owned; moving it between threads moves ownership.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` bytes rounded up to [`ALIGN`], zeroed and faulted in so no page fault hits the capture path.
    pub fn new(len: usize) -> Self {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        Self::try_new(len).unwrap_or_else(|| {
            let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("block layout");
            std::alloc::handle_alloc_error(layout)
        })
    }

    /// As [`new`](Self::new), but `None` when no memory is left.
    ///
    /// An anonymous mapping of its own (zeroed by the kernel once, page aligned), its pages faulted in at
    /// once (MADV_POPULATE_WRITE, Linux 5.14; before that, a write per page). Transparent huge pages were
    /// tried (`MADV_HUGEPAGE`): on a virtual machine whose memory the host backs lazily, clearing fresh
    /// 2 MiB pages cost more than faulting in small ones (docs/bench/record.md), so they are not asked for.
    pub fn try_new(len: usize) -> Option<Self> {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        // SAFETY: an anonymous private mapping has no preconditions; the result is checked.
        let ptr = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .ok()?
        .cast::<u8>();
        let mut buf = AlignedBuf { ptr, len };
        // SAFETY: as above; MADV_POPULATE_WRITE faults the range in as if written, or fails with nothing lost.
        match unsafe { madvise(ptr.cast(), len, Advice::LinuxPopulateWrite) } {
            Ok(()) => {}
            // Out of memory: give the mapping back (dropping `buf` unmaps it).
            Err(rustix::io::Errno::NOMEM) => return None,
            // An older kernel: one write per page.
            Err(_) => {
                for page in buf.as_mut_slice().chunks_mut(ALIGN) {
                    // Volatile so the compiler keeps the write that faults the page in.
                    // SAFETY: page is a valid, exclusively borrowed slice.
                    unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
                }
            }
        }
        Some(buf)
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: mapped in `try_new` with this address and length, and no slice of it outlives self.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// One block: a buffer plus what it holds.
pub struct Block {
    buf: AlignedBuf,
    /// Bytes reserved in front of the header (a multiple of [`ALIGN`]; 0 when nothing is ever shifted).
    headroom: usize,
    /// Where the header (or, without one, the frames) currently starts in the buffer: `headroom` until a
    /// writer shifts the block with [`shift_to`](Self::shift_to).
    start: usize,
    /// Bytes in front of the frames (8 in Mark6 scans, for the block header; 0 for FlexBuff).
    pub data_offset: usize,
    /// Frame bytes held.
    pub len: usize,
    /// Frames held.
    pub frames: u32,
    /// Stream (index in the configuration) whose frames these are.
    pub stream: usize,
    /// Global block (chunk) number, assigned when the block is sealed; with datastreams, the chunk number
    /// within its recording.
    pub number: u32,
    /// With datastreams: the recording (index in the scan's list of recordings) the frames belong to.
    pub recording: u8,
}

impl Block {
    /// A block for `capacity` frame bytes behind `data_offset` header bytes and `headroom` spare bytes.
    pub fn new(capacity: usize, data_offset: usize, headroom: usize) -> Self {
        Block {
            buf: AlignedBuf::new(headroom + data_offset + capacity),
            headroom,
            start: headroom,
            data_offset,
            len: 0,
            frames: 0,
            stream: 0,
            number: 0,
            recording: 0,
        }
    }

    /// As [`new`](Self::new), but `None` when the allocator has no memory left.
    pub fn try_new(capacity: usize, data_offset: usize, headroom: usize) -> Option<Self> {
        Some(Block {
            buf: AlignedBuf::try_new(headroom + data_offset + capacity)?,
            headroom,
            start: headroom,
            data_offset,
            len: 0,
            frames: 0,
            stream: 0,
            number: 0,
            recording: 0,
        })
    }

    /// Space for frames.
    pub fn frame_area_mut(&mut self) -> &mut [u8] {
        let o = self.start + self.data_offset;
        &mut self.buf.as_mut_slice()[o..]
    }

    /// Space for frames, read only.
    pub fn frame_area(&self) -> &[u8] {
        let o = self.start + self.data_offset;
        &self.buf.as_slice()[o..]
    }

    /// The frames held.
    pub fn payload(&self) -> &[u8] {
        let o = self.start + self.data_offset;
        &self.buf.as_slice()[o..o + self.len]
    }

    /// Header space plus frames: what a Mark6 writer writes.
    pub fn with_header_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.start, self.start + self.data_offset + self.len);
        &mut self.buf.as_mut_slice()[start..end]
    }

    /// Where header and frames start in [`raw`](Self::raw).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Bytes in front of the frames available to [`shift_to`](Self::shift_to).
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Moves header and frames so they start at `start` (at most the headroom), leaving `raw()[..start]`
    /// free for the caller. One `memmove` of the block's contents.
    pub fn shift_to(&mut self, start: usize) {
        assert!(
            start <= self.headroom,
            "shift to {start} past headroom {}",
            self.headroom
        );
        if start != self.start {
            let n = self.data_offset + self.len;
            self.buf
                .as_mut_slice()
                .copy_within(self.start..self.start + n, start);
            self.start = start;
        }
    }

    /// The whole buffer from its (aligned) start.
    pub fn raw(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The whole buffer from its (aligned) start, writable.
    pub fn raw_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Empties the block for reuse.
    pub fn reset(&mut self) {
        self.len = 0;
        self.frames = 0;
        self.start = self.headroom;
    }
}

/// The pool's free blocks, last in first out: the block taken next is the one given back last, whose
/// memory is the most likely still in the CPU's caches and TLB (with a first-in-first-out queue every block
/// of the pool, a GB or more, passes through in turn, and each frame is written to memory that left the
/// caches long ago). A lock per block taken or given back (a block holds hundreds of frames), never per frame.
pub struct FreeList {
    blocks: std::sync::Mutex<Vec<Block>>,
    len: std::sync::atomic::AtomicUsize,
}

impl FreeList {
    /// An empty list with room for `capacity` blocks (the pool's limit: never reallocates below it).
    pub fn with_capacity(capacity: usize) -> Self {
        FreeList {
            blocks: std::sync::Mutex::new(Vec::with_capacity(capacity)),
            len: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Block>> {
        // A holder that panicked left a valid Vec behind: go on with it.
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives a block back.
    pub fn put(&self, block: Block) {
        let mut v = self.lock();
        v.push(block);
        self.len.store(v.len(), std::sync::atomic::Ordering::Relaxed);
    }

    /// The block given back last, if any.
    pub fn take(&self) -> Option<Block> {
        let mut v = self.lock();
        let b = v.pop();
        self.len.store(v.len(), std::sync::atomic::Ordering::Relaxed);
        b
    }

    /// Blocks free now (without the lock: a moment's reading).
    pub fn len(&self) -> usize {
        self.len.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// (MemAvailable, MemTotal) in bytes from `/proc/meminfo`, if it can be read.
pub fn meminfo() -> Option<(u64, u64)> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// (MemAvailable, MemTotal) in bytes from the text of `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    Some((field("MemAvailable")?, field("MemTotal")?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_meminfo() {
        let t = "MemTotal:       24684096 kB\nMemFree:        15827132 kB\nMemAvailable:   23581740 kB\n";
        assert_eq!(
            super::parse_meminfo(t),
            Some((23_581_740 * 1024, 24_684_096 * 1024))
        );
        assert_eq!(super::parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    use super::*;

    #[test]
    fn free_list_gives_back_the_block_put_last() {
        let free = FreeList::with_capacity(4);
        assert!(free.take().is_none());
        for n in 1..=3 {
            let mut b = Block::new(4096, 0, 0);
            b.number = n;
            free.put(b);
        }
        assert_eq!(free.len(), 3);
        assert_eq!(free.take().map(|b| b.number), Some(3));
        let mut b = Block::new(4096, 0, 0);
        b.number = 9;
        free.put(b);
        let order: Vec<u32> = std::iter::from_fn(|| free.take()).map(|b| b.number).collect();
        assert_eq!(order, [9, 2, 1]);
        assert!(free.is_empty());
    }

    #[test]
    fn buffers_are_zeroed_and_writable_to_the_end() {
        let mut b = AlignedBuf::new(3 * ALIGN + 1);
        assert_eq!(b.len(), 4 * ALIGN);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[4 * ALIGN - 1] = 7;
        assert_eq!(b.as_slice()[4 * ALIGN - 1], 7);
    }

    #[test]
    fn buffers_are_aligned_and_sized() {
        let mut b = Block::new(10_000, 8, 0);
        assert_eq!(b.raw().as_ptr() as usize % ALIGN, 0);
        assert!(b.raw().len() >= 10_008);
        assert_eq!(b.raw().len() % ALIGN, 0);
        b.frame_area_mut()[..4].copy_from_slice(&[1, 2, 3, 4]);
        b.len = 4;
        assert_eq!(b.payload(), &[1, 2, 3, 4]);
        assert_eq!(b.with_header_mut().len(), 12);
    }

    #[test]
    fn shifting_keeps_header_and_frames_and_reset_restores() {
        let mut b = Block::new(10_000, 8, ALIGN);
        assert_eq!(b.start(), ALIGN);
        b.frame_area_mut()[..3].copy_from_slice(&[7, 8, 9]);
        b.len = 3;
        b.with_header_mut()[..8].copy_from_slice(&[1; 8]);
        for to in [13, 0, ALIGN - 1, ALIGN] {
            b.shift_to(to);
            assert_eq!(b.start(), to);
            assert_eq!(b.with_header_mut(), &[1, 1, 1, 1, 1, 1, 1, 1, 7, 8, 9]);
            assert_eq!(b.payload(), &[7, 8, 9]);
        }
        b.shift_to(5);
        b.reset();
        assert_eq!(b.start(), ALIGN);
        assert!(b.frame_area_mut().len() >= 10_000);
    }
}
