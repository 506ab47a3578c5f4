//! Ctrl-C (SIGINT), SIGTERM and SIGHUP: the one handler of the process, the stop flag it sets and which
//! signal set it.
//!
//! A process has one handler, installed by the first call of [`on_interrupt`] or [`exit_on_interrupt`];
//! later calls return the same flag. The signals are delivered to a thread of their own (`vf-signals`,
//! through the `signal-hook` crate), which is told which signal came. What the first signal does is
//! always the same: it records the signal, sets the flag, which the command's loops watch to end cleanly,
//! and calls the functions given to [`on_stop`]. What a second one does is the command's choice
//! ([`Second`]).
//!
//! Which signal came decides the exit status of a command that runs until stopped (see
//! [`exit_status`]): SIGTERM, what `systemctl stop` and `kill` send, is a requested stop and ends with 0;
//! SIGINT (an operator's Ctrl-C) and SIGHUP (the terminal went away) are interruptions and end with 130.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

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

/// Which signal stopped the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C) or SIGHUP: an interruption.
    Interrupt,
    /// SIGTERM: a requested stop (`systemctl stop`, `kill`).
    Terminate,
}

/// A function called (once, on the signal thread) when the first signal comes.
type OnStop = Box<dyn FnOnce() + Send>;

struct State {
    flag: Arc<AtomicBool>,
    /// 0 until the first signal, then 1 for [`Signal::Interrupt`] or 2 for [`Signal::Terminate`]
    by: AtomicU8,
    /// `None` once the first signal has come (later functions are called at once)
    on_stop: Mutex<Option<Vec<OnStop>>>,
}

static STATE: OnceLock<State> = OnceLock::new();
/// Set by the call that installed the handler (a process has one).
static INSTALLED: OnceLock<()> = OnceLock::new();

fn state() -> &'static State {
    STATE.get_or_init(|| State {
        flag: Arc::new(AtomicBool::new(false)),
        by: AtomicU8::new(0),
        on_stop: Mutex::new(Some(Vec::new())),
    })
}

/// The signal thread's reaction to the first signal.
fn first(s: &State, signal: i32) {
    let by = if signal == SIGTERM { 2 } else { 1 };
    // the kind first, so a loop that sees the flag finds it
    s.by.store(by, Ordering::SeqCst);
    s.flag.store(true, Ordering::SeqCst);
    let calls = s.on_stop.lock().unwrap_or_else(|e| e.into_inner()).take();
    for f in calls.into_iter().flatten() {
        f();
    }
}

/// Installs the handler (on the first call) and returns the stop flag it sets. An error if the handler
/// cannot be installed.
pub fn on_interrupt(second: Second) -> anyhow::Result<Arc<AtomicBool>> {
    let s = state();
    if INSTALLED.set(()).is_err() {
        return Ok(s.flag.clone());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing the Ctrl-C handler")?;
    std::thread::Builder::new()
        .name("vf-signals".into())
        .spawn(move || {
            let s = state();
            for signal in signals.forever() {
                if !s.flag.load(Ordering::SeqCst) {
                    first(s, signal);
                    continue;
                }
                match second {
                    Second::Wait => continue,
                    Second::Exit => {}
                    Second::ExitSaying(m) => eprintln!("\n{m}"),
                }
                std::process::exit(INTERRUPTED.into());
            }
        })
        .context("starting the signal thread")?;
    Ok(s.flag.clone())
}

/// For commands that have nothing to stop cleanly: the first interrupt exits at once with
/// [`INTERRUPTED`].
pub fn exit_on_interrupt() {
    if INSTALLED.set(()).is_err() {
        return;
    }
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        let _ = std::thread::Builder::new()
            .name("vf-signals".into())
            .spawn(move || {
                if signals.forever().next().is_some() {
                    std::process::exit(INTERRUPTED.into());
                }
            });
    }
}

/// Calls `f` (on the signal thread) when the first signal comes, or at once if it has come: for a stop
/// that a flag cannot carry (a daemon's event loop). Needs [`on_interrupt`] to have installed the handler.
pub fn on_stop(f: impl FnOnce() + Send + 'static) {
    let mut calls = state().on_stop.lock().unwrap_or_else(|e| e.into_inner());
    match calls.as_mut() {
        Some(v) => v.push(Box::new(f)),
        None => {
            drop(calls);
            f();
        }
    }
}

/// Whether an interrupt has come (to tell a failure caused by stopping from another).
pub fn interrupted() -> bool {
    STATE.get().is_some_and(|s| s.flag.load(Ordering::SeqCst))
}

/// Which signal stopped the command, if one did.
pub fn stopped_by() -> Option<Signal> {
    match STATE.get()?.by.load(Ordering::SeqCst) {
        1 => Some(Signal::Interrupt),
        2 => Some(Signal::Terminate),
        _ => None,
    }
}

/// The exit status of a command that ended with `code`: a success after SIGINT or SIGHUP becomes
/// [`INTERRUPTED`] (130), so that a command running until stopped (`record`, `serve`, ...) tells an
/// interruption from a requested stop (SIGTERM: 0). Commands with a finite job already end with 130 when
/// a signal cuts them short; other failures keep their own status.
pub fn exit_status(code: ExitCode) -> ExitCode {
    if code == ExitCode::SUCCESS && stopped_by() == Some(Signal::Interrupt) {
        ExitCode::from(INTERRUPTED)
    } else {
        code
    }
}
