//! Every parser of the crate fed arbitrary bytes, and valid encodings with random damage: nothing panics,
//! and whatever parses re-emits to the same bytes. The same properties as the cargo-fuzz targets in
//! `fuzz/`, run in the normal test suite.

use proptest::prelude::*;
use vlbiflow_formats::flexbuff::{chunk_file_name, is_chunk_path, parse_chunk_file_name};
use vlbiflow_formats::mark5b::{Mark5bFrame, Mark5bHeaderRepr};
use vlbiflow_formats::mark6::{Mark6BlockHeaderRepr, Mark6FileHeaderRepr, Mark6Version};
use vlbiflow_formats::samples::{decode, encode, SampleFormat};
use vlbiflow_formats::validate_scan_name;
use vlbiflow_formats::vdif::{VdifFrame, VdifHeader, VdifHeaderRepr};

/// Valid encodings of each layout, to be damaged by the tests.
fn valid_vdif() -> Vec<u8> {
    let mut frame = vec![0u8; 64];
    VdifHeaderRepr {
        frame_len: 64,
        ..Default::default()
    }
    .emit(&mut frame)
    .unwrap();
    frame
}

fn valid_mark5b() -> Vec<u8> {
    Mark5bHeaderRepr::for_frame(1_704_067_200, 3, 12_800, 0xbead)
        .unwrap()
        .to_bytes()
        .unwrap()
        .to_vec()
}

const JIVE5AB_FILE_HEADER: [u8; 20] = [
    0x66, 0x66, 0xed, 0xfe, 2, 0, 0, 0, 0x08, 0xe7, 0xff, 0, 0, 0, 0, 0, 0x60, 0x1f, 0, 0,
];

/// `base` with up to four bytes overwritten at positions chosen by `edits`.
fn damage(base: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut b = base.to_vec();
    for &(at, v) in edits {
        if !b.is_empty() {
            let i = at % b.len();
            b[i] = v;
        }
    }
    b
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)
}

fn check_vdif(bytes: &[u8]) {
    if let Ok(view) = VdifHeader::new_checked(bytes) {
        if let Ok(repr) = VdifHeaderRepr::parse(&view) {
            let len = repr.header_len();
            // Word 1 bits 31..30 are unassigned: parse ignores them, emit writes zeros.
            let mut want = bytes[..len].to_vec();
            want[7] &= 0x3f;
            assert_eq!(&repr.to_bytes().unwrap()[..len], &want[..]);
        }
    }
    if let Ok(frame) = VdifFrame::new_checked(bytes) {
        assert_eq!(frame.header().frame_len(), bytes.len());
        let _ = VdifHeaderRepr::parse(&frame.header());
    }
}

fn check_mark5b(bytes: &[u8]) {
    if let Ok(repr) = Mark5bHeaderRepr::parse_bytes(bytes) {
        assert_eq!(&repr.to_bytes().unwrap()[..], &bytes[..16]);
    }
    let _ = Mark5bFrame::new_checked(bytes);
}

fn check_mark6(bytes: &[u8]) {
    if let Ok(repr) = Mark6FileHeaderRepr::parse_bytes(bytes) {
        assert_eq!(&repr.to_bytes().unwrap()[..], &bytes[..20]);
        let _ = repr.check_block_payload(bytes.len() as u64 * 1000);
    }
    for version in [Mark6Version::V1, Mark6Version::V2] {
        if let Ok(repr) = Mark6BlockHeaderRepr::parse_bytes(bytes, version) {
            let mut out = [0u8; 8];
            repr.emit(&mut out).unwrap();
            assert_eq!(&out[..repr.header_len()], &bytes[..repr.header_len()]);
        }
    }
}

proptest! {
    #[test]
    fn vdif_arbitrary(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        check_vdif(&bytes);
    }

    #[test]
    fn vdif_damaged(e in edits()) {
        check_vdif(&damage(&valid_vdif(), &e));
    }

    #[test]
    fn mark5b_arbitrary(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        check_mark5b(&bytes);
    }

    #[test]
    fn mark5b_damaged(e in edits()) {
        check_mark5b(&damage(&valid_mark5b(), &e));
    }

    #[test]
    fn mark6_arbitrary(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        check_mark6(&bytes);
    }

    #[test]
    fn mark6_damaged(e in edits()) {
        check_mark6(&damage(&JIVE5AB_FILE_HEADER, &e));
    }

    #[test]
    fn names_arbitrary(s in "\\PC{0,80}", chunk in "[a-z/.]{0,12}[.][0-9]{6,10}") {
        for s in [s.as_str(), chunk.as_str()] {
            if let Some((scan, n)) = parse_chunk_file_name(s) {
                prop_assert_eq!(chunk_file_name(scan, n), s.rsplit('/').next().unwrap());
            }
            let _ = is_chunk_path(s);
            let _ = validate_scan_name(s);
        }
    }

    #[test]
    fn samples_arbitrary(selector in any::<u8>(), payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        let bits = [1u8, 2, 4, 8][usize::from(selector & 3)];
        let format = SampleFormat::new(bits, 1 << ((selector >> 2) & 7), selector & 0x80 != 0).unwrap();
        if let Ok(n) = format.values_in(payload.len()) {
            let mut values = vec![0f32; n];
            decode(format, &payload, &mut values).unwrap();
            let mut again = vec![0u8; payload.len()];
            encode(format, &values, &mut again).unwrap();
            prop_assert_eq!(again, payload);
        }
    }
}
