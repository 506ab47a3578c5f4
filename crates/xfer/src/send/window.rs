//! The sender's windows: several MiB of the source read at once (past the chunks the receiver holds),
//! with the digests of their blocks computed as they are read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use vlbiflow_xfer_proto::hash::block_digest;

use crate::source::{AlignedBuf, DirectReads, FdCache, SourceSet, DIRECT_ALIGN};

/// Bytes read at once for new data.
pub const WINDOW: usize = 8 << 20;
/// A window is read in pieces of this size, each hashed right after its read (a piece fits the core's L2
/// cache, a window does not).
pub(super) const PIECE: usize = 256 << 10;
/// Pieces read with `O_DIRECT` are larger: the bytes come from memory the disk wrote, not from a cache a
/// smaller piece would fit, so the whole window goes in one read. A disk that answers each request late
/// reads more the more is asked at once. On a 2-vCPU VM of 2026-11-27, a cold 4 GB file pushed on
/// loopback at a 10 Gb/s ceiling went at 2223-2282 Mb/s with 1 MiB pieces and 2291-2522 Mb/s with
/// whole windows, alternating, four runs each. `dd` there read 530 MB/s in 1 MiB requests and 718 MB/s
/// in 8 MiB ones. On a host with a local NVMe disk, 1 MiB had given 3.0 GB/s against 2.0 at 256 KiB.
pub(super) const DIRECT_PIECE: usize = WINDOW;
/// Longest wait for the reading thread's window (a disk that stalls this long fails the transfer).
pub(super) const READ_WAIT: Duration = Duration::from_secs(60);
/// A range of one virtual file held in the window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seg {
    pub(super) file: usize,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) at: usize,
    /// The file's size.
    pub(super) size: u64,
    /// Digests of the blocks from `dig_from` (block-aligned) on that lie wholly in the range: `dig_n` of
    /// them in the window's digests from index `dig`.
    pub(super) dig_from: u64,
    pub(super) dig: usize,
    pub(super) dig_n: usize,
    /// Its digests are left to the hashing thread (`dig` and `dig_n` are set when they are computed): it
    /// was read with `O_DIRECT`, or comes after such a range in the window. See [`fill`].
    pub(super) pending: bool,
}

/// A window: bytes, what they are, and the digests of their blocks.
pub(super) struct Win {
    /// The window, page-aligned for direct reads, followed by the slack a direct read of a file's
    /// unaligned tail needs.
    pub(super) mem: AlignedBuf,
    pub(super) segs: Vec<Seg>,
    pub(super) digests: Vec<[u8; 32]>,
}

impl Win {
    pub(super) fn new() -> Win {
        Win {
            mem: AlignedBuf::new(WINDOW, DIRECT_ALIGN),
            segs: Vec::new(),
            // at most one per KiB (the smallest subtree block) and one per file's short last block
            digests: Vec::with_capacity(WINDOW / 1024 + 256),
        }
    }

    /// The window's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        self.mem.bytes()
    }
}

/// The chunks of each file that the sender will not send, because the receiver holds them (the resume
/// comparison found them equal): windows are read past them, in the order the sender sends new data, so
/// that a resume whose held chunks are scattered reads neither them nor, at each gap, windows ahead that
/// it then passes over. Shared by the data thread, which learns of a file's held chunks when it adds the
/// file to the protocol's sender, and the reading thread; each lookup takes the lock briefly (a few per
/// window, never during a read).
#[derive(Debug, Clone, Default)]
pub struct Held(Arc<Mutex<HeldMap>>);

#[derive(Debug, Default)]
struct HeldMap {
    chunk: u64,
    /// Per file, whether each chunk is held (an empty or short list: the rest is not).
    files: Vec<Vec<bool>>,
}

