//! Byte layouts of `vlbiflow xfer`: the data datagram (UDP) and the control messages (TCP).
//!
//! **Data datagram**: a fixed 64-byte big-endian header followed by the payload (one block of a file).
//!
//! ```text
//!  0  u16 magic 0x5846 ("XF")      2  u8 version (6)         3  u8 flags (bit 0: retransmission)
//!  4  u32 transfer id              8  u64 sequence number (per transfer, +1 per datagram, never reused)
//! 16  u32 file index              20  u32 payload length
//! 24  u64 byte offset in the file 32  u64 send timestamp, µs on the sender's clock
//! 40  u64 reserved (zero)         48  16-byte authentication tag (keyed BLAKE3 over bytes 0..48 and
//!                                     the payload's digest; all zero when no key is in use)
//! 64  payload
//! ```
//!
//! The payload's digest ([`crate::hash::block_digest`]) is the BLAKE3 chaining value of the block as a
//! subtree of the file when the block size is a power of two of at least 1 KiB (the receiver merges these
//! values into the chunk hash, so every byte is hashed once at each end), else the plain BLAKE3 hash of the
//! payload.
//!
//! [`DataPacket`] is a zero-copy view (checked constructor, accessors, setters), [`DataRepr`] the parsed form
//! with [`DataRepr::parse`] / [`DataRepr::emit`]. [`seal`] and [`verify`] compute and check the tag
//! ([`tag`] from a digest the caller already has).
//!
//! **Feedback datagram** (UDP, receiver -> sender, from the receiver's data port to the address the data
//! comes from): a 32-byte header and one [`Feedback`] as the JSON of its control message, at most
//! [`MAX_FEEDBACK_DATAGRAM`] bytes in all. Feedback travels as datagrams because on the TCP control
//! connection one lost segment holds every later report back for a round trip or more (head-of-line
//! blocking): at 100 ms and 1% loss each way that stalled the feedback for 24% of a transfer.
//!
//! ```text
//!  0  u16 magic 0x5842 ("XB")      2  u8 version (6)         3  u8 reserved (zero)
//!  4  u32 transfer id              8  u16 length of the JSON 10  6 bytes reserved (zero)
//! 16  16-byte authentication tag (keyed BLAKE3 under the feedback key over bytes 0..16 and the JSON;
//!     all zero when no key is in use)
//! 32  JSON
//! ```
//!
//! [`emit_feedback_datagram`] and [`parse_feedback_datagram`] write and check it.
//!
//! **Control messages** ([`ControlMsg`]) are single lines of JSON (serde, externally tagged by `"type"`),
//! at most [`MAX_CONTROL_LINE`] bytes, one per line on the TCP control connection. They are few (a feedback
//! message every few milliseconds, one announce per file), so readability and versioning win over the
//! bytes a binary encoding would save. [`ControlMsg::parse_line`] validates everything a peer could get
//! wrong and names the field.

pub use crate::hash::ChunkHash;
use serde::{Deserialize, Serialize};

/// Length of the data datagram header, tag included.
pub const HEADER_LEN: usize = 64;
/// Magic number at the start of every data datagram.
pub const MAGIC: u16 = 0x5846;
/// Protocol version carried in data and feedback datagrams and in `hello` (3: feedback as datagrams, loss
/// ranges repeated and bounded by `loss_from`; 4: the receiver's counters come with the session's
/// `committed`, which a peer of version 3 would refuse as an unknown field, so the two do not mix; 5: the
/// receiver may change the sender's ceiling while running (`rate_cap`), and an abort may say it was a
/// refusal or a busy file; 6: feedback carries the receiving host's socket drops, `host_drops`, which a
/// sender of version 5 would refuse).
pub const VERSION: u8 = 7;
/// Magic number at the start of every feedback datagram.
pub const FEEDBACK_MAGIC: u16 = 0x5842;
/// Length of the feedback datagram header, tag included.
pub const FEEDBACK_HEADER_LEN: usize = 32;
/// Largest feedback datagram (fits a 1500-byte MTU with IPv6 and UDP headers); a feedback that does not
/// fit goes on the control connection instead.
pub const MAX_FEEDBACK_DATAGRAM: usize = 1400;
/// Length of the authentication tag.
pub const TAG_LEN: usize = 16;
/// Flag bit: this datagram is a retransmission.
pub const FLAG_RETRANSMIT: u8 = 1;
/// Flag bit: the payload is encrypted (ChaCha20-Poly1305); the tag field holds the AEAD tag.
pub const FLAG_ENCRYPTED: u8 = 2;
/// Longest control line accepted (bytes, without the newline).
pub const MAX_CONTROL_LINE: usize = 1 << 20;
/// Longest file name accepted in an announce.
pub const MAX_NAME_LEN: usize = 4096;
/// Bytes of IP (v6) and UDP header per datagram, counted by the rate control as on the wire.
pub const IP_UDP_OVERHEAD: usize = 48;
/// Largest payload a data datagram may carry (fits a 9000-byte jumbo frame with IPv6 + UDP headers).
pub const MAX_PAYLOAD: usize = 9000 - 48 - HEADER_LEN;
/// Smallest and largest chunk sizes (the unit of hashing and verification).
pub const MIN_CHUNK_SIZE: u64 = 4096;
/// Largest chunk size.
pub const MAX_CHUNK_SIZE: u64 = 1 << 30;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const FLAGS: usize = 3;
    pub const TRANSFER: Range<usize> = 4..8;
    pub const SEQ: Range<usize> = 8..16;
    pub const FILE: Range<usize> = 16..20;
    pub const LEN: Range<usize> = 20..24;
    pub const OFFSET: Range<usize> = 24..32;
    pub const TIMESTAMP: Range<usize> = 32..40;
    pub const RESERVED: Range<usize> = 40..48;
    pub const TAG: Range<usize> = 48..64;
}

