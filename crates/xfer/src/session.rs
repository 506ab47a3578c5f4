//! Session messages: what a client asks of a daemon and what comes back, around the protocol's own control
//! messages (`vlbiflow_xfer_proto::ControlMsg`). One JSON object per line, tagged by `"op"` (protocol
//! messages are tagged by `"type"`, so the two never collide on one connection).
//!
//! A push: the client sends `push` (destination, files, options); the daemon answers `accept` (transfer
//! id, data port, what it already holds of each file) or `refuse` (one sentence); when it holds data it
//! streams `have` (the hash of each complete chunk already on its disk, re-read at disk speed) and
//! `have_done`; then the protocol runs; at the end the receiver reports `committed` (each file synced and
//! renamed, with its BLAKE3 hash) and the client exits 0 only after that line.

use serde::{Deserialize, Serialize};
use vlbiflow_xfer_proto::ChunkHash;

/// One file of a request: its relative name at the destination and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub name: String,
    pub size: u64,
}

/// Transfer options both ends must agree on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Chunk size (a power of two, 4 KiB .. 1 GiB).
    pub chunk_size: u64,
    /// Payload bytes per datagram.
    pub block_size: u32,
    /// Replace existing files.
    pub overwrite: bool,
    /// Encrypt data datagrams (ChaCha20-Poly1305) instead of only authenticating them.
    pub encrypt: bool,
    /// Rate ceiling asked for, bits/s on the wire (`None`: automatic).
    pub rate_bps: Option<f64>,
    /// A round of `push --follow`: verify and sync every chunk but keep the files as `.part` (no rename, no
    /// manifest); the file is still growing at the source and a later request completes it.
    #[serde(default)]
    pub partial: bool,
    /// The receiver reads every chunk back from its disk after writing it (`O_DIRECT` where it can) and
    /// compares its hash with the verified one before the file is committed. Left out of the request when
    /// false, so a daemon from before it understands the rest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify_written: bool,
}

/// A scan by name on a daemon's disks (`pull --scan`, `copy --scan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanRequest {
    /// Scan name (the file stem on every disk).
    pub name: String,
    /// The disk directories as `ROOT/relative/dir`, glob patterns allowed below the root.
    pub disks: Vec<String>,
    /// Destination layout: `gather`, `same` or `flexbuff`.
    pub layout: String,
}

/// A scan as a daemon lists it (`xfer ls`, `xfer collect`): what a pull of it in the gather layout would
/// fetch now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanEntry {
    /// Scan name.
    pub name: String,
    /// Bytes of the gathered stream(s) (block payloads only): for a scan still recording, of the complete
    /// blocks with consecutive numbers on disk now.
    pub bytes: u64,
    /// Whether the recorder marked it complete (`<scan>.vlbiflow.json`); `None` for a scan of another
    /// recorder (no metadata), which is taken as it is.
    pub complete: Option<bool>,
    /// The gathered files (`NAME.vdif`, or `NAME.LABEL.vdif` per stream) and their sizes.
    pub streams: Vec<FileSpec>,
    /// The daemon could not lay the scan out (damaged, outside the roots): why. `bytes` and `streams`
    /// are then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a receiver already holds of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Have {
    /// File index in the request.
    pub file: u32,
    /// Complete chunks on disk (from the start of the file) that it will hash and report.
    pub chunks: u32,
    /// The data is the final file itself (complete from an earlier run), not a `.part`.
    pub complete: bool,
}

/// A file as committed by the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Committed {
    pub name: String,
    pub size: u64,
    /// BLAKE3 of the whole file, hex (equal to `b3sum` of it).
    pub blake3: String,
    /// Chunks found already on disk and verified (not moved).
    pub resumed_chunks: u64,
}

/// What the receiver counted over a transfer, reported with `committed` (protocol version 4) so that the
/// sending side's summary has the receiver's own view: what arrived, what it had to ask for again, and
/// everything it dropped, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverReport {
    /// Data datagrams whose payload was written.
    pub datagrams: u64,
    /// Datagrams for blocks already held (late, duplicated or redundant retransmissions).
    pub duplicates: u64,
    /// Sequence numbers the receiver found missing and reported lost, each counted once, when its gap was
    /// seen (one that then arrives late after all counts here and as written or duplicate).
    pub reported_lost: u64,
    /// Datagrams dropped for a wrong authentication tag (forged, or corrupted on the way).
    pub bad_tag: u64,
    /// Datagrams dropped for a malformed header or a range outside the announced file.
    pub malformed: u64,
    /// Datagrams of another transfer, or from before `hello`.
    pub wrong_transfer: u64,
    /// Datagrams for a file not announced.
    pub unknown_file: u64,
    /// Chunks whose hash did not match the sender's (sent again).
    pub chunk_mismatches: u64,
    /// Bytes written past the page cache (`O_DIRECT`).
    pub bytes_written_direct: u64,
    /// Bytes read back from the disk after writing and compared with the verified hashes.
    pub bytes_read_back: u64,
}

impl ReceiverReport {
    /// The report from the protocol's counters and the disk counters of the receiving side.
    pub fn new(
        st: &vlbiflow_xfer_proto::ReceiverStats,
        bytes_written_direct: u64,
        bytes_read_back: u64,
    ) -> ReceiverReport {
        ReceiverReport {
            datagrams: st.delivered,
            duplicates: st.duplicates,
            reported_lost: st.reported_lost,
            bad_tag: st.bad_tag,
            malformed: st.malformed,
            wrong_transfer: st.wrong_transfer,
            unknown_file: st.unknown_file,
            chunk_mismatches: st.mismatches,
            bytes_written_direct,
            bytes_read_back,
        }
    }

