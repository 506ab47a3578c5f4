//! Any bytes as a whole frame: the frame check never panics; an accepted frame's header parses or fails
//! cleanly and its payload is exactly the rest of the buffer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::vdif::{VdifFrame, VdifHeaderRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = VdifFrame::new_checked(data) else {
        return;
    };
    let header = frame.header();
    assert_eq!(header.frame_len(), data.len());
    assert_eq!(frame.payload().len() + header.header_len(), data.len());
    if let Ok(repr) = VdifHeaderRepr::parse(&header) {
        assert_eq!(repr.payload_len(), frame.payload().len());
        let _ = repr.samples_per_frame();
    }
});