/// What is wrong with a datagram or a control line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the structure it should hold.
    #[error("{what}: truncated, need {need} bytes, got {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// A field holds a value the protocol does not allow.
    #[error("{field}: {why}")]
    Field { field: &'static str, why: String },
    /// A control line is not a valid message.
    #[error("control message: {0}")]
    Control(String),
    /// The authentication tag does not match.
    #[error("tag: authentication failed")]
    BadTag,
}

fn bad(field: &'static str, why: impl Into<String>) -> WireError {
    WireError::Field {
        field,
        why: why.into(),
    }
}

/// A read/write view over a data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> DataPacket<T> {
    /// Wraps `buffer` without checks; accessors panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        DataPacket { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks length, magic, version, reserved bits and that the length field matches the buffer.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                what: "data header",
                need: HEADER_LEN,
                got: b.len(),
            });
        }
        if self.magic() != MAGIC {
            return Err(bad(
                "magic",
                format!("{:#06x}, expected {MAGIC:#06x}", self.magic()),
            ));
        }
        if self.version() != VERSION {
            return Err(bad("version", format!("{}, expected {VERSION}", self.version())));
        }
        if self.flags() & !(FLAG_RETRANSMIT | FLAG_ENCRYPTED) != 0 {
            return Err(bad("flags", format!("unknown bits {:#04x}", self.flags())));
        }
        if be64(&b[field::RESERVED]) != 0 {
            return Err(bad("reserved", "not zero"));
        }
        let len = self.payload_len() as usize;
        if len > MAX_PAYLOAD {
            return Err(bad("payload length", format!("{len} > {MAX_PAYLOAD}")));
        }
        if b.len() != HEADER_LEN + len {
            return Err(bad(
                "payload length",
                format!("{len}, but the datagram carries {}", b.len() - HEADER_LEN),
            ));
        }
        if self.offset().checked_add(len as u64).is_none() {
            return Err(bad("offset", "offset + length overflows"));
        }
        Ok(())
    }

    /// Consumes the view and returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Magic number.
    pub fn magic(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::MAGIC])
    }
    /// Version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Transfer id.
    pub fn transfer_id(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::TRANSFER])
    }
    /// Sequence number.
    pub fn seq(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SEQ])
    }
    /// File index.
    pub fn file(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::FILE])
    }
    /// Payload length field.
    pub fn payload_len(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::LEN])
    }
    /// Byte offset in the file.
    pub fn offset(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::OFFSET])
    }
    /// Send timestamp (µs, sender clock).
    pub fn timestamp_us(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::TIMESTAMP])
    }
    /// Authentication tag.
    pub fn tag(&self) -> [u8; TAG_LEN] {
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&self.buffer.as_ref()[field::TAG]);
        t
    }
    /// The payload (after the header; length from the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataPacket<T> {
    fn b(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets magic and version.
    pub fn set_magic_version(&mut self) {
        self.b()[field::MAGIC].copy_from_slice(&MAGIC.to_be_bytes());
        self.b()[field::VERSION] = VERSION;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.b()[field::FLAGS] = v;
    }
    /// Sets the transfer id.
    pub fn set_transfer_id(&mut self, v: u32) {
        self.b()[field::TRANSFER].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u64) {
        self.b()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the file index.
    pub fn set_file(&mut self, v: u32) {
        self.b()[field::FILE].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the payload length field.
    pub fn set_payload_len(&mut self, v: u32) {
        self.b()[field::LEN].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the offset.
    pub fn set_offset(&mut self, v: u64) {
        self.b()[field::OFFSET].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the send timestamp.
    pub fn set_timestamp_us(&mut self, v: u64) {
        self.b()[field::TIMESTAMP].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the tag.
    pub fn set_tag(&mut self, t: &[u8; TAG_LEN]) {
        self.b()[field::TAG].copy_from_slice(t);
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.b()[HEADER_LEN..]
    }
}

/// The parsed header of a data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr {
    /// Transfer id (from `hello`).
    pub transfer_id: u32,
    /// Sequence number.
    pub seq: u64,
    /// File index (from `announce`).
    pub file: u32,
    /// Byte offset of the payload in the file.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
    /// Send timestamp, µs on the sender's clock.
    pub timestamp_us: u64,
    /// A retransmission?
    pub retransmit: bool,
}

impl DataRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &DataPacket<T>) -> Result<DataRepr, WireError> {
        p.check()?;
        Ok(DataRepr {
            transfer_id: p.transfer_id(),
            seq: p.seq(),
            file: p.file(),
            offset: p.offset(),
            len: p.payload_len(),
            timestamp_us: p.timestamp_us(),
            retransmit: p.flags() & FLAG_RETRANSMIT != 0,
        })
    }

    /// Length of the whole datagram.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.len as usize
    }

    /// Writes the header (tag zeroed) into the view; the payload is the caller's.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DataPacket<T>) {
        p.set_magic_version();
        p.set_flags(if self.retransmit { FLAG_RETRANSMIT } else { 0 });
        p.set_transfer_id(self.transfer_id);
        p.set_seq(self.seq);
        p.set_file(self.file);
        p.set_payload_len(self.len);
        p.set_offset(self.offset);
        p.set_timestamp_us(self.timestamp_us);
        p.b()[field::RESERVED].fill(0);
        p.set_tag(&[0; TAG_LEN]);
    }
}

