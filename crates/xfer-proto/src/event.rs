//! Events both state machines report to the I/O layer through `poll_event`.

/// Something the I/O layer (or the user) should know or act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Receiver: a file was announced; open or create it (and, to resume, hash the chunks already on
    /// disk and call `Receiver::declare_verified`).
    FileAnnounced {
        file: u32,
        name: String,
        size: u64,
        chunk_size: u64,
    },
    /// Receiver: every byte of a chunk has been handed out; hash what was written and call
    /// `Receiver::chunk_hashed`.
    ChunkComplete {
        file: u32,
        chunk: u32,
        offset: u64,
        len: u64,
    },
    /// Both: the chunk as written matches the sender's hash.
    ChunkVerified { file: u32, chunk: u32 },
    /// Both: the chunk as written did not match; it is being sent again.
    ChunkMismatch { file: u32, chunk: u32 },
    /// Both: every chunk of the file is verified.
    FileDone { file: u32 },
    /// Both: every file is verified; the transfer succeeded.
    TransferDone,
    /// Both: nothing heard from the peer for the dead-peer timeout.
    PeerDead,
    /// Both: the transfer ended with an error (from the peer or found here).
    Aborted { reason: String },
}
