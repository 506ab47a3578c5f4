//! The hub's archive: SQLite by default (one file), PostgreSQL when given a `postgres://` URL. One
//! schema and one set of SQL statements for both (portable types; `?` placeholders are numbered for
//! PostgreSQL), versioned migrations, indexes on pair and time, retention. Every planned run has a
//! row in `runs` (its outcome when known), its hosts and links in `run_resources`, sweep points one
//! row each in `points`, passive counters in `counters`, alert changes in `alert_events`.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use crate::plan::PlannedRun;
use crate::report::{CounterSample, Outcome, RunReport};
use crate::timespec::Ms;

/// An archive failure.
#[derive(Debug, thiserror::Error)]
#[error("archive {what}: {detail}")]
pub struct ArchiveError {
    /// The step.
    pub what: String,
    /// The cause.
    pub detail: String,
}

fn err(what: &str, e: impl std::fmt::Display) -> ArchiveError {
    ArchiveError {
        what: what.into(),
        detail: e.to_string(),
    }
}

/// A value bound to or read from a statement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Val {
    /// NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Real(f64),
    /// Text.
    Text(String),
}

impl Val {
    /// As an integer (NULL and others: None).
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Real(f) => Some(*f as i64),
            _ => None,
        }
    }
    /// As a float.
    pub fn real(&self) -> Option<f64> {
        match self {
            Val::Real(f) => Some(*f),
            Val::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    /// As text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(v)
    }
}
impl From<f64> for Val {
    fn from(v: f64) -> Self {
        Val::Real(v)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Text(v.into())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Text(v)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Self {
        v.map(Into::into).unwrap_or(Val::Null)
    }
}

/// The two databases behind one interface.
trait Backend: Send {
    fn execute(&mut self, sql: &str, p: &[Val]) -> Result<u64, ArchiveError>;
    fn query(&mut self, sql: &str, p: &[Val]) -> Result<Vec<Vec<Val>>, ArchiveError>;
    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError>;
    fn kind(&self) -> &'static str;
}

struct Sqlite(rusqlite::Connection);

impl Backend for Sqlite {
    fn execute(&mut self, sql: &str, p: &[Val]) -> Result<u64, ArchiveError> {
        let params: Vec<rusqlite::types::Value> = p.iter().map(to_sqlite).collect();
        let mut st = self.0.prepare_cached(sql).map_err(|e| err("prepare", e))?;
        st.execute(rusqlite::params_from_iter(params))
            .map(|n| n as u64)
            .map_err(|e| err("execute", e))
    }
    fn query(&mut self, sql: &str, p: &[Val]) -> Result<Vec<Vec<Val>>, ArchiveError> {
        let params: Vec<rusqlite::types::Value> = p.iter().map(to_sqlite).collect();
        let mut st = self.0.prepare_cached(sql).map_err(|e| err("prepare", e))?;
        let n = st.column_count();
        let mut rows = st
            .query(rusqlite::params_from_iter(params))
            .map_err(|e| err("query", e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| err("query", e))? {
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(match r.get_ref(i).map_err(|e| err("read", e))? {
                    rusqlite::types::ValueRef::Null => Val::Null,
                    rusqlite::types::ValueRef::Integer(v) => Val::Int(v),
                    rusqlite::types::ValueRef::Real(v) => Val::Real(v),
                    rusqlite::types::ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into()),
                    rusqlite::types::ValueRef::Blob(_) => Val::Null,
                });
            }
            out.push(row);
        }
        Ok(out)
    }
    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError> {
        self.0.execute_batch(sql).map_err(|e| err("execute", e))
    }
    fn kind(&self) -> &'static str {
        "sqlite"
    }
}

fn to_sqlite(v: &Val) -> rusqlite::types::Value {
    match v {
        Val::Null => rusqlite::types::Value::Null,
        Val::Int(i) => rusqlite::types::Value::Integer(*i),
        Val::Real(f) => rusqlite::types::Value::Real(*f),
        Val::Text(s) => rusqlite::types::Value::Text(s.clone()),
    }
}