/// A per-transfer data key, derived from the session secret (e.g. the Noise handshake hash or a PSK) and
/// the transfer id, so that tags from one transfer are worthless in another.
pub fn derive_data_key(session_secret: &[u8], transfer_id: u32) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("vlbiflow xfer v1 data datagram MAC");
    h.update(session_secret);
    h.update(&transfer_id.to_be_bytes());
    *h.finalize().as_bytes()
}

/// The tag of a datagram whose header is `header` (at least the 48 bytes before the tag field) and whose
/// payload has the digest `digest` ([`crate::hash::block_digest`]): keyed BLAKE3 over both, truncated.
pub fn tag(key: &[u8; 32], header: &[u8], digest: &[u8; 32]) -> [u8; TAG_LEN] {
    let mut m = [0u8; field::TAG.start + 32];
    m[..field::TAG.start].copy_from_slice(&header[..field::TAG.start]);
    m[field::TAG.start..].copy_from_slice(digest);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&blake3::keyed_hash(key, &m).as_bytes()[..TAG_LEN]);
    t
}

/// Writes the tag of a complete datagram (header emitted, payload filled) under `key`; `subtree_block` is
/// the transfer's block size when blocks are BLAKE3 subtrees (see [`crate::hash::block_digest`]). Returns
/// the payload's digest. Panics if `datagram` is shorter than the header (a caller bug, not external input).
pub fn seal(key: &[u8; 32], subtree_block: Option<u64>, datagram: &mut [u8]) -> [u8; 32] {
    let (head, payload) = datagram.split_at_mut(HEADER_LEN);
    let offset = be64(&head[field::OFFSET]);
    let d = crate::hash::block_digest(subtree_block, offset, payload);
    let t = tag(key, head, &d);
    head[field::TAG].copy_from_slice(&t);
    d
}

/// Checks the tag of a datagram at least [`HEADER_LEN`] long (constant-time comparison) against the digest
/// of its payload.
pub fn verify_digest(key: &[u8; 32], datagram: &[u8], digest: &[u8; 32]) -> Result<(), WireError> {
    if datagram.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            what: "data header",
            need: HEADER_LEN,
            got: datagram.len(),
        });
    }
    let t = tag(key, datagram, digest);
    let got = &datagram[field::TAG];
    let diff = t.iter().zip(got).fold(0u8, |a, (x, y)| a | (x ^ y));
    if diff == 0 {
        Ok(())
    } else {
        Err(WireError::BadTag)
    }
}

/// Checks the tag of a datagram (computing its payload's digest; see [`seal`]).
pub fn verify(key: &[u8; 32], subtree_block: Option<u64>, datagram: &[u8]) -> Result<(), WireError> {
    if datagram.len() < HEADER_LEN {
        return verify_digest(key, datagram, &[0; 32]);
    }
    let offset = be64(&datagram[field::OFFSET]);
    let d = crate::hash::block_digest(subtree_block, offset, &datagram[HEADER_LEN..]);
    verify_digest(key, datagram, &d)
}

/// The per-transfer key for encrypted datagrams, derived like [`derive_data_key`] in its own context.
pub fn derive_data_aead_key(session_secret: &[u8], transfer_id: u32) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("vlbiflow xfer v1 data datagram AEAD");
    h.update(session_secret);
    h.update(&transfer_id.to_be_bytes());
    *h.finalize().as_bytes()
}

/// The per-transfer key of feedback datagrams, derived like [`derive_data_key`] in its own context (a data
/// datagram's tag is worthless as a feedback tag and the other way round).
pub fn derive_feedback_key(session_secret: &[u8], transfer_id: u32) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("vlbiflow xfer v3 feedback datagram MAC");
    h.update(session_secret);
    h.update(&transfer_id.to_be_bytes());
    *h.finalize().as_bytes()
}

fn feedback_tag(key: &[u8; 32], head: &[u8], json: &[u8]) -> [u8; TAG_LEN] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&head[..16]);
    h.update(json);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
    t
}

