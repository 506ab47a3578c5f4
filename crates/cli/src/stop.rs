//! Ctrl-C (SIGINT) and SIGTERM: the one handler of the process and the stop flag it sets.
//!
//! A process has one handler (the `ctrlc` crate allows no second), installed by the first call of
//! [`on_interrupt`] or [`exit_on_interrupt`]; later calls return the same flag. What the first interrupt
//! does is always the same: it sets the flag, which the command's loops watch to end cleanly. What a
//! second one does is the command's choice ([`Second`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::Context;

use crate::cmd::exit::INTERRUPTED;

/// What a second interrupt, while the command is still stopping, does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Second {
    /// Nothing more: the command ends when it has stopped.
    Wait,
    /// Exits at once with [`INTERRUPTED`], as users expect of a stuck process.
    Exit,
    /// Says this on stderr (on a line of its own), then exits at once with [`INTERRUPTED`].
    ExitSaying(&'static str),
}

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the handler (on the first call) and returns the stop flag it sets. An error if the handler
/// cannot be installed.
pub fn on_interrupt(second: Second) -> anyhow::Result<Arc<AtomicBool>> {
    if let Some(f) = FLAG.get() {
        return Ok(f.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || {
        if f.swap(true, Ordering::SeqCst) {
            match second {
                Second::Wait => return,
                Second::Exit => {}
                Second::ExitSaying(m) => eprintln!("\n{m}"),
            }
            std::process::exit(INTERRUPTED.into());
        }
    })
    .context("installing the Ctrl-C handler")?;
    Ok(FLAG.get_or_init(|| flag).clone())
}

/// For commands that have nothing to stop cleanly: the first interrupt exits at once with
/// [`INTERRUPTED`].
pub fn exit_on_interrupt() {
    if FLAG.set(Arc::new(AtomicBool::new(false))).is_ok() {
        let _ = ctrlc::set_handler(|| std::process::exit(INTERRUPTED.into()));
    }
}

/// Whether an interrupt has come (to tell a failure caused by stopping from another).
pub fn interrupted() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::SeqCst))
}
