//! Chunk hashes that add up to the whole-file BLAKE3 hash, and the per-block digests they are merged from.
//!
//! A chunk's hash is the BLAKE3 chaining value of its subtree (the chunk size is a power of two and chunks
//! start at multiples of it, so every chunk is a subtree of the file's BLAKE3 tree); a file of one chunk
//! uses the ordinary (root) hash. [`file_hash`] merges the chunk values into the root, which equals
//! `blake3::hash` of the whole file, i.e. what `b3sum` prints, without reading the file again.
//!
//! When the block size (payload bytes per datagram) is a power of two of at least 1 KiB (the BLAKE3 chunk
//! length), every block is a subtree too: its chaining value ([`block_digest`]) is what each datagram's tag
//! covers, and a chunk's hash is [`merge`]d from its blocks' values, so each byte is hashed once at each
//! end: where it is read (the sender) and where it arrives (the receiver), with no second pass over the
//! file. Other block sizes use the plain BLAKE3 hash of the payload as its digest, and the chunk hash is
//! computed from the bytes ([`ChunkHasher`]).

use blake3::hazmat::{left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};

use serde::{Deserialize, Serialize};

/// BLAKE3's chunk length: the smallest block size whose blocks are subtrees.
pub const BLAKE3_CHUNK_LEN: u64 = 1024;

/// Whether `chunk_size` can be used (a power of two of at least 4 KiB).
pub fn valid_chunk_size(chunk_size: u64) -> bool {
    chunk_size.is_power_of_two() && chunk_size >= 4096
}

/// Whether blocks of `block_size` bytes are BLAKE3 subtrees (a power of two of at least 1 KiB), so that
/// chunk hashes are merged from block digests.
pub fn blocks_are_subtrees(block_size: u64) -> bool {
    block_size.is_power_of_two() && block_size >= BLAKE3_CHUNK_LEN
}

/// The digest of one datagram's payload, which its tag covers: with `subtree_block` (the block size, when
/// [`blocks_are_subtrees`]) and a payload that is a whole block at a block-aligned `offset` (or the shorter
/// last block of a file), the BLAKE3 chaining value of that subtree of the file; otherwise the plain BLAKE3
/// hash of the payload. Total: never panics, whatever a peer sends (a payload of the wrong shape gets the
/// plain hash, which no well-formed datagram uses, so its tag fails).
pub fn block_digest(subtree_block: Option<u64>, offset: u64, payload: &[u8]) -> [u8; 32] {
    match subtree_block {
        Some(b)
            if !payload.is_empty()
                && payload.len() as u64 <= b
                && b.is_power_of_two()
                && b >= BLAKE3_CHUNK_LEN
                && offset % b == 0 =>
        {
            let mut h = blake3::Hasher::new();
            h.set_input_offset(offset);
            h.update(payload);
            h.finalize_non_root()
        }
        _ => *blake3::hash(payload).as_bytes(),
    }
}

/// Merges the chaining values of consecutive, equally sized (`unit` bytes, a power of two of at least
/// 1 KiB; the last may be shorter) subtrees covering `len` bytes into the value of their parent subtree,
/// or into the root hash when `root` (the subtrees make up the whole file). `cvs` holds one value per
/// unit; a single value is returned as it is (a root of one unit is not derivable from its chaining value:
/// hash those bytes with [`ChunkHasher`]).
pub fn merge(cvs: &[[u8; 32]], unit: u64, len: u64, root: bool) -> [u8; 32] {
    debug_assert_eq!(len.div_ceil(unit) as usize, cvs.len());
    if cvs.len() == 1 {
        return cvs[0];
    }
    let left = left_subtree_len(len);
    let n = (left / unit) as usize;
    let l = merge(&cvs[..n], unit, left, false);
    let r = merge(&cvs[n..], unit, len - left, false);
    if root {
        *merge_subtrees_root(&l, &r, Mode::Hash).as_bytes()
    } else {
        merge_subtrees_non_root(&l, &r, Mode::Hash)
    }
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
    let cvs: Vec<[u8; 32]> = chunks.iter().map(|c| c.0).collect();
    merge(&cvs, chunk_size, size, true)
}

/// Collects the block digests of one chunk as its blocks arrive (in any order) and merges them into the
/// chunk hash when the last one is in.
#[derive(Debug)]
pub(crate) struct ChunkDigests {
    cvs: Box<[[u8; 32]]>,
    have: Box<[u64]>,
    filled: u32,
}