/// Writes the feedback datagram carrying `fb` into `out` (cleared first) and returns its length, or `None`
/// when it would be longer than [`MAX_FEEDBACK_DATAGRAM`] (send it on the control connection then).
pub fn emit_feedback_datagram(
    key: Option<&[u8; 32]>,
    transfer_id: u32,
    fb: &Feedback,
    out: &mut Vec<u8>,
) -> Option<usize> {
    out.clear();
    out.resize(FEEDBACK_HEADER_LEN, 0);
    serde_json::to_writer(&mut *out, &ControlMsg::Feedback(fb.clone()))
        .expect("control messages always serialise");
    let json_len = out.len() - FEEDBACK_HEADER_LEN;
    if out.len() > MAX_FEEDBACK_DATAGRAM {
        return None;
    }
    out[0..2].copy_from_slice(&FEEDBACK_MAGIC.to_be_bytes());
    out[2] = VERSION;
    out[4..8].copy_from_slice(&transfer_id.to_be_bytes());
    out[8..10].copy_from_slice(&(json_len as u16).to_be_bytes());
    if let Some(k) = key {
        let (head, json) = out.split_at_mut(FEEDBACK_HEADER_LEN);
        let t = feedback_tag(k, head, json);
        head[16..32].copy_from_slice(&t);
    }
    Some(out.len())
}

/// Checks a feedback datagram (length, magic, version, transfer, tag when `key` is given) and returns its
/// validated [`Feedback`].
pub fn parse_feedback_datagram(
    key: Option<&[u8; 32]>,
    transfer_id: u32,
    d: &[u8],
) -> Result<Feedback, WireError> {
    if d.len() < FEEDBACK_HEADER_LEN {
        return Err(WireError::Truncated {
            what: "feedback header",
            need: FEEDBACK_HEADER_LEN,
            got: d.len(),
        });
    }
    if be16(&d[0..2]) != FEEDBACK_MAGIC {
        return Err(bad("feedback datagram", "wrong magic"));
    }
    if d[2] != VERSION {
        return Err(bad(
            "feedback datagram",
            format!("version {}, expected {VERSION}", d[2]),
        ));
    }
    let json_len = be16(&d[8..10]) as usize;
    if d.len() != FEEDBACK_HEADER_LEN + json_len {
        return Err(bad(
            "feedback datagram",
            format!(
                "{} bytes, its header says {}",
                d.len(),
                FEEDBACK_HEADER_LEN + json_len
            ),
        ));
    }
    let (head, json) = d.split_at(FEEDBACK_HEADER_LEN);
    if let Some(k) = key {
        let t = feedback_tag(k, head, json);
        if t.iter().zip(&head[16..32]).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
            return Err(WireError::BadTag);
        }
    }
    if be32(&head[4..8]) != transfer_id {
        return Err(bad("feedback datagram", "another transfer"));
    }
    let line = std::str::from_utf8(json).map_err(|_| bad("feedback datagram", "not UTF-8"))?;
    match ControlMsg::parse_line(line)? {
        ControlMsg::Feedback(f) => Ok(f),
        _ => Err(bad("feedback datagram", "not a feedback message")),
    }
}

/// The AEAD nonce of a datagram: its transfer id and sequence number (never reused within a transfer:
/// retransmissions get new sequence numbers; the key is per transfer).
fn aead_nonce(datagram: &[u8]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&datagram[field::TRANSFER]);
    n[4..].copy_from_slice(&datagram[field::SEQ]);
    n
}

/// Encrypts the payload of a complete datagram in place (ChaCha20-Poly1305, the header up to the tag as
/// associated data), sets [`FLAG_ENCRYPTED`] and writes the AEAD tag into the tag field. Panics if `datagram`
/// is shorter than the header (a caller bug).
pub fn seal_encrypted(key: &[u8; 32], datagram: &mut [u8]) {
    let (head, payload) = datagram.split_at_mut(HEADER_LEN);
    seal_encrypted_parts(key, head, payload);
}

/// [`seal_encrypted`] for a header (the first [`HEADER_LEN`] bytes of the datagram) and a payload kept apart.
pub fn seal_encrypted_parts(key: &[u8; 32], head: &mut [u8], payload: &mut [u8]) {
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    head[field::FLAGS] |= FLAG_ENCRYPTED;
    head[field::TAG].fill(0);
    let nonce = aead_nonce(head);
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(key.into());
    let tag = cipher
        .encrypt_in_place_detached((&nonce).into(), &head[..field::TAG.start], payload)
        .expect("payload within the AEAD's limit");
    head[field::TAG].copy_from_slice(&tag);
}