struct Pg {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

/// `?` placeholders numbered `$1, $2, ...` (the statements here have no `?` inside literals).
fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out += &format!("${n}");
        } else {
            out.push(c);
        }
    }
    out
}

impl Pg {
    fn prepare(&mut self, sql: &str) -> Result<postgres::Statement, ArchiveError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let st = self
            .client
            .prepare(&pg_sql(sql))
            .map_err(|e| err("prepare", pg_detail(&e)))?;
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }

    fn bind(
        st: &postgres::Statement,
        p: &[Val],
    ) -> Result<Vec<Box<dyn postgres::types::ToSql + Sync>>, ArchiveError> {
        use postgres::types::Type;
        let mut out: Vec<Box<dyn postgres::types::ToSql + Sync>> = Vec::new();
        for (v, t) in p.iter().zip(st.params()) {
            let b: Box<dyn postgres::types::ToSql + Sync> = match *t {
                Type::INT8 => Box::new(v.int()),
                Type::INT4 => Box::new(v.int().map(|x| x as i32)),
                Type::INT2 => Box::new(v.int().map(|x| x as i16)),
                Type::FLOAT8 => Box::new(v.real()),
                Type::FLOAT4 => Box::new(v.real().map(|x| x as f32)),
                Type::TEXT | Type::VARCHAR => Box::new(v.text().map(str::to_string)),
                ref other => return Err(err("bind", format!("parameter of type {other} not supported"))),
            };
            out.push(b);
        }
        Ok(out)
    }
}

fn pg_detail(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

impl Backend for Pg {
    fn execute(&mut self, sql: &str, p: &[Val]) -> Result<u64, ArchiveError> {
        let st = self.prepare(sql)?;
        let b = Pg::bind(&st, p)?;
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = b.iter().map(|x| x.as_ref()).collect();
        self.client
            .execute(&st, &refs)
            .map_err(|e| err("execute", pg_detail(&e)))
    }
    fn query(&mut self, sql: &str, p: &[Val]) -> Result<Vec<Vec<Val>>, ArchiveError> {
        use postgres::types::Type;
        let st = self.prepare(sql)?;
        let b = Pg::bind(&st, p)?;
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = b.iter().map(|x| x.as_ref()).collect();
        let rows = self
            .client
            .query(&st, &refs)
            .map_err(|e| err("query", pg_detail(&e)))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut row = Vec::new();
            for (i, c) in r.columns().iter().enumerate() {
                let g = |e: postgres::Error| err("read", pg_detail(&e));
                row.push(
                    match *c.type_() {
                        Type::INT8 => r.try_get::<_, Option<i64>>(i).map_err(g)?.map(Val::Int),
                        Type::INT4 => r
                            .try_get::<_, Option<i32>>(i)
                            .map_err(g)?
                            .map(|x| Val::Int(x.into())),
                        Type::INT2 => r
                            .try_get::<_, Option<i16>>(i)
                            .map_err(g)?
                            .map(|x| Val::Int(x.into())),
                        Type::FLOAT8 => r.try_get::<_, Option<f64>>(i).map_err(g)?.map(Val::Real),
                        Type::FLOAT4 => r
                            .try_get::<_, Option<f32>>(i)
                            .map_err(g)?
                            .map(|x| Val::Real(x.into())),
                        Type::TEXT | Type::VARCHAR | Type::NAME => {
                            r.try_get::<_, Option<String>>(i).map_err(g)?.map(Val::Text)
                        }
                        Type::BOOL => r
                            .try_get::<_, Option<bool>>(i)
                            .map_err(g)?
                            .map(|x| Val::Int(x.into())),
                        ref other => {
                            return Err(err(
                                "read",
                                format!("column {} of type {other} not supported", c.name()),
                            ))
                        }
                    }
                    .unwrap_or(Val::Null),
                );
            }
            out.push(row);
        }
        Ok(out)
    }
    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError> {
        self.client
            .batch_execute(sql)
            .map_err(|e| err("execute", pg_detail(&e)))
    }
    fn kind(&self) -> &'static str {
        "postgresql"
    }
}