impl Held {
    /// No chunk held yet, chunks of `chunk_size` bytes.
    pub fn new(chunk_size: u64) -> Held {
        Held(Arc::new(Mutex::new(HeldMap {
            chunk: chunk_size,
            files: Vec::new(),
        })))
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HeldMap> {
        // a thread that panicked holding the lock left a consistent map (each change is one assignment)
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// File `file`'s chunks `held` are not sent.
    pub fn set(&self, file: usize, held: &[bool]) {
        let mut m = self.map();
        if m.files.len() <= file {
            m.files.resize(file + 1, Vec::new());
        }
        m.files[file] = held.to_vec();
    }

    /// Whether chunk `chunk` of `file` is held.
    pub fn holds(&self, file: usize, chunk: u64) -> bool {
        let m = self.map();
        m.files
            .get(file)
            .and_then(|h| h.get(chunk as usize))
            .copied()
            .unwrap_or(false)
    }

    /// If `offset` of `file` is in a held chunk: where that chunk ends.
    fn skip(&self, file: usize, offset: u64) -> Option<u64> {
        let chunk = self.map().chunk;
        let c = offset.checked_div(chunk)?;
        self.holds(file, c).then(|| (c + 1) * chunk)
    }

    /// Where the run of chunks to send that `offset` of `file` (of `size` bytes) is in ends: the start of
    /// the next held chunk, or `size`.
    fn run_end(&self, file: usize, offset: u64, size: u64) -> u64 {
        let m = self.map();
        let (Some(c), Some(h)) = (offset.checked_div(m.chunk), m.files.get(file)) else {
            return size;
        };
        let next = (c as usize + 1..h.len()).find(|&i| h[i]);
        next.map_or(size, |i| (i as u64 * m.chunk).min(size))
    }
}

/// The first byte at or after `offset` of `file` that exists and is not held: (the next file, 0) past a
/// file's end, the end of a held chunk in it.
pub(super) fn next_start(set: &SourceSet, held: &Held, mut file: usize, mut offset: u64) -> (usize, u64) {
    while file < set.files.len() {
        if offset >= set.files[file].size {
            file += 1;
            offset = 0;
        } else if let Some(end) = held.skip(file, offset) {
            offset = end;
        } else {
            break;
        }
    }
    (file, offset)
}

/// How [`fill`] reads and hashes: `sub`, the block size when blocks are BLAKE3 subtrees (digests computed
/// as the window is read); `defer`, digests of what is read with `O_DIRECT` left to the hashing thread;
/// `direct`, which ranges are read with `O_DIRECT`.
#[derive(Debug, Clone, Copy)]
pub(super) struct FillMode {
    pub sub: Option<u64>,
    pub defer: bool,
    pub direct: DirectReads,
}

/// Reads the window from `file` at `offset` on, continuing past held chunks (see [`Held`]) and into the
/// following files while it has room (so that many small files take one window), records what it holds,
/// and asks the kernel to read on where the window ends inside a run of chunks to send. With `sub` (the
/// block size, blocks being BLAKE3 subtrees) it reads in pieces and computes the digest of each whole
/// block right after the piece that completes it is read.
/// With `defer`, the digests of a range read with `O_DIRECT`, and of every range after it in the window,
/// are left to [`finish_digests`] (the reading thread's hashing thread): those bytes come from the disk
/// and not from a cache, so hashing them elsewhere costs nothing more, and the reading thread can ask
/// the disk for the next window meanwhile.
/// Returns the bytes read with `O_DIRECT`.
pub(super) fn fill(
    set: &SourceSet,
    held: &Held,
    fds: &mut FdCache,
    win: &mut Win,
    (file, offset): (usize, u64),
    mode: FillMode,
) -> std::io::Result<u64> {
    let FillMode { sub, defer, .. } = mode;
    let mut read_direct = 0u64;
    win.segs.clear();
    win.digests.clear();
    let window = win.mem.with_slack();
    let mut at = 0usize;
    let mut deferring = false;
    let (mut f, mut o) = (file, offset);
    while f < set.files.len() && at < WINDOW {
        let size = set.files[f].size;
        let end = held.run_end(f, o, size);
        let mut n = ((end - o.min(end)) as usize).min(WINDOW - at);
        if n > 0 {
            // from the disk past the page cache, straight into the window (see `wants_direct`), from a
            // place in it with the remainder modulo 4 KiB that `o` has in its file
            let direct_at = direct_place(set, (f, o), at, end, n);
            let direct = direct_at.is_some_and(|a| {
                let len = ((end - o) as usize).min(WINDOW - a);
                set.wants_direct(fds, (f, o, len as u64), mode.direct)
            });
            if let Some(a) = direct_at.filter(|_| direct && direct_at != Some(at)) {
                // the window, shortened by the gap, still ends where a block does (where the data
                // thread asks for the next window, which the reading thread reads on from)
                at = a;
                let to = (o + ((end - o) as usize).min(WINDOW - at) as u64).min(end);
                let to = if to < end { to / BLOCK_END * BLOCK_END } else { to };
                n = (to - o) as usize;
            }
            let dig_from = sub.map_or(u64::MAX, |b| o.next_multiple_of(b));
            let dig = win.digests.len();
            let mut next = dig_from;
            let mut done = 0usize;
            // digests stay in order: once one range is left to the hashing thread, so are the rest
            deferring |= direct && defer && sub.is_some();
            while done < n {
                let k = match (direct, sub.is_some()) {
                    (true, _) => DIRECT_PIECE.min(n - done),
                    (false, true) => PIECE.min(n - done),
                    (false, false) => n - done,
                };
                if direct {
                    let (from, into) = ((f, o + done as u64), at + done);
                    read_direct += set.read_direct(fds, from, window, into, k)? as u64;
                } else {
                    set.read_at(fds, f, o + done as u64, &mut window[at + done..at + done + k])?;
                }
                done += k;
                if !deferring {
                    // every block this piece completes
                    let range = &window[at..at + done];
                    push_digests(sub, range, o, size, &mut next, &mut win.digests);
                }
            }
            win.segs.push(Seg {
                file: f,
                offset: o,
                len: n,
                at,
                size,
                dig_from,
                dig,
                dig_n: win.digests.len() - dig,
                pending: deferring,
            });
            at += n;
            if o + (n as u64) < end && !direct {
                set.advise(fds, f, o + n as u64, WINDOW as u64);
            }
        }
        // small files or runs: a few more in the same window, at most 256 per window
        if win.segs.len() >= 256 || at * 2 > WINDOW {
            break;
        }
        (f, o) = next_start(set, held, f, o + n as u64);
    }
    Ok(read_direct)
}

/// Ranges shorter than this that would start a direct read at another place in the window than where
/// the window's last range ended are read through the page cache instead (the gap before them, under
/// 8 KiB, then takes under 1% of the window; small files go several to a window, read with no gap).
const DIRECT_SHIFT_MIN: usize = 1 << 20;

/// A window shortened for a direct read ends at a multiple of this in its virtual file: a place where a
/// block ends for blocks of any power of two up to it (datagrams are shorter), as a whole window does
/// (see [`fill`]).
const BLOCK_END: u64 = 64 << 10;

/// Where in the window a direct read of `n` bytes of file `f` at `o` (of a run that ends at `end`) puts
/// them, the window's last range ending at `at`: the first place from `at` on, rounded up to 4 KiB, with
/// the remainder modulo 4 KiB that `o` has in its real file (see [`SourceSet::direct_phase`]), for a
/// range long enough when that is not `at` itself; `None` otherwise.
fn direct_place(set: &SourceSet, (f, o): (usize, u64), at: usize, end: u64, n: usize) -> Option<usize> {
    let a = at.next_multiple_of(DIRECT_ALIGN) + set.direct_phase(f, o)?;
    let long = ((end - o) as usize).min(WINDOW.saturating_sub(a)) >= DIRECT_SHIFT_MIN;
    (a == at || (a < WINDOW && long && n >= DIRECT_SHIFT_MIN)).then_some(a)
}

/// Appends the digests of the blocks from `*next` on that end within `range` (the bytes of a file from
/// `o` on, of size `size`), and moves `*next` past them.
fn push_digests(
    sub: Option<u64>,
    range: &[u8],
    o: u64,
    size: u64,
    next: &mut u64,
    digests: &mut Vec<[u8; 32]>,
) {
    let Some(b) = sub else { return };
    let read_to = o + range.len() as u64;
    while *next < read_to {
        let end = (*next + b).min(size);
        if end > read_to {
            break;
        }
        digests.push(block_digest(
            sub,
            *next,
            &range[(*next - o) as usize..(end - o) as usize],
        ));
        *next = end;
    }
}

/// Computes the digests [`fill`] left to the hashing thread.
pub(super) fn finish_digests(win: &mut Win, sub: Option<u64>) {
    let Win { mem, segs, digests } = win;
    for seg in segs.iter_mut().filter(|s| s.pending) {
        seg.dig = digests.len();
        let mut next = seg.dig_from;
        push_digests(
            sub,
            &mem.bytes()[seg.at..seg.at + seg.len],
            seg.offset,
            seg.size,
            &mut next,
            digests,
        );
        seg.dig_n = digests.len() - seg.dig;
        seg.pending = false;
    }
}
