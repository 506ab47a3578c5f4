//! Spellings of the command line that changed: the old ones keep working for one release (clap aliases,
//! hidden from `--help`), with a warning naming the new one; and notes the argument parsers leave (a
//! duration given as a bare number) for the same warning once logging is set up.

use std::ffi::OsString;
use std::sync::Mutex;

/// Renamed flags: (command, old spelling, new spelling). The command is the subcommand path as typed,
/// `xfer push`; the old spelling is a hidden alias of the new flag in that command.
pub const FLAGS: &[(&str, &str, &str)] = &[
    // lists of VDIF thread IDs are --thread-ids everywhere (gen's --threads is a count)
    ("receive", "--threads", "--thread-ids"),
    ("relay", "--threads", "--thread-ids"),
    // time without data after which a receiver ends normally
    ("receive", "--idle", "--idle-timeout"),
    ("relay", "--idle", "--idle-timeout"),
    // bytes of payload per datagram of the transfer protocol, not a Mark6 block (record --block-size);
    // gen --payload is what the frames hold
    ("xfer push", "--block-size", "--payload-size"),
    ("xfer pull", "--block-size", "--payload-size"),
    ("xfer copy", "--block-size", "--payload-size"),
    // a list of sizes is --sizes (net lat has it); one size is --size
    ("net bw", "--size", "--sizes"),
];

static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Leaves a warning to be logged once logging is set up (argument parsers run before it is).
pub fn note(message: String) {
    if let Ok(mut n) = NOTES.lock() {
        n.push(message);
    }
}

/// A duration as `vlbiflow_units::parse_seconds` reads it; a bare number (the old spelling of flags that
/// took only seconds) is still read as seconds, with a note asking for a unit.
pub fn seconds_with_unit(s: &str) -> Result<f64, String> {
    let v = vlbiflow_units::parse_seconds(s)?;
    if s.trim().parse::<f64>().is_ok() {
        note(format!(
            "a duration without a unit ({s}) is read as seconds; write it with one ({s}s, 500ms, 5m)"
        ));
    }
    Ok(v)
}

/// [`seconds_with_unit`] as a [`std::time::Duration`].
pub fn duration_with_unit(s: &str) -> Result<std::time::Duration, String> {
    seconds_with_unit(s)
        .and_then(|v| std::time::Duration::try_from_secs_f64(v).map_err(|e| format!("{s:?}: {e}")))
}

/// The warnings for `args` (the process's arguments, program name first) given to the subcommand `path`:
/// one per old spelling used, then the notes the parsers left.
pub fn warnings(path: &str, args: &[OsString]) -> Vec<String> {
    let mut out = old_spellings(path, args);
    if let Ok(mut n) = NOTES.lock() {
        out.append(&mut n);
    }
    out
}

/// One warning per old spelling in `args` given to the subcommand `path`.
fn old_spellings(path: &str, args: &[OsString]) -> Vec<String> {
    let mut out = Vec::new();
    for a in args.iter().skip(1) {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        let flag = a.split_once('=').map_or(a, |(f, _)| f);
        for (cmd, old, new) in FLAGS {
            if *cmd == path && flag == *old && !out.iter().any(|w: &String| w.contains(old)) {
                out.push(format!(
                    "`{path} {old}` is now `{new}`; the old spelling will be removed in the next release"
                ));
            }
        }
    }
    out
}

/// The subcommand path of `m` as typed (`xfer push`).
pub fn path(m: &clap::ArgMatches) -> String {
    let mut names = Vec::new();
    let mut m = m;
    while let Some((name, sub)) = m.subcommand() {
        names.push(name);
        m = sub;
    }
    names.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn old_spellings_of_the_command_warn_once() {
        let w = old_spellings(
            "receive",
            &args("vlbiflow receive --threads 0 --threads=1 --idle 5s"),
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("--thread-ids"), "{w:?}");
        assert!(w[1].contains("--idle-timeout"), "{w:?}");
        // gen's --threads is a count, not renamed; after `--` nothing is a flag
        assert!(old_spellings("gen", &args("vlbiflow gen --threads 4")).is_empty());
        assert!(old_spellings("relay", &args("vlbiflow relay -- --threads")).is_empty());
    }

    #[test]
    fn bare_seconds_are_read_with_a_note() {
        assert_eq!(seconds_with_unit("10s"), Ok(10.0));
        assert_eq!(seconds_with_unit("500ms"), Ok(0.5));
        assert!(seconds_with_unit("ten").is_err());
        assert_eq!(seconds_with_unit("10"), Ok(10.0));
        let w = warnings("", &[]);
        assert!(w.iter().any(|w| w.contains("(10)")), "{w:?}");
    }
}
