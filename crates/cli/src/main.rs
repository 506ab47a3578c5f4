//! `vlbiflow`: one binary, git-style subcommands. Each subcommand lives in `cmd/<name>.rs` as a clap `Args`
//! struct and a `run` function; the work itself is done by the library crates.

#![forbid(unsafe_code)]

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[macro_use]
mod out;
mod cmd;
mod logging;
mod progress;
mod reference;
mod renamed;
mod service;
mod stop;

use vlbiflow_units as units;

const EXAMPLES: &str = "\
Examples:
  # The whole chain on loopback: simulated backend, recorder, check (10 s at 1 Gb/s)
  vlbiflow demo

  # Record a station's stream to four disks, check the scan, move it to the correlator
  vlbiflow record --stream a=vdif@0.0.0.0:4001,psn --disk '/mnt/disk*' --scan exp_st_no0001
  vlbiflow check exp_st_no0001 --disk '/mnt/disk*'
  vlbiflow xfer push --scan exp_st_no0001 --disk '/mnt/disk*' corr.example.org/data/exp

Each command has its own examples: vlbiflow COMMAND --help.";

#[derive(Parser)]
#[command(
    name = "vlbiflow",
    version,
    about = "Simulate, record, check and move VLBI (VDIF/Mark5B) data streams"
)]
#[command(propagate_version = true, arg_required_else_help = true, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Shape of log lines on standard error: text (RFC 3339 UTC timestamps; syslog priority prefixes
    /// instead when standard error is the systemd journal) or json (one object per line)
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text, value_name = "FORMAT")]
    log_format: logging::LogFormat,
    /// Which log events to write: error, warn, info, debug, trace, or a filter such as
    /// `info,vlbiflow::xfer=debug` (default: $RUST_LOG, else info)
    #[arg(long, global = true, value_name = "FILTER")]
    log_level: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a whole chain on built-in defaults over loopback into a temporary directory
    Demo(cmd::demo::Args),
    /// Simulated VDIF backend: send time-stamped frames to UDP destinations or to a file
    Gen(cmd::gen::Args),
    /// Null receiver: count and discard UDP datagrams, with per-second rates and PSN loss
    Sink(cmd::sink::Args),
    /// Record VDIF/Mark5B UDP streams to Mark6 scatter-gather or FlexBuff scans across disks
    Record(cmd::record::Args),
    /// Check a scan or frame files: continuity, loss, headers, time range, statistics
    Check(cmd::check::Args),
    /// Reassemble a scatter-gather or FlexBuff scan into one frame file or standard output
    Gather(cmd::gather::Args),
    /// List the scans found on disks
    Ls(cmd::ls::Args),
    /// Run the recorder daemon: Mark6 command port, HTTP status/metrics and a live dashboard
    Serve(cmd::serve::Args),
    /// Send Mark6 commands to the recorder daemon (one-shot, from stdin, or interactive)
    Ctl(cmd::ctl::Args),
    /// Show the recorder daemon's live status (MonitorStatus-like), once or refreshing
    Status(cmd::status::Args),
    /// Measure the network: UDP loss and jitter, latency, TCP, capacity; mesh, archive
    Net(cmd::net::Args),
    /// Correlator side of e-VLBI: receive, reorder, deliver one continuous stream with fill
    Receive(cmd::receive::Args),
    /// Relay a stream (net2net): receive, optionally reorder, fan out restamped and paced
    Relay(cmd::relay::Args),
    /// Replay a recording (disk2net) to a UDP destination at its original or a set rate
    Play(cmd::play::Args),
    /// Emulate a long, lossy path (delay, jitter, loss, rate, queue) between two namespaces
    Pathemu(cmd::pathemu::Args),
    /// Move files and scans to a correlator: verified, resumable, authenticated, over UDP
    Xfer(cmd::xfer::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(reference::CompletionsArgs),
    /// Print the man page, or write one for every command into a directory
    Man(reference::ManArgs),
    /// Print the command-line reference in Markdown (docs/cli.md)
    #[command(hide = true)]
    CliReference,
}

fn main() -> ExitCode {
    // `--version` also names the xfer protocol version, which peers must share
    let long_version = format!(
        "{} (xfer protocol {})",
        env!("CARGO_PKG_VERSION"),
        vlbiflow_xfer_proto::wire::VERSION
    );
    let command = Cli::command().long_version(&*Box::leak(long_version.into_boxed_str()));
    let matches = command.clone().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let json = wants_json(&matches);
    if let Err(e) = logging::init(cli.log_format, cli.log_level.as_deref()) {
        eprintln!("vlbiflow: error: {e}");
        return ExitCode::from(cmd::exit::USAGE);
    }
    for w in renamed::warnings(&renamed::path(&matches), &std::env::args_os().collect::<Vec<_>>()) {
        tracing::warn!("{w}");
    }
    // Commands without a Ctrl-C handler of their own end at once on Ctrl-C or SIGTERM, with 130 like
    // those that stop cleanly (the others install theirs; only one handler per process).
    if matches!(
        cli.command,
        Command::Check(_) | Command::Gather(_) | Command::Ls(_) | Command::Status(_) | Command::Ctl(_)
    ) {
        stop::exit_on_interrupt();
    }
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::Gen(a) => cmd::gen::run(a),
        Command::Sink(a) => cmd::sink::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Gather(a) => cmd::gather::run(a),
        Command::Ls(a) => cmd::ls::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Ctl(a) => cmd::ctl::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Net(a) => cmd::net::run(a),
        Command::Pathemu(a) => cmd::pathemu::run(a),
        Command::Receive(a) => cmd::receive::run(a),
        Command::Relay(a) => cmd::relay::run(a),
        Command::Play(a) => cmd::play::run(a),
        Command::Xfer(a) => cmd::xfer::run(a),
        Command::Completions(a) => {
            reference::completions(command, a);
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(a) => reference::man(command, a).map(|pages| {
            for p in pages {
                outln!("{}", p.display());
            }
            ExitCode::SUCCESS
        }),
        Command::CliReference => {
            out!("{}", reference::markdown(command));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        // a command that runs until stopped ends with 0 on SIGTERM, 130 on Ctrl-C (stop::exit_status)
        Ok(code) => stop::exit_status(code),
        // the reader of standard output has gone (frames or a summary written to a closed pipe)
        Err(e) if out::is_closed_stdout(&e) => ExitCode::from(out::CLOSED),
        Err(e) => {
            // One line, naming what went wrong (each cause once); the exit status by its class
            // (cmd::exit), usage errors with 2 like clap's own; with --json also a JSON object on stdout.
            let code = cmd::exit_code(&e);
            if json {
                out::json_error(&e, code);
            }
            eprintln!(
                "{}vlbiflow: error: {}",
                logging::error_prefix(),
                out::error_line(&e)
            );
            ExitCode::from(code)
        }
    }
}

/// Whether the (innermost) subcommand was given `--json`.
fn wants_json(m: &clap::ArgMatches) -> bool {
    let mut m = m;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    matches!(m.try_get_one::<bool>("json"), Ok(Some(true)))
}
