//! The local archive of results: one SQLite file, one row per test (host pair, time, parameters,
//! headline figure, full result as JSON), listed and plotted over time by `vlbiflow net history`.
//!
//! The record types are always here; the SQLite file (`Archive`, `ArchiveStore`) needs the
//! `archive` feature (on by default).

#[cfg(feature = "archive")]
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
#[cfg(feature = "archive")]
use std::path::Path;
use std::path::PathBuf;

/// An archive failure naming the file.
#[derive(Debug, thiserror::Error)]
#[error("archive {path}: {what}: {source}")]
pub struct ArchiveError {
    /// The SQLite file.
    pub path: PathBuf,
    /// The step.
    pub what: &'static str,
    /// Cause.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// One result to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// UTC time of the test, RFC 3339.
    pub time: String,
    /// Test kind: "bw", "bw-zero-loss", "lat", "tcp".
    pub kind: String,
    /// Local end (host name or address).
    pub local: String,
    /// Remote end (responder address).
    pub remote: String,
    /// Name of the headline figure, e.g. "recv_user_rate_mbps".
    pub metric: String,
    /// The headline figure.
    pub value: f64,
    /// Parameters as JSON.
    pub params: serde_json::Value,
    /// The full result as JSON.
    pub result: serde_json::Value,
}

/// A stored record with its row id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// Row id.
    pub id: i64,
    /// The record.
    #[serde(flatten)]
    pub record: Record,
}

/// Which records to list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only remotes containing this text.
    pub remote: Option<String>,
    /// Only at or after this RFC 3339 time.
    pub since: Option<String>,
    /// At most this many, newest first before re-sorting oldest first.
    pub limit: Option<usize>,
}

/// An open archive.
#[cfg(feature = "archive")]
pub struct Archive {
    conn: Connection,
    path: PathBuf,
}

/// `$XDG_DATA_HOME/vlbiflow/net.sqlite`, else `~/.local/share/vlbiflow/net.sqlite`.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("vlbiflow").join("net.sqlite")
}

/// This machine's name, for the `local` column.
pub fn local_host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(feature = "archive")]
impl Archive {
    /// `$XDG_DATA_HOME/vlbiflow/net.sqlite`, else `~/.local/share/vlbiflow/net.sqlite`.
    pub fn default_path() -> PathBuf {
        default_path()
    }

    /// Opens (creating the file, its directory and the table when missing).
    pub fn open(path: &Path) -> Result<Archive, ArchiveError> {
        let err = |what: &'static str| {
            let path = path.to_path_buf();
            move |e: Box<dyn std::error::Error + Send + Sync>| ArchiveError {
                path,
                what,
                source: e,
            }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err("create directory")(Box::new(e)))?;
        }
        let conn = Connection::open(path).map_err(|e| err("open")(Box::new(e)))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| err("set busy timeout")(Box::new(e)))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS results (
                id INTEGER PRIMARY KEY,
                time TEXT NOT NULL,
                kind TEXT NOT NULL,
                local TEXT NOT NULL,
                remote TEXT NOT NULL,
                metric TEXT NOT NULL,
                value REAL NOT NULL,
                params TEXT NOT NULL,
                result TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS results_time ON results(time);",
        )
        .map_err(|e| err("create table (is this a vlbiflow archive?)")(Box::new(e)))?;
        Ok(Archive {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a record; returns its id.
    pub fn insert(&self, r: &Record) -> Result<i64, ArchiveError> {
        self.conn
            .execute(
                "INSERT INTO results (time, kind, local, remote, metric, value, params, result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    r.time,
                    r.kind,
                    r.local,
                    r.remote,
                    r.metric,
                    if r.value.is_finite() { r.value } else { 0.0 },
                    r.params.to_string(),
                    r.result.to_string()
                ],
            )
            .map_err(|e| self.error("insert", e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records matching `f`, oldest first.
    pub fn list(&self, f: &Filter) -> Result<Vec<Stored>, ArchiveError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, time, kind, local, remote, metric, value, params, result FROM results
                 WHERE (?1 IS NULL OR kind = ?1)
                   AND (?2 IS NULL OR instr(remote, ?2) > 0)
                   AND (?3 IS NULL OR time >= ?3)
                 ORDER BY time DESC, id DESC LIMIT ?4",
            )
            .map_err(|e| self.error("query", e))?;
        let limit = f.limit.map(|l| l as i64).unwrap_or(-1);
        let rows = stmt
            .query_map(params![f.kind, f.remote, f.since, limit], |row| {
                let params: String = row.get(7)?;
                let result: String = row.get(8)?;
                Ok(Stored {
                    id: row.get(0)?,
                    record: Record {
                        time: row.get(1)?,
                        kind: row.get(2)?,
                        local: row.get(3)?,
                        remote: row.get(4)?,
                        metric: row.get(5)?,
                        value: row.get(6)?,
                        params: serde_json::from_str(&params).unwrap_or(serde_json::Value::Null),
                        result: serde_json::from_str(&result).unwrap_or(serde_json::Value::Null),
                    },
                })
            })
            .map_err(|e| self.error("query", e))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(|e| self.error("read row", e))?);
        }
        out.reverse();
        Ok(out)
    }

    fn error(&self, what: &'static str, e: rusqlite::Error) -> ArchiveError {
        ArchiveError {
            path: self.path.clone(),
            what,
            source: Box::new(e),
        }
    }
}

