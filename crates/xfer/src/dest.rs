//! Where received files land: only under the daemon's roots. A destination is `ROOT/relative/dir`; each
//! component is checked (no `..`, `.`, empty or absolute parts) and every directory is opened relative to
//! its parent with `O_NOFOLLOW | O_DIRECTORY`, so a symbolic link planted under a root cannot lead out of
//! it. Files are written as `NAME.part`, synced, then renamed to `NAME` (never over an existing file
//! unless overwriting was asked), with a manifest `NAME.blake3.json` beside them recording the chunk
//! hashes and the whole-file BLAKE3.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, RenameFlags};
use serde::{Deserialize, Serialize};

use crate::error::XferError;

/// Mode of the files a transfer creates before the process umask applies: the umask decides (as for
/// `cp` or `rsync` without `--chmod`), so an operator who wants group-writable data sets `UMask=0002` in
/// the unit (or `umask 002` before starting the daemon); with the usual umask 022 files are 0644.
pub const FILE_MODE: u32 = 0o666;
/// Mode of the directories a transfer creates before the umask applies (0755 under umask 022).
pub const DIR_MODE: u32 = 0o777;

/// Suffix of files being received.
pub const PART_SUFFIX: &str = ".part";
/// Suffix of the manifest beside a received file.
pub const MANIFEST_SUFFIX: &str = ".blake3.json";

/// A directory files may be sent to or taken from.
#[derive(Debug, Clone)]
pub struct Root {
    /// Name clients use (`NAME/...`).
    pub name: String,
    /// Canonical path.
    pub path: PathBuf,
    /// What clients may do under it (`--root NAME=DIR:ro` or `:wo`; default both).
    pub access: Access,
}

/// What clients may do under a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// Push to it and pull (or copy) from it.
    #[default]
    ReadWrite,
    /// Pull and copy from it only (`:ro`): recordings served to others.
    ReadOnly,
    /// Push to it only (`:wo`): an inbox whose files no client can read back.
    WriteOnly,
}

/// What a request does under a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Reads files (pull, the sending end of a copy, listing).
    Read,
    /// Writes files (push, the receiving end of a copy).
    Write,
}

impl Access {
    /// Whether `u` is allowed.
    pub fn allows(self, u: Use) -> bool {
        !matches!(
            (self, u),
            (Access::ReadOnly, Use::Write) | (Access::WriteOnly, Use::Read)
        )
    }

    fn suffix(self) -> &'static str {
        match self {
            Access::ReadWrite => "",
            Access::ReadOnly => ":ro",
            Access::WriteOnly => ":wo",
        }
    }
}

/// The roots of a daemon.
#[derive(Debug, Clone, Default)]
pub struct Roots(pub Vec<Root>);

impl Roots {
    /// Parses `--root` arguments: `NAME=DIR` or `DIR` (named after its last component), each optionally
    /// followed by `:ro` (read-only: clients may pull, not push) or `:wo` (write-only: clients may push,
    /// not pull); `:rw` (the default) allows both.
    pub fn parse(specs: &[String]) -> Result<Roots, XferError> {
        let mut out: Vec<Root> = Vec::new();
        for s in specs {
            let (spec, access) = if let Some(d) = s.strip_suffix(":ro") {
                (d, Access::ReadOnly)
            } else if let Some(d) = s.strip_suffix(":wo") {
                (d, Access::WriteOnly)
            } else {
                (s.strip_suffix(":rw").unwrap_or(s), Access::ReadWrite)
            };
            let (name, dir) = match spec.split_once('=') {
                Some((n, d)) => (n.to_string(), PathBuf::from(d)),
                None => {
                    let p = PathBuf::from(spec);
                    let n = p
                        .canonicalize()
                        .ok()
                        .and_then(|c| c.file_name().and_then(|n| n.to_str()).map(str::to_owned))
                        .unwrap_or_default();
                    (n, p)
                }
            };
            if name.is_empty() || split_rel(&name).map(|c| c.len()) != Ok(1) {
                return Err(XferError::Usage(format!(
                    "--root {s:?}: the root name must be one plain path component (give NAME=DIR)"
                )));
            }
            let path = dir
                .canonicalize()
                .map_err(|e| XferError::Usage(format!("--root {s:?}: {}: {e}", dir.display())))?;
            if !path.is_dir() {
                return Err(XferError::Usage(format!(
                    "--root {s:?}: {} is not a directory",
                    path.display()
                )));
            }
            if out.iter().any(|r| r.name == name) {
                return Err(XferError::Usage(format!(
                    "--root {s:?}: two roots named {name:?}"
                )));
            }
            out.push(Root { name, path, access });
        }
        Ok(Roots(out))
    }