impl ChunkDigests {
    /// Room for `blocks` digests.
    pub(crate) fn new(blocks: usize) -> Self {
        ChunkDigests {
            cvs: vec![[0u8; 32]; blocks].into_boxed_slice(),
            have: vec![0u64; blocks.div_ceil(64)].into_boxed_slice(),
            filled: 0,
        }
    }

    /// Stores the digest of block `i` (ignored if already there); true when every block is in.
    pub(crate) fn put(&mut self, i: usize, cv: [u8; 32]) -> bool {
        if i >= self.cvs.len() {
            return false;
        }
        if self.have[i / 64] & (1 << (i % 64)) == 0 {
            self.have[i / 64] |= 1 << (i % 64);
            self.cvs[i] = cv;
            self.filled += 1;
        }
        self.filled as usize == self.cvs.len()
    }

    /// The chunk hash of a complete set: `len` bytes in blocks of `block`, `root` when the chunk is the
    /// whole file (of more than one block).
    pub(crate) fn finish(&self, block: u64, len: u64, root: bool) -> ChunkHash {
        ChunkHash(merge(&self.cvs, block, len, root))
    }

    /// Bytes this set occupies (for the receiver's memory cap).
    pub(crate) fn footprint(&self) -> usize {
        self.cvs.len() * 32 + self.have.len() * 8
    }
}

/// A 32-byte BLAKE3 chunk hash; hex on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkHash(pub [u8; 32]);

impl ChunkHash {
    /// BLAKE3 of `data`.
    pub fn of(data: &[u8]) -> ChunkHash {
        ChunkHash(*blake3::hash(data).as_bytes())
    }
}

impl core::fmt::Debug for ChunkHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

impl core::fmt::Display for ChunkHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl Serialize for ChunkHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ChunkHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let b = s.as_bytes();
        if b.len() != 64 {
            return Err(serde::de::Error::custom(format!(
                "hash: {} hex digits, expected 64",
                b.len()
            )));
        }
        let mut out = [0u8; 32];
        for (i, pair) in b.chunks_exact(2).enumerate() {
            let hex = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            };
            match (hex(pair[0]), hex(pair[1])) {
                (Some(h), Some(l)) => out[i] = h << 4 | l,
                _ => return Err(serde::de::Error::custom("hash: not a hex digit")),
            }
        }
        Ok(ChunkHash(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn file_hash_equals_plain_blake3() {
        let data = data(300_000);
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
    fn chunk_hashes_merge_from_block_digests() {
        let data = data(300_000);
        for (cs, block) in [(4096u64, 1024u64), (65536, 8192), (65536, 4096), (8192, 8192)] {
            for size in [
                1usize, 1000, 1024, 1025, 8192, 8193, 65536, 65537, 200_001, 300_000,
            ] {
                let d = &data[..size];
                let n = (size as u64).div_ceil(cs);
                for c in 0..n {
                    let a = c * cs;
                    let len = cs.min(size as u64 - a);
                    let blocks = len.div_ceil(block) as usize;
                    let mut acc = ChunkDigests::new(blocks);
                    // any order
                    for i in (0..blocks).rev() {
                        let o = a + i as u64 * block;
                        let e = (o + block).min(a + len);
                        let full = acc.put(i, block_digest(Some(block), o, &d[o as usize..e as usize]));
                        assert_eq!(full, i == 0);
                    }
                    let want = chunk_hash(size as u64, cs, c, &d[a as usize..(a + len) as usize]);
                    if size as u64 <= block {
                        // a one-block file: its root is hashed from the bytes, not merged
                        continue;
                    }
                    assert_eq!(
                        acc.finish(block, len, size as u64 <= cs),
                        want,
                        "chunk size {cs}, block {block}, size {size}, chunk {c}"
                    );
                }
            }
        }
    }

    #[test]
    fn digests_of_odd_shapes_do_not_panic() {
        let d = data(9000);
        for (b, off, len) in [
            (Some(8192), 100, 8192),
            (Some(8192), 8192, 8193),
            (Some(8192), 0, 0),
            (Some(1000), 0, 1000),
            (Some(512), 512, 512),
            (None, 7, 9000),
        ] {
            let g = block_digest(b, off, &d[..len]);
            assert_eq!(g, *blake3::hash(&d[..len]).as_bytes(), "{b:?} {off} {len}");
        }
        // far out in a huge file: a subtree, no panic
        let _ = block_digest(Some(8192), u64::MAX - 8191, &d[..8192]);
    }

    #[test]
    fn chunk_hashes_depend_on_position() {
        let d = vec![5u8; 8192];
        assert_ne!(chunk_hash(1 << 20, 8192, 0, &d), chunk_hash(1 << 20, 8192, 1, &d));
    }
}
