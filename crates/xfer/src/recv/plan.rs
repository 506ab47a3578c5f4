//! The receiving side's plan for a request: checked against the destination without writing.

use std::path::PathBuf;

use crate::dest::{self, Existing};
use crate::session::{FileSpec, Have, Options};

/// Where one file of a request goes and what is there already.
#[derive(Debug)]
pub struct FilePlan {
    /// Relative name from the request.
    pub name: String,
    pub size: u64,
    /// Root directory and the components of the file's directory below it.
    pub root: PathBuf,
    pub dir: Vec<String>,
    /// Last component.
    pub leaf: String,
    /// What to resume from.
    pub resume: Resume,
}

/// What a receiver already holds of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Nothing: start from scratch.
    Nothing,
    /// A `.part` holding this many complete chunks.
    Part(u32),
    /// The final file exists with the announced size (verified chunk by chunk, never written).
    Complete(u32),
}

/// The receiving side's plan for a request.
#[derive(Debug)]
pub struct Plan {
    pub files: Vec<FilePlan>,
    pub options: Options,
}

impl Plan {
    /// What to tell the sender in the accept.
    pub fn have(&self) -> Vec<Have> {
        self.files
            .iter()
            .enumerate()
            .filter_map(|(i, f)| match f.resume {
                Resume::Nothing => None,
                Resume::Part(c) => Some(Have {
                    file: i as u32,
                    chunks: c,
                    complete: false,
                }),
                Resume::Complete(c) => Some(Have {
                    file: i as u32,
                    chunks: c,
                    complete: true,
                }),
            })
            .collect()
    }
}

/// Checks a request to write `files` under `root/dir_comps` without writing anything. The error is the
/// sentence to refuse with.
pub fn plan(
    root: &std::path::Path,
    dir_comps: &[String],
    files: &[FileSpec],
    options: &Options,
) -> Result<Plan, String> {
    if !crate::hash::valid_chunk_size(options.chunk_size) || options.chunk_size > 1 << 30 {
        return Err(format!(
            "chunk size {} is not a power of two between 4 KiB and 1 GiB",
            options.chunk_size
        ));
    }
    if options.block_size == 0 || options.block_size as usize > vlbiflow_xfer_proto::wire::MAX_PAYLOAD {
        return Err(format!("block size {} is out of range", options.block_size));
    }
    let mut out = Vec::with_capacity(files.len());
    let mut seen = std::collections::HashSet::new();
    for f in files {
        vlbiflow_xfer_proto::wire::validate_name(&f.name).map_err(|e| format!("file {:?}: {e}", f.name))?;
        if !seen.insert(f.name.as_str()) {
            return Err(format!("file {:?} is listed twice", f.name));
        }
        let comps: Vec<String> = f.name.split('/').map(str::to_owned).collect();
        let (leaf, sub) = comps.split_last().expect("validated names are not empty");
        if leaf.ends_with(dest::PART_SUFFIX) || leaf.ends_with(dest::MANIFEST_SUFFIX) {
            return Err(format!(
                "file {:?}: names ending in {} or {} are reserved for the receiver's own files",
                f.name,
                dest::PART_SUFFIX,
                dest::MANIFEST_SUFFIX
            ));
        }
        let mut dir = dir_comps.to_vec();
        dir.extend(sub.iter().cloned());
        let n_chunks = f.size.div_ceil(options.chunk_size) as u32;
        // look without creating: a directory that does not exist holds nothing
        let resume = match dest::open_dir(root, &dir, false) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Resume::Nothing,
            Err(e) => return Err(format!("destination of {:?}: {e}", f.name)),
            Ok(dfd) => {
                let fin = dest::existing(&dfd, leaf).map_err(|e| format!("{:?}: {e}", f.name))?;
                let part = dest::existing(&dfd, &format!("{leaf}{}", dest::PART_SUFFIX))
                    .map_err(|e| format!("{:?}: {e}", f.name))?;
                match (fin, options.overwrite) {
                    (Existing::Other, _) => {
                        return Err(format!(
                            "{}/{leaf} exists and is not a regular file",
                            dir.join("/")
                        ))
                    }
                    (Existing::File(sz), false) if sz != f.size => {
                        return Err(format!(
                            "{}/{leaf} exists with {sz} bytes, not {}; nothing is overwritten unless asked (--overwrite)",
                            dir.join("/"),
                            f.size
                        ))
                    }
                    (Existing::File(_), false) => Resume::Complete(n_chunks),
                    _ => match part {
                        Existing::File(psz) => {
                            let full = if psz >= f.size {
                                n_chunks
                            } else {
                                (psz / options.chunk_size) as u32
                            };
                            if full > 0 {
                                Resume::Part(full)
                            } else {
                                Resume::Nothing
                            }
                        }
                        Existing::Other => {
                            return Err(format!(
                                "{}/{leaf}{} exists and is not a regular file",
                                dir.join("/"),
                                dest::PART_SUFFIX
                            ))
                        }
                        Existing::None => Resume::Nothing,
                    },
                }
            }
        };
        out.push(FilePlan {
            name: f.name.clone(),
            size: f.size,
            root: root.to_path_buf(),
            dir,
            leaf: leaf.clone(),
            resume,
        });
    }
    // refuse up front what cannot fit, instead of failing with ENOSPC half way
    let need: u64 = out
        .iter()
        .map(|f| match f.resume {
            Resume::Complete(_) => 0,
            Resume::Part(full) => f.size.saturating_sub(u64::from(full) * options.chunk_size),
            Resume::Nothing => f.size,
        })
        .sum();
    if need > 0 {
        if let Ok(st) = rustix::fs::statvfs(root) {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if need > free {
                return Err(format!(
                    "not enough space under the root: the files need {:.3} GB more, {:.3} GB are free",
                    need as f64 / 1e9,
                    free as f64 / 1e9
                ));
            }
        }
    }
    Ok(Plan {
        files: out,
        options: options.clone(),
    })
}
