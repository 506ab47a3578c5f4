//! Windows mapped from the source file (`mmap`) instead of read into buffers: the bytes are hashed and
//! handed to `sendmmsg` straight from the page cache, with no copy into the window and no first touch of
//! the window's own pages.
//!
//! A file truncated under its mapping makes every access past its new end raise SIGBUS (mmap(2), "Use of
//! a mapped region can result in these signals: SIGBUS ... access to a portion of the buffer that does
//! not correspond to the file"). A handler, installed once for the process, recognises faults in the
//! mappings registered here, maps zero-filled anonymous pages over the rest of the faulting mapping (the
//! access then completes and reads zeros) and marks it truncated; the sender checks the mark after each
//! use of a window and fails the transfer with an error naming the file. A fault anywhere else goes to
//! the handler that was there before (Rust's own, for stack overflows), or kills the process as the
//! default disposition does. The kernel's own reads of a truncated mapping (`sendmmsg` gathering from it)
//! fail with `EFAULT` instead; the sender then looks at the files' sizes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::Once;

/// Mappings registered at once, process-wide; past that, windows are read as before.
const SLOTS: usize = 512;

#[allow(clippy::declare_interior_mutable_const)]
const FREE: AtomicBool = AtomicBool::new(false);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);

/// Per slot: taken, the mapping's first address (0 while not set up), its end, and whether a fault
/// was taken in it.
static TAKEN: [AtomicBool; SLOTS] = [FREE; SLOTS];
static STARTS: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
static ENDS: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
static HIT: [AtomicBool; SLOTS] = [FREE; SLOTS];

/// The SIGBUS disposition before ours (set once, before the handler is installed).
static PREV: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The page size, read once before the handler is installed (the handler only loads it).
static PAGE: AtomicUsize = AtomicUsize::new(4096);

fn page() -> usize {
    PAGE.load(Relaxed)
}

/// The SIGBUS handler: see the module's documentation. Only atomics, `mmap` and `sigaction`, which are
/// system calls (no allocation, no lock).
#[allow(unsafe_code)]
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    let pg = addr & !(page() - 1);
    for i in 0..SLOTS {
        let start = STARTS[i].load(Acquire);
        let end = ENDS[i].load(Acquire);
        if start != 0 && addr >= start && addr < end {
            // SAFETY: [pg, end) lies in a mapping this module made and registered, and still owns
            // (unregistered before it is unmapped); replacing its pages with private zero pages cannot
            // touch any other memory.
            let r = unsafe {
                libc::mmap(
                    pg as *mut libc::c_void,
                    end - pg,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                HIT[i].store(true, Release);
                return;
            }
        }
    }
    let prev = PREV.load(Acquire);
    // SAFETY: `prev` is null or the leaked disposition saved before this handler was installed; its
    // handler field is a function of the kind its flags say, or SIG_DFL / SIG_IGN.
    unsafe {
        if prev.is_null() || (*prev).sa_sigaction == libc::SIG_DFL || (*prev).sa_sigaction == libc::SIG_IGN {
            // the default: returning re-runs the access, which faults again and ends the process
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
        } else if (*prev).sa_flags & libc::SA_SIGINFO != 0 {
            type Action = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
            let f = std::mem::transmute::<libc::sighandler_t, Action>((*prev).sa_sigaction);
            f(sig, info, ctx);
        } else {
            type Handler = extern "C" fn(libc::c_int);
            let f = std::mem::transmute::<libc::sighandler_t, Handler>((*prev).sa_sigaction);
            f(sig);
        }
    }
}

/// Installs the handler once; false when that failed (windows are then read as before).
#[allow(unsafe_code)]
fn install() -> bool {
    INSTALL.call_once(|| {
        PAGE.store(rustix::param::page_size(), Relaxed);
        // SAFETY: sigaction with valid pointers; the saved disposition is leaked so the handler can read
        // it at any time; SA_ONSTACK keeps the handler usable on a thread's alternate stack (Rust's).
        unsafe {
            let prev: &'static mut libc::sigaction = Box::leak(Box::new(std::mem::zeroed()));
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), prev) != 0 {
                return;
            }
            PREV.store(prev, Release);
            if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Release);
            }
        }
    });
    INSTALLED.load(Acquire)
}