/// Schema migrations, in order; each runs in one transaction and bumps `meta.schema_version`.
/// Written in the SQL both databases accept.
pub const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        test TEXT NOT NULL,
        kind TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        cycle BIGINT NOT NULL,
        planned_start BIGINT NOT NULL,
        planned_end BIGINT NOT NULL,
        exclusive INTEGER NOT NULL,
        status TEXT NOT NULL,
        rank INTEGER NOT NULL,
        reason TEXT,
        detail TEXT,
        started_at BIGINT,
        ended_at BIGINT,
        throughput_mbps DOUBLE PRECISION,
        loss_percent DOUBLE PRECISION,
        rtt_ms DOUBLE PRECISION,
        capacity_mbps DOUBLE PRECISION,
        result TEXT,
        reported_by TEXT,
        updated_at BIGINT NOT NULL
    );
    CREATE INDEX runs_pair_time ON runs (src, dst, planned_start);
    CREATE INDEX runs_time ON runs (planned_start);
    CREATE INDEX runs_status ON runs (status, planned_end);
    CREATE TABLE run_resources (
        run_id TEXT NOT NULL,
        resource TEXT NOT NULL,
        PRIMARY KEY (run_id, resource)
    );
    CREATE INDEX run_resources_resource ON run_resources (resource, run_id);
    CREATE TABLE points (
        run_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        t BIGINT NOT NULL,
        size INTEGER NOT NULL,
        wait_us DOUBLE PRECISION,
        offered_mbps DOUBLE PRECISION,
        recv_mbps DOUBLE PRECISION,
        loss_percent DOUBLE PRECISION,
        jitter_us DOUBLE PRECISION,
        PRIMARY KEY (run_id, idx)
    );
    CREATE INDEX points_pair_time ON points (src, dst, t);
    CREATE TABLE counters (
        host TEXT NOT NULL,
        iface TEXT NOT NULL,
        t BIGINT NOT NULL,
        span_ms BIGINT NOT NULL,
        rx_bytes BIGINT NOT NULL,
        tx_bytes BIGINT NOT NULL,
        rx_packets BIGINT NOT NULL,
        tx_packets BIGINT NOT NULL,
        rx_errors BIGINT NOT NULL,
        tx_errors BIGINT NOT NULL,
        rx_drops BIGINT NOT NULL,
        tx_drops BIGINT NOT NULL,
        PRIMARY KEY (host, iface, t)
    );
    CREATE INDEX counters_time ON counters (t);
    CREATE TABLE alert_events (
        id TEXT PRIMARY KEY,
        t BIGINT NOT NULL,
        rule TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        metric TEXT NOT NULL,
        state TEXT NOT NULL,
        value DOUBLE PRECISION,
        threshold DOUBLE PRECISION,
        message TEXT NOT NULL,
        delivered INTEGER NOT NULL
    );
    CREATE INDEX alert_events_time ON alert_events (t);
    CREATE INDEX alert_events_pair ON alert_events (rule, src, dst, t);
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        last_seen BIGINT NOT NULL,
        software TEXT,
        config_hash TEXT
    );",
];

/// A run row as read back.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunRow {
    /// Run id.
    pub id: String,
    /// Test name.
    pub test: String,
    /// Test kind.
    pub kind: String,
    /// Source host.
    pub src: String,
    /// Destination host.
    pub dst: String,
    /// Planned start, ms.
    pub planned_start: Ms,
    /// Planned end, ms.
    pub planned_end: Ms,
    /// Exclusive.
    pub exclusive: bool,
    /// planned, ok or failed.
    pub status: String,
    /// Failure reason.
    pub reason: Option<String>,
    /// Failure detail.
    pub detail: Option<String>,
    /// Actual start.
    pub started_at: Option<Ms>,
    /// Actual end.
    pub ended_at: Option<Ms>,
    /// Throughput, Mb/s.
    pub throughput_mbps: Option<f64>,
    /// Loss, percent.
    pub loss_percent: Option<f64>,
    /// RTT, ms.
    pub rtt_ms: Option<f64>,
    /// Capacity, Mb/s.
    pub capacity_mbps: Option<f64>,
    /// Who reported it.
    pub reported_by: Option<String>,
}

