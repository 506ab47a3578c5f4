//! The test-packet header carried at the start of every UDP test datagram.
//!
//! ```text
//! offset size field
//!      0    4 magic        "VFNT"
//!      4    1 version      WIRE_VERSION
//!      5    1 kind         1 data, 2 latency request, 3 latency reply
//!      6    2 reserved     zero
//!      8    4 test_id      chosen by the client per test, big endian
//!     12    4 reserved     zero
//!     16    8 seq          packet number within the test, from 0, big endian
//!     24    8 send_ts_ns   sender's CLOCK_REALTIME in ns at send, big endian
//! ```
//! The rest of the datagram is padding up to the requested size.

use std::fmt;

/// Magic bytes at offset 0.
pub const MAGIC: [u8; 4] = *b"VFNT";
/// Header layout version.
pub const WIRE_VERSION: u8 = 1;
/// Header length; the smallest test datagram.
pub const HEADER_LEN: usize = 32;

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    pub const TEST_ID: Range<usize> = 8..12;
    pub const SEQ: Range<usize> = 16..24;
    pub const SEND_TS: Range<usize> = 24..32;
}

/// What a test datagram is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// Throughput-test data, counted by the receiver.
    Data,
    /// Latency request, echoed by the responder.
    LatencyRequest,
    /// Latency reply.
    LatencyReply,
}

impl PacketKind {
    fn to_byte(self) -> u8 {
        match self {
            PacketKind::Data => 1,
            PacketKind::LatencyRequest => 2,
            PacketKind::LatencyReply => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(PacketKind::Data),
            2 => Some(PacketKind::LatencyRequest),
            3 => Some(PacketKind::LatencyReply),
            _ => None,
        }
    }
}

/// Why a datagram is not a valid test packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than [`HEADER_LEN`].
    #[error("test packet: {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated(usize),
    /// Wrong magic at offset 0.
    #[error("test packet: bad magic at offset 0")]
    BadMagic,
    /// Unknown header version at offset 4.
    #[error("test packet: version {0} at offset 4, expected {WIRE_VERSION}")]
    BadVersion(u8),
    /// Unknown kind at offset 5.
    #[error("test packet: unknown kind {0} at offset 5")]
    BadKind(u8),
}

/// A zero-copy view of a test packet header.
#[derive(Clone, Copy)]
pub struct TestPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TestPacket<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        TestPacket { buffer }
    }

    /// Wraps a buffer after [`check`](Self::check).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = TestPacket::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks length, magic, version and kind.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated(b.len()));
        }
        if b[field::MAGIC] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if b[field::VERSION] != WIRE_VERSION {
            return Err(WireError::BadVersion(b[field::VERSION]));
        }
        if PacketKind::from_byte(b[field::KIND]).is_none() {
            return Err(WireError::BadKind(b[field::KIND]));
        }
        Ok(())
    }

    /// The packet kind (Data when unknown; call `check` first).
    pub fn kind(&self) -> PacketKind {
        PacketKind::from_byte(self.buffer.as_ref()[field::KIND]).unwrap_or(PacketKind::Data)
    }

    /// Test identifier.
    pub fn test_id(&self) -> u32 {
        u32::from_be_bytes(self.buffer.as_ref()[field::TEST_ID].try_into().unwrap())
    }

    /// Sequence number.
    pub fn seq(&self) -> u64 {
        u64::from_be_bytes(self.buffer.as_ref()[field::SEQ].try_into().unwrap())
    }

    /// Sender timestamp, ns since the Unix epoch (CLOCK_REALTIME).
    pub fn send_ts_ns(&self) -> u64 {
        u64::from_be_bytes(self.buffer.as_ref()[field::SEND_TS].try_into().unwrap())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TestPacket<T> {
    /// Writes magic and version.
    pub fn fill_fixed(&mut self) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = WIRE_VERSION;
        b[6..8].fill(0);
        b[12..16].fill(0);
    }

    /// Sets the kind.
    pub fn set_kind(&mut self, kind: PacketKind) {
        self.buffer.as_mut()[field::KIND] = kind.to_byte();
    }

    /// Sets the test identifier.
    pub fn set_test_id(&mut self, id: u32) {
        self.buffer.as_mut()[field::TEST_ID].copy_from_slice(&id.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, seq: u64) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.to_be_bytes());
    }

    /// Sets the send timestamp.
    pub fn set_send_ts_ns(&mut self, ts: u64) {
        self.buffer.as_mut()[field::SEND_TS].copy_from_slice(&ts.to_be_bytes());
    }
}

/// The parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestPacketRepr {
    /// Kind.
    pub kind: PacketKind,
    /// Test identifier.
    pub test_id: u32,
    /// Sequence number.
    pub seq: u64,
    /// Send timestamp, ns (CLOCK_REALTIME).
    pub send_ts_ns: u64,
}

impl TestPacketRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &TestPacket<T>) -> Result<Self, WireError> {
        p.check()?;
        Ok(TestPacketRepr {
            kind: p.kind(),
            test_id: p.test_id(),
            seq: p.seq(),
            send_ts_ns: p.send_ts_ns(),
        })
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TestPacket<T>) {
        p.fill_fixed();
        p.set_kind(self.kind);
        p.set_test_id(self.test_id);
        p.set_seq(self.seq);
        p.set_send_ts_ns(self.send_ts_ns);
    }
}

impl fmt::Display for TestPacketRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} test {} seq {} ts {}",
            self.kind, self.test_id, self.seq, self.send_ts_ns
        )
    }
}

/// CLOCK_REALTIME in ns, the clock of the send timestamps and of the kernel's receive times (between
/// hosts comparable only up to their clock offset, which the one-way delay statistics remove).
pub use vlbiflow_udp::realtime_ns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let mut buf = [0xAAu8; 64];
        let repr = TestPacketRepr {
            kind: PacketKind::LatencyRequest,
            test_id: 0xDEADBEEF,
            seq: 1 << 40,
            send_ts_ns: 123_456_789,
        };
        repr.emit(&mut TestPacket::new_unchecked(&mut buf[..]));
        let p = TestPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(TestPacketRepr::parse(&p).unwrap(), repr);
        assert_eq!(
            TestPacket::new_checked(&buf[..31]).err(),
            Some(WireError::Truncated(31))
        );
        let mut bad = buf;
        bad[0] = b'X';
        assert_eq!(TestPacket::new_checked(&bad[..]).err(), Some(WireError::BadMagic));
        let mut bad = buf;
        bad[4] = 9;
        assert_eq!(
            TestPacket::new_checked(&bad[..]).err(),
            Some(WireError::BadVersion(9))
        );
        let mut bad = buf;
        bad[5] = 0;
        assert_eq!(
            TestPacket::new_checked(&bad[..]).err(),
            Some(WireError::BadKind(0))
        );
    }
}
