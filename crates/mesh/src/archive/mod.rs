//! The hub's archive: SQLite by default (one file), PostgreSQL when given a `postgres://` URL. One
//! schema and one set of SQL statements for both (portable types; `?` placeholders are numbered for
//! PostgreSQL), versioned migrations, indexes on pair and time, retention. Every planned run has a
//! row in `runs` (its outcome when known), its hosts and links in `run_resources`, sweep points one
//! row each in `points`, passive counters in `counters`, alert changes in `alert_events`.
//!
//! Files: `db` the two databases behind one interface (values, errors, SQLite and PostgreSQL);
//! `schema` the migrations; `rows` the rows read back; `runs` planned runs, outcomes, points and
//! counters; `alerts` alert changes; this file the archive itself, its metadata and agents, retention.

mod alerts;
mod db;
mod pgpass;
pub mod pgtls;
mod rows;
mod runs;
mod schema;

use crate::timespec::Ms;
use db::{err, Backend};

pub use db::{redact, redact_path, ArchiveError, Val};
pub use rows::{AlertEvent, RunFilter, RunRow};
pub use schema::MIGRATIONS;

/// The archive.
pub struct Archive {
    db: Box<dyn Backend>,
    location: String,
}

impl Archive {
    /// Opens (creating and migrating) the archive at `target`: a `postgres://` or `postgresql://`
    /// URL, or a SQLite file path.
    pub fn open(target: &str) -> Result<Archive, ArchiveError> {
        let db = db::connect(target)?;
        let mut a = Archive {
            db,
            location: redact(target),
        };
        a.migrate()?;
        Ok(a)
    }

    /// "sqlite" or "postgresql".
    pub fn kind(&self) -> &'static str {
        self.db.kind()
    }

    /// Where it is (a URL without its password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The schema version in force.
    pub fn schema_version(&mut self) -> Result<i64, ArchiveError> {
        Ok(self
            .meta("schema_version")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Brings the schema up to date in one transaction that excludes every other opener (an advisory
    /// lock on PostgreSQL, a write lock on SQLite), so a hub and a reader opening a new archive at the
    /// same time do not race on `CREATE TABLE`.
    fn migrate(&mut self) -> Result<(), ArchiveError> {
        let begin = match self.db.kind() {
            "postgresql" => "BEGIN; SELECT pg_advisory_xact_lock(7216513)",
            _ => "BEGIN IMMEDIATE",
        };
        self.db.batch(begin)?;
        match self.migrate_locked() {
            Ok(()) => self.db.batch("COMMIT"),
            Err(e) => {
                let _ = self.db.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn migrate_locked(&mut self) -> Result<(), ArchiveError> {
        self.db
            .batch("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")?;
        let have = self.schema_version()? as usize;
        if have > MIGRATIONS.len() {
            return Err(err(
                "schema",
                format!(
                    "the archive has schema version {have}, newer than this vlbiflow knows ({}): upgrade vlbiflow",
                    MIGRATIONS.len()
                ),
            ));
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(have) {
            let v = i + 1;
            let sql = format!(
                "{m}; DELETE FROM meta WHERE key = 'schema_version'; \
                 INSERT INTO meta (key, value) VALUES ('schema_version', '{v}')"
            );
            self.db
                .batch(&sql)
                .map_err(|e| err(&format!("migration to schema version {v}"), e))?;
        }
        Ok(())
    }

    /// A value from the meta table.
    pub fn meta(&mut self, key: &str) -> Result<Option<String>, ArchiveError> {
        let rows = self
            .db
            .query("SELECT value FROM meta WHERE key = ?", &[key.into()])?;
        Ok(rows.first().and_then(|r| r[0].text().map(str::to_string)))
    }

    /// Sets a meta value.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), ArchiveError> {
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[key.into(), value.into()],
        )?;
        Ok(())
    }

    fn tx<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Backend) -> Result<T, ArchiveError>,
    ) -> Result<T, ArchiveError> {
        self.db.batch("BEGIN")?;
        match f(self.db.as_mut()) {
            Ok(v) => {
                self.db.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.db.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Records an agent's contact.
    pub fn agent_seen(
        &mut self,
        name: &str,
        at: Ms,
        software: &str,
        config_hash: &str,
    ) -> Result<(), ArchiveError> {
        self.db.execute(
            "INSERT INTO agents (name, last_seen, software, config_hash) VALUES (?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET last_seen = excluded.last_seen, software = excluded.software, \
             config_hash = excluded.config_hash",
            &[name.into(), at.into(), software.into(), config_hash.into()],
        )?;
        Ok(())
    }

    /// Agents and their last contact.
    pub fn agents(&mut self) -> Result<Vec<(String, Ms, String, String)>, ArchiveError> {
        Ok(self
            .db
            .query("SELECT name, last_seen, COALESCE(software, ''), COALESCE(config_hash, '') FROM agents ORDER BY name", &[])?
            .iter()
            .map(|r| {
                (
                    r[0].text().unwrap_or_default().into(),
                    r[1].int().unwrap_or(0),
                    r[2].text().unwrap_or_default().into(),
                    r[3].text().unwrap_or_default().into(),
                )
            })
            .collect())
    }

    /// Deletes what is older than `before` (planned start, sample or event time); returns rows
    /// deleted.
    pub fn retain(&mut self, before: Ms) -> Result<u64, ArchiveError> {
        self.tx(|db| {
            let mut n = 0;
            n += db.execute(
                "DELETE FROM run_resources WHERE run_id IN (SELECT id FROM runs WHERE planned_start < ?)",
                &[before.into()],
            )?;
            n += db.execute("DELETE FROM points WHERE t < ?", &[before.into()])?;
            n += db.execute("DELETE FROM runs WHERE planned_start < ?", &[before.into()])?;
            n += db.execute("DELETE FROM counters WHERE t < ?", &[before.into()])?;
            n += db.execute(
                "DELETE FROM alert_events WHERE t < ? AND delivered = 1",
                &[before.into()],
            )?;
            Ok(n)
        })
    }

    /// Runs an arbitrary read-only query (tests, operators' checks).
    pub fn query(&mut self, sql: &str) -> Result<Vec<Vec<Val>>, ArchiveError> {
        self.db.query(sql, &[])
    }
}
