//! The command line's reference, generated from the clap definitions: docs/cli.md must equal what the
//! program prints (so it cannot drift), README's exit-code table must hold the same rows, completions
//! and man pages come out for every command.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn vlbiflow(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args(args)
        .output()
        .expect("run vlbiflow");
    assert!(
        out.status.success(),
        "vlbiflow {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn docs_cli_md_is_what_the_program_says() {
    let generated = vlbiflow(&["cli-reference"]);
    let file = std::fs::read_to_string(repo().join("docs/cli.md")).expect("docs/cli.md");
    if generated != file {
        let line = generated
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| generated.lines().count().min(file.lines().count()));
        panic!(
            "docs/cli.md differs from the program's own reference from line {}: regenerate it with\n  \
             cargo run --release -- cli-reference > docs/cli.md\nprogram: {:?}\nfile:    {:?}",
            line + 1,
            generated.lines().nth(line),
            file.lines().nth(line)
        );
    }
    // every subcommand has its section
    for sub in [
        "record",
        "xfer push",
        "net agent",
        "receive",
        "completions",
        "man",
    ] {
        assert!(
            generated.contains(&format!("\n## vlbiflow {sub}\n")),
            "no section for {sub}"
        );
    }
}

#[test]
fn readme_exit_codes_are_the_programs_table() {
    let generated = vlbiflow(&["cli-reference"]);
    let table = generated
        .split("\n## Exit codes\n")
        .nth(1)
        .expect("an exit-code section");
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| status") && !l.starts_with("| ---"))
        .collect();
    assert_eq!(rows.len(), 7, "{rows:?}");
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    for row in rows {
        assert!(
            readme.contains(row),
            "README.md's exit-code table lacks the row\n{row}"
        );
    }
}

#[test]
fn completions_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let script = vlbiflow(&["completions", shell]);
        for word in ["record", "xfer", "receive", "stream", "disk", "scan"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
}

#[test]
fn man_pages_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let listed = vlbiflow(&["man", "--out", dir.path().to_str().unwrap()]);
    let reference = vlbiflow(&["cli-reference"]);
    let commands = reference
        .lines()
        .filter(|l| l.starts_with("## vlbiflow "))
        .count();
    // the top page and one per command
    assert_eq!(listed.lines().count(), commands + 1, "{listed}");
    for page in [
        "vlbiflow.1",
        "vlbiflow-record.1",
        "vlbiflow-xfer-push.1",
        "vlbiflow-net-mesh-status.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page} is not a man page"
        );
    }
    let top = vlbiflow(&["man"]);
    assert!(
        top.contains(".TH vlbiflow"),
        "top page: {}",
        &top[..top.len().min(200)]
    );
}
