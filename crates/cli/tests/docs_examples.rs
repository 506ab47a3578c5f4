//! Every shell example of README.md, docs/*.md and docs/bench/*.md (the ```sh blocks) runs as written, on loopback and
//! temporary directories, or is listed here as skipped with the reason. An example is a command line (with
//! its `\` continuations, without its trailing comment).
//!
//! How an example is adapted, everywhere (`Env::adapt`): the placeholder hosts (far/corr/jive/hub
//! .example.org, `corr`, `station`, 10.x.y.z, 0.0.0.0) become 127.0.0.1; every well-known port of the
//! examples (4001, 14233, 46227, 46230, 14242, 14280, 8090, 47123) becomes a free port of this run, the
//! same number for the same service; absolute paths under /tmp, /mnt, /data, /local, /scratch and /var/tmp
//! move into a temporary directory; `vlbiflow ctl` and `vlbiflow status` are pointed at the daemon of this
//! run. Rates, durations and counts are scaled down where an example names them (`scale` at each use),
//! so the whole file runs in about a minute on two cores. Long-running commands run in the background:
//! the test waits for their port (or a line), never for a while, and stops them with SIGINT.
//!
//! The test checks exit statuses and the files the examples say they make, not the wording of their
//! output. A new example fails the test until it is run or skipped here.

#[path = "common/proc.rs"]
mod proc;

use proc::{free_port, output_within, wait_port, Proc};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// One command line of a ```sh block.
#[derive(Debug)]
struct Example {
    file: String,
    line: usize,
    text: String,
    /// "run" or the reason it is skipped, once the test has dealt with it.
    done: RefCell<Option<String>>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The part of `line` before a `#` comment that is outside quotes.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let b = line.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || b[i - 1].is_ascii_whitespace()) => {
                return &line[..i];
            }
            _ => {}
        }
    }
    line
}

/// The command lines of every ```sh block in `text`.
fn examples_in(file: &str, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim_end();
        if t.starts_with("```") {
            in_sh = t == "```sh" || t.starts_with("```sh "); // "```sh install": still an example
            pending = None;
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = strip_comment(t).trim_end();
        let (start, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = code.strip_suffix('\\') {
            acc.push_str(head.trim());
            acc.push(' ');
            pending = Some((start, acc));
            continue;
        }
        acc.push_str(code.trim());
        let acc = acc.trim().to_string();
        if !acc.is_empty() {
            out.push(Example {
                file: file.to_string(),
                line: start,
                text: acc,
                done: RefCell::new(None),
            });
        }
    }
    out
}

/// Every example of README.md, docs/*.md and docs/bench/*.md.
struct Docs(Vec<Example>);

impl Docs {
    fn load() -> Docs {
        let mut files = vec!["README.md".to_string()];
        let mut docs: Vec<String> = ["docs", "docs/bench"]
            .iter()
            .flat_map(|dir| {
                std::fs::read_dir(repo().join(dir))
                    .unwrap_or_else(|e| panic!("{dir}/: {e}"))
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".md"))
                    .map(move |n| format!("{dir}/{n}"))
            })
            .collect();
        docs.sort();
        files.extend(docs);
        let mut all = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(repo().join(&f)).expect("read");
            all.extend(examples_in(&f, &text));
        }
        Docs(all)
    }

    fn find(&self, file: &str, prefix: &str) -> &Example {
        self.0
            .iter()
            .find(|e| e.file == file && e.done.borrow().is_none() && e.text.starts_with(prefix))
            .unwrap_or_else(|| {
                panic!(
                    "{file}: no example (left) starting with {prefix:?}; if it changed, update \
                     crates/cli/tests/docs_examples.rs"
                )
            })
    }

    /// The next example of `file` starting with `prefix`, to run.
    fn take(&self, file: &str, prefix: &str) -> String {
        let e = self.find(file, prefix);
        *e.done.borrow_mut() = Some("run".into());
        eprintln!("=== {}:{}: {}", e.file, e.line, e.text);
        e.text.clone()
    }

    /// The next example of `file` starting with `prefix` is not run, for `why`.
    fn skip(&self, file: &str, prefix: &str, why: &str) {
        let e = self.find(file, prefix);
        *e.done.borrow_mut() = Some(format!("skipped: {why}"));
    }

    /// Every example of `file` not dealt with yet is not run, for `why` (at least one).
    fn skip_rest(&self, file: &str, why: &str) {
        let mut n = 0;
        for e in self
            .0
            .iter()
            .filter(|e| e.file == file && e.done.borrow().is_none())
        {
            *e.done.borrow_mut() = Some(format!("skipped: {why}"));
            n += 1;
        }
        assert!(n > 0, "{file}: no examples left to skip");
    }

    /// Fails if an example was neither run nor skipped; prints the account.
    fn all_dealt_with(&self) {
        let mut left = Vec::new();
        for e in &self.0 {
            match &*e.done.borrow() {
                Some(how) => eprintln!("{}:{}: {how}: {}", e.file, e.line, e.text),
                None => left.push(format!("{}:{}: {}", e.file, e.line, e.text)),
            }
        }
        assert!(
            left.is_empty(),
            "examples neither run nor skipped by crates/cli/tests/docs_examples.rs:\n{}",
            left.join("\n")
        );
    }
}

