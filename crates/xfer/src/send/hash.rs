//! The sender's hashing thread: chunk hashes of the source for the resume comparison and, where the
//! protocol does not derive them from the datagrams, for every chunk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_xfer_proto::ChunkHash;

use crate::hash::ChunkHasher;
use crate::source::{FdCache, SourceSet};

/// Bytes the hashing thread may read ahead of the data cursor (it waits beyond).
const HASH_AHEAD: u64 = 512 << 20;

pub(super) enum HashMsg {
    Chunk { file: u32, chunk: u32, hash: ChunkHash },
    Error(String),
}

/// Hashes chunks of the source as the resume comparison and the protocol need them: with `only_held`
/// (the protocol's sender derives the hashes of what it sends from the datagrams) just the chunks the
/// receiver holds, else every chunk, staying near the data cursor.
pub(super) struct Hasher {
    pub set: Arc<SourceSet>,
    pub chunk_size: u64,
    /// Chunks the receiver holds of each file (from its accept).
    pub have: Vec<u32>,
    pub only_held: bool,
    /// Where the data thread is, in bytes of the whole set.
    pub cursor: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    pub out: crossbeam_channel::Sender<HashMsg>,
}

impl Hasher {
    pub(super) fn run(self) {
        let mut fds = FdCache::default();
        let mut buf = vec![0u8; (8 << 20).min(self.chunk_size as usize)];
        let mut global = 0u64;
        for (fi, f) in self.set.files.iter().enumerate() {
            let n = f.size.div_ceil(self.chunk_size);
            for c in 0..n {
                let start = c * self.chunk_size;
                let len = self.chunk_size.min(f.size - start);
                let resuming = (c as u32) < self.have.get(fi).copied().unwrap_or(0);
                if self.only_held && !resuming {
                    continue;
                }
                // stay near the data cursor so the page cache still holds what the data thread reads
                while !resuming && global > self.cursor.load(Relaxed) + HASH_AHEAD {
                    if self.stop.load(Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                if self.stop.load(Relaxed) {
                    return;
                }
                let mut h = ChunkHasher::new(f.size, self.chunk_size, c);
                let mut done = 0u64;
                while done < len {
                    let k = (buf.len() as u64).min(len - done) as usize;
                    if let Err(e) = self.set.read_at(&mut fds, fi, start + done, &mut buf[..k]) {
                        let _ = self.out.send(HashMsg::Error(format!("reading {}: {e}", f.name)));
                        return;
                    }
                    h.update(&buf[..k]);
                    done += k as u64;
                }
                global += len;
                let m = HashMsg::Chunk {
                    file: fi as u32,
                    chunk: c as u32,
                    hash: h.finish(),
                };
                if self.out.send(m).is_err() {
                    return;
                }
            }
        }
    }
}