/// Checks and decrypts an encrypted datagram in place; on success the payload is plaintext and the flag
/// and tag are as [`seal_encrypted`] left them. A datagram without [`FLAG_ENCRYPTED`], too short, or whose
/// tag does not verify is `Err` and its bytes are unchanged.
pub fn open_encrypted(key: &[u8; 32], datagram: &mut [u8]) -> Result<(), WireError> {
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    if datagram.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            what: "data header",
            need: HEADER_LEN,
            got: datagram.len(),
        });
    }
    if datagram[field::FLAGS] & FLAG_ENCRYPTED == 0 {
        return Err(bad("flags", "not encrypted, but this transfer encrypts"));
    }
    let nonce = aead_nonce(datagram);
    let (head, payload) = datagram.split_at_mut(HEADER_LEN);
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&head[field::TAG]);
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(key.into());
    cipher
        .decrypt_in_place_detached((&nonce).into(), &head[..field::TAG.start], payload, (&tag).into())
        .map_err(|_| WireError::BadTag)
}

/// Receiver feedback, sent at least every feedback interval while data arrives (and as a keep-alive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Feedback {
    /// Number of this feedback, from 1, +1 per feedback: the sender ignores one not newer than the newest
    /// it has (a copy on the control connection, a reordered or replayed datagram).
    pub n: u64,
    /// Highest sequence number accepted so far (`null` before the first).
    pub highest_seq: Option<u64>,
    /// The sequence numbers `loss` speaks for: every missing number from `loss_from` to `highest_seq` is
    /// in `loss` (each gap is repeated in several consecutive feedbacks, so that losing a few feedback
    /// datagrams loses no report). The sender presumes lost what it sent below `loss_from` and has not
    /// seen acknowledged: a report about it may have been lost.
    pub loss_from: u64,
    /// Missing sequence numbers as `[start, len]` ranges, ascending, from `loss_from` up to
    /// `highest_seq` (numbers above `highest_seq` are not reported).
    pub loss: Vec<(u64, u32)>,
    /// Payload bytes accepted in total (duplicates excluded).
    pub recv_bytes: u64,
    /// Datagrams accepted in total (duplicates excluded); with `recv_bytes` it gives the bytes on the wire.
    pub recv_datagrams: u64,
    /// Receiver clock (µs) at which the newest datagram counted in `recv_bytes` arrived (the kernel's
    /// receive time where the socket gives one).
    pub recv_time_us: u64,
    /// Receive rate over the last interval, bits/s (informational; the sender derives its own samples
    /// from `recv_bytes` / `recv_time_us`).
    pub rate_bps: u64,
    /// Send timestamp of the datagram that carried `highest_seq`, echoed for RTT measurement.
    pub echo_ts_us: u64,
    /// How long the receiver held that echo before sending this message, µs.
    pub echo_delay_us: u64,
    /// Queueing delay: smallest one-way delay in the interval minus the smallest over the last 10 s, µs.
    /// A value that stays high is a standing queue.
    pub queue_delay_us: u64,
    /// Change of the interval's smallest one-way delay since the previous feedback, µs (the trend).
    pub owd_trend_us: i64,
    /// Chunks verified so far.
    pub chunks_verified: u64,
    /// Datagrams the receiving host's kernel dropped on the data socket so far (its buffer overflowed,
    /// `SO_RXQ_OVFL`), where the socket counts them: lost by the receiver, not by the path.
    #[serde(default)]
    pub host_drops: u64,
}

impl Feedback {
    /// Checks the values a peer could get wrong (`loss_from` and the loss ranges against
    /// `highest_seq`), naming the field.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.loss_from > self.highest_seq.map_or(0, |h| h.saturating_add(1)) {
            return Err(bad("feedback.loss_from", "above highest_seq + 1"));
        }
        let mut floor = self.loss_from;
        for (i, &(start, len)) in self.loss.iter().enumerate() {
            if len == 0 {
                return Err(bad("feedback.loss", format!("range {i} is empty")));
            }
            let end = start
                .checked_add(len as u64)
                .ok_or_else(|| bad("feedback.loss", "range overflows"))?;
            if start < floor {
                return Err(bad(
                    "feedback.loss",
                    format!("range {i} not ascending or below loss_from"),
                ));
            }
            match self.highest_seq {
                Some(h) if end <= h => {}
                _ => {
                    return Err(bad(
                        "feedback.loss",
                        format!("range {i} reaches past highest_seq"),
                    ))
                }
            }
            floor = end;
        }
        Ok(())
    }
}

