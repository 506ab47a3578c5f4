//! Progress on a terminal: status lines and bars redrawn in place (indicatif), on standard error or
//! standard output. They are drawn only when that stream is a terminal and the command was not asked
//! to be quiet; otherwise nothing is drawn and the lines of [`Progress::say`] are written as they come,
//! so what scripts and tests read is the same with or without it.

use std::io::{IsTerminal, Write};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The stream progress is drawn on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// The progress of one command: any number of lines and bars, cleared when dropped.
pub struct Progress {
    multi: Option<MultiProgress>,
    stream: Stream,
}

impl Progress {
    /// On standard error, drawn when `show` and standard error is a terminal.
    pub fn stderr(show: bool) -> Self {
        let on = show && std::io::stderr().is_terminal();
        Progress {
            multi: on.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
            stream: Stream::Stderr,
        }
    }

    /// On standard output, drawn when `show` and standard output is a terminal.
    pub fn stdout(show: bool) -> Self {
        let on = show && std::io::stdout().is_terminal();
        Progress {
            multi: on.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout())),
            stream: Stream::Stdout,
        }
    }

    /// Whether anything is drawn.
    pub fn is_drawn(&self) -> bool {
        self.multi.is_some()
    }

    /// A status line, below those added before.
    pub fn line(&self) -> Line {
        Line {
            bar: self.add("{msg}"),
            drawn: self.is_drawn(),
            stream: self.stream,
        }
    }

    /// A bar of 30 characters after `label` and before the message ([`ProgressBar::set_length`],
    /// [`ProgressBar::set_position`], [`ProgressBar::set_message`]).
    pub fn bar(&self, label: &str) -> ProgressBar {
        let bar = self.add("{prefix} {bar:30} {msg}");
        bar.set_prefix(label.to_owned());
        bar
    }

    fn add(&self, template: &str) -> ProgressBar {
        match &self.multi {
            Some(m) => {
                let bar = m.add(ProgressBar::new(0));
                bar.set_style(ProgressStyle::with_template(template).expect("progress template"));
                bar
            }
            None => ProgressBar::hidden(),
        }
    }

    /// A line that stays: above the progress when it is drawn, else written out.
    pub fn say(&self, line: &str) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(line);
            }
            None => write_line(self.stream, line),
        }
    }
}

/// Writes one line to `stream` (standard output as [`outln!`](crate::out) writes it).
fn write_line(stream: Stream, line: &str) {
    match stream {
        Stream::Stdout => outln!("{line}"),
        Stream::Stderr => {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}

/// A status line of a [`Progress`].
pub struct Line {
    bar: ProgressBar,
    drawn: bool,
    stream: Stream,
}

impl Line {
    /// Shows `text`: in place when the progress is drawn; otherwise written out as a line of its own
    /// when `keep` (the periodic lines a log keeps), else not at all.
    pub fn set(&self, text: String, keep: bool) {
        if self.drawn {
            self.bar.set_message(text);
        } else if keep {
            write_line(self.stream, &text);
        }
    }
}

impl Progress {
    /// Clears what is drawn (the lines come back at their next update).
    pub fn clear(&self) {
        if let Some(m) = &self.multi {
            let _ = m.clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}
