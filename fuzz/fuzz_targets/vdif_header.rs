//! Any bytes: checking and parsing a VDIF header never panics, and a parsed header re-emits to the same
//! header bytes and parses back equal.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::vdif::{VdifHeader, VdifHeaderRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(view) = VdifHeader::new_checked(data) else {
        return;
    };
    // Every getter stays in bounds on a checked view.
    let _ = (
        view.invalid(),
        view.seconds(),
        view.epoch(),
        view.frame_number(),
        view.version(),
    );
    let _ = (
        view.channels(),
        view.payload_len(),
        view.bits_per_sample(),
        view.thread_id(),
    );
    let _ = (view.station_bytes(), view.edv(), view.sample_rate_hz());
    let Ok(repr) = VdifHeaderRepr::parse(&view) else {
        return;
    };
    let mut out = [0u8; 32];
    repr.emit(&mut out).expect("a parsed header emits");
    let len = repr.header_len();
    // Word 1 bits 31..30 are unassigned: parse ignores them, emit writes zeros.
    let mut want = data[..len].to_vec();
    want[7] &= 0x3f;
    assert_eq!(&out[..len], &want[..], "emit reproduces the header bytes");
    let again = VdifHeaderRepr::parse(&VdifHeader::new_checked(&out[..len]).unwrap()).unwrap();
    assert_eq!(again, repr);
    let _ = repr.samples_per_frame();
});