    /// Names of the roots, for messages.
    pub fn names(&self) -> String {
        self.0
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Names of the roots with their access (`data:ro, inbox:wo, scratch`), for logs.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|r| format!("{}{}", r.name, r.access.suffix()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether a client may `u` under `root`: the root's access allows it, and `scope` (the roots of
    /// the client's key; None: every root) names it. The refusal says which rule and what is allowed.
    pub fn permit(root: &Root, u: Use, scope: Option<&[String]>) -> Result<(), String> {
        if let Some(scope) = scope {
            if !scope.contains(&root.name) {
                return Err(format!(
                    "this key may not use root {:?} on this daemon (its roots: {})",
                    root.name,
                    if scope.is_empty() {
                        "none".to_string()
                    } else {
                        scope.join(", ")
                    }
                ));
            }
        }
        if !root.access.allows(u) {
            return Err(match u {
                Use::Write => format!(
                    "root {:?} is read-only on this daemon: files may be pulled from it, not pushed to it",
                    root.name
                ),
                Use::Read => format!(
                    "root {:?} is write-only on this daemon: files may be pushed to it, not read from it",
                    root.name
                ),
            });
        }
        Ok(())
    }

    /// [`resolve`](Self::resolve), then [`permit`](Self::permit).
    pub fn resolve_for(
        &self,
        spec: &str,
        u: Use,
        scope: Option<&[String]>,
    ) -> Result<(&Root, Vec<String>), String> {
        let (root, comps) = self.resolve(spec)?;
        Roots::permit(root, u, scope)?;
        Ok((root, comps))
    }

    /// Splits `ROOT/rel/path` into the root and the checked components below it.
    pub fn resolve(&self, spec: &str) -> Result<(&Root, Vec<String>), String> {
        let comps = split_rel(spec)?;
        let root = self.0.iter().find(|r| r.name == comps[0]).ok_or_else(|| {
            format!(
                "unknown root {:?} in {spec:?}: this daemon serves {}",
                comps[0],
                if self.0.is_empty() {
                    "no roots".to_string()
                } else {
                    self.names()
                }
            )
        })?;
        Ok((root, comps[1..].to_vec()))
    }
}

/// Checks a relative path and splits it into components: no `..`, `.` or empty components, not absolute,
/// no NUL or backslash.
pub fn split_rel(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Err("empty path".into());
    }
    if p.starts_with('/') {
        return Err(format!("{p:?} is absolute; give ROOT/relative/path"));
    }
    if p.contains('\0') || p.contains('\\') {
        return Err(format!("{p:?} contains NUL or a backslash"));
    }
    let comps: Vec<String> = p.trim_end_matches('/').split('/').map(str::to_owned).collect();
    if comps.iter().any(|c| c == "..") {
        return Err(format!(
            "{p:?} contains '..': paths stay inside the daemon's roots"
        ));
    }
    if comps.iter().any(|c| c.is_empty() || c == ".") {
        return Err(format!("{p:?} has an empty or '.' component"));
    }
    Ok(comps)
}

fn io_err(e: rustix::io::Errno, what: impl std::fmt::Display) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Opens directory `root/comps...` without following symbolic links at any step below the root, creating
/// missing directories when `create`.
pub fn open_dir(root: &Path, comps: &[String], create: bool) -> io::Result<OwnedFd> {
    let mut fd = rfs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(e, root.display()))?;
    let mut shown = root.to_path_buf();
    for c in comps {
        shown.push(c);
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let next = match rfs::openat(&fd, c.as_str(), flags, Mode::empty()) {
            Ok(f) => f,
            Err(rustix::io::Errno::NOENT) if create => {
                match rfs::mkdirat(&fd, c.as_str(), Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io_err(e, format!("creating {}", shown.display()))),
                }
                rfs::openat(&fd, c.as_str(), flags, Mode::empty()).map_err(|e| io_err(e, shown.display()))?
            }
            Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::NOTDIR) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link or not a directory (links are not followed)",
                        shown.display()
                    ),
                ))
            }
            Err(e) => return Err(io_err(e, shown.display())),
        };
        fd = next;
    }
    Ok(fd)
}

