//! `vlbiflow ctl`: send Mark6 commands to a running `vlbiflow serve` (da-client's role): one-shot from the
//! arguments, from standard input, or interactively with line editing and history.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use vlbiflow_control::client::CommandClient;
use vlbiflow_control::proto::parse_reply;

const EXAMPLES: &str = "\
Examples:
  vlbiflow ctl 'record?'
  vlbiflow ctl 'input_stream=add:RDBE1:vdif:8224:50:42:lo:127.0.0.1:4001:0:0; input_stream=commit;'
  echo 'record=on:60:scan1:exp:st;' | vlbiflow ctl
  vlbiflow ctl --host recorder1:14242 --token-file ~/.vlbiflow-token   # interactive, with history
  vlbiflow ctl --wait-busy 60s 'scan_check?'   # after record=off: wait while the scan flushes

Each statement gets one reply line `!keyword = rc : ... ;`. The exit code is 0 when every reply's return \
code is 0 (done) or 1 (initiated), 1 otherwise. Return code 5 means busy, retry: e.g. `scan_check?` while \
the scan just stopped is still flushing (wait until `record?` says off, or let --wait-busy retry). Commands: input_stream, group, \
mstat?, record, scan_check?, rtime?, status?, evlbi?, help? (docs/control.md).";

/// Send Mark6 commands to the recorder daemon (one-shot, from stdin, or interactive)
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Statements to send, e.g. 'record=on:30:scan1:exp:st; record?'; none: read standard input
    /// (interactive when it is a terminal)
    commands: Vec<String>,
    /// Daemon command address
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:14242")]
    host: String,
    // access token (sent as auth=<token>; first)
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
    /// How long to wait for the daemon (10s, 500ms)
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = crate::renamed::seconds_with_unit)]
    timeout: f64,
    /// Send a statement again while it is answered 5 (busy), for up to this long (0: never)
    #[arg(long, value_name = "TIME", default_value = "0s", value_parser = crate::renamed::seconds_with_unit)]
    wait_busy: f64,
    /// Print the replies as one JSON object on standard output (each with its keyword, return code and
    /// fields) instead of the reply lines; not with the interactive prompt
    #[arg(long)]
    json: bool,
}

/// Return code 5: busy, retry.
const BUSY: u8 = 5;

fn ok_code(line: &str) -> bool {
    parse_reply(line).is_some_and(|r| r.code <= 1)
}

/// Where reply lines go: printed as they come, or kept for the JSON object (`--json`).
enum Replies {
    Print,
    Keep(Vec<String>),
}

impl Replies {
    fn push(&mut self, line: String) {
        match self {
            Replies::Print => outln!("{line}"),
            Replies::Keep(v) => v.push(line),
        }
    }
}

/// The `--json` object: the daemon's address, whether every reply was done or initiated (0 or 1), and
/// each reply line with its parts (keyword, whether it answers a query, return code, fields).
fn json(host: &str, all_ok: bool, lines: &[String]) -> serde_json::Value {
    let replies: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| match parse_reply(l) {
            Some(r) => serde_json::json!({
                "line": l,
                "keyword": r.keyword,
                "query": r.query,
                "code": r.code,
                "fields": r.fields,
            }),
            None => serde_json::json!({ "line": l }),
        })
        .collect();
    serde_json::json!({ "host": host, "ok": all_ok, "replies": replies })
}

fn send(
    client: &mut CommandClient,
    text: &str,
    all_ok: &mut bool,
    wait_busy: Duration,
    out: &mut Replies,
) -> anyhow::Result<()> {
    if wait_busy.is_zero() {
        for line in client.send(text)? {
            *all_ok &= ok_code(&line);
            out.push(line);
        }
        return Ok(());
    }
    // One statement at a time, so a busy one can be sent again on its own (statements end with ';').
    for st in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let deadline = std::time::Instant::now() + wait_busy;
        loop {
            let lines = client.send(&format!("{st};"))?;
            let busy = lines
                .iter()
                .any(|l| parse_reply(l).is_some_and(|r| r.code == BUSY));
            if busy && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            for line in lines {
                *all_ok &= ok_code(&line);
                out.push(line);
            }
            break;
        }
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let token = args.token.resolve()?;
    if args.json && args.commands.is_empty() && std::io::stdin().is_terminal() {
        crate::usage!(
            "--json needs the statements as arguments or on standard input, not the interactive prompt"
        );
    }
    if !(args.timeout > 0.0 && args.timeout < 86400.0) {
        crate::usage!("--timeout must be between 0 and 86400 seconds");
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    if !(args.wait_busy >= 0.0 && args.wait_busy < 86400.0) {
        crate::usage!("--wait-busy must be between 0 and 86400 seconds");
    }
    let wait_busy = Duration::from_secs_f64(args.wait_busy);
    let mut client = CommandClient::connect(&args.host, timeout).map_err(|e| {
        crate::cmd::ExitError::error(
            crate::cmd::exit::IO,
            format!(
                "cannot reach the daemon at {}: {e} (is `vlbiflow serve` running?)",
                args.host
            ),
        )
    })?;
    if let Some(t) = &token {
        let r = client.send(&format!("auth={t};"))?;
        if !r.iter().all(|l| ok_code(l)) {
            return Err(crate::cmd::ExitError::error(
                crate::cmd::exit::REFUSED,
                format!("token refused by {}: {}", args.host, r.join(" ")),
            ));
        }
    }
    let mut all_ok = true;
    let mut out = if args.json {
        Replies::Keep(Vec::new())
    } else {
        Replies::Print
    };
    if !args.commands.is_empty() {
        send(
            &mut client,
            &args.commands.join(" "),
            &mut all_ok,
            wait_busy,
            &mut out,
        )?;
    } else if std::io::stdin().is_terminal() {
        interactive(&mut client, &args.host)?;
    } else {
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            if !line.trim().is_empty() {
                send(&mut client, &line, &mut all_ok, wait_busy, &mut out)?;
            }
        }
    }
    if let Replies::Keep(lines) = &out {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json(&args.host, all_ok, lines))?
        );
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn interactive(client: &mut CommandClient, host: &str) -> anyhow::Result<()> {
    let mut rl = rustyline::DefaultEditor::new()?;
    let history = std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".vlbiflow_ctl_history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    eprintln!("connected to {host}; statements end with ';' or Enter; help? lists commands; Ctrl-D quits");
    loop {
        match rl.readline(&format!("{host}> ")) {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(line.as_str());
                let mut ok = true;
                if let Err(e) = send(client, &line, &mut ok, Duration::ZERO, &mut Replies::Print) {
                    eprintln!("vlbiflow ctl: {e}");
                    break;
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(h) = &history {
        let _ = rl.save_history(h);
    }
    Ok(())
}
