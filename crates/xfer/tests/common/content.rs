//! Test files of known content, for the xfer crate's tests and the CLI's (which include this file by
//! path: one generator, so that both name the same bytes by the same seed).

/// `len` bytes of a xorshift stream seeded with `seed`: test files whose content differs with the seed.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
