//! I/O layer of `vlbiflow xfer`: everything around the sans-IO protocol core (`vlbiflow-xfer-proto`).
//!
//! - [`key`]: the pre-shared key file (created by `serve` on first start, mode 0600).
//! - [`secure`]: the control channel: TCP with a Noise `NNpsk0` handshake (mutual authentication by the
//!   pre-shared key, forward secrecy from ephemeral keys), then encrypted frames carrying JSON lines. The
//!   handshake hash is the session secret the per-transfer datagram key is derived from.
//! - [`session`]: the session messages around the protocol's control messages (request, accept or
//!   refuse, resume hashes, commit report).
//! - [`hash`]: chunk hashes as BLAKE3 subtree chaining values, so the whole-file hash is the plain
//!   BLAKE3 hash of the file (what `b3sum` prints) without reading it again.
//! - [`source`]: what is sent: virtual files made of extents of real files (plain files, directory trees,
//!   Mark6/FlexBuff scans read in place).
//! - [`dest`]: where it lands: paths confined to the daemon's roots, `.part` + fsync + rename, manifests.
//! - [`send`], [`recv`]: the data plane of one transfer on dedicated threads (batched GSO sends paced by
//!   the protocol's sender, batched GRO receives).
//! - [`client`], [`daemon`]: the client verbs and the serving daemon.
//! - [`remote`]: `DAEMON[:PORT]/ROOT/PATH` arguments and the client's state directory.
//! - [`follow`]: `push --follow`, a scan sent while it is recorded.

// One system call rustix does not wrap (`cachestat`, in `source`) is the only unsafe code, allowed there.
#![deny(unsafe_code)]

pub mod archive;
pub mod client;
pub mod daemon;
pub mod dest;
pub mod error;
pub mod follow;
pub mod hash;
pub mod key;
pub mod link;
pub mod out;
pub mod progress;
pub mod recv;
pub mod remote;
pub mod scan;
pub mod secure;
pub mod send;
pub mod session;
pub mod source;

pub use error::XferError;
pub use key::Key;
pub use progress::Progress;
