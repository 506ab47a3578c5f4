//! The dashboard in headless Chromium during a recording: the page loads, its script polls /status and the
//! DOM shows the recording in progress with its scan name; at 1400 px (a desktop) and 390 px (a phone) the
//! page fits the window without horizontal scrolling (the page's script records that on `<html data-fit>`),
//! with screenshots of both left in the test's temporary target directory.
//!
//! Needs Debian's `chromium` package (`apt-get install -y chromium`; scripts/test installs it as root).

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use vlbiflow_control::{spawn, RecorderEngine};

fn chromium() -> Option<PathBuf> {
    for c in [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ] {
        if std::path::Path::new(c).is_file() {
            return Some(c.into());
        }
    }
    None
}

#[test]
fn dashboard_shows_a_recording_in_progress() {
    let Some(browser) = chromium() else {
        panic!(
            "headless Chromium not found (/usr/bin/chromium): install it with `apt-get install -y chromium` \
             (scripts/test does when run as root)"
        );
    };
    let disks = Disks::new(2);
    let d = spawn(disks.config(""), Box::new(RecorderEngine)).unwrap();
    let mut ctl = Ctl::connect(d.control_addr);
    let port = free_udp_port();
    ctl.expect(
        &format!("input_stream=add:RDBE1:vdif:{FRAME}:50:42:lo:127.0.0.1:{port}:0"),
        "!input_stream = 0 : added : RDBE1 ;",
    );
    ctl.expect("input_stream=commit", "!input_stream = 0 : committed : 1 ;");
    ctl.expect(
        "record=on:60:dash1:exp:st",
        "!record = 0 : recording : exp_st_dash1 ;",
    );
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 0, 150);

    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| {
        let out = Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--virtual-time-budget=3000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("http://{}/", d.http_addr))
            .output()
            .expect("run chromium");
        assert!(
            out.status.success(),
            "chromium failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (w, h) in [(1400, 900), (390, 844)] {
        let size = format!("--window-size={w},{h}");
        let dom = run(&[size.clone(), "--dump-dom".into()]);
        assert!(
            dom.contains(r#"data-fit="yes""#),
            "at {w} px: {}",
            &dom[..dom.len().min(300)]
        );
        let png = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dashboard-{w}.png"));
        run(&[size, format!("--screenshot={}", png.display())]);
        assert!(std::fs::metadata(&png).unwrap().len() > 1000, "{}", png.display());
        eprintln!("screenshot at {w} px: {}", png.display());
    }
    let out = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("http://{}/", d.http_addr))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Filled in by the page's script from /status: the state badge, the scan, the stream and disk rows.
    assert!(
        dom.contains(r#"<span id="state" class="recording">recording</span>"#),
        "{dom}"
    );
    assert!(dom.contains("scan #1 exp_st_dash1"), "{dom}");
    assert!(dom.contains(r#"<td data-label="stream">RDBE1</td>"#), "{dom}");
    assert!(
        dom.contains(&format!(r#"<td data-label="address">127.0.0.1:{port} psn</td>"#)),
        "{dom}"
    );
    assert!(dom.contains(&format!("{}", disks.disk(1).display())), "{dom}");
    assert!(dom.contains("updated "), "the poll succeeded: {dom}");
    // The pool in the one wording of `vlbiflow status` and `record`, the rates with their window.
    assert!(
        dom.contains(" blocks free (") && dom.contains(" queued for a disk"),
        "{dom}"
    );
    assert!(dom.contains(" s average)"), "{dom}");
    ctl.expect("record=off", "!record = 0 : flushing : exp_st_dash1 ;");
    ctl.wait_state("off");
    d.stop();
}
