//! Preallocated, page-aligned block buffers. A block holds whole frames of one stream; in Mark6 scans the
//! first 8 bytes are reserved for the block header so the writer emits header and frames in one write.

use std::alloc::{alloc_zeroed, dealloc, Layout};

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
    /// Allocates `len` bytes rounded up to [`ALIGN`], zeroed and touched so no page fault hits the capture path.
    pub fn new(len: usize) -> Self {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(len, ALIGN).expect("block layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mut buf = AlignedBuf { ptr, len };
        for page in buf.as_mut_slice().chunks_mut(ALIGN) {
            // Volatile so the compiler keeps the write that faults the page in.
            // SAFETY: page is a valid, exclusively borrowed slice.
            unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
        }
        buf
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
        // SAFETY: allocated in `new` with this exact layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, ALIGN)) }
    }
}

/// One block: a buffer plus what it holds.
pub struct Block {
    buf: AlignedBuf,
    /// Where frames start in the buffer (8 in Mark6 scans, for the block header; 0 for FlexBuff).
    pub data_offset: usize,
    /// Frame bytes held.
    pub len: usize,
    /// Frames held.
    pub frames: u32,
    /// Stream (index in the configuration) whose frames these are.
    pub stream: usize,
    /// Global block (chunk) number, assigned when the block is sealed.
    pub number: u32,
}

impl Block {
    pub fn new(capacity: usize, data_offset: usize) -> Self {
        Block {
            buf: AlignedBuf::new(capacity + data_offset),
            data_offset,
            len: 0,
            frames: 0,
            stream: 0,
            number: 0,
        }
    }

    /// Space for frames.
    pub fn frame_area_mut(&mut self) -> &mut [u8] {
        let o = self.data_offset;
        &mut self.buf.as_mut_slice()[o..]
    }

    /// The frames held.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_slice()[self.data_offset..self.data_offset + self.len]
    }

    /// Header space plus frames: what a Mark6 writer writes.
    pub fn with_header_mut(&mut self) -> &mut [u8] {
        let end = self.data_offset + self.len;
        &mut self.buf.as_mut_slice()[..end]
    }

    /// The whole buffer from its (aligned) start.
    pub fn raw(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// Empties the block for reuse.
    pub fn reset(&mut self) {
        self.len = 0;
        self.frames = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        let mut b = Block::new(10_000, 8);
        assert_eq!(b.raw().as_ptr() as usize % ALIGN, 0);
        assert!(b.raw().len() >= 10_008);
        assert_eq!(b.raw().len() % ALIGN, 0);
        b.frame_area_mut()[..4].copy_from_slice(&[1, 2, 3, 4]);
        b.len = 4;
        assert_eq!(b.payload(), &[1, 2, 3, 4]);
        assert_eq!(b.with_header_mut().len(), 12);
    }
}
