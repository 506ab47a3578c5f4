//! What a collect has brought in, in an SQLite archive under the destination: one row per station and scan
//! with its state, bytes, the BLAKE3 of each file once verified, and the last error with its time. A
//! restarted collect reads it first: a scan verified before, whose files are still there with their
//! sizes, is not pulled again.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

/// One scan's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanRow {
    pub station: String,
    pub scan: String,
    /// `verified`, or the last state it was in (`pending`, `pulling`, `following`, `failed`).
    pub state: String,
    pub bytes: u64,
    /// The files as `NAME SIZE BLAKE3` lines, once verified.
    pub files: String,
    pub error: Option<String>,
    pub updated: String,
}

/// The archive.
pub struct State {
    db: Connection,
}

impl State {
    /// Opens (creating) the archive at `path`, its directory included.
    pub fn open(path: &Path) -> Result<State, String> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let db = Connection::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE IF NOT EXISTS scans (
                station TEXT NOT NULL, scan TEXT NOT NULL, state TEXT NOT NULL,
                bytes INTEGER NOT NULL, files TEXT NOT NULL, error TEXT, updated TEXT NOT NULL,
                PRIMARY KEY (station, scan));",
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(State { db })
    }

    /// Sets a scan's state (and error), keeping its files.
    pub fn set(
        &self,
        station: &str,
        scan: &str,
        state: &str,
        bytes: u64,
        error: Option<&str>,
    ) -> Result<(), String> {
        self.db
            .execute(
                "INSERT INTO scans (station, scan, state, bytes, files, error, updated)
                 VALUES (?1, ?2, ?3, ?4, '', ?5, ?6)
                 ON CONFLICT (station, scan) DO UPDATE SET state = ?3, bytes = ?4, error = ?5, updated = ?6",
                params![
                    station,
                    scan,
                    state,
                    bytes as i64,
                    error,
                    vlbiflow_xfer::utc_now()
                ],
            )
            .map(|_| ())
            .map_err(|e| format!("collect state: {e}"))
    }

    /// Records a scan verified, with its files.
    pub fn verified(&self, station: &str, scan: &str, bytes: u64, files: &str) -> Result<(), String> {
        self.db
            .execute(
                "INSERT INTO scans (station, scan, state, bytes, files, error, updated)
                 VALUES (?1, ?2, 'verified', ?3, ?4, NULL, ?5)
                 ON CONFLICT (station, scan) DO UPDATE SET state = 'verified', bytes = ?3, files = ?4,
                 error = NULL, updated = ?5",
                params![station, scan, bytes as i64, files, vlbiflow_xfer::utc_now()],
            )
            .map(|_| ())
            .map_err(|e| format!("collect state: {e}"))
    }

    /// A scan's row, if any.
    pub fn get(&self, station: &str, scan: &str) -> Result<Option<ScanRow>, String> {
        self.db
            .query_row(
                "SELECT station, scan, state, bytes, files, error, updated FROM scans WHERE station = ?1 AND scan = ?2",
                params![station, scan],
                |r| {
                    Ok(ScanRow {
                        station: r.get(0)?,
                        scan: r.get(1)?,
                        state: r.get(2)?,
                        bytes: r.get::<_, i64>(3)? as u64,
                        files: r.get(4)?,
                        error: r.get(5)?,
                        updated: r.get(6)?,
                    })
                },
            )
            .optional()
            .map_err(|e| format!("collect state: {e}"))
    }

    /// Whether the scan was verified before and its files are still in `dir` with their sizes.
    pub fn still_verified(&self, station: &str, scan: &str, dir: &Path) -> Result<bool, String> {
        let Some(row) = self.get(station, scan)? else {
            return Ok(false);
        };
        if row.state != "verified" || row.files.is_empty() {
            return Ok(false);
        }
        Ok(row.files.lines().all(|l| {
            let mut w = l.split(' ');
            match (w.next(), w.next().and_then(|s| s.parse::<u64>().ok())) {
                (Some(name), Some(size)) => std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() == size),
                _ => false,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verified_scan_counts_while_its_files_are_there() {
        let d = tempfile::tempdir().unwrap();
        let s = State::open(&d.path().join("x/state.sqlite")).unwrap();
        s.set("ef", "a", "pulling", 10, None).unwrap();
        assert!(!s.still_verified("ef", "a", d.path()).unwrap());
        std::fs::write(d.path().join("a.vdif"), [0u8; 10]).unwrap();
        s.verified("ef", "a", 10, "a.vdif 10 abcd").unwrap();
        assert!(s.still_verified("ef", "a", d.path()).unwrap());
        assert_eq!(s.get("ef", "a").unwrap().unwrap().state, "verified");
        std::fs::write(d.path().join("a.vdif"), [0u8; 9]).unwrap();
        assert!(
            !s.still_verified("ef", "a", d.path()).unwrap(),
            "a file of another size"
        );
        drop(s);
        let s = State::open(&d.path().join("x/state.sqlite")).unwrap();
        assert_eq!(
            s.get("ef", "a").unwrap().unwrap().files,
            "a.vdif 10 abcd",
            "kept across opens"
        );
        s.set("ef", "a", "failed", 10, Some("gone")).unwrap();
        assert_eq!(s.get("ef", "a").unwrap().unwrap().error.as_deref(), Some("gone"));
    }
}
