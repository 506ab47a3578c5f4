//! What a sender sends: *virtual files*, each a list of extents of real files. A plain file is one extent;
//! a Mark6 scan gathered into one VDIF file is the payload of every block in block-number order across the
//! disks (block headers left out), so it is sent in place without a gather step; a FlexBuff chunk, a
//! Mark6 disk file or any plain file is one extent of itself.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::XferError;

/// A byte range of a real file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Index into [`SourceSet::paths`].
    pub path: usize,
    /// Offset in that file.
    pub offset: u64,
    /// Length.
    pub len: u64,
}

/// A file as the receiver will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VFile {
    /// Relative name at the destination (validated like the protocol's announce names).
    pub name: String,
    /// Size in bytes (sum of the extents).
    pub size: u64,
    /// The extents, in order.
    pub extents: Vec<Extent>,
    /// Start of each extent in the virtual file.
    starts: Vec<u64>,
}

impl VFile {
    /// A virtual file of `extents`.
    pub fn new(name: String, extents: Vec<Extent>) -> VFile {
        let mut starts = Vec::with_capacity(extents.len());
        let mut size = 0;
        for e in &extents {
            starts.push(size);
            size += e.len;
        }
        VFile {
            name,
            size,
            extents,
            starts,
        }
    }
}

/// The files of one transfer and the real files they are made of.
#[derive(Debug, Clone, Default)]
pub struct SourceSet {
    /// Real files.
    pub paths: Vec<PathBuf>,
    /// Virtual files, in sending order.
    pub files: Vec<VFile>,
}

/// The alignment of direct reads: their file offsets, lengths and buffers are multiples of it (4 KiB: what
/// Linux block devices and file systems accept for `O_DIRECT`, 512-byte devices included).
pub const DIRECT_ALIGN: usize = 4096;

/// Set to `0` or `off`, the sender reads everything through the page cache; set to `cold`, it reads with
/// `O_DIRECT` only what the page cache holds less than half of (for comparing the three; see
/// [`DirectReads`]).
pub const DIRECT_ENV: &str = "VLBIFLOW_XFER_DIRECT";

/// Which reads of the sender's windows go past the page cache with `O_DIRECT`. Either way only ranges of
/// one extent at a 4 KiB-aligned place of its file, on a file system that takes `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectReads {
    /// Every such range the page cache holds no dirty or writeback page of (the default): no copy out
    /// of the cache and no LRU bookkeeping per page, whether the cache holds the bytes or not. A range
    /// being written (a scan recorded through the cache, `--follow`) is read through the cache, since a
    /// direct read would first wait for its writeback.
    #[default]
    On,
    /// Only such ranges the page cache holds less than half of (a recording read long after it was made);
    /// the rest through the cache.
    Cold,
    /// None: everything through the page cache.
    Off,
}

impl DirectReads {
    /// From [`DIRECT_ENV`]: `0` or `off`, `cold`, else [`DirectReads::On`].
    pub fn from_env() -> DirectReads {
        match std::env::var(DIRECT_ENV).as_deref() {
            Ok("0" | "off") => DirectReads::Off,
            Ok("cold") => DirectReads::Cold,
            _ => DirectReads::On,
        }
    }
}

/// Memory for direct I/O: `len` bytes starting at a multiple of [`DIRECT_ALIGN`], followed by `slack`
/// bytes a direct read of a file's unaligned tail may fill (glibc's large allocations are not aligned).
/// Zeroed lazily by the kernel: pages are touched only when used.
pub(crate) struct AlignedBuf {
    mem: Vec<u8>,
    base: usize,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize, slack: usize) -> AlignedBuf {
        let mem = vec![0u8; len + slack + DIRECT_ALIGN];
        let base = (DIRECT_ALIGN - mem.as_ptr() as usize % DIRECT_ALIGN) % DIRECT_ALIGN;
        AlignedBuf { mem, base, len }
    }

    /// The `len` aligned bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.mem[self.base..self.base + self.len]
    }

    /// The `len` aligned bytes, to fill.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.base..self.base + self.len]
    }

    /// The aligned bytes and (at least) the slack after them.
    pub(crate) fn with_slack(&mut self) -> &mut [u8] {
        &mut self.mem[self.base..]
    }
}

