//! Chunk hashes that add up to the whole-file BLAKE3 hash.
//!
//! A chunk's hash is the BLAKE3 chaining value of its subtree (the chunk size is a power of two and chunks
//! start at multiples of it, so every chunk is a subtree of the file's BLAKE3 tree); a file of one chunk
//! uses the ordinary (root) hash. [`file_hash`] merges the chunk values into the root, which equals
//! `blake3::hash` of the whole file, i.e. what `b3sum` prints, without reading the file again. Both ends
//! compute chunk hashes the same way, so comparing them verifies the chunk exactly as well as the root
//! hash of the chunk would.

use blake3::hazmat::{left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};
use vlbiflow_xfer_proto::ChunkHash;

/// Whether `chunk_size` can be used (a power of two of at least 4 KiB).
pub fn valid_chunk_size(chunk_size: u64) -> bool {
    chunk_size.is_power_of_two() && chunk_size >= 4096
}

/// An incremental hasher for chunk `chunk` of a file of `size` bytes.
pub struct ChunkHasher {
    h: blake3::Hasher,
    root: bool,
}

impl ChunkHasher {
    /// Starts chunk `chunk` (of `chunk_size` bytes) of a file of `size` bytes.
    pub fn new(size: u64, chunk_size: u64, chunk: u64) -> Self {
        let mut h = blake3::Hasher::new();
        let root = size <= chunk_size;
        if !root {
            h.set_input_offset(chunk * chunk_size);
        }
        ChunkHasher { h, root }
    }
    /// Adds bytes (in order).
    pub fn update(&mut self, data: &[u8]) {
        self.h.update(data);
    }
    /// The chunk's hash.
    pub fn finish(&self) -> ChunkHash {
        if self.root {
            ChunkHash(*self.h.finalize().as_bytes())
        } else {
            ChunkHash(self.h.finalize_non_root())
        }
    }
}

/// The hash of chunk `chunk` of a file of `size` bytes whose bytes are `data`.
pub fn chunk_hash(size: u64, chunk_size: u64, chunk: u64, data: &[u8]) -> ChunkHash {
    let mut h = ChunkHasher::new(size, chunk_size, chunk);
    h.update(data);
    h.finish()
}

/// The BLAKE3 hash of the whole file from its chunk hashes (one per chunk, in order).
pub fn file_hash(size: u64, chunk_size: u64, chunks: &[ChunkHash]) -> [u8; 32] {
    if size == 0 {
        return *blake3::hash(b"").as_bytes();
    }
    assert_eq!(
        size.div_ceil(chunk_size) as usize,
        chunks.len(),
        "one hash per chunk"
    );
    if chunks.len() == 1 {
        return chunks[0].0;
    }
    fn merge(cvs: &[ChunkHash], chunk_size: u64, len: u64, root: bool) -> [u8; 32] {
        if cvs.len() == 1 {
            return cvs[0].0;
        }
        let left = left_subtree_len(len);
        let n = (left / chunk_size) as usize;
        let l = merge(&cvs[..n], chunk_size, left, false);
        let r = merge(&cvs[n..], chunk_size, len - left, false);
        if root {
            *merge_subtrees_root(&l, &r, Mode::Hash).as_bytes()
        } else {
            merge_subtrees_non_root(&l, &r, Mode::Hash)
        }
    }
    merge(chunks, chunk_size, size, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_hash_equals_plain_blake3() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for cs in [4096u64, 8192, 65536] {
            for size in [
                0usize,
                1,
                4095,
                4096,
                4097,
                8192,
                12288 + 5,
                65536 * 2 + 1,
                200_000,
                300_000,
            ] {
                let d = &data[..size];
                let n = (size as u64).div_ceil(cs);
                let chunks: Vec<ChunkHash> = (0..n)
                    .map(|c| {
                        let a = (c * cs) as usize;
                        let b = ((c + 1) * cs).min(size as u64) as usize;
                        chunk_hash(size as u64, cs, c, &d[a..b])
                    })
                    .collect();
                assert_eq!(
                    file_hash(size as u64, cs, &chunks),
                    *blake3::hash(d).as_bytes(),
                    "chunk size {cs}, size {size}"
                );
            }
        }
    }

    #[test]
    fn chunk_hashes_depend_on_position() {
        let d = vec![5u8; 8192];
        assert_ne!(chunk_hash(1 << 20, 8192, 0, &d), chunk_hash(1 << 20, 8192, 1, &d));
    }
}
