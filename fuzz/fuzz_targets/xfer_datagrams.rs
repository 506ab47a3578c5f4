//! Anything arriving on a `vlbiflow xfer` UDP port or control line: the data datagram's checks, the
//! feedback datagram's checks (with and without a key) and the control-line parser never panic; a data
//! header that passes its checks re-emits to the same bytes, and an accepted feedback re-emits to a
//! datagram that parses to the same report.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_xfer_proto::wire::{
    emit_feedback_datagram, parse_feedback_datagram, ControlMsg, DataPacket, DataRepr, HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = DataPacket::new_checked(data) {
        let repr = DataRepr::parse(&view).expect("a checked datagram parses");
        let mut out = vec![0u8; data.len()];
        out[HEADER_LEN..].copy_from_slice(&data[HEADER_LEN..]);
        repr.emit(&mut DataPacket::new_unchecked(&mut out[..]));
        // the tag and the reserved field are not part of the parsed form
        assert_eq!(out[..40], data[..40]);
    }
    let key = [5u8; 32];
    for k in [None, Some(&key)] {
        if let Ok(fb) = parse_feedback_datagram(k, 1, data) {
            let mut again = Vec::new();
            if emit_feedback_datagram(k, 1, &fb, &mut again).is_some() {
                assert_eq!(parse_feedback_datagram(k, 1, &again), Ok(fb));
            }
        }
    }
    if let Ok(line) = std::str::from_utf8(data) {
        let _ = ControlMsg::parse_line(line);
    }
});
