//! The archive on a real PostgreSQL server with `ssl=on` and a certificate from a CA made at test
//! time: `sslmode` in the URL is honoured (`disable`, `require`, `verify-ca`, `verify-full` with
//! `sslrootcert`), and the session's own row of `pg_stat_ssl` says whether it is on TLS.

mod common;

use common::pg::{PgServer, TlsFiles};
use common::tls::Ca;
use vlbiflow_mesh::archive::{Archive, Val};

/// Whether this archive's session is on TLS, as the server sees it.
fn session_ssl(url: &str) -> String {
    let mut a = Archive::open(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let rows = a
        .query("SELECT CASE WHEN ssl THEN 'on' ELSE 'off' END FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .unwrap();
    match &rows[..] {
        [row] => match &row[..] {
            [Val::Text(t)] => t.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn sslmode_is_honoured_against_a_tls_server() {
    let ca = Ca::new("vlbiflow test DB CA");
    // The certificate names db.example.org; the test connects to 127.0.0.1.
    let leaf = ca.leaf(&["db.example.org"]);
    let pg = PgServer::start_tls(TlsFiles {
        cert: &leaf.cert,
        key: &leaf.key,
    });
    let ca_file = pg.dir().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let ca_path = ca_file.display().to_string();
    let with = |q: &str| format!("{}?{q}", pg.url);

    assert_eq!(session_ssl(&with("sslmode=require")), "on");
    assert_eq!(
        session_ssl(&pg.url),
        "on",
        "the default, prefer, takes TLS when offered"
    );
    assert_eq!(session_ssl(&with("sslmode=disable")), "off");
    assert_eq!(
        session_ssl(&with(&format!("sslmode=verify-ca&sslrootcert={ca_path}"))),
        "on"
    );
    // The chain is good but the name is not: verify-full refuses.
    let e = Archive::open(&with(&format!("sslmode=verify-full&sslrootcert={ca_path}")))
        .err()
        .expect("verify-full with the wrong host name must be refused")
        .to_string();
    assert!(e.contains("connect to PostgreSQL"), "{e}");
    assert!(e.to_lowercase().contains("name"), "{e}");
    // A CA that did not sign the server's certificate: verify-ca refuses.
    let other = pg.dir().join("other-ca.pem");
    std::fs::write(&other, Ca::new("another CA").pem()).unwrap();
    let e = Archive::open(&with(&format!(
        "sslmode=verify-ca&sslrootcert={}",
        other.display()
    )))
    .err()
    .expect("verify-ca with another CA must be refused")
    .to_string();
    assert!(e.contains("certificate"), "{e}");
}
