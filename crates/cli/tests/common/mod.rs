//! Helpers shared by the CLI's integration tests (each test file includes this with `mod common;`).
#![allow(dead_code)] // not every test file uses every helper

use std::process::{Command, Output};

/// Runs `args[0]` with the rest as its arguments and returns what it printed.
pub fn run(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().expect("run")
}

/// Runs a command that must succeed (setting up namespaces, links, shapers); fails the test with its
/// standard error otherwise.
pub fn sh(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
