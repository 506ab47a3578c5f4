//! The two databases behind one interface: values bound and read, errors, SQLite and PostgreSQL.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

/// An archive failure.
#[derive(Debug, thiserror::Error)]
#[error("archive {what}: {detail}")]
pub struct ArchiveError {
    /// The step.
    pub what: String,
    /// The cause.
    pub detail: String,
}

pub(super) fn err(what: &str, e: impl std::fmt::Display) -> ArchiveError {
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
pub(super) trait Backend: Send {
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
        None => {
            // The cause (a refused certificate, a refused connection) is in the source chain.
            let mut m = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(c) = src {
                m = format!("{m}: {c}");
                src = c.source();
            }
            m
        }
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

/// Connects to `target`: a `postgres://` or `postgresql://` URL, or a SQLite file path (its directory
/// created, WAL switched on).
pub(super) fn connect(target: &str) -> Result<Box<dyn Backend>, ArchiveError> {
    let db: Box<dyn Backend> = if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        let (url, tls) = super::pgtls::split_url(target)
            .map_err(|e| err(&format!("PostgreSQL URL {}", redact(target)), e))?;
        let mut cfg: postgres::Config = url
            .parse()
            .map_err(|e| err(&format!("PostgreSQL URL {}", redact(target)), e))?;
        if cfg.get_password().is_none() {
            if let Some(p) = super::pgpass::password_for(&cfg) {
                cfg.password(p);
            }
        }
        cfg.ssl_mode(tls.postgres_mode());
        let connector = tls
            .connector()
            .map_err(|e| err(&format!("PostgreSQL TLS for {}", redact(target)), e))?;
        let client = match connector {
            Some(c) => cfg.connect(c),
            None => cfg.connect(postgres::NoTls),
        };
        let client = client.map_err(|e| {
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
    Ok(db)
}

/// A URL with any password in it replaced by `***` (`postgresql://user:***@host/db`), for logs and
/// status pages. Text that is not a URL with
/// credentials is returned as it is. The one helper for this: the CLI's log uses it too.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..rest_start], &rest[at..]),
        None => url.to_string(),
    }
}

/// A URL whose path and query may themselves be the secret (a webhook's, as chat services issue
/// them) reduced to its scheme and host, `https://hooks.example.org/***`, with [`redact`] applied to
/// any password; for logs.
pub fn redact_path(url: &str) -> String {
    let url = redact(url);
    let Some(scheme_end) = url.find("://") else {
        return "***".into();
    };
    let rest = &url[scheme_end + 3..];
    match rest.find(['/', '?', '#']) {
        Some(end) => format!("{}/***", &url[..scheme_end + 3 + end]),
        None => url,
    }
}

#[cfg(test)]
mod redact_tests {
    use super::{redact, redact_path};

    #[test]
    fn webhook_paths_are_redacted() {
        assert_eq!(
            redact_path("https://hooks.example.org/services/T0/B0/secret?x=1"),
            "https://hooks.example.org/***"
        );
        assert_eq!(redact_path("http://u:pw@h:9/a"), "http://u:***@h:9/***");
        assert_eq!(redact_path("http://h:9"), "http://h:9");
        assert_eq!(redact_path("not a url"), "***");
    }

    #[test]
    fn passwords_are_redacted_and_nothing_else() {
        assert_eq!(
            redact("postgresql://vlbi:s3cret@db.example.org/mesh"),
            "postgresql://vlbi:***@db.example.org/mesh"
        );
        assert_eq!(redact("postgresql://vlbi@db/mesh"), "postgresql://vlbi@db/mesh");
        assert_eq!(redact("http://hub:8090/a@b"), "http://hub:8090/a@b");
        assert_eq!(redact("mesh.sqlite"), "mesh.sqlite");
    }
}
