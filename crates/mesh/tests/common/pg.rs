//! A private PostgreSQL server for a test: `initdb` into a temporary directory, `pg_ctl start`
//! listening only on a Unix socket in that directory (no TCP), stopped and removed on drop. As root
//! the server runs as the `postgres` user (initdb refuses root). Needs Debian's postgresql package
//! (scripts/test installs it as root).

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_user: Option<String>,
    pub url: String,
}

fn pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("initdb").is_file())
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions.pop().unwrap_or_else(|| {
        panic!("PostgreSQL not found (/usr/lib/postgresql/*/bin/initdb): install it with `apt-get install -y postgresql` (scripts/test does when run as root)")
    })
}

/// A server with TLS on loopback TCP: its certificate chain and key (PEM).
pub struct TlsFiles<'a> {
    pub cert: &'a str,
    pub key: &'a str,
}

impl PgServer {
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// [`PgServer::start`], also listening on 127.0.0.1 (a free port) with `ssl=on` and this
    /// certificate; `url` is then the TCP one, `postgresql://vlbiflow@127.0.0.1:PORT/postgres`.
    #[allow(dead_code)]
    pub fn start_tls(tls: TlsFiles<'_>) -> PgServer {
        PgServer::start_with(Some(tls))
    }

    fn start_with(tls: Option<TlsFiles<'_>>) -> PgServer {
        let bin = pg_bin();
        let root = rustix::process::getuid().is_root();
        let dir = tempfile::Builder::new()
            .prefix("vlbiflow-pg-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let as_user = root.then(|| "postgres".to_string());
        if let Some(t) = &tls {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(dir.path().join("server.crt"), t.cert).unwrap();
            let key = dir.path().join("server.key");
            std::fs::write(&key, t.key).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        if root {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "chown: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut s = PgServer {
            dir,
            bin,
            as_user,
            url: String::new(),
        };
        let data = s.dir.path().join("data");
        s.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "vlbiflow",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let sock = s.dir.path().to_str().unwrap().to_string();
        // A free port for TCP: bound, read, released for the server.
        let port = match &tls {
            None => 5432,
            Some(_) => std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
        };
        let opts = match &tls {
            None => format!("-k {sock} -c listen_addresses='' -c fsync=off -p 5432"),
            Some(_) => format!(
                "-k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -p {port} -c ssl=on \
                 -c ssl_cert_file={sock}/server.crt -c ssl_key_file={sock}/server.key"
            ),
        };
        let log = s.dir.path().join("log");
        s.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        let host: String = sock
            .bytes()
            .map(|b| {
                if b == b'/' {
                    "%2F".to_string()
                } else {
                    (b as char).to_string()
                }
            })
            .collect();
        s.url = match &tls {
            None => format!("postgresql://vlbiflow@{host}:5432/postgres"),
            Some(_) => format!("postgresql://vlbiflow@127.0.0.1:{port}/postgres"),
        };
        s
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let path = self.bin.join(tool);
        let mut c = match &self.as_user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={u}"),
                    &format!("--regid={u}"),
                    "--init-groups",
                    "--",
                ])
                .arg(&path);
                c
            }
            None => Command::new(&path),
        };
        let out = c.args(args).current_dir(self.dir.path()).output().unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[allow(dead_code)]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let path = self.bin.join("pg_ctl");
        let mut c = match &self.as_user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={u}"),
                    &format!("--regid={u}"),
                    "--init-groups",
                    "--",
                ])
                .arg(&path);
                c
            }
            None => Command::new(&path),
        };
        let _ = c
            .args(["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}
