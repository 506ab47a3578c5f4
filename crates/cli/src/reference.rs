//! The command line's own reference, generated from the clap definitions: shell completions
//! (clap_complete), man pages (clap_mangen) and docs/cli.md (a test fails when that file drifts).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};

use crate::cmd::exit;

#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  # bash, for this shell and for every new one
  source <(vlbiflow completions bash)
  vlbiflow completions bash > /etc/bash_completion.d/vlbiflow

  # zsh: a file named _vlbiflow in a directory of $fpath
  vlbiflow completions zsh > ~/.zfunc/_vlbiflow")]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  # The top page on standard output, read with man
  vlbiflow man | man -l -

  # A page for every command and subcommand (vlbiflow.1, vlbiflow-xfer-push.1, ...)
  vlbiflow man --out /usr/local/share/man/man1")]
pub struct ManArgs {
    /// Write a page for every command and subcommand into this directory instead of printing the top page
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Writes the completion script for `shell` to standard output.
pub fn completions(mut cli: Command, a: CompletionsArgs) {
    clap_complete::generate(a.shell, &mut cli, "vlbiflow", &mut crate::out::Stdout);
}

/// Writes the top man page to standard output, or every page into `--out`; returns the pages written.
pub fn man(cli: Command, a: ManArgs) -> anyhow::Result<Vec<PathBuf>> {
    match a.out {
        None => {
            clap_mangen::Man::new(cli).render(&mut crate::out::Stdout)?;
            Ok(Vec::new())
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
            let mut written = Vec::new();
            write_pages(&dir, cli, &mut written)?;
            Ok(written)
        }
    }
}

fn write_pages(dir: &Path, cmd: Command, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut cmd = cmd;
    cmd.build();
    let mut stack = vec![cmd];
    while let Some(c) = stack.pop() {
        let name = page_name(&c);
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(c.clone().name(name.clone())).render(&mut buf)?;
        std::fs::write(&path, buf).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        written.push(path);
        stack.extend(
            c.get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                .cloned(),
        );
    }
    Ok(())
}

/// `vlbiflow xfer push` -> `vlbiflow-xfer-push`.
fn page_name(c: &Command) -> String {
    c.get_bin_name().unwrap_or_else(|| c.get_name()).replace(' ', "-")
}

/// docs/cli.md: every command with its usage and a table of its arguments, then the exit statuses.
pub fn markdown(cli: Command) -> String {
    let mut cli = cli;
    cli.build();
    let mut s = String::new();
    s.push_str(
        "# Command-line reference\n\n\
         Generated from the command definitions by `vlbiflow cli-reference > docs/cli.md`; a test fails when\n\
         this file and the program disagree. Each command's `--help` has the same text and examples.\n\
         Sizes, rates and durations take units (`256MiB`, `2.1Gbps`, `10s`).\n\n",
    );
    let mut order = Vec::new();
    collect(&cli, &mut order);
    s.push_str("## Commands\n\n");
    for c in &order[1..] {
        let name = c.get_bin_name().unwrap_or_default();
        let _ = writeln!(s, "- [`{name}`](#{}): {}", anchor(name), one_line(c.get_about()));
    }
    s.push('\n');
    for c in &order[1..] {
        command_section(&mut s, c);
    }
    s.push_str(
        "## Exit codes\n\nEvery command exits with one of these:\n\n| status | meaning |\n| --- | --- |\n",
    );
    for (code, meaning) in exit::TABLE {
        let _ = writeln!(s, "| {code} | {} |", cell(meaning));
    }
    s
}

fn collect(c: &Command, out: &mut Vec<Command>) {
    out.push(c.clone());
    for sub in c.get_subcommands() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            collect(sub, out);
        }
    }
}

fn command_section(s: &mut String, c: &Command) {
    let name = c.get_bin_name().unwrap_or_default();
    let _ = writeln!(s, "## {name}\n");
    if let Some(about) = c.get_long_about().or(c.get_about()) {
        let _ = writeln!(s, "{}\n", about.to_string().trim());
    }
    let usage = c.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(s, "```text\n{usage}\n```\n");
    let args: Vec<&Arg> = c
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_action(), ArgAction::Help | ArgAction::Version))
        .collect();
    if args.is_empty() {
        return;
    }
    s.push_str("| argument | default | meaning |\n| --- | --- | --- |\n");
    for a in args {
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let flag = matches!(
            a.get_action(),
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
        );
        let default = if defaults.is_empty() || flag {
            String::new()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let mut meaning = one_line(a.get_help());
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        if !values.is_empty() && matches!(a.get_action(), ArgAction::Set | ArgAction::Append) {
            let _ = write!(meaning, " (one of: {})", values.join(", "));
        }
        let _ = writeln!(s, "| {} | {default} | {} |", cell(&spelling(a)), cell(&meaning));
    }
    s.push('\n');
}

/// How an argument is written: `--rate <RATE>`, `-d, --disk <GLOB>`, `<FILES>...`.
fn spelling(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| v.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let takes_value = matches!(a.get_action(), ArgAction::Set | ArgAction::Append);
    let many =
        matches!(a.get_action(), ArgAction::Append) || a.get_num_args().is_some_and(|n| n.max_values() > 1);
    if a.is_positional() {
        return format!("`{value}{}`", if many { "..." } else { "" });
    }
    let mut names = Vec::new();
    if let Some(c) = a.get_short() {
        names.push(format!("-{c}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    let mut out = names.join(", ");
    if takes_value {
        let _ = write!(out, " {value}");
    }
    if many && !a.is_positional() && matches!(a.get_action(), ArgAction::Append) {
        out.push_str(" (repeatable)");
    }
    format!("`{out}`")
}

fn one_line(s: Option<&clap::builder::StyledStr>) -> String {
    s.map(|t| t.to_string().lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// GitHub's heading anchor of `## vlbiflow xfer push`.
fn anchor(name: &str) -> String {
    name.to_lowercase().replace(' ', "-")
}
