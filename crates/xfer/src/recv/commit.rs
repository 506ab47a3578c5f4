//! The committing thread of a receive: verified files synced, renamed to their final names, and their
//! manifests written.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx};
use vlbiflow_xfer_proto::ChunkHash;

use super::plan::Plan;
use crate::dest::{self, Manifest};
use crate::hash::file_hash;
use crate::key::hex;
use crate::session::Committed;

/// A verified file, every write of it done: commit it.
pub(super) struct Finalize {
    pub file: u32,
    pub f: Arc<File>,
    pub dir: Arc<OwnedFd>,
    /// The existing final file, verified in place: nothing to sync or rename.
    pub read_only: bool,
    pub hashes: Vec<ChunkHash>,
    /// Chunks found on disk (and not sent).
    pub resumed: u64,
}

/// Most verified files the committing thread takes at once (see [`finalize_batch`]).
const COMMIT_BATCH: usize = 256;
/// Most syncs the committing thread has running at once.
const COMMIT_SYNCS: usize = 8;

/// The committing thread: takes each verified file, with every other one already waiting, and commits
/// them together ([`finalize_batch`]), one result per file in the order they came.
pub(super) struct Committer {
    pub plan: Arc<Plan>,
    pub jobs: ChanRx<Finalize>,
    pub results: ChanTx<Result<Committed, String>>,
    /// Written into each manifest: who sent the file.
    pub source: String,
}

impl Committer {
    /// Commits until the verifier closes the channel (or the loop stops listening).
    pub(super) fn run(self) {
        let overwrite = self.plan.options.overwrite;
        while let Ok(j) = self.jobs.recv() {
            let mut batch = vec![j];
            while batch.len() < COMMIT_BATCH {
                match self.jobs.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            for r in finalize_batch(&self.plan, batch, overwrite, &self.source) {
                if self.results.send(r).is_err() {
                    return;
                }
            }
        }
    }
}

/// Commits verified files: each file and its manifest synced (all of them at once, up to
/// [`COMMIT_SYNCS`]), then `NAME.part` renamed to `NAME` and the manifest's temporary file to
/// `NAME.blake3.json`, then each directory synced once. A file is reported committed only after all of
/// that; one that fails leaves the others of the batch alone.
///
/// One file at a time, each commit took three syncs in a row (the file, its directory after the rename,
/// the manifest), and on a disk where a sync waits for the journal that is what many small files cost:
/// the batch shares them. With `--follow`'s partial rounds the files are only synced.
pub(super) fn finalize_batch(
    plan: &Plan,
    jobs: Vec<Finalize>,
    overwrite: bool,
    source: &str,
) -> Vec<Result<Committed, String>> {
    let partial = plan.options.partial;
    let mut out: Vec<(Committed, Option<dest::StagedManifest>, Option<String>)> = jobs
        .iter()
        .map(|j| {
            let f = &plan.files[j.file as usize];
            let blake3 = hex(&file_hash(f.size, plan.options.chunk_size, &j.hashes));
            let mut err = None;
            let staged = if partial {
                None
            } else {
                let m = Manifest {
                    name: f.leaf.clone(),
                    size: f.size,
                    blake3: blake3.clone(),
                    chunk_size: plan.options.chunk_size,
                    chunks: j.hashes.iter().map(|h| hex(&h.0)).collect(),
                    source: source.to_string(),
                    committed_utc: crate::utc_now(),
                    writer: format!("vlbiflow {}", env!("CARGO_PKG_VERSION")),
                };
                dest::stage_manifest(&j.dir, &m)
                    .map_err(|e| err = Some(format!("{}: manifest: {e}", f.name)))
                    .ok()
            };
            let c = Committed {
                name: f.name.clone(),
                size: f.size,
                blake3,
                resumed_chunks: j.resumed,
            };
            (c, staged, err)
        })
        .collect();

    // every sync of the batch at once: (file, the file or its manifest)
    let mut syncs: Vec<(usize, &File, bool)> = Vec::new();
    for (i, (j, (_, staged, err))) in jobs.iter().zip(&out).enumerate() {
        if err.is_none() {
            if !j.read_only {
                syncs.push((i, &j.f, false));
            }
            if let Some(m) = staged {
                syncs.push((i, &m.file, true));
            }
        }
    }
    let failed: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let Some(&(i, f, manifest)) = syncs.get(next.fetch_add(1, Relaxed)) else {
            return;
        };
        let r = if manifest { f.sync_data() } else { f.sync_all() };
        if let Err(e) = r {
            let what = if manifest { "manifest" } else { "sync" };
            let name = &plan.files[jobs[i].file as usize].name;
            failed.lock().unwrap().push((i, format!("{name}: {what}: {e}")));
        }
    };
    std::thread::scope(|sc| {
        for _ in 1..syncs.len().min(COMMIT_SYNCS) {
            sc.spawn(work);
        }
        work();
    });
    for (i, e) in failed.into_inner().unwrap() {
        out[i].2.get_or_insert(e);
    }

