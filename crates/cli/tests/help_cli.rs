//! Every command's `--help`, as a user reads it: found by walking the command lists from `vlbiflow
//! --help` down, each with examples of that command.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// `vlbiflow PATH... --help` as a program reading it through a pipe gets it (wrapped at 100 columns when
/// `columns` is None).
fn help(path: &[String], columns: Option<&str>) -> String {
    let mut c = Command::new(BIN);
    c.args(path).arg("--help").env_remove("COLUMNS");
    if let Some(w) = columns {
        c.env("COLUMNS", w);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{path:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands in a help text's `Commands:` list (`help` left out).
fn subcommands(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// Every command path, the binary itself (`[]`) first.
fn commands() -> Vec<Vec<String>> {
    let mut all = Vec::new();
    let mut todo = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        for s in subcommands(&help(&path, Some("100000"))) {
            let mut p = path.clone();
            p.push(s);
            todo.push(p);
        }
        all.push(path);
    }
    all
}

#[test]
fn every_command_has_examples_of_itself() {
    let all = commands();
    assert!(all.len() > 30, "{all:?}");
    let mut missing = Vec::new();
    for path in &all {
        let text = help(path, None);
        let call = ["vlbiflow"]
            .into_iter()
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        // a line `vlbiflow PATH ...` below the `Examples:` heading
        let shown = text
            .lines()
            .skip_while(|l| *l != "Examples:")
            .skip(1)
            .any(|l| l.trim() == call || l.trim_start().starts_with(&format!("{call} ")));
        if !shown {
            missing.push(call);
        }
    }
    assert!(
        missing.is_empty(),
        "no Examples: section with the command itself in the help of {missing:?}"
    );
}