const RUN_COLUMNS: &str =
    "id, test, kind, src, dst, planned_start, planned_end, exclusive, status, reason, detail, \
     started_at, ended_at, throughput_mbps, loss_percent, rtt_ms, capacity_mbps, reported_by";

fn run_row(r: &[Val]) -> RunRow {
    let t = |i: usize| r[i].text().unwrap_or_default().to_string();
    let ot = |i: usize| r[i].text().map(str::to_string);
    RunRow {
        id: t(0),
        test: t(1),
        kind: t(2),
        src: t(3),
        dst: t(4),
        planned_start: r[5].int().unwrap_or(0),
        planned_end: r[6].int().unwrap_or(0),
        exclusive: r[7].int() == Some(1),
        status: t(8),
        reason: ot(9),
        detail: ot(10),
        started_at: r[11].int(),
        ended_at: r[12].int(),
        throughput_mbps: r[13].real(),
        loss_percent: r[14].real(),
        rtt_ms: r[15].real(),
        capacity_mbps: r[16].real(),
        reported_by: ot(17),
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this source.
    pub src: Option<String>,
    /// Only this destination.
    pub dst: Option<String>,
    /// Only this test.
    pub test: Option<String>,
    /// Only this status (planned, ok, failed).
    pub status: Option<String>,
    /// Planned start at or after.
    pub since: Option<Ms>,
    /// Planned start before.
    pub until: Option<Ms>,
    /// Newest first, at most this many.
    pub limit: Option<usize>,
}

/// An alert change as stored.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct AlertEvent {
    /// Unique id.
    pub id: String,
    /// When, ms.
    pub t: Ms,
    /// Rule name.
    pub rule: String,
    /// Source host ("" for none).
    pub src: String,
    /// Destination host.
    pub dst: String,
    /// Metric.
    pub metric: String,
    /// "raised" or "cleared".
    pub state: String,
    /// The value that changed it (None for no-data).
    pub value: Option<f64>,
    /// The threshold crossed.
    pub threshold: Option<f64>,
    /// In words.
    pub message: String,
}

/// The archive.
pub struct Archive {
    db: Box<dyn Backend>,
    location: String,
}

