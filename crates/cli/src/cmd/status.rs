//! `vlbiflow status`: the MonitorStatus view of a running `vlbiflow serve` — per stream rx packets, bytes,
//! drops, VDIF time and its offset from the wall clock; block pool and queue; per-disk write rate and fill.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use vlbiflow_control::client::http_get;
use vlbiflow_control::report::{render_monitor, StatusReport};

const EXAMPLES: &str = "\
Examples:
  vlbiflow status                 # once
  vlbiflow status --watch         # refresh in place every second (Ctrl-C to quit)
  vlbiflow status --json | jq .record

The same data is served as JSON on http://127.0.0.1:14280/status and shown live on http://127.0.0.1:14280/.";

/// Show the recorder daemon's live status (MonitorStatus-like), once or refreshing
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Daemon HTTP address
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:14280")]
    http: String,
    // access token (sent as Authorization: Bearer)
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
    /// Refresh in place every second until interrupted
    #[arg(long)]
    watch: bool,
    /// Print the status JSON instead
    #[arg(long, conflicts_with = "watch")]
    json: bool,
}

fn fetch(args: &Args, token: Option<&str>) -> anyhow::Result<(String, StatusReport)> {
    let (code, body) = http_get(&args.http, "/status", token, Duration::from_secs(5)).map_err(|e| {
        crate::cmd::ExitError::error(
            crate::cmd::exit::IO,
            format!(
                "cannot reach the daemon at {}: {e} (is `vlbiflow serve` running?)",
                args.http
            ),
        )
    })?;
    if code != 200 {
        // a missing or wrong token is the daemon refusing; anything else it answered, a failure
        let class = if code == 401 || code == 403 {
            crate::cmd::exit::REFUSED
        } else {
            crate::cmd::exit::PROBLEMS
        };
        return Err(crate::cmd::ExitError::error(
            class,
            format!("http://{}/status answered {code}: {}", args.http, body.trim()),
        ));
    }
    let r = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("http://{}/status: not status JSON: {e}", args.http))?;
    Ok((body, r))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let token = args.token.resolve()?;
    if !args.watch {
        let (body, r) = fetch(&args, token.as_deref())?;
        if args.json {
            outln!("{}", body.trim());
        } else {
            out!("{}", render_monitor(&r));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout();
    loop {
        let text = match fetch(&args, token.as_deref()) {
            Ok((_, r)) => render_monitor(&r),
            Err(e) => format!("{e}\n(retrying)\n"),
        };
        // Home, print over the previous frame, clear what is left below.
        let framed: String = text.lines().map(|l| format!("{l}\x1b[K\n")).collect();
        write!(out, "\x1b[H{framed}\x1b[J")?;
        out.flush()?;
        std::thread::sleep(Duration::from_secs(1));
    }
}
