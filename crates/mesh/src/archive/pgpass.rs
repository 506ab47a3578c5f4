//! The PostgreSQL password when the archive's URL has none, from libpq's password file: the file the
//! environment variable `PGPASSFILE` names, else `~/.pgpass`; one `hostname:port:database:username:password`
//! a line, `*` matching anything, `\:` and `\\` escaped, the first matching line wins; the file is
//! ignored unless only its owner may read it (PostgreSQL documentation, "The Password File").

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The password for `cfg`'s first host, port, database and user, if the password file has one.
pub(super) fn password_for(cfg: &postgres::Config) -> Option<String> {
    let path = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match cfg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        // libpq matches a Unix-domain socket as localhost.
        _ => "localhost".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user()?;
    let db = cfg.get_dbname().unwrap_or(user);
    lookup(&text, &host, port, db, user)
}

/// The password of the first line of `text` matching host, port, database and user.
pub(super) fn lookup(text: &str, host: &str, port: u16, db: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split(line);
        let [h, p, d, u, pw] = fields.as_slice() else {
            continue;
        };
        let m = |field: &str, want: &str| field == "*" || field == want;
        if m(h, host) && m(p, &port) && m(d, db) && m(u, user) {
            return Some(pw.clone());
        }
    }
    None
}

/// The fields of a line, split at unescaped `:` (the last field takes the rest).
fn split(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(f)) = (chars.next(), out.last_mut()) {
                    f.push(n);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => {
                if let Some(f) = out.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::lookup;

    #[test]
    fn first_matching_line_with_wildcards_and_escapes() {
        let f =
            "# comment\nother:5432:*:vlbi:no\ndb.example.org:5432:mesh:vlbi:s3cr\\:et\n*:*:*:vlbi:fallback\n";
        assert_eq!(
            lookup(f, "db.example.org", 5432, "mesh", "vlbi").as_deref(),
            Some("s3cr:et")
        );
        assert_eq!(
            lookup(f, "db.example.org", 5433, "mesh", "vlbi").as_deref(),
            Some("fallback")
        );
        assert_eq!(lookup(f, "db.example.org", 5432, "mesh", "other"), None);
        assert_eq!(lookup("h:1:d:u:a:b\n", "h", 1, "d", "u").as_deref(), Some("a:b"));
        assert_eq!(lookup("short:line\n", "short", 1, "d", "u"), None);
    }
}