    /// Datagrams dropped, all causes.
    pub fn dropped(&self) -> u64 {
        // saturating: the numbers come from the peer
        self.bad_tag
            .saturating_add(self.malformed)
            .saturating_add(self.wrong_transfer)
            .saturating_add(self.unknown_file)
    }
}

/// A session message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Session {
    /// Client -> daemon: receive these files into `dest` (`ROOT/relative/dir`).
    Push {
        dest: String,
        files: Vec<FileSpec>,
        options: Options,
    },
    /// Client -> daemon: send these sources (`ROOT/relative/path`, files or directories) to the client's
    /// UDP port `data_port`.
    Pull {
        sources: Vec<String>,
        options: Options,
        data_port: u16,
        /// Instead of `sources`: a scan on the daemon's disks, read in place.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scan: Option<ScanRequest>,
    },
    /// Client -> daemon: push these sources of yours to the daemon at `peer` into its `dest`, retrying
    /// failed attempts up to `retries` times with exponential backoff (each retry resumes).
    Relay {
        peer: String,
        sources: Vec<String>,
        dest: String,
        options: Options,
        retries: u32,
        /// Instead of `sources`: a scan on the daemon's disks, read in place.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scan: Option<ScanRequest>,
    },
    /// Client -> daemon: list the scans on `disks` (`ROOT/relative/dir`, globs allowed below the root)
    /// whose names match `pattern` (`*` and `?` wildcards; every scan without one).
    Ls {
        disks: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pattern: Option<String>,
    },
    /// Daemon -> client: the answer to `ls`, sorted by name.
    Scans { scans: Vec<ScanEntry> },
    /// Daemon -> client: request accepted.
    Accept {
        transfer_id: u32,
        data_port: u16,
        have: Vec<Have>,
        /// Pull: the files that will come (the client is the receiver).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<FileSpec>,
        /// The daemon's rate ceiling for this transfer, bits/s on the wire.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_cap_bps: Option<f64>,
    },
    /// Daemon -> client: request refused; nothing was written.
    Refuse {
        error: String,
        /// Not now rather than not at all: the daemon is at its limit of transfers, or another transfer
        /// is writing one of the files.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        busy: bool,
    },
    /// Client -> daemon (pull): what the client already holds of the files in the accept; `have` lines
    /// follow as for a push.
    Ready { have: Vec<Have> },
    /// Receiver -> sender: the hash of a complete chunk already on the receiver's disk.
    Have { file: u32, chunk: u32, hash: ChunkHash },
    /// Receiver -> sender: every `have` has been sent.
    HaveDone,
    /// Receiver -> sender: every file is synced under its final name; with the receiver's counters.
    Committed {
        files: Vec<Committed>,
        receiver: ReceiverReport,
    },
    /// Daemon -> client of a relay: progress of the daemon-to-daemon transfer.
    Progress {
        bytes_total: u64,
        bytes_verified: u64,
        bytes_sent: u64,
        retransmits: u64,
        rate_bps: f64,
    },
    /// Daemon -> client of a relay: an attempt failed and will be retried.
    Retrying {
        attempt: u32,
        error: String,
        wait_s: f64,
    },
    /// Daemon -> client of a relay: the result.
    Result {
        ok: bool,
        error: Option<String>,
        files: Vec<Committed>,
        bytes_moved: u64,
        seconds: f64,
        /// The receiving daemon's counters (none when the relay failed, and then left out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receiver: Option<ReceiverReport>,
        /// When it failed: the exit code the failure has (`XferError::exit_code`: 1 failed, 3 refused,
        /// 4 busy).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<u8>,
    },
}

impl Session {
    /// One JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("session messages serialise")
    }
    /// Parses a session line.
    pub fn parse(line: &str) -> Result<Session, String> {
        serde_json::from_str(line).map_err(|e| format!("session message: {e}"))
    }
    /// Whether a line is a session message (rather than a protocol control message).
    pub fn is_session_line(line: &str) -> bool {
        line.starts_with("{\"op\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tag_first() {
        let m = Session::Accept {
            transfer_id: 5,
            data_port: 4000,
            have: vec![Have {
                file: 0,
                chunks: 3,
                complete: false,
            }],
            files: vec![],
            rate_cap_bps: None,
        };
        let l = m.to_line();
        assert!(Session::is_session_line(&l), "{l}");
        assert_eq!(Session::parse(&l).unwrap(), m);
        let p = vlbiflow_xfer_proto::ControlMsg::Ping.to_line();
        assert!(!Session::is_session_line(&p));
        assert!(Session::parse(r#"{"op":"push","dest":"a","files":[],"options":{}}"#).is_err());
    }

    #[test]
    fn the_commit_report_carries_the_receivers_counts() {
        let st = vlbiflow_xfer_proto::ReceiverStats {
            delivered: 10,
            duplicates: 1,
            malformed: 2,
            bad_tag: 3,
            wrong_transfer: 4,
            unknown_file: 5,
            reported_lost: 6,
            mismatches: 7,
            ..Default::default()
        };
        let r = ReceiverReport::new(&st, 8, 9);
        assert_eq!(r.dropped(), 2 + 3 + 4 + 5);
        let m = Session::Committed {
            files: vec![],
            receiver: r,
        };
        let l = m.to_line();
        assert_eq!(Session::parse(&l).unwrap(), m);
        // a commit report of version 3 (no counters) is not taken for one of version 4
        assert!(Session::parse(r#"{"op":"committed","files":[]}"#).is_err());
    }
}
