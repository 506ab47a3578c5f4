//! Any bytes: Mark5B header and frame checks and parsing never panic; a parsed header re-emits to the
//! same 16 bytes; time conversions of a parsed header stay in range.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::mark5b::{Mark5bFrame, Mark5bHeader, Mark5bHeaderRepr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let _ = Mark5bFrame::new_checked(data);
    let Ok(view) = Mark5bHeader::new_checked(data) else {
        return;
    };
    let _ = (
        view.user(),
        view.test_vector(),
        view.frame_number(),
        view.computed_crc(),
    );
    let Ok(repr) = Mark5bHeaderRepr::parse(&view) else {
        return;
    };
    assert_eq!(&repr.to_bytes().unwrap()[..], &data[..HEADER_LEN]);
    // Frame rate and reference day taken from the input, so odd values get exercised too.
    let rate = u32::from(data.get(HEADER_LEN).copied().unwrap_or(1)) * 128;
    let reference_mjd = 40_000 + i64::from(data.get(HEADER_LEN + 1).copied().unwrap_or(0)) * 100;
    if let Ok(t) = repr.to_utc(reference_mjd, rate) {
        let again = Mark5bHeaderRepr::from_utc(t, rate, repr.user).unwrap();
        assert_eq!(again.frame_number, repr.frame_number);
        assert_eq!(again.seconds_of_day, repr.seconds_of_day);
        assert_eq!(again.mjd_mod_1000, repr.mjd_mod_1000);
    }
});
