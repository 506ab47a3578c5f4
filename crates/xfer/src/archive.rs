//! The archive of transfers: one SQLite file, one row per transfer (who, what, where, how much, how long,
//! verified or why not), written by the daemon and by the client verbs (push, pull, copy) and listed by
//! `vlbiflow xfer history`.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

/// One transfer as archived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Row id (0 before it is stored).
    pub id: i64,
    /// UTC start and end, RFC 3339.
    pub started: String,
    pub ended: String,
    /// "send" or "receive", from the archiving side's point of view.
    pub role: String,
    /// The other end.
    pub peer: String,
    /// Destination (`ROOT/dir`) or source description.
    pub path: String,
    /// Transfer id, hex.
    pub transfer_id: String,
    pub files: u64,
    /// Bytes of all files.
    pub bytes: u64,
    /// Bytes found already at the destination and re-verified.
    pub bytes_resumed: u64,
    /// Payload bytes that crossed the network (retransmissions included).
    pub bytes_moved: u64,
    pub seconds: f64,
    /// Verified and committed?
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// Files with their BLAKE3 (JSON), counters.
    pub detail: serde_json::Value,
}

/// An open archive.
pub struct Archive {
    conn: Connection,
    path: PathBuf,
}

fn err(path: &Path, what: &str, e: impl std::fmt::Display) -> String {
    format!("archive {}: {what}: {e}", path.display())
}

impl Archive {
    /// Opens (creating) the archive file.
    pub fn open(path: &Path) -> Result<Archive, String> {
        if let Some(p) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(p).map_err(|e| err(path, "creating its directory", e))?;
        }
        let conn = Connection::open(path).map_err(|e| err(path, "open", e))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| err(path, "busy timeout", e))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS transfers (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                started TEXT NOT NULL, ended TEXT NOT NULL, role TEXT NOT NULL, peer TEXT NOT NULL,
                path TEXT NOT NULL, transfer_id TEXT NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL,
                bytes_resumed INTEGER NOT NULL, bytes_moved INTEGER NOT NULL, seconds REAL NOT NULL,
                ok INTEGER NOT NULL, error TEXT, detail TEXT NOT NULL);",
        )
        .map_err(|e| err(path, "creating the table", e))?;
        Ok(Archive {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Stores a transfer; returns its row id.
    pub fn insert(&self, e: &Entry) -> Result<i64, String> {
        self.conn
            .execute(
                "INSERT INTO transfers (started, ended, role, peer, path, transfer_id, files, bytes, bytes_resumed,
                 bytes_moved, seconds, ok, error, detail) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
                params![
                    e.started,
                    e.ended,
                    e.role,
                    e.peer,
                    e.path,
                    e.transfer_id,
                    e.files as i64,
                    e.bytes as i64,
                    e.bytes_resumed as i64,
                    e.bytes_moved as i64,
                    e.seconds,
                    e.ok,
                    e.error,
                    e.detail.to_string()
                ],
            )
            .map_err(|x| err(&self.path, "insert", x))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest `limit` transfers (0: all), oldest first.
    pub fn list(&self, limit: usize) -> Result<Vec<Entry>, String> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, started, ended, role, peer, path, transfer_id, files, bytes, bytes_resumed, bytes_moved,
                 seconds, ok, error, detail FROM transfers ORDER BY id DESC LIMIT ?1",
            )
            .map_err(|e| err(&self.path, "query", e))?;
        let rows = st
            // SQLite reads a negative LIMIT as none
            .query_map(params![if limit == 0 { -1 } else { limit as i64 }], |r| {
                let detail: String = r.get(14)?;
                Ok(Entry {
                    id: r.get(0)?,
                    started: r.get(1)?,
                    ended: r.get(2)?,
                    role: r.get(3)?,
                    peer: r.get(4)?,
                    path: r.get(5)?,
                    transfer_id: r.get(6)?,
                    files: r.get::<_, i64>(7)? as u64,
                    bytes: r.get::<_, i64>(8)? as u64,
                    bytes_resumed: r.get::<_, i64>(9)? as u64,
                    bytes_moved: r.get::<_, i64>(10)? as u64,
                    seconds: r.get(11)?,
                    ok: r.get(12)?,
                    error: r.get(13)?,
                    detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
                })
            })
            .map_err(|e| err(&self.path, "query", e))?;
        let mut v: Vec<Entry> = rows
            .collect::<Result<_, _>>()
            .map_err(|e| err(&self.path, "row", e))?;
        v.reverse();
        Ok(v)
    }
}

/// Stores `e` in the archive at `archive` (created when missing); a failure to archive is a warning on
/// standard error, never an error of the transfer.
fn store(archive: &Path, e: &Entry) {
    if let Err(x) = Archive::open(archive).and_then(|a| a.insert(e)) {
        eprintln!("vlbiflow: warning: {x}");
    }
}

/// What a client run asked for, as archived in `path`: its sources (`ROOT/path` on the daemon), or the
/// scan it named.
pub fn describe_sources(sources: &[String], scan: Option<&crate::session::ScanRequest>) -> String {
    match scan {
        Some(s) => format!("scan {} on {}", s.name, s.disks.join(" ")),
        None => sources.join(" "),
    }
}

/// A client command's run, to be archived when it ends: where the archive is, the daemon it talked to,
/// when it started and its progress counters.
pub struct ClientRun<'a> {
    pub archive: &'a Path,
    pub server: &'a str,
    pub started: String,
    pub progress: &'a crate::progress::Progress,
}