/// A control message (one JSON line on the control connection).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlMsg {
    /// Sender -> receiver, first message: protocol version, transfer id, block (payload) size.
    Hello {
        version: u8,
        transfer_id: u32,
        block_size: u32,
    },
    /// Either way: authentication exchange placeholder (the I/O layer runs Noise/TLS before this).
    Auth { scheme: String, payload: String },
    /// Sender -> receiver: a file of the transfer. `hashes` is empty or has one hash per chunk.
    Announce {
        file: u32,
        name: String,
        size: u64,
        chunk_size: u64,
        hashes: Vec<ChunkHash>,
    },
    /// Sender -> receiver: the hash of a chunk, known once the sender has read it.
    ChunkHash { file: u32, chunk: u32, hash: ChunkHash },
    /// Receiver -> sender: loss, rate and delay report.
    Feedback(Feedback),
    /// Receiver -> sender: the chunk as written hashes to the sender's hash (also sent on resume for chunks
    /// the receiver already holds).
    ChunkVerified { file: u32, chunk: u32 },
    /// Receiver -> sender: the chunk as written does not match; the sender sends it again.
    ChunkMismatch { file: u32, chunk: u32 },
    /// Sender -> receiver: feedback datagrams arrive, so the receiver stops copying every feedback to the
    /// control connection (it does so until this message, in case UDP does not come back).
    FeedbackDatagrams,
    /// Sender -> receiver: keep-alive while no data flows.
    Ping,
    /// Receiver -> sender: pace at most at `bps` bits/s on the wire from now on (`None`: no ceiling but the
    /// sender's own). A daemon sends it when its share of a limit on all its transfers changes.
    RateCap { bps: Option<u64> },
    /// Sender -> receiver: no file will be added; the transfer has `files` files of `bytes` bytes in all.
    /// The receiver then commits and reports as soon as it has verified every chunk itself, without
    /// waiting a round trip for `done` (since version 7).
    Closed { files: u32, bytes: u64 },
    /// Sender -> receiver: every file is announced and every chunk verified.
    Done { files: u32, bytes: u64 },
    /// Either way: the transfer ends with an error. `kind` says whether to rerun (the default, left out
    /// on the wire), not to (refused) or later (busy).
    Abort {
        reason: String,
        #[serde(default, skip_serializing_if = "AbortKind::is_failed")]
        kind: AbortKind,
    },
}

/// Why a transfer was aborted, as far as what to do next goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortKind {
    /// It failed (network, disk, peer): rerunning the same command resumes.
    #[default]
    Failed,
    /// The receiver will not take it as asked (e.g. a file exists with other content): rerunning the same
    /// command gets the same answer.
    Refused,
    /// Another transfer is writing the same file: retry when it has ended.
    Busy,
}

impl AbortKind {
    /// Whether this is the default kind (not written on the wire).
    pub fn is_failed(&self) -> bool {
        *self == AbortKind::Failed
    }
}

impl ControlMsg {
    /// Number of chunks of a file of `size` bytes in chunks of `chunk_size`.
    pub fn chunk_count(size: u64, chunk_size: u64) -> u64 {
        size.div_ceil(chunk_size.max(1))
    }

    /// Parses and validates one control line (without the newline).
    pub fn parse_line(line: &str) -> Result<ControlMsg, WireError> {
        if line.len() > MAX_CONTROL_LINE {
            return Err(WireError::Truncated {
                what: "control line (too long)",
                need: MAX_CONTROL_LINE,
                got: line.len(),
            });
        }
        let msg: ControlMsg = serde_json::from_str(line).map_err(|e| WireError::Control(e.to_string()))?;
        msg.validate()?;
        Ok(msg)
    }

    /// The message as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("control messages always serialise")
    }

    /// Checks the values a peer could get wrong.
    pub fn validate(&self) -> Result<(), WireError> {
        match self {
            ControlMsg::Hello {
                version, block_size, ..
            } => {
                if *version != VERSION {
                    return Err(bad(
                        "hello.version",
                        format!("{version}, this side speaks {VERSION} (both ends need the same protocol version: install the same vlbiflow release)"),
                    ));
                }
                if *block_size == 0 || *block_size as usize > MAX_PAYLOAD {
                    return Err(bad(
                        "hello.block_size",
                        format!("{block_size}, must be 1..={MAX_PAYLOAD}"),
                    ));
                }
            }
            ControlMsg::Announce {
                name,
                size,
                chunk_size,
                hashes,
                ..
            } => {
                validate_name(name)?;
                if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(chunk_size) {
                    return Err(bad(
                        "announce.chunk_size",
                        format!("{chunk_size}, must be {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}"),
                    ));
                }
                let n = Self::chunk_count(*size, *chunk_size);
                if n > u32::MAX as u64 {
                    return Err(bad("announce.size", "more than 2^32 chunks"));
                }
                if !hashes.is_empty() && hashes.len() as u64 != n {
                    return Err(bad(
                        "announce.hashes",
                        format!("{} hashes for {n} chunks", hashes.len()),
                    ));
                }
            }
            ControlMsg::Feedback(f) => f.validate()?,
            ControlMsg::RateCap { bps: Some(0) } => return Err(bad("rate_cap.bps", "zero")),
            ControlMsg::Abort { reason, .. } if reason.len() > 4096 => {
                return Err(bad("abort.reason", "longer than 4096 bytes"));
            }
            _ => {}
        }
        Ok(())
    }
}

