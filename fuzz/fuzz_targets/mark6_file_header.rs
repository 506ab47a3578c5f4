//! Any bytes: checking and parsing a Mark6 file header never panics; a parsed header re-emits to the
//! same 20 bytes; block payload checks never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::mark6::{Mark6FileHeaderRepr, FILE_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(repr) = Mark6FileHeaderRepr::parse_bytes(data) else {
        return;
    };
    assert_eq!(&repr.to_bytes().unwrap()[..], &data[..FILE_HEADER_LEN]);
    let _ = repr.packets_per_block();
    if let Some(extra) = data.get(FILE_HEADER_LEN..FILE_HEADER_LEN + 8) {
        let _ = repr.check_block_payload(u64::from_le_bytes(extra.try_into().unwrap()));
    }
});
