//! Packet sequence numbers (PSN) in front of frames on the wire.
//!
//! Mark6 d-plane and jive5ab's `udps` protocol put an 8-byte sequence number before each frame in a UDP
//! datagram, +1 per datagram (jive5ab starts at a random number). It is written in the sender's host byte
//! order (jive5ab copies a `uint64_t`), which on every host these tools run on (x86-64, ARM64) is
//! little-endian; vlbiflow reads and writes it little-endian, so it matches them on any host.
//! In Mark6 `input_stream` terms the PSN sits at offset 42 and the frame at offset 50.

/// Bytes of the sequence number in front of each frame.
pub const PSN_LEN: usize = 8;

/// Mark6 `input_stream` offset of the PSN (counted from the Ethernet header: 14 + 20 + 8).
pub const MARK6_PSN_OFFSET: u32 = 42;
/// Mark6 `input_stream` payload offset of a frame behind a PSN.
pub const MARK6_PAYLOAD_OFFSET: u32 = MARK6_PSN_OFFSET + PSN_LEN as u32;

/// Reads the PSN from the first 8 bytes of a datagram.
#[inline]
pub fn read(bytes: &[u8; PSN_LEN]) -> u64 {
    u64::from_le_bytes(*bytes)
}

/// Reads the PSN at the start of `datagram`, or `None` if it is shorter than [`PSN_LEN`].
#[inline]
pub fn read_prefix(datagram: &[u8]) -> Option<u64> {
    datagram.first_chunk::<PSN_LEN>().map(read)
}

/// The wire bytes of `psn`.
#[inline]
pub fn to_bytes(psn: u64) -> [u8; PSN_LEN] {
    psn.to_le_bytes()
}

/// Writes `psn` into the first 8 bytes of `out`.
#[inline]
pub fn write(psn: u64, out: &mut [u8; PSN_LEN]) {
    *out = to_bytes(psn);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_little_endian_as_jive5ab_writes_on_x86() {
        let mut b = [0u8; 8];
        write(0x0102_0304_0506_0708, &mut b);
        assert_eq!(b, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(read(&b), 0x0102_0304_0506_0708);
        assert_eq!(read_prefix(&[1, 0, 0, 0, 0, 0, 0, 0, 0xff]), Some(1));
        assert_eq!(read_prefix(&[1, 0, 0]), None);
    }
}
