//! Validation of one datagram's frame: size, VDIF or Mark5B header, time, thread.

use vlbiflow_formats::mark5b::{Mark5bHeader, SYNC_WORD as MARK5B_SYNC};
use vlbiflow_formats::time::VdifTime;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_scan::FrameKind;

/// Why a datagram was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A frame to store; for VDIF its thread, time and invalid bit.
    Frame {
        thread: u16,
        time: Option<VdifTime>,
        invalid: bool,
        m5b_index: Option<(i64, u32)>,
    },
    /// Not a frame of this stream: wrong size, or header check failed.
    Rejected(&'static str),
}

/// Checks one datagram's frame part (`frame` holds at most `frame_size` bytes; `len` is the real frame
/// length received, PSN excluded). Pure function: the heart of "bad input is counted, never fatal".
#[inline]
pub fn classify(kind: FrameKind, frame_size: usize, frame: &[u8], len: usize) -> Verdict {
    if len != frame_size {
        return Verdict::Rejected(if len > frame_size {
            "datagram too long"
        } else {
            "datagram too short"
        });
    }
    match kind {
        FrameKind::Vdif => {
            let h = VdifHeader::new_unchecked(frame);
            if h.check().is_err() {
                return Verdict::Rejected("not a VDIF header");
            }
            if h.frame_len() != frame_size {
                return Verdict::Rejected("VDIF frame length field does not match the datagram");
            }
            Verdict::Frame {
                thread: h.thread_id(),
                time: Some(VdifTime {
                    epoch: h.epoch(),
                    seconds: h.seconds(),
                    frame: h.frame_number(),
                }),
                invalid: h.invalid(),
                m5b_index: None,
            }
        }
        FrameKind::M5b => {
            let h = Mark5bHeader::new_unchecked(frame);
            if h.sync() != MARK5B_SYNC {
                return Verdict::Rejected("no Mark5B sync word");
            }
            Verdict::Frame {
                thread: 0,
                time: None,
                invalid: false,
                // A bad BCD digit just means no time index.
                m5b_index: h.day_second().map(|second| (second, u32::from(h.frame_number()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vlbiflow_formats::vdif::VdifHeaderRepr;

    fn vdif_frame(size: usize, thread: u16) -> Vec<u8> {
        let mut f = vec![0u8; size];
        let repr = VdifHeaderRepr {
            frame_len: size,
            thread_id: thread,
            ..Default::default()
        };
        repr.emit(&mut f).unwrap();
        f
    }

    #[test]
    fn classifies_vdif() {
        let f = vdif_frame(1032, 3);
        match classify(FrameKind::Vdif, 1032, &f, 1032) {
            Verdict::Frame { thread, invalid, .. } => assert_eq!((thread, invalid), (3, false)),
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            classify(FrameKind::Vdif, 1032, &f, 1031),
            Verdict::Rejected(_)
        ));
        assert!(matches!(
            classify(FrameKind::Vdif, 1032, &f, 5000),
            Verdict::Rejected(_)
        ));
        // Length field disagreeing with the datagram.
        let g = vdif_frame(1024, 0);
        let mut padded = g.clone();
        padded.resize(1032, 0);
        assert!(matches!(
            classify(FrameKind::Vdif, 1032, &padded, 1032),
            Verdict::Rejected(_)
        ));
        // Garbage.
        let junk = vec![0xffu8; 1032];
        assert!(matches!(
            classify(FrameKind::Vdif, 1032, &junk, 1032),
            Verdict::Rejected(_)
        ));
    }

    #[test]
    fn classifies_mark5b() {
        let mut f = vec![0u8; 10016];
        f[..4].copy_from_slice(&MARK5B_SYNC.to_le_bytes());
        f[4..8].copy_from_slice(&7u32.to_le_bytes());
        f[8..12].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        match classify(FrameKind::M5b, 10016, &f, 10016) {
            Verdict::Frame { m5b_index, .. } => assert_eq!(m5b_index, Some((123 * 86400 + 45678, 7))),
            v => panic!("{v:?}"),
        }
        f[0] = 0;
        assert!(matches!(
            classify(FrameKind::M5b, 10016, &f, 10016),
            Verdict::Rejected(_)
        ));
    }
}