/// Stores the results of a series between one host pair, time-stamped as they are stored.
#[cfg(feature = "archive")]
pub struct ArchiveStore {
    /// The archive.
    pub archive: Archive,
    /// Local end.
    pub local: String,
    /// Remote end.
    pub remote: String,
}

#[cfg(feature = "archive")]
impl ArchiveStore {
    /// Opens the archive at `path` (default: [`default_path`]) for results against `remote` from
    /// this machine.
    pub fn open(path: Option<&Path>, remote: impl ToString) -> Result<ArchiveStore, ArchiveError> {
        Ok(ArchiveStore {
            archive: Archive::open(&path.map(Path::to_path_buf).unwrap_or_else(default_path))?,
            local: local_host_name(),
            remote: remote.to_string(),
        })
    }
}

#[cfg(feature = "archive")]
impl crate::sweep::Store for ArchiveStore {
    fn store(
        &self,
        kind: &str,
        metric: &str,
        value: f64,
        params: serde_json::Value,
        result: serde_json::Value,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.archive.insert(&Record {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind: kind.into(),
            local: self.local.clone(),
            remote: self.remote.clone(),
            metric: metric.into(),
            value,
            params,
            result,
        })?;
        Ok(())
    }
}

#[cfg(all(test, feature = "archive"))]
mod tests {
    use super::*;

    fn rec(time: &str, kind: &str, value: f64) -> Record {
        Record {
            time: time.into(),
            kind: kind.into(),
            local: "a".into(),
            remote: "10.0.0.2:14233".into(),
            metric: "m".into(),
            value,
            params: serde_json::json!({"size": 1472}),
            result: serde_json::json!({"x": [1, 2]}),
        }
    }

    #[test]
    fn insert_list_filter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/net.sqlite");
        let a = Archive::open(&path).unwrap();
        a.insert(&rec("2024-01-01T00:00:00Z", "bw", 1.0)).unwrap();
        a.insert(&rec("2024-01-02T00:00:00Z", "lat", 2.0)).unwrap();
        a.insert(&rec("2024-01-03T00:00:00Z", "bw", 3.0)).unwrap();
        drop(a);
        let a = Archive::open(&path).unwrap();
        let all = a.list(&Filter::default()).unwrap();
        assert_eq!(
            all.iter().map(|s| s.record.value).collect::<Vec<_>>(),
            vec![1.0, 2.0, 3.0]
        );
        assert_eq!(all[0].record.params["size"], 1472);
        let bw = a
            .list(&Filter {
                kind: Some("bw".into()),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(bw.len(), 2);
        let last = a
            .list(&Filter {
                limit: Some(1),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(last[0].record.value, 3.0);
        let since = a
            .list(&Filter {
                since: Some("2024-01-02".into()),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(since.len(), 2);
        let none = a
            .list(&Filter {
                remote: Some("192.168".into()),
                ..Filter::default()
            })
            .unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sqlite");
        std::fs::write(&path, vec![b'z'; 4096]).unwrap();
        let e = Archive::open(&path).err().unwrap().to_string();
        assert!(e.contains("x.sqlite"), "{e}");
    }
}