/// What is at `name` in a directory (symbolic links not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Nothing.
    None,
    /// A regular file of this size.
    File(u64),
    /// Something else (directory, link, device).
    Other,
}

/// Looks at `name` in `dir` without following links.
pub fn existing(dir: &OwnedFd, name: &str) -> io::Result<Existing> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = rfs::FileType::from_raw_mode(st.st_mode);
            Ok(if ft == rfs::FileType::RegularFile {
                Existing::File(st.st_size as u64)
            } else {
                Existing::Other
            })
        }
        Err(rustix::io::Errno::NOENT) => Ok(Existing::None),
        Err(e) => Err(io_err(e, name)),
    }
}

/// Opens (creating if needed) `name.part` in `dir` for reading and writing, never through a link, and
/// locks it (`flock`, exclusive) for as long as the returned file is open: a second transfer into the
/// same file, from this process or another (a second daemon on the same root, a pull), gets an error of
/// kind [`io::ErrorKind::WouldBlock`] instead of writing into it.
pub fn open_part(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let part = format!("{name}{PART_SUFFIX}");
    let fd = rfs::openat(
        dir,
        part.as_str(),
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(FILE_MODE),
    )
    .map_err(|e| io_err(e, &part))?;
    match rfs::flock(&fd, rfs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(File::from(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{part} is being written by another transfer; retry when it has ended"),
        )),
        Err(e) => Err(io_err(e, format!("locking {part}"))),
    }
}

/// `NAME.part` (as opened by [`open_part`] into `part`) opened a second time with `O_DIRECT`,
/// where its file system allows that; `None` otherwise (tmpfs, or the name no longer being that file).
pub fn open_part_direct(dir: &OwnedFd, name: &str, part: &File) -> Option<File> {
    let fd = rfs::openat(
        dir,
        format!("{name}{PART_SUFFIX}").as_str(),
        OFlags::RDWR | OFlags::DIRECT | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let (a, b) = (rfs::fstat(&fd).ok()?, rfs::fstat(part).ok()?);
    (a.st_dev == b.st_dev && a.st_ino == b.st_ino).then(|| File::from(fd))
}

/// Opens the existing final file `name` in `dir` for reading, never through a link.
pub fn open_final_ro(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(e, name))?;
    Ok(File::from(fd))
}

/// Renames `name.part` to `name` in `dir` (refusing to replace an existing file unless `overwrite`),
/// without syncing the directory: [`sync_dir`] afterwards makes one or many renames durable.
pub fn rename_part(dir: &OwnedFd, name: &str, overwrite: bool) -> io::Result<()> {
    let part = format!("{name}{PART_SUFFIX}");
    let flags = if overwrite {
        RenameFlags::empty()
    } else {
        RenameFlags::NOREPLACE
    };
    rfs::renameat_with(dir, part.as_str(), dir, name, flags)
        .map_err(|e| io_err(e, format!("renaming {part} to {name}")))
}

/// Syncs a directory: the renames and new entries in it are durable once this returns.
pub fn sync_dir(dir: &OwnedFd) -> io::Result<()> {
    rfs::fsync(dir).map_err(|e| io_err(e, "syncing the directory"))
}

/// The manifest written beside a received file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// File name (last component).
    pub name: String,
    pub size: u64,
    /// BLAKE3 of the whole file, hex.
    pub blake3: String,
    pub chunk_size: u64,
    /// Chunk hashes (BLAKE3 subtree chaining values; see `vlbiflow_xfer::hash`), hex.
    pub chunks: Vec<String>,
    /// Where it came from (the sending host's address) and when it was committed (UTC, RFC 3339).
    pub source: String,
    pub committed_utc: String,
    pub writer: String,
}