/// Replaces `from` by `to` in `text`, asserting nothing: where an example no longer names `from` it runs
/// unscaled (slower, still checked).
fn scale(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut t = text.to_string();
    for (from, to) in pairs {
        t = t.replace(from, to);
    }
    t
}

/// A temporary directory, the ports of this run and the environment the examples run in.
struct Env {
    dir: tempfile::TempDir,
    ports: RefCell<BTreeMap<String, u16>>,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        // the examples' top directories, as a host has them
        for d in ["tmp", "mnt", "data", "local", "scratch", "var/tmp"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        Env {
            dir,
            ports: RefCell::new(BTreeMap::new()),
        }
    }

    fn t(&self) -> &Path {
        self.dir.path()
    }

    /// `rel` under the temporary directory.
    fn path(&self, rel: &str) -> PathBuf {
        self.t().join(rel.trim_start_matches('/'))
    }

    /// The port of this run standing for service `key` (a port number of the examples, or a name); a
    /// port of this run stands for itself, so adapting twice changes nothing.
    fn port(&self, key: &str) -> u16 {
        let mut ports = self.ports.borrow_mut();
        if let Ok(p) = key.parse::<u16>() {
            if ports.values().any(|v| *v == p) {
                return p;
            }
        }
        *ports.entry(key.to_string()).or_insert_with(free_port)
    }

    fn addr(&self, key: &str) -> String {
        format!("127.0.0.1:{}", self.port(key))
    }

    /// The example as it runs here (see the file's header).
    fn adapt(&self, text: &str) -> String {
        let mut t = text.replace("cargo run --release --", "vlbiflow");
        // hosts with a port: the correlator, hub and this host share the port numbers of one service;
        // the other hosts of the examples get their own
        for host in [
            "0.0.0.0:",
            "127.0.0.1:",
            "jive.example.org:",
            "corr.example.org:",
            "hub.example.org:",
        ] {
            t = replace_ports(&t, host, |p| self.port(p));
        }
        for host in ["10.1.2.3:", "10.0.0.5:", "10.0.0.2:"] {
            t = replace_ports(&t, host, |p| self.port(&format!("{host}{p}")));
        }
        // hosts without a port: the service's default
        t = replace_bare_host(&t, "far.example.org", &self.addr("14233"));
        for (host, key) in [
            ("corr.example.org/", "46230"),
            ("'station/", "station"),
            (" corr/", "46230"),
        ] {
            let lead = &host[..host.len() - host.trim_start_matches(['\'', ' ']).len()];
            t = t.replace(host, &format!("{lead}{}/", self.addr(key)));
        }
        // absolute paths into the temporary directory
        let base = self.t().display().to_string();
        for p in ["/tmp/", "/mnt", "/data", "/local", "/scratch", "/var/tmp/"] {
            for lead in [' ', '\'', '=', '"'] {
                t = t.replace(&format!("{lead}{p}"), &format!("{lead}{base}{p}"));
            }
        }
        t = t.replace(
            "docs/vlbiflow.example.toml",
            &format!("{base}/vlbiflow.example.toml"),
        );
        t = t.replace(
            "vlbiflow ctl",
            &format!("vlbiflow ctl --host {}", self.addr("14242")),
        );
        t = t.replace(
            "vlbiflow status",
            &format!("vlbiflow status --http {}", self.addr("14280")),
        );
        t
    }