/// Open files, at most a bounded number at once.
#[derive(Default)]
pub struct FdCache {
    open: HashMap<usize, File>,
    /// The same files opened with `O_DIRECT`; `None` where that is not possible (a file system without
    /// it, or one that refused a read).
    direct: HashMap<usize, Option<File>>,
}

const MAX_OPEN: usize = 256;

impl FdCache {
    fn get(&mut self, set: &SourceSet, path: usize) -> io::Result<&File> {
        if !self.open.contains_key(&path) {
            if self.open.len() >= MAX_OPEN {
                self.open.clear();
                self.direct.clear();
            }
            let p = &set.paths[path];
            let f = File::open(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
            self.open.insert(path, f);
        }
        Ok(&self.open[&path])
    }

    /// `path` opened with `O_DIRECT`, if its file system allows it.
    fn get_direct(&mut self, set: &SourceSet, path: usize) -> Option<&File> {
        use std::os::unix::fs::OpenOptionsExt;
        if !self.direct.contains_key(&path) {
            if self.direct.len() >= MAX_OPEN {
                self.open.clear();
                self.direct.clear();
            }
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&set.paths[path])
                .ok()
                .filter(|f| !in_memory(f));
            self.direct.insert(path, f);
        }
        self.direct[&path].as_ref()
    }
}

/// What `cachestat(2)` reports (Linux 6.5 on), in pages.
#[repr(C)]
#[derive(Default)]
struct CacheStat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// What the page cache holds of `len` bytes of `f` at `offset`, in pages: all of it and the dirty or
/// writeback part; `None` where the kernel cannot say (before Linux 6.5). It looks and reads nothing.
#[allow(unsafe_code)]
pub(crate) fn cache_state(f: &File, offset: u64, len: u64) -> Option<(u64, u64)> {
    use std::os::fd::AsRawFd;
    /// The system call's number (the same on every architecture: it came after their tables were unified).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range: [u64; 2] = [offset, len];
    let mut stat = CacheStat::default();
    // SAFETY: cachestat(fd, range, stat, flags) reads the two u64 of `range` and writes the five u64 of
    // `stat`, both valid, aligned and alive for the call; a bad descriptor only makes it fail.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            f.as_raw_fd(),
            range.as_ptr(),
            &mut stat as *mut CacheStat,
            0u32,
        )
    };
    (r == 0).then_some((stat.nr_cache, stat.nr_dirty + stat.nr_writeback))
}

/// How many of the pages of `len` bytes of `f` at `offset` the page cache holds; `None` where the kernel
/// cannot say (before Linux 6.5).
#[cfg(test)]
pub(crate) fn cached_pages(f: &File, offset: u64, len: u64) -> Option<u64> {
    cache_state(f, offset, len).map(|(cached, _)| cached)
}

/// Whether `f` lives in memory (tmpfs, ramfs): its page cache is its storage, and `O_DIRECT` (which
/// Linux 6.6 and later accept there) reads through that cache all the same.
pub(crate) fn in_memory(f: &File) -> bool {
    // the file systems' magic numbers (linux/magic.h), 32 bits on every architecture
    const TMPFS_MAGIC: u32 = 0x0102_1994;
    const RAMFS_MAGIC: u32 = 0x8584_58f6;
    rustix::fs::fstatfs(f).is_ok_and(|s| matches!(s.f_type as u32, TMPFS_MAGIC | RAMFS_MAGIC))
}

