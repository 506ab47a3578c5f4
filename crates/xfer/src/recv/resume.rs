//! The resume thread of a receive: it re-reads what is already on disk at disk speed and reports the
//! hash of each complete chunk to the sender (`have`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender as ChanTx;
use vlbiflow_xfer_proto::ChunkHash;

use super::plan::{Plan, Resume};
use super::verify::{hash_from_disk, READ_PIECE};
use crate::dest;
use crate::hash::ChunkHasher;
use crate::session::Session;
use crate::source::AlignedBuf;

/// The hashes of what each file holds already, by chunk, as the resume thread finds them: the data
/// thread declares them to the protocol when the file is announced.
pub(super) type ResumeStore = Arc<Mutex<Vec<Vec<Option<ChunkHash>>>>>;

/// An empty store for `plan`: a slot for each chunk to re-verify.
pub(super) fn resume_store(plan: &Plan) -> ResumeStore {
    Arc::new(Mutex::new(
        plan.files
            .iter()
            .map(|f| match f.resume {
                Resume::Nothing => Vec::new(),
                Resume::Part(c) | Resume::Complete(c) => vec![None; c as usize],
            })
            .collect(),
    ))
}

/// Hashes what is already on disk (`have` files) in order, storing each hash and reporting it to the
/// sender.
pub(super) struct Resumer {
    pub plan: Arc<Plan>,
    /// To the data thread, which sends them on the control connection in order.
    pub link_tx: ChanTx<Session>,
    pub store: ResumeStore,
    pub stop: Arc<AtomicBool>,
}

impl Resumer {
    /// Runs until every held chunk is hashed (then `have_done`), `stop`, or an error reading one.
    pub(super) fn run(self) -> Result<(), String> {
        let plan = &self.plan;
        let cs = plan.options.chunk_size;
        let mut buf = AlignedBuf::new(READ_PIECE.min(cs as usize), 0);
        for (i, f) in plan.files.iter().enumerate() {
            let (chunks, name) = match f.resume {
                Resume::Nothing => continue,
                Resume::Part(c) => (c, format!("{}{}", f.leaf, dest::PART_SUFFIX)),
                Resume::Complete(c) => (c, f.leaf.clone()),
            };
            let dir = dest::open_dir(&f.root, &f.dir, false).map_err(|e| format!("{}: {e}", f.name))?;
            let file = dest::open_final_ro(&dir, &name).map_err(|e| format!("{}: {e}", f.name))?;
            for c in 0..chunks {
                if self.stop.load(Relaxed) {
                    return Ok(());
                }
                let off = c as u64 * cs;
                let len = cs.min(f.size - off);
                let h = hash_from_disk(
                    &file,
                    false,
                    off,
                    len,
                    &mut buf,
                    ChunkHasher::new(f.size, cs, c as u64),
                )
                .map_err(|e| format!("{}: {e}", f.name))?;
                self.store.lock().expect("resume hashes")[i][c as usize] = Some(h);
                let _ = self.link_tx.send(Session::Have {
                    file: i as u32,
                    chunk: c,
                    hash: h,
                });
            }
        }
        let _ = self.link_tx.send(Session::HaveDone);
        Ok(())
    }
}
