//! `vlbiflow serve`: the recorder daemon. A Mark6-compatible command port, HTTP status, Prometheus metrics
//! and a dashboard, around the same recorder engine as `vlbiflow record`.

use std::path::PathBuf;
use std::process::ExitCode;

use vlbiflow_control::config::{ConfigFile, DaemonConfig};
use vlbiflow_control::RecorderEngine;

use crate::usage;

const EXAMPLES: &str = "\
Examples:
  # On built-in defaults (commands on 127.0.0.1:14242, dashboard on http://127.0.0.1:14280/):
  vlbiflow serve --config docs/vlbiflow.example.toml

  # Reachable from the station network: a token is then required on both ports (the file's
  # first line; mode 0600; or set VLBIFLOW_TOKEN)
  vlbiflow serve --config /etc/vlbiflow.toml --control 0.0.0.0:14242 --http 0.0.0.0:14280 \\
      --token-file /etc/vlbiflow/token

  # The token on loopback too (other users of this host may not command the recorder)
  vlbiflow serve --config /etc/vlbiflow.toml --token-file /etc/vlbiflow/token --require-token

  # Prometheus scrapes GET /metrics with a read-only token of its own
  vlbiflow serve --config /etc/vlbiflow.toml --token-file /etc/vlbiflow/token \\
      --metrics-token-file /etc/vlbiflow/metrics.token

Then, from another terminal:
  vlbiflow ctl 'input_stream=add:RDBE1:vdif:8224:50:42:lo:127.0.0.1:4001:0:0; input_stream=commit;'
  vlbiflow ctl 'record=on:30:scan1:exp:st;'
  vlbiflow status --watch

  # jive5ab's FlexBuff dialect for the Field System (commands on 127.0.0.1:2620):
  vlbiflow serve --config /etc/vlbiflow.toml --dialect jive5ab

The command set, the mapping of Mark6 input_stream fields onto UDP sockets and the configuration are \
described in docs/control.md, the jive5ab dialect in docs/jive5ab-dialect.md. SIGINT/SIGTERM stop the daemon; a recording is stopped and flushed first.";

/// Run the recorder daemon: Mark6 command port, HTTP status/metrics and dashboard.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// Configuration file (TOML); without it, built-in defaults (no disk group, no stream)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check a configuration file, print a one-line summary and exit (2 and the error if it is wrong)
    #[arg(long, value_name = "FILE", exclusive = true)]
    check_config: Option<PathBuf>,
    /// Command port address, overriding the configuration (default 127.0.0.1:14242)
    #[arg(long, value_name = "ADDR")]
    control: Option<String>,
    /// HTTP address, overriding the configuration (default 127.0.0.1:14280)
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    // access token, overriding the configuration (required when listening beyond loopback)
    #[command(flatten)]
    token: crate::cmd::token::TokenArgs,
    /// Require the token on loopback addresses too (by default only beyond loopback)
    #[arg(long)]
    require_token: bool,
    /// Command connections from this address block need no token (repeatable; added to the
    /// configuration's `allow`): for clients that cannot send one, such as the Field System
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    allow: Vec<vlbiflow_guard::net::Prefix>,
    /// Read-only token that GET /metrics accepts (Authorization: Bearer TOKEN; the file's content, 16
    /// characters at least), overriding the configuration's metrics_token; grants nothing else
    #[arg(long, value_name = "FILE")]
    metrics_token_file: Option<PathBuf>,
    /// Command dialect, overriding the configuration: mark6 (default) or jive5ab (jive5ab's FlexBuff
    /// dialect as the Field System sends it; the command port then defaults to 127.0.0.1:2620; see
    /// docs/jive5ab-dialect.md)
    #[arg(long, value_name = "DIALECT", value_parser = ["mark6", "jive5ab"])]
    dialect: Option<String>,
}

/// `--check-config`: the file parsed and checked as the daemon would at start-up.
fn check(p: &std::path::Path) -> Result<String, String> {
    let file: ConfigFile = crate::service::load_toml(p)?;
    let cfg = DaemonConfig::from_file(file).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(format!(
        "{}: serve {:?}, commands on {} ({:?} dialect), HTTP on {}, {} disk groups, {} streams",
        p.display(),
        cfg.name,
        cfg.control,
        cfg.dialect,
        cfg.http,
        cfg.groups.len(),
        cfg.streams.len()
    ))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(p) = &args.check_config {
        return crate::service::check_result(check(p));
    }
    let mut file = match &args.config {
        Some(p) => match crate::service::load_toml::<ConfigFile>(p) {
            Ok(f) => f,
            Err(e) => usage!("--config {e}"),
        },
        None => ConfigFile::default(),
    };
    if args.dialect.is_some() {
        file.dialect = args.dialect;
    }
    if file.dialect.as_deref() == Some("jive5ab") && file.control.is_none() && args.control.is_none() {
        file.control = Some(format!("127.0.0.1:{}", vlbiflow_control::jive5ab::DEFAULT_PORT));
    }
    if args.control.is_some() {
        file.control = args.control;
    }
    if args.http.is_some() {
        file.http = args.http;
    }
    if let Some(t) = args.token.resolve()? {
        file.token = Some(t);
    }
    if args.require_token {
        file.require_token = Some(true);
    }
    file.allow.extend(args.allow.iter().map(ToString::to_string));
    match crate::cmd::read_metrics_token(args.metrics_token_file.as_deref()) {
        Ok(Some(t)) => file.metrics_token = Some(t),
        Ok(None) => {}
        Err(e) => usage!("{e}"),
    }
    let cfg = match DaemonConfig::from_file(file) {
        Ok(c) => c,
        Err(e) => usage!(
            "{}{e}",
            args.config
                .as_ref()
                .map(|p| format!("{}: ", p.display()))
                .unwrap_or_default()
        ),
    };
    // WATCHDOG=1 from the controller loop (the one that ticks recordings and carries out commands)
    let watchdog = std::sync::Arc::new(crate::service::Watchdog::from_env());
    // the process's one signal handler stops the daemon (and tells SIGINT from SIGTERM: exit 130 or 0)
    let (stopper, stop) = vlbiflow_control::stop_channel();
    crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    crate::stop::on_stop(move || stopper.stop());
    vlbiflow_control::serve_until(
        cfg,
        Box::new(RecorderEngine),
        |c, h| crate::service::notify_ready(&format!("commands on {c}, HTTP on {h}")),
        std::sync::Arc::new(move || watchdog.alive()),
        stop,
    )?;
    crate::service::notify_stopping();
    Ok(ExitCode::SUCCESS)
}
