//! Fill: what recorders write where data is missing, and how to recognise it.
//!
//! jive5ab (and Mark5 recorders before it) write a lost packet as a frame-sized run of the 32-bit word
//! [`FILL_WORD`] (0x11223344, little-endian in the file), so a reader keeps its framing. For VDIF, jive5ab
//! then overwrites words 0-3 with a header whose invalid bit is set and whose time, thread and station are
//! all zero (`00000080 00000000 ssssss04 00000000` as bytes: invalid bit, epoch 0, second 0, frame 0,
//! thread 0, station 0, and the frame length in units of 8 bytes); words 4-7 keep the fill word. Such a
//! header says nothing about which frame is missing: the position of the fill frame in the stream does.
//!
//! Recognition, used by every reader of the workspace:
//! - VDIF ([`is_vdif_fill`]): the invalid bit is set and every word of the payload (after the 32-byte
//!   header, or the 16-byte legacy header) is the fill word. jive5ab's fill frames qualify (their words 4-7
//!   are fill words too), and so do fill frames whose header a recorder stamped with the missing frame's
//!   time and thread. The header's time, thread and station are ignored either way.
//! - Mark5B ([`is_mark5b_fill`]): every word of the payload (after the 16-byte header) is the fill word,
//!   whatever the header holds (jive5ab keeps or fills it).
//! - Any format ([`is_fill_words`]): a run made only of fill words, header included (a frame-sized hole).
//!
//! A real frame whose data happen to be the fill word throughout would be taken for fill; with 2-bit
//! samples that is a 1 in 2^(8 x payload bytes) event for noise-like data.

/// The 32-bit word written where data is missing.
pub const FILL_WORD: u32 = 0x1122_3344;

/// The fill word as it lies in a file (little-endian).
pub const FILL_BYTES: [u8; 4] = FILL_WORD.to_le_bytes();

/// Byte offset in a VDIF frame from which jive5ab's fill frames hold only fill words (word 4).
pub const VDIF_FILL_FROM: usize = 16;

/// True if `bytes` is at least one word long and made only of fill words (a trailing partial word is
/// ignored). Looks at the first two words before scanning the rest, so real data is rejected at once.
#[inline]
pub fn is_fill_words(bytes: &[u8]) -> bool {
    if bytes.len() < 4 || bytes[..4] != FILL_BYTES {
        return false;
    }
    bytes.chunks_exact(4).all(|w| w == FILL_BYTES)
}

/// True if `frame` is a VDIF fill frame: invalid bit set and the payload all fill words (see module docs).
/// A frame of fill words only (no header) is fill too.
#[inline]
pub fn is_vdif_fill(frame: &[u8]) -> bool {
    if frame.len() <= crate::vdif::HEADER_LEN {
        return false;
    }
    if frame[..4] == FILL_BYTES {
        return is_fill_words(frame);
    }
    let invalid = frame[3] & 0x80 != 0;
    let legacy = frame[3] & 0x40 != 0;
    let header = if legacy {
        crate::vdif::LEGACY_HEADER_LEN
    } else {
        crate::vdif::HEADER_LEN
    };
    invalid && is_fill_words(&frame[header..])
}

/// True if `frame` is a Mark5B fill frame: the payload after the 16-byte header is all fill words.
#[inline]
pub fn is_mark5b_fill(frame: &[u8]) -> bool {
    frame.len() > crate::mark5b::HEADER_LEN && is_fill_words(&frame[crate::mark5b::HEADER_LEN..])
}

/// True if `frame` of the given kind is fill.
#[inline]
pub fn is_fill(kind: crate::FrameKind, frame: &[u8]) -> bool {
    match kind {
        crate::FrameKind::Vdif => is_vdif_fill(frame),
        crate::FrameKind::M5b => is_mark5b_fill(frame),
    }
}

/// Writes a fill frame of `frame.len()` bytes as jive5ab does: fill words throughout and, for VDIF, the
/// invalid-bit header described in the module docs (frame length set, everything else zero).
pub fn write_fill(kind: crate::FrameKind, frame: &mut [u8]) {
    for w in frame.chunks_exact_mut(4) {
        w.copy_from_slice(&FILL_BYTES);
    }
    if kind == crate::FrameKind::Vdif && frame.len() >= VDIF_FILL_FROM {
        let words8 = (frame.len() / 8) as u32;
        let header: [u32; 4] = [1 << 31, 0, words8 & 0x00ff_ffff, 0];
        for (i, w) in header.iter().enumerate() {
            frame[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrameKind;

    /// The first 32 bytes of a fill frame as jive5ab 3.1.0 writes them for 8224-byte frames.
    fn jive5ab_fill(len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        write_fill(FrameKind::Vdif, &mut f);
        f
    }

    #[test]
    fn jive5ab_vdif_fill_header_bytes() {
        let f = jive5ab_fill(8224);
        assert_eq!(
            &f[..16],
            &[0, 0, 0, 0x80, 0, 0, 0, 0, 0x04, 0x04, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(&f[16..20], &[0x44, 0x33, 0x22, 0x11]);
        assert!(is_vdif_fill(&f));
        assert!(is_fill(FrameKind::Vdif, &f));
    }

    #[test]
    fn fill_with_any_header_time_or_thread_is_fill_but_valid_frames_are_not() {
        let mut f = jive5ab_fill(1032);
        // Header time, thread and station do not matter.
        f[0] = 0x12;
        f[14] = 5;
        f[12] = b'X';
        assert!(is_vdif_fill(&f));
        // Without the invalid bit, a frame with real header and fill payload is data.
        f[3] &= 0x7f;
        assert!(!is_vdif_fill(&f));
        // One word of data in the payload: not fill.
        let mut g = jive5ab_fill(1032);
        g[1000] = 0;
        assert!(!is_vdif_fill(&g));
        // A recorder that stamps its fill frames: real header with the invalid bit, fill payload.
        let mut stamped = jive5ab_fill(1032);
        stamped[16..32].fill(0);
        stamped[0] = 7;
        assert!(is_vdif_fill(&stamped));
        // A frame made only of fill words, header included, is fill.
        let h: Vec<u8> = FILL_BYTES.iter().copied().cycle().take(1032).collect();
        assert!(is_vdif_fill(&h));
        assert!(!is_vdif_fill(&h[..32]));
    }

    #[test]
    fn mark5b_fill_ignores_the_header() {
        let mut f = vec![0u8; crate::mark5b::FRAME_LEN];
        write_fill(FrameKind::M5b, &mut f);
        assert!(is_mark5b_fill(&f));
        f[..4].copy_from_slice(&crate::mark5b::SYNC_WORD.to_le_bytes());
        assert!(is_mark5b_fill(&f));
        f[5000] ^= 1;
        assert!(!is_mark5b_fill(&f));
        assert!(!is_fill_words(&[]));
    }
}