impl SourceSet {
    /// Total bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Reads `buf.len()` bytes of virtual file `file` at `offset`.
    pub fn read_at(&self, fds: &mut FdCache, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = &self.files[file];
        if offset + buf.len() as u64 > f.size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: read past the end ({} > {})",
                    f.name,
                    offset + buf.len() as u64,
                    f.size
                ),
            ));
        }
        let mut i = f.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut done = 0usize;
        while done < buf.len() {
            let e = f.extents[i];
            let within = offset + done as u64 - f.starts[i];
            let n = ((e.len - within) as usize).min(buf.len() - done);
            if n > 0 {
                let file = fds.get(self, e.path)?;
                file.read_exact_at(&mut buf[done..done + n], e.offset + within)
                    .map_err(|err| {
                        io::Error::new(
                            err.kind(),
                            format!(
                                "{} at offset {}: {err}",
                                self.paths[e.path].display(),
                                e.offset + within
                            ),
                        )
                    })?;
            }
            done += n;
            i += 1;
        }
        Ok(())
    }

    /// Where `offset` of virtual file `file` lies in its real file, modulo 4 KiB: a direct read of it goes
    /// to a place in memory with the same remainder (0 for plain files and FlexBuff chunks at their
    /// 4 KiB-aligned places; the payloads of a Mark6 scan, after each block's header, lie anywhere).
    /// `None` past the end.
    pub fn direct_phase(&self, file: usize, offset: u64) -> Option<usize> {
        let f = &self.files[file];
        let i = f.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let e = f.extents.get(i)?;
        let within = offset.checked_sub(f.starts[i]).filter(|&w| w < e.len)?;
        Some(((e.offset + within) % DIRECT_ALIGN as u64) as usize)
    }

    /// Whether `len` bytes of virtual file `file` at `offset` should be read with `O_DIRECT`, as `policy`
    /// has it (the bytes up to the end of the extent `offset` is in, which [`SourceSet::read_direct`]
    /// reads directly): the page cache holds no dirty or writeback page of them ([`DirectReads::On`]) or
    /// less than half of them ([`DirectReads::Cold`]: a recording read long after it was made; a scan
    /// just recorded or being recorded is read from the cache). A read through the page cache costs a
    /// copy per byte and the cache's bookkeeping per page, and a recording of terabytes read through it
    /// evicts everything else; the kernel writes back any dirty pages of the range before a direct read,
    /// so both ways read the same bytes. Where the kernel cannot say what the cache holds (before Linux
    /// 6.5), [`DirectReads::On`] reads directly and [`DirectReads::Cold`] not.
    pub fn wants_direct(
        &self,
        fds: &mut FdCache,
        (file, offset, len): (usize, u64, u64),
        policy: DirectReads,
    ) -> bool {
        if policy == DirectReads::Off || len == 0 {
            return false;
        }
        let f = &self.files[file];
        let i = f.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let Some(e) = f.extents.get(i) else { return false };
        let within = offset - f.starts[i];
        let Some(len) = e
            .len
            .checked_sub(within)
            .map(|rest| rest.min(len))
            .filter(|&l| l > 0)
        else {
            return false;
        };
        let Ok(fd) = fds.get(self, e.path) else {
            return false;
        };
        match (cache_state(fd, e.offset + within, len), policy) {
            (Some((_, dirty)), DirectReads::On) => dirty == 0,
            (None, DirectReads::On) => true,
            (Some((pages, _)), _) => pages * 2 * (DIRECT_ALIGN as u64) < len,
            (None, _) => false,
        }
    }

    /// Reads `len` bytes of virtual file `file` at `offset` into `mem[at..at + len]`, with `O_DIRECT` where
    /// it can: from `offset` to the end of its extent when `mem`'s address at `at` has the same remainder
    /// modulo 4 KiB as the place of `offset` in its file (see [`SourceSet::direct_phase`]) and `at` is at
    /// least that remainder. A direct read starts that remainder before `at` (those bytes of `mem` are
    /// overwritten with what precedes `offset` in the file) and ends at the 4 KiB boundary after `at +
    /// len`, into the bytes after it (at least the slack of one 4 KiB block must be there), when the
    /// range ends in the extent (a file's unaligned tail is the short last read at its end); else at the
    /// extent's last 4 KiB boundary. The rest, and everything where the file system refuses `O_DIRECT`,
    /// is read through the page cache as [`SourceSet::read_at`] reads. Returns the bytes read directly.
    pub fn read_direct(
        &self,
        fds: &mut FdCache,
        (file, offset): (usize, u64),
        mem: &mut [u8],
        at: usize,
        len: usize,
    ) -> io::Result<usize> {
        const A: usize = DIRECT_ALIGN;
        let f = &self.files[file];
        let i = f.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut got = 0usize;
        if let Some(&e) = f.extents.get(i) {
            let within = offset - f.starts[i];
            let pos = e.offset + within;
            let r = (pos % A as u64) as usize;
            let inside = within + len as u64 <= e.len;
            // the bytes read directly, and the read's length from `pos - r`
            let (want, room) = if inside {
                (len, (r + len).next_multiple_of(A))
            } else {
                let end = (e.offset + e.len) / A as u64 * A as u64;
                let n = end.saturating_sub(pos) as usize;
                (n, r + n)
            };
            let start = at.wrapping_sub(r);
            let aligned = at >= r && (mem.as_ptr() as usize + start) % A == 0 && room % A == 0;
            if aligned && want > 0 && start + room <= mem.len() && within < e.len {
                if let Some(fd) = fds.get_direct(self, e.path) {
                    let buf = &mut mem[start..start + room];
                    let from = pos - r as u64;
                    // whole aligned blocks, the last possibly short at the end of the file
                    let mut done = 0usize;
                    while done < room {
                        match rustix::io::pread(fd, &mut buf[done..], from + done as u64) {
                            Ok(0) => break,
                            Ok(n) => {
                                done += n;
                                if done % A != 0 {
                                    break;
                                }
                            }
                            Err(rustix::io::Errno::INTR) => {}
                            Err(rustix::io::Errno::INVAL) => {
                                // the file system has stricter rules: this file is read buffered
                                fds.direct.insert(e.path, None);
                                done = 0;
                                break;
                            }
                            Err(err) => {
                                return Err(io::Error::new(
                                    io::Error::from(err).kind(),
                                    format!(
                                        "{} at offset {}: {err}",
                                        self.paths[e.path].display(),
                                        from + done as u64
                                    ),
                                ))
                            }
                        }
                    }
                    got = done.saturating_sub(r).min(want);
                }
            }
        }
        if got < len {
            self.read_at(fds, file, offset + got as u64, &mut mem[at + got..at + len])?;
        }
        Ok(got)
    }

    /// Asks the kernel to read `len` bytes of virtual file `file` at `offset` ahead into the page cache
    /// (`posix_fadvise(WILLNEED)`: it starts the reads and returns). Failures only cost the hint.
    pub fn advise(&self, fds: &mut FdCache, file: usize, offset: u64, len: u64) {
        let f = &self.files[file];
        let end = (offset + len).min(f.size);
        let mut i = f.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut at = offset;
        while at < end && i < f.extents.len() {
            let e = f.extents[i];
            let within = at - f.starts[i];
            let n = (e.len - within).min(end - at);
            if n > 0 {
                if let Ok(fd) = fds.get(self, e.path) {
                    let _ = rustix::fs::fadvise(
                        fd,
                        e.offset + within,
                        std::num::NonZeroU64::new(n),
                        rustix::fs::Advice::WillNeed,
                    );
                }
            }
            at += n;
            i += 1;
        }
    }

    /// Adds a plain file as one virtual file named `name`.
    pub fn add_plain(&mut self, name: String, path: PathBuf, size: u64) {
        let idx = self.paths.len();
        self.paths.push(path);
        let extents = if size > 0 {
            vec![Extent {
                path: idx,
                offset: 0,
                len: size,
            }]
        } else {
            Vec::new()
        };
        self.files.push(VFile::new(name, extents));
    }

    /// Checks names: valid relative paths, no two alike.
    pub fn check_names(&self) -> Result<(), XferError> {
        let mut seen = std::collections::HashSet::new();
        for f in &self.files {
            vlbiflow_xfer_proto::wire::validate_name(&f.name)
                .map_err(|e| XferError::Usage(format!("source name {:?}: {e}", f.name)))?;
            if !seen.insert(f.name.as_str()) {
                return Err(XferError::Usage(format!(
                    "two sources would land at the same name {:?}",
                    f.name
                )));
            }
        }
        Ok(())
    }
}

