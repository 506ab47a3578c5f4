//! Chunk hashes that add up to the whole-file BLAKE3 hash: the definitions live in the protocol crate
//! (`vlbiflow_xfer_proto::hash`), which merges the digests of subtree blocks into them; re-exported here
//! for the I/O layer.

pub use vlbiflow_xfer_proto::hash::{chunk_hash, file_hash, valid_chunk_size, ChunkHasher};
