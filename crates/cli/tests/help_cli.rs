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

/// The lines of `text` that are its own prose, not clap's tables: the description above `Usage:` and what
/// follows the options (examples and notes, after `-V, --version`, the last option of every command).
fn own_text(path: &[String], text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let usage = lines.iter().position(|l| l.starts_with("Usage:")).unwrap();
    let version = lines
        .iter()
        .position(|l| l.trim_end().ends_with("Print version"))
        .unwrap_or_else(|| panic!("{path:?}: no -V, --version line"));
    // an empty line between the two parts: never part of one paragraph
    let mut own: Vec<String> = lines[..usage].iter().map(|l| l.to_string()).collect();
    own.push(String::new());
    own.extend(lines[version + 1..].iter().map(|l| l.to_string()));
    own
}

/// Help is read at 100 columns (clap's width when standard output is not a terminal). A line of the
/// source text longer than that is cut by clap, which is clean only for a paragraph that is one line
/// of prose: a paragraph broken by hand into lines of more than 100 columns gets a word or two alone
/// on a line after each, and an example command cut in two cannot be copied. So in the help as written
/// (rendered without wrapping), every line longer than 100 columns is a paragraph of its own and not
/// indented; and the lines of the command lists fit.
#[test]
fn help_texts_wrap_cleanly_at_100_columns() {
    let mut bad = Vec::new();
    for path in commands() {
        let text = help(&path, Some("100000"));
        let own = own_text(&path, &text);
        for (i, l) in own.iter().enumerate() {
            let width = l.chars().count();
            if width <= 100 {
                continue;
            }
            let alone = (i == 0 || own[i - 1].is_empty()) && own.get(i + 1).is_none_or(|n| n.is_empty());
            if l.starts_with(' ') || !alone {
                bad.push(format!("{path:?}: {width} columns: {l}"));
            }
        }
        let listed = text
            .lines()
            .skip_while(|l| *l != "Commands:")
            .take_while(|l| !l.is_empty());
        for l in listed.filter(|l| l.chars().count() > 100) {
            bad.push(format!(
                "{path:?}: command list, {} columns: {l}",
                l.chars().count()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "help lines that wrap badly at 100 columns:\n{}",
        bad.join("\n")
    );
}