    /// `sh -c TEXT` (adapted), in the temporary directory, with the built vlbiflow first on the path and
    /// every state and archive under the temporary directory.
    fn sh(&self, text: &str) -> Command {
        let bin_dir = Path::new(BIN).parent().expect("bin dir");
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(text)
            .current_dir(self.t())
            .env("PATH", path)
            .env("HOME", self.t())
            .env("XDG_STATE_HOME", self.path("state"))
            .env("XDG_DATA_HOME", self.path("share"))
            .env("XDG_CONFIG_HOME", self.path("config"));
        c
    }

    /// Runs an (adapted) example to its end; asserts its exit status.
    fn run_code(&self, text: &str, code: i32) {
        let text = self.adapt(text);
        eprintln!("--> {text}");
        let out = output_within(&text, self.sh(&text));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{text}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn run(&self, text: &str) {
        self.run_code(text, 0)
    }

    /// Starts an (adapted) example in the background (`exec`, so signals reach vlbiflow itself).
    fn bg(&self, name: &str, text: &str) -> Proc {
        let text = self.adapt(text.trim_end_matches('&').trim_end());
        eprintln!("--> (background) {text}");
        Proc::spawn(name, self.sh(&format!("exec {text}")))
    }

    /// Asserts `rel` exists under the temporary directory and is not empty.
    fn made(&self, rel: &str) {
        let p = self.path(rel);
        let len = std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .len();
        assert!(len > 0 || p.is_dir(), "{} is empty", p.display());
    }
}

/// `host` not followed by `:` (a port of its own) replaced by `with`.
fn replace_bare_host(t: &str, host: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = t;
    while let Some(i) = rest.find(host) {
        out.push_str(&rest[..i]);
        let after = &rest[i + host.len()..];
        if after.starts_with(':') {
            out.push_str(host);
        } else {
            out.push_str(with);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Every `HOST:PORT` (`host` ends with `:`) as `127.0.0.1:map(PORT)`.
fn replace_ports(t: &str, host: &str, map: impl Fn(&str) -> u16) -> String {
    let mut out = String::new();
    let mut rest = t;
    while let Some(i) = rest.find(host) {
        out.push_str(&rest[..i]);
        let after = &rest[i + host.len()..];
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            out.push_str(host);
        } else {
            out.push_str(&format!("127.0.0.1:{}", map(&after[..n])));
        }
        rest = &after[n..];
    }
    out.push_str(rest);
    out
}

/// A few thousand frames with packet sequence numbers into `port` (test traffic, not an example).
fn feed(env: &Env, key: &str, count: u32) {
    env.run(&format!(
        "vlbiflow gen --dest {} --psn --pps 1000 --count {count} --payload noise --quiet",
        env.addr(key)
    ));
}

fn readme_demo_and_tests(d: &Docs) {
    let env = Env::new();
    let demo = d.take("README.md", "cargo run --release -- demo");
    env.run(&format!("{demo} --duration 2 --rate 200Mbps"));
    d.skip(
        "README.md",
        "./scripts/test",
        "the test suite itself (it runs this test)",
    );
}

fn readme_gen_record_check(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    env.run(&d.take(f, "vlbiflow gen --output /tmp/t.vdif"));
    env.made("tmp/t.vdif");
    env.run(&d.take(f, "mkdir -p /tmp/d/0"));
    let record = d.take(f, "vlbiflow record --stream a=vdif@127.0.0.1:4001,psn");
    let mut rec = env.bg("record", &scale(&record, &[("--duration 12", "--duration 5")]));
    wait_port(&mut rec, env.port("4001"), true);
    let gen = d.take(f, "vlbiflow gen --dest 127.0.0.1:4001 --rate 4Gbps");
    env.run(&scale(
        &gen,
        &[
            ("--rate 4Gbps", "--rate 100Mbps"),
            ("--duration 10", "--duration 2"),
        ],
    ));
    assert_eq!(rec.finish(), Some(0), "record");
    env.run(&d.take(f, "vlbiflow check t_xx_001 --disk '/tmp/d/*'"));
    env.run(&d.take(f, "vlbiflow check t_xx_001 --disk '/tmp/d/*' --stats --plot"));
    env.made("spectrum.png");
    env.run(&d.take(f, "vlbiflow gather t_xx_001"));
    env.made("t_xx_001.vdif");
    env.run(&d.take(f, "vlbiflow ls /tmp/d/*"));
    d.skip(
        f,
        "pip install",
        "installs the Python package from the network (crates/python has its own tests)",
    );
}

fn readme_net(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    let mut resp = env.bg("responder", &d.take(f, "vlbiflow net responder"));
    wait_port(&mut resp, env.port("14233"), false);
    let bw = d.take(f, "vlbiflow net bw far.example.org --sizes 64,1472,8192");
    env.run(&format!(
        "{} --count 200",
        scale(&bw, &[("--wait 0:40:1", "--wait 0:40:20")])
    ));
    env.made("sweep.png");
    let zero = d.take(
        f,
        "vlbiflow net bw far.example.org --sizes 1472,8192 --find-zero-loss",
    );
    env.run(&format!(
        "{zero} --trial-duration 0.2 --resolution 0.25 --max-rate 200Mbps"
    ));
    env.run(&format!(
        "{} --count 50",
        d.take(f, "vlbiflow net lat far.example.org")
    ));
    env.made("lat.svg");
    env.run(&format!(
        "{} --duration 0.5",
        d.take(f, "vlbiflow net tcp far.example.org")
    ));
    env.run(&d.take(f, "vlbiflow net history"));
    env.made("history.png");
    // what receiving costs: every transport this host offers, scaled to half a second each
    let short = "--duration 0.5 --repeats 1";
    let eff = d.take(f, "vlbiflow net efficiency far.example.org --plot");
    env.run(&format!("{eff} {short}"));
    env.made("eff.png");
    let lofar = d.take(f, "vlbiflow net efficiency far.example.org --streams 50");
    env.run(&format!(
        "{} {short} --transports udp,tcp",
        scale(&lofar, &[("--rate 6Gbps", "--rate 200Mbps")])
    ));
    // the two reports the redraw reads, made as bench/efficiency.sh makes them (scaled)
    for (loss, file) in [("0", "loss-0.json"), ("1%", "loss-1.json")] {
        env.run(&format!(
            "vlbiflow net efficiency far.example.org --transports udp {short} --path-loss {loss} --json > {file}"
        ));
    }
    env.run(&d.take(f, "vlbiflow net efficiency --from loss-0.json"));
    env.made("loss.png");
    let cap = d.take(f, "vlbiflow net capacity far.example.org");
    env.run(&format!(
        "{cap} --pairs 20 --trains 2 --train 256 --min-train-mb 1"
    ));
    d.skip(
        f,
        "vlbiflow net capacity far.example.org --hops",
        "needs routers between the hosts that answer TTL-limited trains; loopback has none",
    );
    assert_eq!(resp.interrupt(), Some(130), "net responder");
    for p in [
        "vlbiflow net hub",
        "vlbiflow net agent",
        "vlbiflow net mesh status",
        "vlbiflow net mesh runs",
    ] {
        d.skip(
            f,
            p,
            "needs mesh.toml naming real hosts and a shared token file (docs/mesh.md); \
             bench/mesh-accept.sh runs the mesh in namespaces as root",
        );
    }
    for p in [
        "vlbiflow pathemu",
        "ip netns exec vf-pe-b",
        "ip netns exec vf-pe-a",
    ] {
        d.skip(
            f,
            p,
            "needs root for network namespaces and TUN devices (pathemu_cli.rs runs it as root)",
        );
    }
}

/// The station records and forwards, the correlator receives, an edge host relays, a scan is replayed.
fn readme_realtime(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    for i in 0..4 {
        std::fs::create_dir_all(env.path(&format!("mnt/disk{i}"))).unwrap();
    }
    std::fs::create_dir_all(env.path("data")).unwrap();
    let mut recv = env.bg("receive", &d.take(f, "vlbiflow receive --listen 0.0.0.0:46227"));
    wait_port(&mut recv, env.port("46227"), true);
    let record = d.take(f, "vlbiflow record --stream a=vdif@0.0.0.0:4001,psn");
    let mut rec = env.bg("record", &format!("{record} --duration 4"));
    wait_port(&mut rec, env.port("4001"), true);
    feed(&env, "4001", 2000);
    assert_eq!(rec.finish(), Some(0), "record");
    // the edge host listens on its own port here (on loopback it cannot share the correlator's)
    let relay = d.take(f, "vlbiflow relay --listen 0.0.0.0:46227");
    let relay = relay.replace(
        "--listen 0.0.0.0:46227",
        &format!("--listen {}", env.addr("edge")),
    );
    let mut relay = env.bg("relay", &relay);
    wait_port(&mut relay, env.port("edge"), true);
    env.run(&d.take(f, "vlbiflow play ek051_ef_no0001"));
    assert_eq!(relay.interrupt(), Some(130), "relay");
    assert_eq!(recv.interrupt(), Some(130), "receive");
    env.made("data/ek051_ef_no0001.vdif");
    assert!(env.path("fills.txt").exists(), "no fill log");
}

fn realtime_md(d: &Docs) {
    let env = Env::new();
    let f = "docs/realtime.md";
    for i in 0..4 {
        std::fs::create_dir_all(env.path(&format!("mnt/disk{i}"))).unwrap();
    }
    std::fs::create_dir_all(env.path("data")).unwrap();
    std::fs::create_dir_all(env.path("tmp")).unwrap();
    let mut recv = env.bg("receive", &d.take(f, "vlbiflow receive --listen 0.0.0.0:46227"));
    wait_port(&mut recv, env.port("46227"), true);
    let record = d.take(f, "vlbiflow record --stream a=vdif@0.0.0.0:4001,psn");
    let mut rec = env.bg("record", &format!("{record} --duration 4"));
    wait_port(&mut rec, env.port("4001"), true);
    feed(&env, "4001", 2000);
    assert_eq!(rec.finish(), Some(0), "record");
    assert_eq!(recv.interrupt(), Some(130), "receive");
    env.made("data/ek051_ef_no0001.vdif");
    // a FIFO output needs its reader
    let fifo = env.path("tmp/ef.fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    let _reader = Proc::spawn("fifo reader", {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("exec cat '{}' > /dev/null", fifo.display()));
        c
    });
    let mut recv2 = env.bg(
        "receive vdif",
        &d.take(f, "vlbiflow receive --listen 0.0.0.0:4001"),
    );
    wait_port(&mut recv2, env.port("4001"), true);
    feed(&env, "4001", 500);
    assert_eq!(recv2.interrupt(), Some(130), "receive to a FIFO");
    for (name, prefix) in [
        ("relay", "vlbiflow relay --listen 0.0.0.0:46227 --to"),
        ("relay reorder", "vlbiflow relay --listen 0.0.0.0:46227 --reorder"),
    ] {
        let mut r = env.bg(name, &d.take(f, prefix));
        wait_port(&mut r, env.port("46227"), true);
        assert_eq!(r.interrupt(), Some(130), "{name}");
    }
    // the replay of a recorded scan, from the recording above (under /mnt/disk* here), to a sink
    let mut sink = env.bg("sink", "vlbiflow sink --listen 10.0.0.2:46227");
    wait_port(&mut sink, env.port("10.0.0.2:46227"), true);
    let play = d.take(f, "vlbiflow play ek051_ef_no0001");
    env.run(&play.replace("'/mnt/disks/1/*/data'", "'/mnt/disk*'"));
    assert_eq!(sink.interrupt(), Some(130), "sink");
    // a frame file covering 12:30:00-12:30:12 (small frames), replayed from 12:30:10
    env.run(
        "vlbiflow gen --output /data/scan.vdif --threads 2 --pps 100 --frame-size 1056 --count 2400 \
         --start 2026-03-01T12:30:00Z --quiet",
    );
    let mut sink = env.bg("sink", "vlbiflow sink --listen 127.0.0.1:4001");
    wait_port(&mut sink, env.port("4001"), true);
    env.run(&d.take(f, "vlbiflow play /data/scan.vdif"));
    assert_eq!(sink.interrupt(), Some(130), "sink");
}

fn xfer_examples(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    std::fs::create_dir_all(env.path("mnt/raid")).unwrap();
    std::fs::create_dir_all(env.path("data/exp1")).unwrap();
    std::fs::create_dir_all(env.path("scratch")).unwrap();
    // where the operator pulls to (pull writes into an existing directory)
    std::fs::create_dir_all(env.path("local/exp1")).unwrap();
    for n in ["a", "b"] {
        env.run(&format!(
            "vlbiflow gen --output /data/exp1/{n}.vdif --pps 1000 --count 200 --quiet"
        ));
    }
    for m in ["1", "2"] {
        for i in ["0", "1"] {
            std::fs::create_dir_all(env.path(&format!("mnt/disks/{m}/{i}/data"))).unwrap();
        }
    }
    // a recorded scan on the station's disks (test data, not an example)
    let rec_scan = |scan: &str, secs: u32| {
        env.bg(
            scan,
            &format!(
                "vlbiflow record --stream a=vdif@127.0.0.1:4001,psn --disk '/mnt/disks/*/*/data' \
                 --scan {scan} --duration {secs}"
            ),
        )
    };
    let mut rec = rec_scan("exp1_st_no0001", 3);
    wait_port(&mut rec, env.port("4001"), true);
    feed(&env, "4001", 1000);
    assert_eq!(rec.finish(), Some(0), "record");

    let mut serve = env.bg("xfer serve", &d.take(f, "vlbiflow xfer serve"));
    wait_port(&mut serve, env.port("46230"), false);
    // the station's daemon, serving its disks (for pull and copy by scan name; copies may go to the
    // correlator, here on loopback: docs/xfer.md says the station's operator allows it with --relay-to)
    let mut station = env.bg(
        "station",
        &format!(
            "vlbiflow xfer serve --listen {} --root data=/mnt --relay-to 127.0.0.0/8",
            env.addr("station")
        ),
    );
    wait_port(&mut station, env.port("station"), false);
    env.run(&d.take(f, "vlbiflow xfer push /data/exp1 corr.example.org/data"));
    env.made("mnt/raid/exp1/a.vdif");
    env.run(&d.take(f, "vlbiflow xfer push --scan exp1_st_no0001"));
    env.made("mnt/raid/exp1/exp1_st_no0001.vdif");
    // --follow: pushed while recorded
    let mut rec2 = rec_scan("exp1_st_no0002", 4);
    wait_port(&mut rec2, env.port("4001"), true);
    let follow = env.bg(
        "push --follow",
        &d.take(f, "vlbiflow xfer push --scan exp1_st_no0002"),
    );
    feed(&env, "4001", 1000);
    assert_eq!(rec2.finish(), Some(0), "record");
    assert_eq!(follow.finish(), Some(0), "push --follow");
    env.made("mnt/raid/exp1/exp1_st_no0002.vdif");
    env.run(&d.take(f, "vlbiflow xfer pull --scan exp1_st_no0001"));
    env.run(&d.take(f, "vlbiflow xfer history"));
    assert_eq!(serve.interrupt(), Some(130), "xfer serve");

    // docs/xfer.md, against its own daemon with two roots
    let f = "docs/xfer.md";
    let mut serve = env.bg("xfer serve", &d.take(f, "vlbiflow xfer serve"));
    wait_port(&mut serve, env.port("46230"), false);
    env.run(&d.take(f, "vlbiflow xfer push /data/exp1/*.vdif"));
    env.run(&d.take(
        f,
        "vlbiflow xfer push --scan exp1_st_no0001 --disk '/mnt/disks/*/*/data' corr",
    ));
    env.run(&d.take(f, "vlbiflow xfer pull --scan exp1_st_no0001"));
    env.made("local/exp1/exp1_st_no0001.vdif");
    env.run(&d.take(f, "vlbiflow xfer copy --scan exp1_st_no0001"));
    env.run(&d.take(
        f,
        "vlbiflow xfer push --scan exp1_st_no0001 --disk '/mnt/disks/*/*/data' --follow",
    ));
    assert_eq!(serve.interrupt(), Some(130), "xfer serve");
    assert_eq!(station.interrupt(), Some(130), "station's xfer serve");
}

fn readme_recorder_daemon(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    env.run(&d.take(f, "mkdir -p /tmp/vlbiflow-disks/0"));
    // the example configuration, with this run's disks and ports
    let cfg = std::fs::read_to_string(repo().join("docs/vlbiflow.example.toml")).unwrap();
    let base = env.t().display().to_string();
    let cfg = cfg
        .replace("/tmp/vlbiflow-disks", &format!("{base}/tmp/vlbiflow-disks"))
        .replace("127.0.0.1:14242", &env.addr("14242"))
        .replace("127.0.0.1:14280", &env.addr("14280"));
    std::fs::write(env.path("vlbiflow.example.toml"), cfg).unwrap();
    let mut serve = env.bg("serve", &d.take(f, "vlbiflow serve --config"));
    wait_port(&mut serve, env.port("14242"), false);
    env.run(&d.take(f, "vlbiflow ctl 'input_stream=add"));
    let on = d.take(f, "vlbiflow ctl 'record=on:30:");
    env.run(&on.replace("record=on:30:", "record=on:8:"));
    let gen = d.take(f, "vlbiflow gen --dest 127.0.0.1:4001 --rate 1Gbps");
    env.run(&scale(
        &gen,
        &[
            ("--rate 1Gbps", "--rate 100Mbps"),
            ("--duration 10", "--duration 2"),
        ],
    ));
    env.run(&d.take(f, "vlbiflow status"));
    env.run(&d.take(f, "echo 'record=off;' | vlbiflow ctl"));
    env.run(&d.take(f, "vlbiflow ctl --wait-busy 30s"));
    assert_eq!(serve.interrupt(), Some(130), "serve");
    env.made("tmp/vlbiflow-disks/0/exp_st_scan1.vdif");
}

fn jive5ab_and_python_md(d: &Docs) {
    let env = Env::new();
    let f = "docs/jive5ab.md";
    d.skip(
        f,
        "JIVE5AB=",
        "needs a jive5ab build (scripts/jive5ab-fixtures.sh, run by hand)",
    );
    // jive5ab's side: a sink on its port
    let mut sink = env.bg("sink", "vlbiflow sink --listen 127.0.0.1:46227 --psn");
    wait_port(&mut sink, env.port("46227"), true);
    let gen = d.take(f, "vlbiflow gen --dest 127.0.0.1:46227");
    env.run(&scale(&gen, &[("--count 156250", "--count 1562")]));
    assert_eq!(sink.interrupt(), Some(130), "sink");

    let f = "docs/python.md";
    let pip = "installs the Python package from the network (scripts/test installs it with this line into a \
               fresh venv and runs crates/python's tests)";
    let wheel = "builds and installs the wheel (scripts/test does, into a venv without cargo, and runs this \
                 page's Python examples from it)";
    d.skip(f, "pip install \"pip>=21.3\" && pip install ./crates/python", pip);
    d.skip(f, "pip install \"maturin", wheel);
    d.skip(f, "pip install target/wheels/", wheel);
    d.skip(
        f,
        "cargo build --release",
        "the test runs the vlbiflow it was built with",
    );
    d.skip(f, "python3 -m venv", pip);
    d.skip(f, "pip install \"pip>=21.3\" && pip install ./crates/python", pip);
    d.skip(f, "pip install matplotlib", pip);
    env.run(&d.take(f, "rm -rf /tmp/pydemo"));
    d.skip(
        f,
        "export PATH",
        "the test puts the built vlbiflow first on the path",
    );
    let mut rec = env.bg(
        "record",
        &d.take(f, "vlbiflow record --stream a=vdif@127.0.0.1:47123"),
    );
    d.skip(f, "sleep 1", "the test waits for the recorder's port instead");
    wait_port(&mut rec, env.port("47123"), true);
    env.run(&d.take(f, "vlbiflow gen --dest 127.0.0.1:47123"));
    d.skip(f, "wait", "the test waits for the recorder itself");
    assert_eq!(rec.finish(), Some(0), "record");
    env.run(&d.take(f, "vlbiflow ls '/tmp/pydemo/d/*'"));
    d.skip_rest(
        f,
        "a Python decode benchmark over two virtual environments (bench/python_decode.py)",
    );
}

fn readme_reference(d: &Docs) {
    let env = Env::new();
    let f = "README.md";
    env.run(&d.take(f, "vlbiflow completions bash"));
    env.made("vlbiflow.bash");
    env.run(&d.take(f, "vlbiflow man --out man1"));
    env.made("man1/vlbiflow-record.1");
}

#[test]
fn every_shell_example_in_the_docs_runs() {
    let d = Docs::load();
    assert!(d.0.len() > 50, "only {} examples found", d.0.len());
    readme_demo_and_tests(&d);
    readme_gen_record_check(&d);
    readme_net(&d);
    readme_realtime(&d);
    realtime_md(&d);
    xfer_examples(&d);
    readme_recorder_daemon(&d);
    jive5ab_and_python_md(&d);
    readme_reference(&d);
    d.skip_rest(
        "docs/bench/efficiency.md",
        "benchmarks as root for minutes (bench/efficiency.sh) and a redraw of their JSON",
    );
    d.skip_rest(
        "docs/bench/xfer.md",
        "benchmarks through the path emulator as root, minutes each (bench/xfer*.sh)",
    );
    let tls = "the private CA of the TLS set-up (openssl writes keys and certificates for real host \
         names): crates/mesh/tests/hub_tls.rs makes the same chain (a CA, a hub certificate it signs) with \
         rcgen, serves the hub on it, syncs an agent trusting the CA and delivers an https webhook";
    for p in [
        "openssl req -x509",
        "openssl req -newkey",
        "printf 'subjectAltName",
        "openssl x509 -req",
        "openssl verify",
        "vlbiflow net hub --config mesh.toml --listen 0.0.0.0:8090 --keys-file /etc/vlbiflow/mesh.keys --tls-cert",
        "vlbiflow net agent --name Ef --hub https://",
        "curl --cacert mesh-ca.pem",
    ] {
        d.skip("docs/mesh.md", p, tls);
    }
    d.skip_rest(
        "docs/mesh.md",
        "the mesh acceptance run, as root in namespaces (bench/mesh-accept.sh)",
    );
    d.skip_rest(
        "docs/operations.md",
        "installs the package and manages systemd services (root, systemd as PID 1); the \
         --check-config of every deploy/config example runs in service.rs",
    );
    let collect = "station daemons on other hosts with recorded scans and an experiment file naming them: \
         crates/cli/tests/collect_cli.rs runs xfer ls, xfer collect --follow (which pulls recording scans \
         with pull --follow), --status and a rerun against two real daemons, bench/collect.sh twelve behind emulated paths";
    d.skip("README.md", "vlbiflow xfer ls 'ef.example.org", collect);
    d.skip(
        "README.md",
        "vlbiflow xfer collect --config r41c.toml --follow",
        collect,
    );
    d.skip(
        "README.md",
        "vlbiflow xfer collect --config r41c.toml --status",
        collect,
    );
    d.skip_rest("docs/collect.md", collect);
    d.skip_rest(
        "docs/pathemu.md",
        "needs root for network namespaces and TUN devices (pathemu_cli.rs runs it as root)",
    );
    d.all_dealt_with();
}

#[test]
fn examples_are_parsed_with_continuations_and_without_comments() {
    let text = "x\n```sh\n# a comment\nvlbiflow a \\\n    --b 'c # d'   # note\n\nvlbiflow e\n```\n```\nnot sh\n```\n";
    let ex = examples_in("f.md", text);
    let got: Vec<(usize, &str)> = ex.iter().map(|e| (e.line, e.text.as_str())).collect();
    assert_eq!(got, [(4, "vlbiflow a --b 'c # d'"), (7, "vlbiflow e")]);
}