/// How long a SQLite opener waits for another one that holds the file.
const SQLITE_BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Switches a SQLite archive to WAL. The switch takes an exclusive lock, and while another opener is
/// switching or recovering the same file SQLite answers "database is locked" at once, without calling
/// the busy handler (CI saw it with six threads opening a new archive together): it is tried again, every
/// 10 ms, until `limit`.
fn sqlite_pragmas(c: &rusqlite::Connection, limit: std::time::Duration) -> rusqlite::Result<()> {
    let until = std::time::Instant::now() + limit;
    loop {
        match c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;") {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

impl Archive {
    /// Opens (creating and migrating) the archive at `target`: a `postgres://` or `postgresql://`
    /// URL, or a SQLite file path.
    pub fn open(target: &str) -> Result<Archive, ArchiveError> {
        let db: Box<dyn Backend> = if target.starts_with("postgres://") || target.starts_with("postgresql://")
        {
            let client = postgres::Client::connect(target, postgres::NoTls).map_err(|e| {
                err(
                    &format!("connect to PostgreSQL {}", redact(target)),
                    pg_detail(&e),
                )
            })?;
            Box::new(Pg {
                client,
                statements: HashMap::new(),
            })
        } else {
            let path = Path::new(target);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| err(&format!("create {}", dir.display()), e))?;
            }
            let c = rusqlite::Connection::open(path).map_err(|e| err(&format!("open {target}"), e))?;
            c.busy_timeout(SQLITE_BUSY_WAIT)
                .map_err(|e| err("busy timeout", e))?;
            sqlite_pragmas(&c, SQLITE_BUSY_WAIT).map_err(|e| err("pragmas", e))?;
            Box::new(Sqlite(c))
        };
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

    /// Archives planned runs (rows with status "planned" and their resources); runs already present
    /// are left alone.
    pub fn plan(&mut self, runs: &[PlannedRun], now: Ms) -> Result<(), ArchiveError> {
        self.tx(|db| {
            for r in runs {
                insert_planned(db, r, now)?;
            }
            Ok(())
        })
    }

    /// Archives reports; a report replaces an earlier one of the same run only when it ranks higher
    /// (a result over a failure, an agent's failure over the hub's inference). Returns how many
    /// changed a row.
    pub fn record(&mut self, reports: &[RunReport], now: Ms) -> Result<usize, ArchiveError> {
        self.tx(|db| {
            let mut changed = 0;
            for r in reports {
                insert_planned(db, &r.run, now)?;
                let (reason, detail, m, result) = match &r.outcome {
                    Outcome::Ok { metrics, result, .. } => (None, None, Some(metrics), Some(result.to_string())),
                    Outcome::Failed { reason, detail } => (Some(reason.as_str()), Some(detail.clone()), None, None),
                };
                let n = db.execute(
                    "UPDATE runs SET status = ?, rank = ?, reason = ?, detail = ?, started_at = ?, ended_at = ?, \
                     throughput_mbps = ?, loss_percent = ?, rtt_ms = ?, capacity_mbps = ?, result = ?, \
                     reported_by = ?, updated_at = ? WHERE id = ? AND rank < ?",
                    &[
                        r.status().into(),
                        r.rank().into(),
                        reason.into(),
                        detail.into(),
                        r.started_at.into(),
                        r.ended_at.into(),
                        m.and_then(|m| m.throughput_mbps).into(),
                        m.and_then(|m| m.loss_percent).into(),
                        m.and_then(|m| m.rtt_ms).into(),
                        m.and_then(|m| m.capacity_mbps).into(),
                        result.into(),
                        r.reported_by.as_str().into(),
                        now.into(),
                        r.run.id.as_str().into(),
                        r.rank().into(),
                    ],
                )?;
                if n > 0 {
                    changed += 1;
                    if let Outcome::Ok { points, .. } = &r.outcome {
                        db.execute("DELETE FROM points WHERE run_id = ?", &[r.run.id.as_str().into()])?;
                        let t = r.started_at.unwrap_or(r.run.start);
                        for (i, p) in points.iter().enumerate() {
                            db.execute(
                                "INSERT INTO points (run_id, idx, src, dst, t, size, wait_us, offered_mbps, recv_mbps, \
                                 loss_percent, jitter_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                &[
                                    r.run.id.as_str().into(),
                                    (i as i64).into(),
                                    r.run.src.as_str().into(),
                                    r.run.dst.as_str().into(),
                                    t.into(),
                                    (p.size as i64).into(),
                                    p.wait_us.into(),
                                    p.offered_mbps.into(),
                                    p.recv_mbps.into(),
                                    p.loss_percent.into(),
                                    p.jitter_us.into(),
                                ],
                            )?;
                        }
                    }
                }
            }
            Ok(changed)
        })
    }

    /// Archives counter samples (a repeated sample is ignored).
    pub fn counters(&mut self, samples: &[CounterSample]) -> Result<(), ArchiveError> {
        self.tx(|db| {
            for s in samples {
                db.execute(
                    "INSERT INTO counters (host, iface, t, span_ms, rx_bytes, tx_bytes, rx_packets, tx_packets, \
                     rx_errors, tx_errors, rx_drops, tx_drops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (host, iface, t) DO NOTHING",
                    &[
                        s.host.as_str().into(),
                        s.iface.as_str().into(),
                        s.t.into(),
                        s.span_ms.into(),
                        (s.rx_bytes as i64).into(),
                        (s.tx_bytes as i64).into(),
                        (s.rx_packets as i64).into(),
                        (s.tx_packets as i64).into(),
                        (s.rx_errors as i64).into(),
                        (s.tx_errors as i64).into(),
                        (s.rx_drops as i64).into(),
                        (s.tx_drops as i64).into(),
                    ],
                )?;
            }
            Ok(())
        })
    }

    /// Counter samples of a host since `since`, oldest first.
    pub fn counter_samples(&mut self, host: &str, since: Ms) -> Result<Vec<CounterSample>, ArchiveError> {
        let rows = self.db.query(
            "SELECT host, iface, t, span_ms, rx_bytes, tx_bytes, rx_packets, tx_packets, rx_errors, tx_errors, \
             rx_drops, tx_drops FROM counters WHERE host = ? AND t >= ? ORDER BY t, iface",
            &[host.into(), since.into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let u = |i: usize| r[i].int().unwrap_or(0).max(0) as u64;
                CounterSample {
                    host: r[0].text().unwrap_or_default().into(),
                    iface: r[1].text().unwrap_or_default().into(),
                    t: r[2].int().unwrap_or(0),
                    span_ms: r[3].int().unwrap_or(0),
                    rx_bytes: u(4),
                    tx_bytes: u(5),
                    rx_packets: u(6),
                    tx_packets: u(7),
                    rx_errors: u(8),
                    tx_errors: u(9),
                    rx_drops: u(10),
                    tx_drops: u(11),
                }
            })
            .collect())
    }

    /// Runs matching `f`, newest planned start first.
    pub fn runs(&mut self, f: &RunFilter) -> Result<Vec<RunRow>, ArchiveError> {
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
        let mut p: Vec<Val> = Vec::new();
        for (col, v) in [
            ("src", &f.src),
            ("dst", &f.dst),
            ("test", &f.test),
            ("status", &f.status),
        ] {
            if let Some(v) = v {
                sql += &format!(" AND {col} = ?");
                p.push(v.as_str().into());
            }
        }
        if let Some(s) = f.since {
            sql += " AND planned_start >= ?";
            p.push(s.into());
        }
        if let Some(u) = f.until {
            sql += " AND planned_start < ?";
            p.push(u.into());
        }
        sql += " ORDER BY planned_start DESC, id";
        if let Some(l) = f.limit {
            sql += &format!(" LIMIT {l}");
        }
        Ok(self.db.query(&sql, &p)?.iter().map(|r| run_row(r)).collect())
    }

    /// The full result JSON of a run.
    pub fn result_json(&mut self, id: &str) -> Result<Option<serde_json::Value>, ArchiveError> {
        let rows = self
            .db
            .query("SELECT result FROM runs WHERE id = ?", &[id.into()])?;
        Ok(rows
            .first()
            .and_then(|r| r[0].text())
            .and_then(|s| serde_json::from_str(s).ok()))
    }

    /// Runs planned but without an outcome.
    pub fn pending(&mut self) -> Result<Vec<PlannedRun>, ArchiveError> {
        let rows = self.db.query(
            "SELECT r.id, r.test, r.kind, r.cycle, r.src, r.dst, r.planned_start, r.planned_end, r.exclusive, \
             (SELECT COUNT(*) FROM run_resources x WHERE x.run_id = r.id) FROM runs r WHERE r.status = 'planned'",
            &[],
        )?;
        let mut out = Vec::new();
        for r in rows {
            let id = r[0].text().unwrap_or_default().to_string();
            let res = self
                .db
                .query(
                    "SELECT resource FROM run_resources WHERE run_id = ? ORDER BY resource",
                    &[id.as_str().into()],
                )?
                .iter()
                .filter_map(|x| x[0].text().map(str::to_string))
                .collect();
            let kind =
                serde_json::from_value(serde_json::Value::String(r[2].text().unwrap_or_default().into()));
            let Ok(kind) = kind else { continue };
            out.push(PlannedRun {
                id,
                test: r[1].text().unwrap_or_default().into(),
                kind,
                cycle: r[3].int().unwrap_or(0),
                src: r[4].text().unwrap_or_default().into(),
                dst: r[5].text().unwrap_or_default().into(),
                start: r[6].int().unwrap_or(0),
                end: r[7].int().unwrap_or(0),
                exclusive: r[8].int() == Some(1),
                resources: res,
                slot: 0,
                skipped: None,
            });
        }
        Ok(out)
    }

    /// The newest finished run of each (test, src, dst).
    pub fn latest(&mut self) -> Result<Vec<RunRow>, ArchiveError> {
        let sql = format!(
            "SELECT {} FROM runs r WHERE r.status = 'ok' AND r.planned_start = \
             (SELECT MAX(x.planned_start) FROM runs x WHERE x.status = 'ok' AND x.test = r.test AND x.src = r.src \
             AND x.dst = r.dst) ORDER BY r.src, r.dst, r.test",
            RUN_COLUMNS
                .split(", ")
                .map(|c| format!("r.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(self.db.query(&sql, &[])?.iter().map(|r| run_row(r)).collect())
    }

    /// Counts of runs by status and reason (optionally within a planned-start window).
    pub fn counts(
        &mut self,
        since: Option<Ms>,
        until: Option<Ms>,
    ) -> Result<Vec<(String, String, String, i64)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT test, status, COALESCE(reason, ''), COUNT(*) FROM runs WHERE planned_start >= ? AND planned_start < ? \
             GROUP BY test, status, COALESCE(reason, '') ORDER BY test, status, COALESCE(reason, '')",
            &[since.unwrap_or(i64::MIN).into(), until.unwrap_or(i64::MAX).into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].text().unwrap_or_default().into(),
                    r[1].text().unwrap_or_default().into(),
                    r[2].text().unwrap_or_default().into(),
                    r[3].int().unwrap_or(0),
                )
            })
            .collect())
    }

    /// Pairs of exclusive runs that overlapped in actual time on a shared host or link:
    /// (resource, run a, run b). Empty when exclusivity held.
    pub fn overlaps(&mut self) -> Result<Vec<(String, String, String)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT ra.resource, a.id, b.id FROM runs a \
             JOIN run_resources ra ON ra.run_id = a.id \
             JOIN run_resources rb ON rb.resource = ra.resource AND rb.run_id > a.id \
             JOIN runs b ON b.id = rb.run_id \
             WHERE a.exclusive = 1 AND b.exclusive = 1 \
             AND a.started_at IS NOT NULL AND b.started_at IS NOT NULL \
             AND a.started_at < b.ended_at AND b.started_at < a.ended_at \
             ORDER BY ra.resource, a.id",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].text().unwrap_or_default().into(),
                    r[1].text().unwrap_or_default().into(),
                    r[2].text().unwrap_or_default().into(),
                )
            })
            .collect())
    }

    /// Sweep points of a pair since `since`, oldest first: (t, run id, point).
    pub fn points(
        &mut self,
        src: &str,
        dst: &str,
        since: Ms,
    ) -> Result<Vec<(Ms, String, crate::report::Point)>, ArchiveError> {
        let rows = self.db.query(
            "SELECT t, run_id, size, wait_us, offered_mbps, recv_mbps, loss_percent, jitter_us FROM points \
             WHERE src = ? AND dst = ? AND t >= ? ORDER BY t, idx",
            &[src.into(), dst.into(), since.into()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r[0].int().unwrap_or(0),
                    r[1].text().unwrap_or_default().to_string(),
                    crate::report::Point {
                        size: r[2].int().unwrap_or(0) as usize,
                        wait_us: r[3].real().unwrap_or(0.0),
                        offered_mbps: r[4].real().unwrap_or(0.0),
                        recv_mbps: r[5].real().unwrap_or(0.0),
                        loss_percent: r[6].real().unwrap_or(0.0),
                        jitter_us: r[7].real().unwrap_or(0.0),
                    },
                )
            })
            .collect())
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

    /// Stores an alert change (not yet delivered to the webhook).
    pub fn alert_event(&mut self, e: &AlertEvent) -> Result<(), ArchiveError> {
        self.db.execute(
            "INSERT INTO alert_events (id, t, rule, src, dst, metric, state, value, threshold, message, delivered) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (id) DO NOTHING",
            &[
                e.id.as_str().into(),
                e.t.into(),
                e.rule.as_str().into(),
                e.src.as_str().into(),
                e.dst.as_str().into(),
                e.metric.as_str().into(),
                e.state.as_str().into(),
                e.value.into(),
                e.threshold.into(),
                e.message.as_str().into(),
            ],
        )?;
        Ok(())
    }

    fn alert_rows(&mut self, sql: &str, p: &[Val]) -> Result<Vec<AlertEvent>, ArchiveError> {
        Ok(self
            .db
            .query(sql, p)?
            .iter()
            .map(|r| AlertEvent {
                id: r[0].text().unwrap_or_default().into(),
                t: r[1].int().unwrap_or(0),
                rule: r[2].text().unwrap_or_default().into(),
                src: r[3].text().unwrap_or_default().into(),
                dst: r[4].text().unwrap_or_default().into(),
                metric: r[5].text().unwrap_or_default().into(),
                state: r[6].text().unwrap_or_default().into(),
                value: r[7].real(),
                threshold: r[8].real(),
                message: r[9].text().unwrap_or_default().into(),
            })
            .collect())
    }

    /// Alert changes, newest first (at most `limit`).
    pub fn alert_events(&mut self, limit: usize) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            &format!(
                "SELECT id, t, rule, src, dst, metric, state, value, threshold, message FROM alert_events \
                 ORDER BY t DESC, id LIMIT {limit}"
            ),
            &[],
        )
    }

    /// Alerts raised and not cleared: the newest change per (rule, pair) when it is "raised".
    pub fn active_alerts(&mut self) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            "SELECT e.id, e.t, e.rule, e.src, e.dst, e.metric, e.state, e.value, e.threshold, e.message \
             FROM alert_events e WHERE e.state = 'raised' AND e.t = (SELECT MAX(x.t) FROM alert_events x \
             WHERE x.rule = e.rule AND x.src = e.src AND x.dst = e.dst) ORDER BY e.t, e.id",
            &[],
        )
    }

    /// Alert changes not yet delivered to the webhook, oldest first.
    pub fn undelivered_alerts(&mut self) -> Result<Vec<AlertEvent>, ArchiveError> {
        self.alert_rows(
            "SELECT id, t, rule, src, dst, metric, state, value, threshold, message FROM alert_events \
             WHERE delivered = 0 ORDER BY t, id",
            &[],
        )
    }

    /// Marks an alert change delivered.
    pub fn alert_delivered(&mut self, id: &str) -> Result<(), ArchiveError> {
        self.db
            .execute("UPDATE alert_events SET delivered = 1 WHERE id = ?", &[id.into()])?;
        Ok(())
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

fn insert_planned(db: &mut dyn Backend, r: &PlannedRun, now: Ms) -> Result<(), ArchiveError> {
    let n = db.execute(
        "INSERT INTO runs (id, test, kind, src, dst, cycle, planned_start, planned_end, exclusive, status, rank, \
         updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned', 0, ?) ON CONFLICT (id) DO NOTHING",
        &[
            r.id.as_str().into(),
            r.test.as_str().into(),
            r.kind.as_str().into(),
            r.src.as_str().into(),
            r.dst.as_str().into(),
            r.cycle.into(),
            r.start.into(),
            r.end.into(),
            i64::from(r.exclusive).into(),
            now.into(),
        ],
    )?;
    if n > 0 {
        for res in &r.resources {
            db.execute(
                "INSERT INTO run_resources (run_id, resource) VALUES (?, ?) ON CONFLICT (run_id, resource) DO NOTHING",
                &[r.id.as_str().into(), res.as_str().into()],
            )?;
        }
    }
    Ok(())
}

/// A URL with its password replaced by `***`.
pub fn redact(target: &str) -> String {
    match (target.find("://"), target.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &target[s + 3..at];
            match cred.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &target[..s + 3], &target[at..]),
                None => target.to_string(),
            }
        }
        _ => target.to_string(),
    }
}
