//! Disk probing behind a trait, so the controller decides without touching the file system itself: the
//! daemon gives it [`SystemDisks`] (statvfs, stat, directory creation, glob expansion, metadata reads),
//! tests give it [`MemDisks`], an in-memory file system whose answers they choose.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use vlbiflow_scan::ScanMetadata;

/// What the controller asks of the disks. Every call is short (no waiting on recordings).
pub trait DiskProbe: Send {
    /// Free and total bytes of the file system holding `path`.
    fn space(&self, path: &Path) -> Option<(u64, u64)>;
    /// The device of `path` if it is a directory.
    fn dir_device(&self, path: &Path) -> Option<u64>;
    /// Creates `path` and its parents.
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()>;
    /// Expands configured disk patterns (globs) into existing paths, in order.
    fn expand(&self, patterns: &[String]) -> Vec<PathBuf>;
    /// Every scan whose metadata sits on `disks`, with each copy read (or why it could not be).
    fn scans(&self, disks: &[PathBuf]) -> Vec<(String, Vec<Result<ScanMetadata, String>>)>;

    /// True if `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool {
        self.dir_device(path).is_some()
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemDisks;

/// Free and total bytes of the file system holding `path` (statvfs).
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(path).ok()?;
    let frsize = st.f_frsize;
    Some((st.f_bavail * frsize, st.f_blocks * frsize))
}

impl DiskProbe for SystemDisks {
    fn space(&self, path: &Path) -> Option<(u64, u64)> {
        disk_space(path)
    }

    fn dir_device(&self, path: &Path) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        m.is_dir().then(|| m.dev())
    }

    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn expand(&self, patterns: &[String]) -> Vec<PathBuf> {
        crate::config::expand(patterns)
    }

    fn scans(&self, disks: &[PathBuf]) -> Vec<(String, Vec<Result<ScanMetadata, String>>)> {
        vlbiflow_scan::find_scans(disks)
            .into_iter()
            .map(|(name, copies)| {
                let copies = copies
                    .into_iter()
                    .map(|(_, m)| m.map_err(|e| e.to_string()))
                    .collect();
                (name, copies)
            })
            .collect()
    }
}

/// An in-memory file system for tests: directories with a device number, space per device, scan
/// metadata copies. Clones share the same state, so a test keeps one to change what the controller sees.
#[derive(Debug, Default, Clone)]
pub struct MemDisks(Arc<Mutex<MemState>>);

#[derive(Debug, Default)]
struct MemState {
    dirs: BTreeMap<PathBuf, u64>,
    space: BTreeMap<u64, (u64, u64)>,
    scans: BTreeMap<(PathBuf, String), Result<ScanMetadata, String>>,
    fail_create: BTreeSet<PathBuf>,
}

impl MemDisks {
    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds directory `path` on device `dev`.
    pub fn add_dir(&self, path: impl Into<PathBuf>, dev: u64) {
        self.state().dirs.insert(path.into(), dev);
    }

    /// Removes directory `path` (a disk that went away).
    pub fn remove_dir(&self, path: &Path) {
        self.state().dirs.remove(path);
    }

    /// Sets the free and total bytes of device `dev`.
    pub fn set_space(&self, dev: u64, free: u64, total: u64) {
        self.state().space.insert(dev, (free, total));
    }

    /// Puts a metadata copy (or an unreadable one) of scan `name` on disk `disk`.
    pub fn put_scan(&self, disk: impl Into<PathBuf>, name: &str, meta: Result<ScanMetadata, String>) {
        self.state().scans.insert((disk.into(), name.to_string()), meta);
    }

    /// Makes directory creation under `path` fail.
    pub fn fail_create(&self, path: impl Into<PathBuf>) {
        self.state().fail_create.insert(path.into());
    }
}

impl DiskProbe for MemDisks {
    fn space(&self, path: &Path) -> Option<(u64, u64)> {
        let s = self.state();
        let dev = path.ancestors().find_map(|p| s.dirs.get(p))?;
        s.space.get(dev).copied()
    }

    fn dir_device(&self, path: &Path) -> Option<u64> {
        self.state().dirs.get(path).copied()
    }

    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        let mut s = self.state();
        if path.ancestors().any(|p| s.fail_create.contains(p)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "permission denied",
            ));
        }
        for p in path.ancestors() {
            if p.as_os_str().is_empty() || s.dirs.contains_key(p) {
                break;
            }
            s.dirs.insert(p.to_path_buf(), 0);
        }
        Ok(())
    }

    fn expand(&self, patterns: &[String]) -> Vec<PathBuf> {
        let s = self.state();
        let mut out = Vec::new();
        for p in patterns {
            match glob::Pattern::new(p) {
                Ok(pat) if p.contains(['*', '?', '[']) => {
                    out.extend(s.dirs.keys().filter(|d| pat.matches_path(d)).cloned())
                }
                _ => out.push(PathBuf::from(p)),
            }
        }
        out
    }

    fn scans(&self, disks: &[PathBuf]) -> Vec<(String, Vec<Result<ScanMetadata, String>>)> {
        let s = self.state();
        let mut by_name: BTreeMap<String, Vec<Result<ScanMetadata, String>>> = BTreeMap::new();
        for ((disk, name), m) in &s.scans {
            if disks.contains(disk) {
                by_name.entry(name.clone()).or_default().push(m.clone());
            }
        }
        by_name.into_iter().collect()
    }
}
