//! Validation of scan names, which become file and directory names on every recording disk (Mark6
//! scatter-gather files, FlexBuff chunk directories). A name that passes cannot escape its directory,
//! cannot hide, and survives shells, `mk6gather`/`gather` command lines and jive5ab's chunk-name matching.

use crate::error::{Error, Result};

/// Longest accepted scan name, in bytes (Mark6 and jive5ab both keep scan names short).
pub const MAX_SCAN_NAME_LEN: usize = 64;

fn invalid(reason: &'static str) -> Error {
    Error::Invalid {
        field: "scan name",
        reason,
    }
}

/// Checks a scan name: non-empty, at most [`MAX_SCAN_NAME_LEN`] bytes, only `A-Z a-z 0-9 _ + - .`, not
/// starting with `.` or `-` and without `..` (so no path traversal, hidden file or option-like name).
pub fn validate_scan_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if name.len() > MAX_SCAN_NAME_LEN {
        return Err(invalid("longer than 64 bytes"));
    }
    for c in name.bytes() {
        match c {
            b'/' => return Err(invalid("must not contain '/'")),
            0 => return Err(invalid("must not contain NUL")),
            c if c.is_ascii_control() => return Err(invalid("must not contain control characters")),
            c if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'+' | b'-' | b'.') => {}
            _ => return Err(invalid("may only contain A-Z, a-z, 0-9, '_', '+', '-' and '.'")),
        }
    }
    if name.contains("..") {
        return Err(invalid("must not contain \"..\""));
    }
    if name.starts_with('.') {
        return Err(invalid("must not start with '.'"));
    }
    if name.starts_with('-') {
        return Err(invalid("must not start with '-'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_usual_names() {
        for n in [
            "ec071a_ef_no0001",
            "exp_Stn_scan.vdif",
            "r1234+5",
            "a",
            "X-1",
            &"a".repeat(64),
        ] {
            validate_scan_name(n).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    #[test]
    fn rejects_with_reason() {
        let cases = [
            ("", "empty"),
            ("a/b", "'/'"),
            ("..", ".."),
            ("a..b", ".."),
            (".hidden", "start with '.'"),
            ("-rf", "start with '-'"),
            ("a\0b", "NUL"),
            ("a\nb", "control"),
            ("a b", "may only contain"),
            ("scän", "may only contain"),
        ];
        for (name, want) in cases {
            let e = validate_scan_name(name).unwrap_err().to_string();
            assert!(e.contains("scan name") && e.contains(want), "{name:?}: {e}");
        }
        assert!(validate_scan_name(&"a".repeat(65))
            .unwrap_err()
            .to_string()
            .contains("64"));
    }

    proptest! {
        #[test]
        fn accepted_names_are_single_safe_components(name in ".{0,70}") {
            if validate_scan_name(&name).is_ok() {
                let p = std::path::Path::new(&name);
                let mut comps = p.components();
                prop_assert!(matches!(comps.next(), Some(std::path::Component::Normal(_))));
                prop_assert!(comps.next().is_none());
            }
        }
    }
}