/// A file name in an announce must be a relative path without `..`, empty components or NUL.
pub fn validate_name(name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(bad(
            "announce.name",
            format!("length {}, must be 1..={MAX_NAME_LEN}", name.len()),
        ));
    }
    if name.starts_with('/') || name.contains('\0') || name.contains('\\') {
        return Err(bad(
            "announce.name",
            format!("{name:?} is not a plain relative path"),
        ));
    }
    if name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(bad(
            "announce.name",
            format!("{name:?} has an empty, '.' or '..' component"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn repr_strategy() -> impl Strategy<Value = DataRepr> {
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            0u64..u64::MAX / 2,
            0u32..=MAX_PAYLOAD as u32,
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(
                |(transfer_id, seq, file, offset, len, timestamp_us, retransmit)| DataRepr {
                    transfer_id,
                    seq,
                    file,
                    offset,
                    len,
                    timestamp_us,
                    retransmit,
                },
            )
    }

    proptest! {
        #[test]
        fn data_round_trip(r in repr_strategy(), key in any::<[u8; 32]>(), fill in any::<u8>()) {
            let mut buf = vec![fill; r.buffer_len()];
            r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
            let sub = (r.offset % 2 == 0).then_some(8192);
            seal(&key, sub, &mut buf);
            let p = DataPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(DataRepr::parse(&p).unwrap(), r);
            prop_assert!(verify(&key, sub, &buf).is_ok());
            // any single flipped bit breaks the tag
            let i = (r.seq as usize) % buf.len();
            buf[i] ^= 1 << (r.file % 8);
            prop_assert_eq!(verify(&key, sub, &buf), Err(WireError::BadTag));
        }

        #[test]
        fn data_garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = DataPacket::new_checked(&b[..]) {
                let _ = DataRepr::parse(&p);
            }
            let _ = verify(&[7; 32], Some(8192), &b);
            let _ = verify(&[7; 32], None, &b);
        }

        #[test]
        fn control_garbage_never_panics(s in ".{0,300}") {
            let _ = ControlMsg::parse_line(&s);
        }

        #[test]
        fn control_mutated_never_panics(i in 0usize..400, c in any::<char>()) {
            let m = ControlMsg::Announce { file: 3, name: "a/b.vdif".into(), size: 1 << 30, chunk_size: 1 << 24,
                hashes: vec![] };
            let mut line: Vec<char> = m.to_line().chars().collect();
            let i = i % line.len();
            line[i] = c;
            let s: String = line.into_iter().collect();
            let _ = ControlMsg::parse_line(&s);
        }

        #[test]
        fn feedback_datagram_checks_and_round_trips(highest in 100u64..1_000_000, n in 1u64..1000,
                                                    garbage in proptest::collection::vec(any::<u8>(), 0..200),
                                                    flip in 0usize..10_000) {
            let fb = Feedback { n, highest_seq: Some(highest), loss_from: 50, loss: vec![(60, 3), (99, 1)],
                recv_bytes: 12345, ..Default::default() };
            let key = [7u8; 32];
            let mut buf = Vec::new();
            let len = emit_feedback_datagram(Some(&key), 9, &fb, &mut buf).expect("fits");
            prop_assert_eq!(len, buf.len());
            prop_assert!(len <= MAX_FEEDBACK_DATAGRAM);
            prop_assert_eq!(parse_feedback_datagram(Some(&key), 9, &buf).unwrap(), fb.clone());
            // another transfer or another key
            prop_assert!(parse_feedback_datagram(Some(&key), 10, &buf).is_err());
            prop_assert_eq!(parse_feedback_datagram(Some(&[8u8; 32]), 9, &buf), Err(WireError::BadTag));
            prop_assert!(parse_feedback_datagram(None, 10, &buf).is_err());
            // any one flipped bit fails (the tag covers the header and the JSON)
            let mut bad = buf.clone();
            let bit = flip % (bad.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(parse_feedback_datagram(Some(&key), 9, &bad).is_err());
            // truncated or garbage: an error, never a panic
            for cut in [0, 1, FEEDBACK_HEADER_LEN - 1, FEEDBACK_HEADER_LEN, len - 1] {
                prop_assert!(parse_feedback_datagram(Some(&key), 9, &buf[..cut]).is_err());
            }
            prop_assert!(parse_feedback_datagram(Some(&key), 9, &garbage).is_err());
            let _ = parse_feedback_datagram(None, 9, &garbage);
        }

        #[test]
        fn feedback_round_trip(highest in 1000u64..1_000_000, starts in proptest::collection::vec(0u64..999, 0..20),
                               bytes in any::<u64>(), trend in any::<i64>()) {
            let mut starts = starts;
            starts.sort();
            starts.dedup();
            let loss: Vec<(u64, u32)> = starts.iter().map(|&s| (s, 1)).collect();
            let m = ControlMsg::Feedback(Feedback { highest_seq: Some(highest), loss, recv_bytes: bytes,
                owd_trend_us: trend, ..Default::default() });
            prop_assert_eq!(ControlMsg::parse_line(&m.to_line()).unwrap(), m);
        }
    }

    #[test]
    fn encrypted_round_trip_and_tamper() {
        let key = derive_data_aead_key(b"secret", 5);
        let r = DataRepr {
            transfer_id: 5,
            seq: 77,
            file: 1,
            offset: 8192,
            len: 100,
            timestamp_us: 3,
            retransmit: true,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
        for (i, b) in buf[HEADER_LEN..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let plain = buf.clone();
        seal_encrypted(&key, &mut buf);
        assert_ne!(&buf[HEADER_LEN..], &plain[HEADER_LEN..], "payload encrypted");
        let p = DataPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(DataRepr::parse(&p).unwrap(), r);
        // any flipped bit (header or payload), a wrong key, or a plain datagram is refused, bytes unchanged
        for i in [0usize, 3, 9, 30, 50, HEADER_LEN + 5] {
            let mut t = buf.clone();
            t[i] ^= 4;
            let before = t.clone();
            assert!(open_encrypted(&key, &mut t).is_err(), "bit in byte {i}");
            assert_eq!(t, before);
        }
        assert!(open_encrypted(&derive_data_aead_key(b"other", 5), &mut buf.clone()).is_err());
        assert!(open_encrypted(&key, &mut plain.clone()).is_err());
        open_encrypted(&key, &mut buf).unwrap();
        assert_eq!(&buf[HEADER_LEN..], &plain[HEADER_LEN..]);
    }

    #[test]
    fn control_round_trip_every_kind() {
        let h = ChunkHash::of(b"abc");
        let msgs = vec![
            ControlMsg::Hello {
                version: VERSION,
                transfer_id: 9,
                block_size: 8192,
            },
            ControlMsg::Auth {
                scheme: "none".into(),
                payload: String::new(),
            },
            ControlMsg::Announce {
                file: 0,
                name: "exp/st/scan1.vdif".into(),
                size: 100_000,
                chunk_size: 65536,
                hashes: vec![h, h],
            },
            ControlMsg::ChunkHash {
                file: 1,
                chunk: 2,
                hash: h,
            },
            ControlMsg::Feedback(Feedback {
                highest_seq: Some(10),
                loss: vec![(2, 3), (7, 1)],
                ..Default::default()
            }),
            ControlMsg::ChunkVerified { file: 1, chunk: 0 },
            ControlMsg::ChunkMismatch { file: 1, chunk: 0 },
            ControlMsg::Ping,
            ControlMsg::RateCap {
                bps: Some(500_000_000),
            },
            ControlMsg::RateCap { bps: None },
            ControlMsg::Closed { files: 2, bytes: 5 },
            ControlMsg::Done { files: 2, bytes: 5 },
            ControlMsg::Abort {
                reason: "disk full".into(),
                kind: AbortKind::Failed,
            },
            ControlMsg::Abort {
                reason: "exists".into(),
                kind: AbortKind::Refused,
            },
            ControlMsg::Abort {
                reason: "in use".into(),
                kind: AbortKind::Busy,
            },
        ];
        for m in msgs {
            let line = m.to_line();
            assert!(!line.contains('\n'));
            assert_eq!(ControlMsg::parse_line(&line).unwrap(), m, "{line}");
        }
    }

    #[test]
    fn feedback_too_long_for_a_datagram_is_refused() {
        let fb = Feedback {
            n: 1,
            highest_seq: Some(1_000_000),
            loss: (0..200).map(|i| (i * 1000, 1)).collect(),
            ..Default::default()
        };
        assert!(emit_feedback_datagram(None, 1, &fb, &mut Vec::new()).is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let e = |s: &str| ControlMsg::parse_line(s).unwrap_err().to_string();
        assert!(
            e(r#"{"type":"announce","file":0,"name":"../x","size":1,"chunk_size":65536,"hashes":[]}"#)
                .contains("announce.name")
        );
        assert!(
            e(r#"{"type":"announce","file":0,"name":"x","size":1,"chunk_size":1,"hashes":[]}"#)
                .contains("announce.chunk_size")
        );
        assert!(
            e(r#"{"type":"announce","file":0,"name":"x","size":1,"chunk_size":65536}"#).contains("hashes")
        );
        assert!(e(r#"{"type":"chunk_hash","file":0,"chunk":0,"hash":"zz"}"#).contains("hash"));
        assert!(e(r#"{"type":"feedback","n":1,"highest_seq":5,"loss_from":0,"loss":[[4,3]],"recv_bytes":0,"recv_datagrams":0,"recv_time_us":0,"rate_bps":0,"echo_ts_us":0,"echo_delay_us":0,"queue_delay_us":0,"owd_trend_us":0,"chunks_verified":0}"#).contains("feedback.loss"));
        assert!(e(r#"{"type":"warp"}"#).contains("warp"));
        let mut buf = [0u8; HEADER_LEN + 4];
        DataRepr {
            transfer_id: 1,
            seq: 1,
            file: 0,
            offset: 0,
            len: 4,
            timestamp_us: 0,
            retransmit: false,
        }
        .emit(&mut DataPacket::new_unchecked(&mut buf[..]));
        assert!(DataPacket::new_checked(&buf[..HEADER_LEN + 3])
            .unwrap_err()
            .to_string()
            .contains("payload length"));
        buf[0] = 0;
        assert!(DataPacket::new_checked(&buf[..])
            .unwrap_err()
            .to_string()
            .contains("magic"));
        assert!(DataPacket::new_checked(&buf[..10])
            .unwrap_err()
            .to_string()
            .contains("truncated"));
    }
}
