//! The whole chain as a station runs it, in separate processes: `gen` over UDP to `record` across four
//! disks, then `check`, `gather` and `ls`; the generator's own `--output` file is the reference.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run vlbiflow")
}

use vlbiflow_testkit::net::free_udp_port;

/// The frames every run below generates: two threads, 2000 frames/s, 9000 frames, a fixed start, noise,
/// and every 1000th frame left out (as a lossy network would).
const GEN_ARGS: &[&str] = &[
    "--threads",
    "2",
    "--pps",
    "2000",
    "--count",
    "9000",
    "--start",
    "2026-03-01T12:00:00Z",
    "--payload",
    "noise",
    "--drop-every",
    "1000",
    "--quiet",
];

fn record_scan(dir: &Path, scan: &str) -> Vec<PathBuf> {
    let disks: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("disk{i}"))).collect();
    for d in &disks {
        std::fs::create_dir_all(d).unwrap();
    }
    let port = free_udp_port();
    let stream = format!("a=vdif@127.0.0.1:{port},psn");
    let mut args = vec![
        "record".to_string(),
        "--stream".into(),
        stream,
        "--scan".into(),
        scan.into(),
        "--block-size".into(),
        "1MB".into(),
        "--json".into(),
    ];
    for d in &disks {
        args.push("--disk".into());
        args.push(d.to_str().unwrap().into());
    }
    let mut recorder = bin()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder prints its streams once it listens; wait for that line instead of sleeping.
    let mut stderr = recorder.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    use std::io::Read;
    while !String::from_utf8_lossy(&seen).contains("stream a") {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "recorder exited early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let dest = format!("127.0.0.1:{port}");
    let mut gen_args = vec!["gen", "--dest", &dest, "--psn"];
    gen_args.extend_from_slice(GEN_ARGS);
    let out = run(&gen_args);
    assert!(
        out.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SIGTERM: the recorder must flush and finish a consistent scan.
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(recorder.id() as i32, libc::SIGTERM) };
    let mut stdout = recorder.stdout.take().unwrap();
    let mut json = String::new();
    stdout.read_to_string(&mut json).unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(recorder.wait().unwrap().success(), "{rest}");
    let meta: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}\n{rest}"));
    assert_eq!(meta["complete"], true, "{rest}");
    let c = &meta["streams"][0]["counters"];
    assert_eq!(c["packets"], 8991, "{rest}");
    // Frames 999, 1999, ..., 8999 are left out; the last of them ends the stream, so no receiver can
    // tell it from the end: 8 are visible as lost.
    assert_eq!(c["lost"], 8, "the recorder sees the PSNs left out: {rest}");
    disks
}

#[test]
fn recorded_scan_checks_with_exact_gaps_and_gathers_to_the_generators_file() {
    let dir = tempfile::tempdir().unwrap();
    let disks = record_scan(dir.path(), "e2e_xx_001");
    let disk_glob = format!("{}/disk*", dir.path().display());

    // check: exactly the frames left out, one per gap, in thread 1 (odd frame indices).
    let out = run(&["check", "e2e_xx_001", "--disk", &disk_glob, "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "missing frames are data errors");
    assert_eq!(report["frames"], 8991, "{report}");
    assert_eq!(report["missing"], 8, "{report}");
    let loss = report["loss_fraction"].as_f64().unwrap();
    assert!((loss - 8.0 / 8999.0).abs() < 1e-9, "{loss}");

    // gather: byte for byte what the generator writes to a file with the same settings.
    let reference = dir.path().join("reference.vdif");
    let mut gen_args = vec!["gen", "--output", reference.to_str().unwrap()];
    gen_args.extend_from_slice(GEN_ARGS);
    assert!(run(&gen_args).status.success());
    let gathered = dir.path().join("gathered.vdif");
    let out = run(&[
        "gather",
        "e2e_xx_001",
        "--disk",
        &disk_glob,
        "-o",
        gathered.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (
        std::fs::read(&reference).unwrap(),
        std::fs::read(&gathered).unwrap(),
    );
    assert_eq!(a.len(), 8991 * 8224);
    assert!(a == b, "gathered scan differs from the generator's file");

    // ls: the scan, complete, with its stream.
    let out = run(&["ls", &disks[0].to_string_lossy(), &disks[1].to_string_lossy()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("e2e_xx_001") && text.contains("complete"), "{text}");

    // A copy with one corrupted block header: reported with file and offset, the rest still checked.
    let copy = dir.path().join("copy");
    let mut victim = None;
    for d in &disks {
        let to = copy.join(d.file_name().unwrap());
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            if e.file_name() == "e2e_xx_001.vdif"
                && victim.is_none()
                && e.metadata().unwrap().len() > 2_000_000
            {
                victim = Some(to.join(e.file_name()));
            }
        }
    }
    let victim = victim.expect("a disk with at least two blocks");
    let mut bytes = std::fs::read(&victim).unwrap();
    // The second block's header: after the 20-byte file header and the first block (its wb_size).
    let first_wb = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
    let off = 20 + first_wb;
    bytes[off + 4..off + 8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    std::fs::write(&victim, &bytes).unwrap();
    let out = run(&[
        "check",
        "e2e_xx_001",
        "--disk",
        &format!("{}/disk*", copy.display()),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0));
    let name = victim.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        text.contains(&name) && text.contains(&off.to_string()),
        "names file and offset {off}: {text}"
    );
}
