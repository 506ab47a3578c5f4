//! FlexBuff / vbs recordings (jive5ab): no file header, just raw frames in chunk files
//! `<mountpoint>/<scan>/<scan>.%08u` (chunk numbers from 0, each chunk a whole number of frames), spread
//! over the mountpoints. Readers (jive5ab, vbs_fs, m5copy) find chunks with `^.+/[^/.]+\.([0-9]{8})$`
//! on the full path, so a FlexBuff scan name must not contain a dot and chunk numbers must stay below 10^8.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::names::validate_scan_name;

/// Number of decimal digits in a chunk number as readers match it.
pub const CHUNK_DIGITS: usize = 8;
/// Largest chunk number readers can find (eight digits).
pub const MAX_CHUNK_NUMBER: u32 = 99_999_999;

/// Checks a scan name for FlexBuff use: [`validate_scan_name`] and, because jive5ab's chunk pattern allows
/// no dot before the chunk number, no `.` in the name.
pub fn validate_flexbuff_scan_name(scan: &str) -> Result<()> {
    validate_scan_name(scan)?;
    if scan.contains('.') {
        return Err(Error::Invalid {
            field: "FlexBuff scan name",
            reason: "must not contain '.' (jive5ab would not find the chunks)",
        });
    }
    Ok(())
}

/// Checks that a chunk number stays within the eight digits readers match.
pub fn validate_chunk_number(chunk_number: u32) -> Result<()> {
    if chunk_number > MAX_CHUNK_NUMBER {
        return Err(Error::OutOfRange {
            field: "FlexBuff chunk number",
            value: chunk_number.into(),
            allowed: "0..=99999999 (eight digits)",
        });
    }
    Ok(())
}

/// File name of chunk `chunk_number` of `scan`: `<scan>.%08u`. The scan should pass
/// [`validate_flexbuff_scan_name`] and the number [`validate_chunk_number`]; this only formats.
pub fn chunk_file_name(scan: &str, chunk_number: u32) -> String {
    format!("{scan}.{chunk_number:08}")
}

/// Directory holding the chunks of `scan` on one mountpoint: `<mountpoint>/<scan>`.
pub fn chunk_dir(mountpoint: &Path, scan: &str) -> PathBuf {
    mountpoint.join(scan)
}

/// Full path of a chunk: `<mountpoint>/<scan>/<scan>.%08u`.
pub fn chunk_path(mountpoint: &Path, scan: &str, chunk_number: u32) -> PathBuf {
    chunk_dir(mountpoint, scan).join(chunk_file_name(scan, chunk_number))
}

/// Splits a chunk file name (or the last component of a path) into scan name and chunk number, accepting
/// exactly what jive5ab's pattern accepts for that component: a non-empty stem without `/` or `.`, a dot,
/// and eight ASCII digits. Returns `None` for anything else.
pub fn parse_chunk_file_name(name: &str) -> Option<(&str, u32)> {
    let file = match name.rfind('/') {
        Some(i) => &name[i + 1..],
        None => name,
    };
    let dot = file.len().checked_sub(CHUNK_DIGITS + 1)?;
    if !file.is_char_boundary(dot) {
        return None;
    }
    let (stem, rest) = file.split_at(dot);
    let digits = rest.strip_prefix('.')?;
    if stem.is_empty() || stem.contains('.') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Eight ASCII digits always fit a u32.
    Some((stem, digits.parse().ok()?))
}

/// Whether jive5ab would take `path` as a chunk: [`parse_chunk_file_name`] on the last component and at
/// least one character of directory before it (`^.+/`).
pub fn is_chunk_path(path: &str) -> bool {
    match path.rfind('/') {
        Some(i) if i > 0 => parse_chunk_file_name(&path[i + 1..]).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A literal transcription of `^.+/[^/.]+\.([0-9]{8})$`, to check the hand-written matcher against.
    fn reference_match(path: &str) -> Option<u32> {
        let slash = path.rfind('/')?;
        if slash == 0 {
            return None;
        }
        let file = &path[slash + 1..];
        let b = file.as_bytes();
        if b.len() < 10 {
            return None;
        }
        let (stem, tail) = b.split_at(b.len() - 9);
        if stem.is_empty() || stem.iter().any(|&c| c == b'.' || c == b'/') || tail[0] != b'.' {
            return None;
        }
        if !tail[1..].iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(&tail[1..]).ok()?.parse().ok()
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(
            chunk_file_name("ec071a_ef_no0001", 7),
            "ec071a_ef_no0001.00000007"
        );
        assert_eq!(
            chunk_path(Path::new("/mnt/disk3"), "scan1", 12345678),
            PathBuf::from("/mnt/disk3/scan1/scan1.12345678")
        );
        assert_eq!(
            chunk_dir(Path::new("/mnt/disk0"), "s"),
            PathBuf::from("/mnt/disk0/s")
        );
        assert_eq!(parse_chunk_file_name("scan1.00000042"), Some(("scan1", 42)));
        assert_eq!(
            parse_chunk_file_name("/mnt/disk3/scan1/scan1.99999999"),
            Some(("scan1", 99_999_999))
        );
        assert!(is_chunk_path("/mnt/disk3/scan1/scan1.00000000"));
        assert!(!is_chunk_path("scan1.00000000"), "jive5ab wants a directory part");
        assert!(
            !is_chunk_path("/scan1.00000000"),
            "'.+' before the slash needs a character"
        );
        for bad in [
            "scan.1.00000001",
            "scan.0000001",
            "scan.000000001",
            ".00000001",
            "scan_00000001",
            "s.0000000x",
        ] {
            assert_eq!(parse_chunk_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn flexbuff_scan_names() {
        validate_flexbuff_scan_name("ec071a_ef_no0001").unwrap();
        let e = validate_flexbuff_scan_name("a.b").unwrap_err().to_string();
        assert!(e.contains("FlexBuff scan name"), "{e}");
        assert!(validate_flexbuff_scan_name("a/b").is_err());
        validate_chunk_number(MAX_CHUNK_NUMBER).unwrap();
        assert!(validate_chunk_number(MAX_CHUNK_NUMBER + 1)
            .unwrap_err()
            .to_string()
            .contains("chunk number"));
    }

    proptest! {
        #[test]
        fn round_trip(scan in "[A-Za-z0-9_+-]{1,64}", n in 0..=MAX_CHUNK_NUMBER) {
            let name = chunk_file_name(&scan, n);
            prop_assert_eq!(parse_chunk_file_name(&name), Some((scan.as_str(), n)));
            let p = chunk_path(Path::new("/mnt/d"), &scan, n);
            prop_assert!(is_chunk_path(p.to_str().unwrap()));
        }

        #[test]
        fn matches_the_reference_pattern(path in "[a/.0-9\u{e9}]{0,6}[.]?[0-9]{0,9}") {
            prop_assert_eq!(is_chunk_path(&path), reference_match(&path).is_some());
            if is_chunk_path(&path) {
                prop_assert_eq!(parse_chunk_file_name(&path).map(|(_, n)| n), reference_match(&path));
            }
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = parse_chunk_file_name(&s);
            let _ = is_chunk_path(&s);
        }
    }
}