/// Archives a push (`push`, `push --follow`; or a failed one) of `files` files of `total` bytes: role
/// "send", the daemon as peer, the destination as path.
pub fn record_send(
    run: ClientRun<'_>,
    dest: &str,
    files: u64,
    total: u64,
    r: Result<&crate::send::SendOutcome, &crate::error::XferError>,
) {
    let ClientRun {
        archive,
        server,
        started,
        progress,
    } = run;
    let mut e = client_entry(
        "send",
        server,
        dest.to_string(),
        started,
        r,
        |o| o.seconds,
        |o| {
            serde_json::json!({"files": o.committed, "retransmits": o.stats.retransmits,
            "datagrams": o.stats.datagrams, "receiver": o.receiver})
        },
    );
    e.files = files;
    e.bytes = total;
    e.bytes_resumed = crate::progress::Progress::get(&progress.bytes_resumed);
    e.bytes_moved = crate::progress::Progress::get(&progress.bytes_moved);
    store(archive, &e);
}

/// Archives a pull (or a failed one): role "receive", the daemon as peer, `SOURCES -> LOCAL_DIR` as
/// path.
pub fn record_pull(
    run: ClientRun<'_>,
    sources: &str,
    into: &Path,
    r: Result<&crate::recv::RecvOutcome, &crate::error::XferError>,
) {
    let ClientRun {
        archive,
        server,
        started,
        progress,
    } = run;
    let path = format!("{sources} -> {}", into.display());
    let mut e = client_entry(
        "receive",
        server,
        path,
        started,
        r,
        |o| o.seconds,
        |o| {
            serde_json::json!({"files": o.committed, "receiver": o.report(),
            "bytes_written_direct": o.bytes_written_direct, "bytes_read_back": o.bytes_read_back})
        },
    );
    let get = crate::progress::Progress::get;
    e.files = r.map_or_else(|_| get(&progress.files_total), |o| o.committed.len() as u64);
    e.bytes = r.map_or_else(
        |_| get(&progress.bytes_total),
        |o| o.committed.iter().map(|c| c.size).sum(),
    );
    e.bytes_resumed = r.map_or_else(|_| get(&progress.bytes_resumed), |o| o.bytes_resumed);
    e.bytes_moved = get(&progress.bytes_moved);
    store(archive, &e);
}

/// Archives a copy started from this host (one daemon pushing to another; or a failed one): role
/// "copy", the source daemon as peer, `SOURCES -> DEST_DAEMON/ROOT/DIR` as path. The source daemon
/// archives its side of it as a "relay".
pub fn record_copy(
    run: ClientRun<'_>,
    sources: &str,
    (to, dest): (&str, &str),
    r: Result<&crate::client::RelayOutcome, &crate::error::XferError>,
) {
    let ClientRun {
        archive,
        server,
        started,
        progress,
    } = run;
    let path = format!("{sources} -> {to}/{dest}");
    let mut e = client_entry(
        "copy",
        server,
        path,
        started,
        r,
        |o| o.seconds,
        |o| serde_json::json!({"files": o.files, "attempts": o.attempts, "receiver": o.receiver}),
    );
    let get = crate::progress::Progress::get;
    e.files = r.map_or(0, |o| o.files.len() as u64);
    e.bytes = r.map_or_else(
        |_| get(&progress.bytes_total),
        |o| o.files.iter().map(|c| c.size).sum(),
    );
    e.bytes_moved = r.map_or_else(|_| get(&progress.bytes_moved), |o| o.bytes_moved);
    store(archive, &e);
}

/// The entry of a client run that ended with `r`, as the roles share it: what it was, when, how it
/// ended, its seconds and details on success; the counts are the caller's to fill in.
fn client_entry<T>(
    role: &str,
    peer: &str,
    path: String,
    started: String,
    r: Result<&T, &crate::error::XferError>,
    seconds: impl FnOnce(&T) -> f64,
    detail: impl FnOnce(&T) -> serde_json::Value,
) -> Entry {
    Entry {
        id: 0,
        started,
        ended: crate::utc_now(),
        role: role.into(),
        peer: peer.to_string(),
        path,
        transfer_id: String::new(),
        files: 0,
        bytes: 0,
        bytes_resumed: 0,
        bytes_moved: 0,
        seconds: r.map_or(0.0, seconds),
        ok: r.is_ok(),
        error: r.err().map(|e| e.to_string()),
        detail: r.map_or(serde_json::Value::Null, detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_lists_oldest_first() {
        let d = tempfile::tempdir().unwrap();
        let a = Archive::open(&d.path().join("x/xfer.sqlite")).unwrap();
        for i in 0..3 {
            a.insert(&Entry {
                id: 0,
                started: format!("2026-01-0{}T00:00:00Z", i + 1),
                ended: "e".into(),
                role: "send".into(),
                peer: "p".into(),
                path: "data/x".into(),
                transfer_id: "00000001".into(),
                files: 1,
                bytes: 10,
                bytes_resumed: 0,
                bytes_moved: 10,
                seconds: 1.5,
                ok: i != 1,
                error: (i == 1).then(|| "peer died".into()),
                detail: serde_json::json!({"n": i}),
            })
            .unwrap();
        }
        let l = a.list(2).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].started, "2026-01-02T00:00:00Z");
        assert_eq!(l[0].error.as_deref(), Some("peer died"));
        assert_eq!(l[1].detail["n"], 2);
        assert_eq!(a.list(0).unwrap().len(), 3, "0 lists them all");
    }
}
