//! Any bytes: parsing a Mark6 block header of either version never panics, and a parsed header re-emits
//! to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::mark6::{Mark6BlockHeaderRepr, Mark6Version};

fuzz_target!(|data: &[u8]| {
    for version in [Mark6Version::V1, Mark6Version::V2] {
        let Ok(repr) = Mark6BlockHeaderRepr::parse_bytes(data, version) else {
            continue;
        };
        assert_eq!(repr.version(), version);
        let mut out = [0u8; 8];
        repr.emit(&mut out).unwrap();
        let len = repr.header_len();
        assert_eq!(&out[..len], &data[..len]);
        let _ = repr.payload_len();
    }
});