/// A manifest written to its temporary file, not yet synced or renamed (see [`stage_manifest`]).
#[derive(Debug)]
pub struct StagedManifest {
    /// The temporary file, to be synced before [`StagedManifest::rename`].
    pub file: File,
    tmp: String,
    fin: String,
}

impl StagedManifest {
    /// Renames the temporary file to `name.blake3.json` (replacing an older manifest). Sync
    /// [`StagedManifest::file`] before, and the directory after, for the manifest to be durable.
    pub fn rename(&self, dir: &OwnedFd) -> io::Result<()> {
        rfs::renameat(dir, self.tmp.as_str(), dir, self.fin.as_str()).map_err(|e| io_err(e, &self.fin))
    }

    /// Removes the temporary file (its file was not committed).
    pub fn discard(self, dir: &OwnedFd) {
        let _ = rfs::unlinkat(dir, self.tmp.as_str(), AtFlags::empty());
    }
}

/// Writes the manifest of `m.name` to a temporary file `.name.blake3.json.tmp` in `dir`, so that its sync
/// can run beside the sync of the file it describes.
pub fn stage_manifest(dir: &OwnedFd, m: &Manifest) -> io::Result<StagedManifest> {
    let tmp = format!(".{}{MANIFEST_SUFFIX}.tmp", m.name);
    let fin = format!("{}{MANIFEST_SUFFIX}", m.name);
    let fd = rfs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(FILE_MODE),
    )
    .map_err(|e| io_err(e, &tmp))?;
    let mut file = File::from(fd);
    let mut text = serde_json::to_vec_pretty(m).expect("manifest serialises");
    text.push(b'\n');
    file.write_all(&text)?;
    Ok(StagedManifest { file, tmp, fin })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside() {
        assert!(split_rel("a/../b").unwrap_err().contains(".."));
        assert!(split_rel("/etc").unwrap_err().contains("absolute"));
        assert!(split_rel("a//b").is_err());
        assert_eq!(split_rel("a/b/").unwrap(), ["a", "b"]);
        let d = tempfile::tempdir().unwrap();
        let roots = Roots::parse(&[format!("data={}", d.path().display())]).unwrap();
        assert!(roots.resolve("other/x").unwrap_err().contains("unknown root"));
        assert_eq!(roots.resolve("data/x/y").unwrap().1, ["x", "y"]);
    }

    #[test]
    fn links_are_not_followed_and_nothing_is_replaced() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("escape")).unwrap();
        let e = open_dir(d.path(), &["escape".into(), "x".into()], true).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let dir = open_dir(d.path(), &["in".into(), "deep".into()], true).unwrap();
        let mut f = open_part(&dir, "f").unwrap();
        f.write_all(b"new").unwrap();
        std::fs::write(d.path().join("in/deep/f"), b"old").unwrap();
        assert!(rename_part(&dir, "f", false).is_err());
        assert_eq!(std::fs::read(d.path().join("in/deep/f")).unwrap(), b"old");
        rename_part(&dir, "f", true).unwrap();
        sync_dir(&dir).unwrap();
        assert_eq!(std::fs::read(d.path().join("in/deep/f")).unwrap(), b"new");
        assert_eq!(existing(&dir, "f").unwrap(), Existing::File(3));
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("in/deep/l")).unwrap();
        assert_eq!(existing(&dir, "l").unwrap(), Existing::Other);
        assert!(open_part(&dir, "l").is_ok()); // creates l.part, not through l
                                               // one writer at a time: a second open of a .part that is open fails until the first is closed
        let held = open_part(&dir, "w").unwrap();
        let e = open_part(&dir, "w").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        assert!(
            e.to_string()
                .contains("w.part is being written by another transfer"),
            "{e}"
        );
        drop(held);
        assert!(open_part(&dir, "w").is_ok());
        assert!(open_final_ro(&dir, "l").is_err());
    }
}
