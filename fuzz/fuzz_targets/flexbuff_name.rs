//! Any string: chunk-name parsing and scan-name validation never panic; a parsed chunk name formats
//! back to the same file name; an accepted scan name is one plain path component.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::flexbuff::{
    chunk_file_name, is_chunk_path, parse_chunk_file_name, validate_flexbuff_scan_name,
};
use vlbiflow_formats::validate_scan_name;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some((scan, n)) = parse_chunk_file_name(s) {
        let file = s.rsplit('/').next().unwrap();
        assert_eq!(chunk_file_name(scan, n), file);
    }
    let _ = is_chunk_path(s);
    if validate_scan_name(s).is_ok() {
        let mut parts = std::path::Path::new(s).components();
        assert!(matches!(parts.next(), Some(std::path::Component::Normal(_))));
        assert!(parts.next().is_none());
    }
    if validate_flexbuff_scan_name(s).is_ok() {
        assert_eq!(parse_chunk_file_name(&chunk_file_name(s, 0)), Some((s, 0)));
    }
});