fn base_name(p: &Path) -> Result<String, XferError> {
    p.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| XferError::Usage(format!("{}: has no usable file name", p.display())))
}

/// Plain files and directory trees: a file lands under its own name, a directory `d` as `d/...` with every
/// regular file below it (sorted; symbolic links, special files and a receiver's own `.part` and
/// `.blake3.json` files are skipped and listed in the second return value).
pub fn collect_paths(args: &[PathBuf]) -> Result<(SourceSet, Vec<String>), XferError> {
    let mut set = SourceSet::default();
    let mut skipped = Vec::new();
    for a in args {
        let meta =
            std::fs::metadata(a).map_err(|e| XferError::Usage(format!("source {}: {e}", a.display())))?;
        let base = base_name(a)?;
        if meta.is_file() {
            set.add_plain(base, a.clone(), meta.len());
        } else if meta.is_dir() {
            walk(&mut set, a, &base, &mut skipped)?;
        } else {
            return Err(XferError::Usage(format!(
                "source {}: not a regular file or directory",
                a.display()
            )));
        }
    }
    set.check_names()?;
    Ok((set, skipped))
}

fn walk(set: &mut SourceSet, dir: &Path, prefix: &str, skipped: &mut Vec<String>) -> Result<(), XferError> {
    let rd = std::fs::read_dir(dir).map_err(|e| XferError::Usage(format!("{}: {e}", dir.display())))?;
    let mut entries: Vec<_> = rd
        .collect::<Result<_, _>>()
        .map_err(|e| XferError::Usage(format!("{}: {e}", dir.display())))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let Some(name) = e.file_name().to_str().map(str::to_owned) else {
            skipped.push(format!("{} (name is not UTF-8)", path.display()));
            continue;
        };
        let ft = e
            .file_type()
            .map_err(|err| XferError::Usage(format!("{}: {err}", path.display())))?;
        let rel = format!("{prefix}/{name}");
        if name.ends_with(crate::dest::PART_SUFFIX) || name.ends_with(crate::dest::MANIFEST_SUFFIX) {
            // a receiver's own files (incomplete data, manifests): the destination makes its own
            skipped.push(format!("{} (receiver's .part or manifest file)", path.display()));
            continue;
        }
        if ft.is_dir() {
            walk(set, &path, &rel, skipped)?;
        } else if ft.is_file() {
            let len = e
                .metadata()
                .map_err(|err| XferError::Usage(format!("{}: {err}", path.display())))?
                .len();
            set.add_plain(rel, path, len);
        } else {
            skipped.push(format!("{} (symbolic link or special file)", path.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_read_across_boundaries() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::write(&a, b"0123456789").unwrap();
        std::fs::write(&b, b"abcdefghij").unwrap();
        let set = SourceSet {
            paths: vec![a, b],
            files: vec![VFile::new(
                "v".into(),
                vec![
                    Extent {
                        path: 0,
                        offset: 2,
                        len: 5,
                    },
                    Extent {
                        path: 1,
                        offset: 0,
                        len: 3,
                    },
                    Extent {
                        path: 0,
                        offset: 9,
                        len: 1,
                    },
                ],
            )],
        };
        assert_eq!(set.files[0].size, 9);
        let mut fds = FdCache::default();
        let mut buf = [0u8; 9];
        set.read_at(&mut fds, 0, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"23456abc9");
        let mut buf = [0u8; 4];
        set.read_at(&mut fds, 0, 4, &mut buf).unwrap();
        assert_eq!(&buf, b"6abc");
        assert!(set.read_at(&mut fds, 0, 7, &mut buf).is_err());
    }

    #[test]
    fn directories_walk_sorted_and_skip_links() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("exp");
        std::fs::create_dir_all(top.join("z/y")).unwrap();
        std::fs::write(top.join("b.vdif"), b"x").unwrap();
        std::fs::write(top.join("z/y/a.vdif"), b"yy").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", top.join("link")).unwrap();
        let (set, skipped) = collect_paths(&[top]).unwrap();
        let names: Vec<_> = set.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["exp/b.vdif", "exp/z/y/a.vdif"]);
        assert_eq!(skipped.len(), 1);
    }
}
