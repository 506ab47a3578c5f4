//! Any datagram: the recorder's classifier never panics, a datagram it keeps as a frame has the stream's
//! frame size and (VDIF) a header that checks with that length, and fill recognition never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::{fill, mark5b, FrameKind};
use vlbiflow_recorder::capture::{classify, Verdict};

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, frame)) = data.split_first() else { return };
    let kind = if ctl & 1 == 0 { FrameKind::Vdif } else { FrameKind::M5b };
    // Frame sizes as the stream configuration allows them: the datagram's own length when that is a
    // valid VDIF size (to reach the header checks), else a fixed one.
    let len = frame.len();
    let frame_size = match kind {
        FrameKind::Vdif if ctl & 2 == 0 && len >= 32 && len % 8 == 0 => len,
        FrameKind::Vdif => 1032,
        FrameKind::M5b => mark5b::FRAME_LEN,
    };
    // The capture hands over at most frame_size bytes and the datagram's real length.
    let held = &frame[..len.min(frame_size)];
    match classify(kind, frame_size, held, len) {
        Verdict::Frame { .. } => {
            assert_eq!(len, frame_size);
            if kind == FrameKind::Vdif {
                let h = VdifHeader::new_checked(held).expect("a kept frame has a valid header");
                assert_eq!(h.frame_len(), frame_size);
            }
        }
        Verdict::Rejected(reason) => assert!(!reason.is_empty()),
    }
    let _ = fill::is_fill(kind, frame);
    let _ = fill::is_fill_words(frame);
});