    // renames, then each directory synced once
    let mut dirs: Vec<(&Arc<OwnedFd>, Vec<usize>)> = Vec::new();
    for (i, (j, (c, staged, err))) in jobs.iter().zip(out.iter_mut()).enumerate() {
        if err.is_none() && !j.read_only && !partial {
            let leaf = &plan.files[j.file as usize].leaf;
            if let Err(e) = dest::rename_part(&j.dir, leaf, overwrite) {
                *err = Some(format!("{}: {e}", c.name));
            }
        }
        if let Some(m) = staged.take() {
            let r = if err.is_none() {
                m.rename(&j.dir).map_err(|e| format!("{}: manifest: {e}", c.name))
            } else {
                m.discard(&j.dir);
                Ok(())
            };
            if let Err(e) = r {
                *err = Some(e);
            }
        }
        if err.is_none() && !partial {
            match dirs.iter_mut().find(|(d, _)| Arc::ptr_eq(d, &j.dir)) {
                Some((_, v)) => v.push(i),
                None => dirs.push((&j.dir, vec![i])),
            }
        }
    }
    for (d, members) in dirs {
        if let Err(e) = dest::sync_dir(d) {
            for i in members {
                out[i].2 = Some(format!("{}: {e}", out[i].0.name));
            }
        }
    }
    out.into_iter()
        .map(|(c, _, err)| match err {
            Some(e) => Err(e),
            None => Ok(c),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::chunk_hash;
    use crate::recv::plan;
    use crate::session::{FileSpec, Options};
    use std::os::unix::fs::FileExt;

    /// Three files committed as one batch, the second of which cannot take its name (a file of that
    /// name appeared after the plan, and overwriting was not asked): the other two are committed with
    /// their manifests, the second keeps its `.part` and leaves no manifest behind, and each result
    /// comes in order. Then a `--follow` round: synced, still `.part`, no manifest.
    #[test]
    fn a_batch_commits_each_file_it_can_and_reports_each_in_order() {
        let d = tempfile::tempdir().unwrap();
        let cs: u64 = 64 << 10;
        let sizes = [5000u64, cs + 17, 3 * cs];
        let specs: Vec<FileSpec> = ["a", "b", "c"]
            .iter()
            .zip(sizes)
            .map(|(n, size)| FileSpec {
                name: n.to_string(),
                size,
            })
            .collect();
        let mut options = Options {
            chunk_size: cs,
            block_size: 8192,
            overwrite: false,
            encrypt: false,
            rate_bps: None,
            partial: false,
            verify_written: false,
        };
        let pl = plan(d.path(), &[], &specs, &options).unwrap();
        let dir = Arc::new(dest::open_dir(d.path(), &[], true).unwrap());
        let content = |i: usize| -> Vec<u8> { (0..sizes[i]).map(|x| (x * 7 + i as u64) as u8).collect() };
        let js: Vec<Finalize> = (0..3)
            .map(|i| {
                let data = content(i);
                let part = dest::open_part(&dir, &specs[i].name).unwrap();
                part.write_all_at(&data, 0).unwrap();
                let hashes = data
                    .chunks(cs as usize)
                    .enumerate()
                    .map(|(c, piece)| chunk_hash(sizes[i], cs, c as u64, piece))
                    .collect();
                Finalize {
                    file: i as u32,
                    f: Arc::new(part),
                    dir: dir.clone(),
                    read_only: false,
                    hashes,
                    resumed: 0,
                }
            })
            .collect();
        std::fs::write(d.path().join("b"), b"already here").unwrap();
        let r = finalize_batch(&pl, js, false, "test");
        assert_eq!(r.len(), 3);
        for i in [0, 2] {
            let c = r[i].as_ref().unwrap();
            assert_eq!(c.name, specs[i].name);
            assert_eq!(c.blake3, blake3::hash(&content(i)).to_hex().to_string());
            assert_eq!(std::fs::read(d.path().join(&c.name)).unwrap(), content(i));
            let m: Manifest = serde_json::from_slice(
                &std::fs::read(d.path().join(format!("{}{}", c.name, dest::MANIFEST_SUFFIX))).unwrap(),
            )
            .unwrap();
            assert_eq!(m.blake3, c.blake3);
            assert_eq!(m.chunks.len() as u64, sizes[i].div_ceil(cs));
        }
        let e = r[1].as_ref().unwrap_err();
        assert!(e.starts_with("b: renaming b.part to b"), "{e}");
        assert_eq!(std::fs::read(d.path().join("b")).unwrap(), b"already here");
        assert_eq!(std::fs::read(d.path().join("b.part")).unwrap(), content(1));
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["a", "a.blake3.json", "b", "b.part", "c", "c.blake3.json"],
            "no manifest of b, no temporary file"
        );

        // a round of `push --follow`: synced and still `.part`, no manifest
        let e = tempfile::tempdir().unwrap();
        options.partial = true;
        let pl = plan(e.path(), &[], &specs, &options).unwrap();
        let d2 = Arc::new(dest::open_dir(e.path(), &[], true).unwrap());
        let part = dest::open_part(&d2, "a").unwrap();
        part.write_all_at(&content(0), 0).unwrap();
        let j = Finalize {
            file: 0,
            f: Arc::new(part),
            dir: d2,
            read_only: false,
            hashes: vec![chunk_hash(sizes[0], cs, 0, &content(0))],
            resumed: 0,
        };
        let r = finalize_batch(&pl, vec![j], false, "test");
        assert!(r[0].is_ok(), "{r:?}");
        let left: Vec<String> = std::fs::read_dir(e.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["a.part"]);
    }
}
