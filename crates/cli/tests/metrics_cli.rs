//! Every daemon's `/metrics` read from the real process and checked by `promtool check metrics`; the
//! alerting rules checked and unit-tested by `promtool`; every metric the dashboards and rules use named
//! in docs/metrics.md.
//!
//! promtool comes with Debian's `prometheus` package (scripts/test installs it). Without it these tests
//! skip with a message, except under `CI=true`, where they fail.

mod common;
#[path = "common/proc.rs"]
mod proc;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proc::Proc;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// The repository's top directory.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether promtool can run; without it, fails under `CI=true` and says why it skips otherwise.
fn promtool_present(test: &str) -> bool {
    let ok = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: promtool is missing (apt-get install prometheus); CI=true requires it"
        );
        eprintln!("{test}: skipped: promtool is missing (apt-get install prometheus)");
    }
    ok
}

/// Runs promtool with `args`, `input` on its standard input; fails the test with what it said unless
/// it succeeds.
fn promtool(args: &[&str], input: &str) -> String {
    let mut c = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?}: {said}\n--- input:\n{input}"
    );
    said
}

/// `GET /metrics` with an optional bearer token: (status line, body).
fn scrape(addr: &str, token: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(proc::PATIENCE)).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// Checks a `/metrics` body: promtool accepts it, and the common families are there.
fn check(body: &str) {
    for family in [
        "# TYPE vlbiflow_build_info gauge",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge",
        "# TYPE process_start_time_seconds gauge",
    ] {
        assert!(body.contains(family), "{family} missing from\n{body}");
    }
    promtool(&["check", "metrics"], body);
}

#[test]
fn serve_metrics_pass_promtool() {
    if !promtool_present("serve_metrics_pass_promtool") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("disk0")).unwrap();
    let cfg = dir.path().join("vlbiflow.toml");
    std::fs::write(
        &cfg,
        format!(
            "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nopen_group = \"main\"\n\
             metrics_token = \"read-only-metrics-0123\"\n[groups]\nmain = [\"{}/disk*\"]\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--config"]).arg(&cfg);
    let mut p = Proc::spawn("serve", cmd);
    let line = p.wait_line("listening control=");
    let http = line.rsplit("http=").next().unwrap().trim().to_string();
    let (status, body) = scrape(&http, Some("read-only-metrics-0123"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("# TYPE vlbiflow_disk_free_bytes gauge"), "{body}");
    check(&body);
}

#[test]
fn xfer_serve_metrics_pass_promtool() {
    if !promtool_present("xfer_serve_metrics_pass_promtool") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (state, root) = (dir.path().join("state"), dir.path().join("root"));
    std::fs::create_dir_all(&root).unwrap();
    let token = dir.path().join("metrics.token");
    std::fs::write(&token, "xfer-metrics-token-0123\n").unwrap();
    let d = common::xfer_serve(
        &state,
        &root,
        "127.0.0.1:0",
        &[
            "--metrics",
            "127.0.0.1:0",
            "--metrics-token-file",
            token.to_str().unwrap(),
        ],
    );
    let m = d.metrics.clone().unwrap();
    assert!(scrape(&m, None).0.contains(" 401 "));
    let (status, body) = scrape(&m, Some("xfer-metrics-token-0123"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        body.contains("# TYPE vlbiflow_xfer_sent_bytes_total counter"),
        "{body}"
    );
    check(&body);
}

#[test]
fn hub_metrics_pass_promtool() {
    if !promtool_present("hub_metrics_pass_promtool") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mesh.toml");
    std::fs::write(
        &cfg,
        "[mesh]\nname = \"t\"\n[[host]]\nname = \"A\"\naddress = \"127.0.0.1\"\n[[host]]\nname = \"B\"\n\
         address = \"127.0.0.2\"\n[[test]]\nname = \"lat\"\nkind = \"latency\"\ninterval = \"PT60S\"\n\
         slot = \"PT2S\"\nrequests = 10\n",
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["net", "hub", "--config"])
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0", "--archive"])
        .arg(dir.path().join("mesh.sqlite"));
    let mut p = Proc::spawn("hub", cmd);
    let line = p.wait_line("hub of mesh t on http://");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .to_string();
    let (status, body) = scrape(&addr, None);
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("vlbiflow_mesh_archive_up 1"), "{body}");
    check(&body);
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    if !promtool_present("alert_rules_pass_promtool_check_and_their_unit_tests") {
        return;
    }
    promtool(&["check", "rules", "deploy/prometheus/alerts.yml"], "");
    promtool(&["test", "rules", "deploy/prometheus/alerts_test.yml"], "");
    // the scrape configuration, with alerts.yml as its rules
    promtool(&["check", "config", "deploy/prometheus/prometheus.yml"], "");
}

/// Names that look like metrics (`vlbiflow_...`, `process_...`) in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && word(b[i]) {
            i += 1;
        }
        if i > start {
            let w = &text[start..i];
            let preceded = start > 0 && (b[start - 1] == b'$' || b[start - 1] == b'.');
            if !preceded && (w.starts_with("vlbiflow_") || w.starts_with("process_")) {
                out.push(w.to_string());
            }
        } else {
            i += 1;
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_metric_the_dashboards_and_rules_use_is_in_docs_metrics_md() {
    let docs = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/grafana"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    files.push(repo().join("deploy/prometheus/alerts.yml"));
    files.push(repo().join("deploy/prometheus/alerts_test.yml"));
    let mut used = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for name in metric_names(&text) {
            // A histogram's or summary's series would add suffixes; these are all plain families.
            assert!(
                docs.contains(&format!("`{name}`")),
                "{}: {name} is not in docs/metrics.md",
                f.display()
            );
            used += 1;
        }
    }
    assert!(used > 20, "only {used} metric names found");
}

/// `serve --metrics-token-file`: the file's token reads `/metrics` (as the configuration's
/// `metrics_token` does), another token does not.
#[test]
fn serve_metrics_token_file_reads_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("vlbiflow.toml");
    std::fs::write(&cfg, "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n").unwrap();
    let token = dir.path().join("metrics.token");
    std::fs::write(&token, "serve-metrics-token-0123\n").unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--require-token", "--token-file"])
        .arg(write_token(dir.path()))
        .arg("--config")
        .arg(&cfg)
        .arg("--metrics-token-file")
        .arg(&token);
    let mut p = Proc::spawn("serve", cmd);
    let line = p.wait_line("listening control=");
    let http = line.rsplit("http=").next().unwrap().trim().to_string();
    let (status, body) = scrape(&http, Some("serve-metrics-token-0123"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("# TYPE vlbiflow_build_info gauge"), "{body}");
    let (status, _) = scrape(&http, Some("another-token-0123456"));
    assert!(!status.contains(" 200 "), "{status}");
    let (status, _) = scrape(&http, None);
    assert!(!status.contains(" 200 "), "{status}");
}

/// An access token file (mode 0600) in `dir`.
fn write_token(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("access.token");
    std::fs::write(&p, "serve-access-token-0123456\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}