/// `len` bytes of a file from `offset` on, mapped read-only and registered with the SIGBUS handler.
pub(crate) struct Mapping {
    base: *mut u8,
    /// Bytes mapped from `base` (whole pages).
    mapped: usize,
    /// Where the asked-for bytes start after `base` (`offset` less the page it lies in).
    skip: usize,
    len: usize,
    slot: usize,
}

// SAFETY: the mapping is read-only memory owned by this value; sharing or moving it between threads
// is as safe as for a `Box<[u8]>`.
#[allow(unsafe_code)]
unsafe impl Send for Mapping {}
// SAFETY: as above: only shared reads.
#[allow(unsafe_code)]
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` (> 0) bytes of `file` at `offset`, its page tables filled at once from the page cache
    /// (`MAP_POPULATE`: no fault per page later). `None` when the handler could not be installed, every
    /// slot is taken, or `mmap` failed: the caller reads instead.
    #[allow(unsafe_code)]
    pub(crate) fn new(file: &File, offset: u64, len: usize) -> Option<Mapping> {
        if len == 0 || !install() {
            return None;
        }
        let skip = (offset % page() as u64) as usize;
        let mapped = (skip + len).next_multiple_of(page());
        let slot = (0..SLOTS).find(|&i| TAKEN[i].compare_exchange(false, true, AcqRel, Relaxed).is_ok())?;
        // SAFETY: a new read-only private mapping of a file we hold open; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                (offset - skip as u64) as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            TAKEN[slot].store(false, Release);
            return None;
        }
        HIT[slot].store(false, Relaxed);
        ENDS[slot].store(base as usize + mapped, Release);
        STARTS[slot].store(base as usize, Release);
        Some(Mapping {
            base: base.cast(),
            mapped,
            skip,
            len,
            slot,
        })
    }

    /// The mapped bytes (zeros past the point where the file was found truncated).
    #[allow(unsafe_code)]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `base + skip .. + len` lies in the mapping, which lives as long as `self`, is never
        // written, and stays mapped (file pages, or zero pages after a truncation).
        unsafe { std::slice::from_raw_parts(self.base.add(self.skip), self.len) }
    }

    /// Whether an access found the file shorter than the mapping.
    pub(crate) fn truncated(&self) -> bool {
        HIT[self.slot].load(Acquire)
    }
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        STARTS[self.slot].store(0, Release);
        // SAFETY: the mapping made in `new`, no longer borrowed (`bytes` borrows `self`).
        unsafe {
            libc::munmap(self.base.cast(), self.mapped);
        }
        TAKEN[self.slot].store(false, Release);
    }
}

/// The error for a file found shorter than its mapping: the file's name and its size now.
pub(crate) fn truncated_error(path: &Path) -> io::Error {
    let now = std::fs::metadata(path).map(|m| m.len());
    let size = match now {
        Ok(n) => format!("{n} bytes now"),
        Err(e) => e.to_string(),
    };
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("{}: truncated while being sent ({size})", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file truncated after it was mapped: reading the mapping gives zeros past the new end and marks
    /// it truncated; the process lives on.
    #[test]
    fn a_truncated_mapping_reads_zeros_and_is_marked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let len = 4 << 20;
        std::fs::write(&p, vec![7u8; len]).unwrap();
        let f = File::open(&p).unwrap();
        let m = Mapping::new(&f, 4096, len - 4096).expect("mapped");
        assert!(m.bytes().iter().all(|&b| b == 7));
        assert!(!m.truncated());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let sum: u64 = m.bytes().iter().map(|&b| u64::from(b)).sum();
        assert!(m.truncated());
        // what lies before the new end is still the file
        assert_eq!(sum, 7 * ((1 << 20) - 4096));
        let e = truncated_error(&p).to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("truncated"),
            "{e}"
        );
        // a new mapping of the same slot starts unmarked
        drop(m);
        let m = Mapping::new(&f, 0, 1 << 20).expect("mapped");
        assert!(!m.truncated());
    }
}
