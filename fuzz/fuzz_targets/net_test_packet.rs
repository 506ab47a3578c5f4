//! Any datagram on a `vlbiflow net` test port: the test-packet header check and parse never panic, and
//! a parsed header re-emits to the same 32 bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_net::wire::{TestPacket, TestPacketRepr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(view) = TestPacket::new_checked(data) else {
        return;
    };
    let repr = TestPacketRepr::parse(&view).expect("a checked packet parses");
    let mut out = [0u8; HEADER_LEN];
    repr.emit(&mut TestPacket::new_unchecked(&mut out[..]));
    // The reserved bytes are zero on emit and not checked on parse; everything else matches.
    let mut expected = [0u8; HEADER_LEN];
    expected.copy_from_slice(&data[..HEADER_LEN]);
    expected[6..8].fill(0);
    expected[12..16].fill(0);
    assert_eq!(out, expected);
});
