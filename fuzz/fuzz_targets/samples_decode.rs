//! Any bytes: the first byte picks a sample format, the rest is a payload. Decoding never panics, and
//! re-encoding the decoded levels reproduces the payload exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_formats::samples::{decode, encode, level_counts, SampleFormat};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    let bits = [1u8, 2, 4, 8][usize::from(selector & 3)];
    let channels = 1u32 << ((selector >> 2) & 7);
    let complex = selector & 0x80 != 0;
    let format = SampleFormat::new(bits, channels, complex).unwrap();
    let Ok(n) = format.values_in(payload.len()) else {
        return;
    };
    let mut values = vec![0f32; n];
    decode(format, payload, &mut values).unwrap();
    let mut again = vec![0u8; payload.len()];
    encode(format, &values, &mut again).unwrap();
    assert_eq!(again, payload);
    let mut counts = [0u64; 256];
    level_counts(bits, payload, &mut counts);
    assert_eq!(counts.iter().sum::<u64>(), n as u64);
    // Wrong lengths are errors, not panics.
    let _ = decode(format, payload, &mut values[..n / 2]);
});
