//! `vlbiflow net agent`, `net hub`, `net mesh` and `net capacity`: network monitoring of a VLBI
//! network. Arguments and printing only; the work is in `vlbiflow_mesh`.

use crate::usage;
use anyhow::{anyhow, Context};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vlbiflow_mesh::archive::RunRow;
use vlbiflow_mesh::auth::{check_token, Key};
use vlbiflow_mesh::capacity::{self, CapacityParams};
use vlbiflow_mesh::config::Config;
use vlbiflow_mesh::hub::{AlertsView, Status};
use vlbiflow_mesh::timespec::{now_ms, rfc3339};

/// The mesh library's event lines as `tracing` events (target `vlbiflow::mesh`).
/// `[agent]` of the agent's configuration file: its own settings, overridden by flags.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentSection {
    name: Option<String>,
    hub: Option<String>,
    listen: Option<SocketAddr>,
    state_dir: Option<PathBuf>,
    sync_every: Option<String>,
    ca_file: Option<PathBuf>,
    responder_token_file: Option<PathBuf>,
}

/// `[hub]` of the mesh configuration: the hub's own settings, overridden by flags.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HubSection {
    listen: Option<SocketAddr>,
    archive: Option<String>,
    public_read: Option<bool>,
    keys_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// The hub's TLS from `--tls-cert`/`--tls-key` (or `tls_cert`/`tls_key` in [hub]): both or neither.
fn hub_tls(cert: Option<&Path>, key: Option<&Path>) -> Result<Option<vlbiflow_mesh::tls::Tls>, String> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(c), Some(k)) => vlbiflow_mesh::tls::Tls::from_pem_files(c, k)
            .map(Some)
            .map_err(|e| e.to_string()),
        (Some(_), None) => Err("--tls-cert without --tls-key (tls_key in [hub])".into()),
        (None, Some(_)) => Err("--tls-key without --tls-cert (tls_cert in [hub])".into()),
    }
}

/// The daemon sections of a file; the rest is the mesh configuration, checked by `vlbiflow_mesh`.
#[derive(Debug, Default, serde::Deserialize)]
struct Sections {
    #[serde(default)]
    agent: AgentSection,
    #[serde(default)]
    hub: HubSection,
}

/// A file read for `net agent` or `net hub`: its daemon sections, and the mesh configuration when it
/// has more than those (an agent's file may hold only `[agent]`).
struct ServiceFile {
    sections: Sections,
    mesh: Option<Config>,
}

fn read_service_file(path: &Path) -> Result<ServiceFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let sections: Sections =
        toml::from_str(&text).map_err(|e| crate::service::toml_error(path, &text, &e))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| crate::service::toml_error(path, &text, &e))?;
    let only_sections = table.keys().all(|k| k == "agent" || k == "hub");
    let mesh = if only_sections {
        None
    } else {
        let c = Config::load(path).map_err(|e| e.to_string())?;
        for w in &c.warnings {
            tracing::warn!(target: "vlbiflow::config", file = %path.display(), "{w}");
        }
        Some(c)
    };
    Ok(ServiceFile { sections, mesh })
}

/// `net agent --check-config` and `net hub --check-config`: one line on what the file holds.
fn check_service_file(path: &Path, hub: bool) -> Result<String, String> {
    let f = read_service_file(path)?;
    if let Some(s) = &f.sections.agent.sync_every {
        crate::service::duration("agent.sync_every", s).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let (a, h) = (&f.sections.agent, &f.sections.hub);
    if let Some(c) = &a.ca_file {
        vlbiflow_mesh::tls::read_ca_file(c).map_err(|e| format!("{}: agent.ca_file: {e}", path.display()))?;
    }
    if let Some(t) = &a.responder_token_file {
        read_responder_token(t).map_err(|e| format!("{}: agent.{e}", path.display()))?;
    }
    hub_tls(h.tls_cert.as_deref(), h.tls_key.as_deref())
        .map_err(|e| format!("{}: hub: {e}", path.display()))?;
    if let Some(c) = f
        .mesh
        .as_ref()
        .and_then(|m| m.webhook.as_ref())
        .and_then(|w| w.ca_file.as_ref())
    {
        vlbiflow_mesh::tls::read_ca_file(c)
            .map_err(|e| format!("{}: webhook.ca_file: {e}", path.display()))?;
    }
    match (&f.mesh, hub) {
        (None, true) => Err(format!(
            "{}: no mesh configuration (hosts, tests) for the hub",
            path.display()
        )),
        (None, false) => Ok(format!(
            "{}: agent settings only (name {:?}, hub {:?})",
            path.display(),
            f.sections.agent.name.as_deref().unwrap_or("from --name"),
            f.sections.agent.hub.as_deref().unwrap_or("none")
        )),
        (Some(c), _) => Ok(format!(
            "{}: mesh {:?}: {} hosts, {} links, {} tests, {} alert rules{}",
            path.display(),
            c.name,
            c.hosts.len(),
            c.links.len(),
            c.tests.len(),
            c.alerts.len(),
            if c.warnings.is_empty() {
                String::new()
            } else {
                format!(", {} deprecated durations (see the warnings)", c.warnings.len())
            }
        )),
    }
}

/// The mesh's responder token from its file (at least 16 characters, no white space).
fn read_responder_token(file: &Path) -> Result<String, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("responder_token_file {}: {e}", file.display()))?;
    check_token(&text)
        .map(str::to_string)
        .map_err(|e| format!("responder_token_file {}: {e}", file.display()))
}

fn read_token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let text = match (file, std::env::var("VLBIFLOW_MESH_TOKEN").ok()) {
        (Some(f), _) => {
            std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?
        }
        (None, Some(t)) => t,
        (None, None) => return Ok(None),
    };
    match check_token(&text) {
        Ok(t) => Ok(Some(t.to_string())),
        Err(e) => usage!("token: {e}"),
    }
}

const AGENT_EXAMPLES: &str = "\
Examples:
  # On station Ef (its name in the hub's mesh.toml), with the shared token
  vlbiflow net agent --name Ef --hub http://hub.example.org:8090 \\
      --token-file /etc/vlbiflow/mesh.token

  # A hub on TLS with a private CA; responders require the mesh's responder token
  vlbiflow net agent --name Ef --hub https://hub.example.org:8090 \\
      --ca-file /etc/vlbiflow/mesh-ca.pem --token-file /etc/vlbiflow/mesh.token \\
      --responder-token-file /etc/vlbiflow/responder.token

  # Without a hub, on a configuration file (results stay in the outbox until a hub takes them)
  vlbiflow net agent --name Ef --config mesh.toml --state-dir /var/lib/vlbiflow/agent

The agent answers the other hosts' tests (responder on the configured address and port, mesh hosts
only), runs its own on the schedule every agent and the hub compute alike from the configuration,
and delivers outcomes to the hub; while the hub is away they wait in the state directory.";

/// Run a mesh agent: responder for the other hosts' tests and runner of this host's own
#[derive(clap::Args)]
#[command(after_help = AGENT_EXAMPLES)]
pub struct AgentArgs {
    /// This host's name in the mesh configuration (or `name` in the file's [agent])
    #[arg(long)]
    name: Option<String>,
    /// The hub's URL, e.g. http://hub:8090 or https://hub.example.org:8090
    #[arg(long, value_name = "URL")]
    hub: Option<String>,
    /// PEM file of the CA certificates trusted for an https:// hub, instead of Mozilla's roots
    /// (ca_file in [agent])
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// File with the mesh's responder token: this agent's responder requires it from every client,
    /// and its runs send it to the other agents' responders; give every agent the same file
    /// (responder_token_file in [agent])
    #[arg(long, value_name = "FILE")]
    responder_token_file: Option<PathBuf>,
    /// File with this host's key (its line in the hub's --keys-file) or the mesh's shared token (or
    /// VLBIFLOW_MESH_TOKEN); required for a hub not on loopback
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// State directory: outbox, cached configuration, schedule cursor (default: $STATE_DIRECTORY under
    /// systemd, else ~/.local/state/vlbiflow/agent)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Responder address (default: this host's address and port in the configuration)
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,
    /// Configuration file: the agent's own settings in [agent] (deploy/config/agent.toml), and a mesh
    /// configuration to use until the hub gives one; flags override it
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check a configuration file, print a one-line summary and exit (2 and the error if it is wrong)
    #[arg(long, value_name = "FILE", exclusive = true)]
    check_config: Option<PathBuf>,
    /// Time between exchanges with the hub (2s, 500ms) [default: 2s]
    #[arg(long, value_name = "TIME", value_parser = crate::renamed::duration_with_unit)]
    sync_every: Option<Duration>,
}

pub fn run_agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    if let Some(p) = &a.check_config {
        return crate::service::check_result(check_service_file(p, false));
    }
    let file = match &a.config {
        Some(p) => match read_service_file(p) {
            Ok(f) => Some(f),
            Err(e) => usage!("--config {e}"),
        },
        None => None,
    };
    let (sect, has_mesh) = match file {
        Some(f) => (f.sections.agent, f.mesh.is_some()),
        None => (AgentSection::default(), false),
    };
    let Some(name) = a.name.or(sect.name) else {
        usage!("give --name (or name in the configuration's [agent])");
    };
    let hub = a.hub.or(sect.hub);
    if hub.is_none() && !has_mesh {
        usage!("give --hub URL (or hub in [agent]) or --config FILE with a mesh configuration");
    }
    let sync_every = match (a.sync_every, &sect.sync_every) {
        (Some(d), _) => d,
        (None, Some(s)) => match crate::service::duration("agent.sync_every", s) {
            Ok(d) => d,
            Err(e) => usage!("--config {e}"),
        },
        (None, None) => Duration::from_secs(2),
    };
    let token = read_token(a.token_file.as_deref())?;
    if let Some(h) = &hub {
        let Some(rest) = h.strip_prefix("http://").or_else(|| h.strip_prefix("https://")) else {
            usage!("--hub {h:?}: expected an http:// or https:// URL");
        };
        let loopback = ["127.", "localhost", "[::1]"].iter().any(|p| rest.starts_with(p));
        if token.is_none() && !loopback {
            usage!("--hub {h} is not on loopback: give the shared token (--token-file)");
        }
    }
    if !(0.1..=3600.0).contains(&sync_every.as_secs_f64()) {
        usage!("--sync-every {sync_every:?} outside 0.1..=3600 seconds");
    }
    let responder_token = match a.responder_token_file.or(sect.responder_token_file) {
        Some(f) => match read_responder_token(&f) {
            Ok(t) => Some(t),
            Err(e) => usage!("{e}"),
        },
        None => None,
    };
    let opts = vlbiflow_mesh::agent::AgentOptions {
        name,
        hub,
        key: token.as_deref().map(Key::from_token),
        ca_file: a.ca_file.or(sect.ca_file),
        responder_token,
        state_dir: a
            .state_dir
            .or(sect.state_dir)
            .unwrap_or_else(|| crate::service::state_dir("agent")),
        listen: a.listen.or(sect.listen),
        config: a.config.filter(|_| has_mesh),
        sync_every,
        // agents answer efficiency tests as `net responder` does
        responder_setup: Some(vlbiflow_efficiency::with_service),
        on_ready: Some(|| crate::service::notify_ready("responder listening")),
        // WATCHDOG=1 from the schedule loop
        on_pass: Some(|| {
            static WATCHDOG: std::sync::OnceLock<crate::service::Watchdog> = std::sync::OnceLock::new();
            WATCHDOG.get_or_init(crate::service::Watchdog::from_env).alive();
        }),
    };
    vlbiflow_mesh::agent::run(&opts, crate::stop::on_interrupt(crate::stop::Second::Wait)?)
        .map_err(|e| anyhow!(e))?;
    crate::service::notify_stopping();
    Ok(ExitCode::SUCCESS)
}

const HUB_EXAMPLES: &str = "\
Examples:
  # Loopback only, SQLite archive in the state directory (~/.local/state/vlbiflow/hub/mesh.sqlite)
  vlbiflow net hub --config mesh.toml

  # For the network: keys required (per-host keys, the shared token for readers); PostgreSQL archive
  vlbiflow net hub --config mesh.toml --listen 0.0.0.0:8090 --keys-file /etc/vlbiflow/mesh.keys \\
      --token-file /etc/vlbiflow/mesh.token --archive postgresql://vlbiflow@db.example.org/mesh

  # On TLS (certificate and key in PEM), the archive over TLS verified against a private CA
  vlbiflow net hub --config mesh.toml --listen 0.0.0.0:8090 --keys-file /etc/vlbiflow/mesh.keys \\
      --token-file /etc/vlbiflow/mesh.token \\
      --tls-cert /etc/vlbiflow/hub.pem --tls-key /etc/vlbiflow/hub.key \\
      --archive 'postgresql://db.example.org/mesh?sslmode=verify-full&sslrootcert=/etc/db-ca.pem'

Pages: / (matrix, alerts, run log), /pair?src=A&dst=B (time series and latest sweep), /metrics
(Prometheus), /api/v1/{status,runs,results,alerts,matrix} (JSON).";

/// Run the mesh hub: plans runs, collects results, archive, dashboard, metrics, alerts
#[derive(clap::Args)]
#[command(after_help = HUB_EXAMPLES)]
pub struct HubArgs {
    /// Mesh configuration (TOML; see docs/mesh.md), with the hub's own settings in [hub]
    /// (deploy/config/hub.toml); flags override them
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Check a configuration file, print a one-line summary and exit (2 and the error if it is wrong)
    #[arg(long, value_name = "FILE", exclusive = true)]
    check_config: Option<PathBuf>,
    /// HTTP address for agents, pages and the API [default: 127.0.0.1:8090]
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,
    /// Serve HTTPS with this certificate (PEM: the hub's, then intermediates; tls_cert in [hub])
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; tls_key in [hub])
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Archive: a SQLite file or a postgresql:// URL (default: mesh.sqlite in $STATE_DIRECTORY under
    /// systemd, else in ~/.local/state/vlbiflow/hub)
    #[arg(long, value_name = "PATH|URL")]
    archive: Option<String>,
    /// File with the mesh's shared token (or VLBIFLOW_MESH_TOKEN): authenticates readers, and agents
    /// without a key in --keys-file (any holder can report as any of those: give each host its key)
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// File of per-host keys, one `HOST KEY` a line: each authenticates only its host's agent
    /// (keys_file in [hub])
    #[arg(long, value_name = "FILE")]
    keys_file: Option<PathBuf>,
    /// File with a token for readers of pages and the API only (Authorization: Bearer TOKEN)
    #[arg(long, value_name = "FILE")]
    read_token_file: Option<PathBuf>,
    /// Refuse to start without keys (--keys-file or --token-file), so that loopback needs them too
    #[arg(long)]
    require_token: bool,
    /// Serve pages and the read API without authentication
    #[arg(long)]
    public_read: bool,
    /// Read-only token that GET /metrics accepts (Authorization: Bearer TOKEN); grants nothing else
    #[arg(long, value_name = "FILE")]
    metrics_token_file: Option<PathBuf>,
    /// Check the configuration, print the plan of the next hour and exit
    #[arg(long)]
    check: bool,
}

pub fn run_hub(a: HubArgs) -> anyhow::Result<ExitCode> {
    if let Some(p) = &a.check_config {
        return crate::service::check_result(check_service_file(p, true));
    }
    let Some(config_path) = a.config.clone() else {
        usage!("give --config FILE");
    };
    let (cfg, sect) = match read_service_file(&config_path) {
        Ok(ServiceFile {
            mesh: Some(c),
            sections,
        }) => (Arc::new(c), sections.hub),
        Ok(_) => usage!(
            "{}: no mesh configuration (hosts, tests) for the hub",
            config_path.display()
        ),
        Err(e) => usage!("{e}"),
    };
    let listen = a
        .listen
        .or(sect.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8090)));
    let public_read = a.public_read || sect.public_read.unwrap_or(false);
    if a.check {
        let mut p = vlbiflow_mesh::plan::Planner::new(cfg.clone());
        let now = now_ms();
        let runs = p.runs_between(now, now + 3_600_000);
        outln!(
            "{:<24} {:<10} {:<8} {:<12} slot/skipped",
            "start",
            "test",
            "kind",
            "pair"
        );
        for r in &runs {
            outln!(
                "{:<24} {:<10} {:<8} {:<12} {}",
                rfc3339(r.start),
                r.test,
                r.kind.as_str(),
                format!("{}->{}", r.src, r.dst),
                r.skipped.clone().unwrap_or_else(|| format!("slot {}", r.slot))
            );
        }
        eprintln!(
            "configuration {} is valid: {} runs in the next hour",
            config_path.display(),
            runs.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let archive = match a.archive.or(sect.archive) {
        Some(x) => x,
        None => {
            let dir = crate::service::state_dir("hub");
            std::fs::create_dir_all(&dir).with_context(|| format!("state directory {}", dir.display()))?;
            dir.join("mesh.sqlite").display().to_string()
        }
    };
    let token = read_token(a.token_file.as_deref())?;
    let host_keys = match a.keys_file.or(sect.keys_file) {
        Some(f) => {
            let text = std::fs::read_to_string(&f).with_context(|| format!("--keys-file {}", f.display()))?;
            match vlbiflow_mesh::auth::Keyring::parse_keys_file(&text) {
                Ok(k) => k,
                Err(e) => usage!("--keys-file {}: {e}", f.display()),
            }
        }
        None => Vec::new(),
    };
    let read_token = match &a.read_token_file {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("--read-token-file {}", f.display()))?;
            match check_token(&text) {
                Ok(t) => Some(t.to_string()),
                Err(e) => usage!("--read-token-file {}: {e}", f.display()),
            }
        }
        None => None,
    };
    if token.is_none() && host_keys.is_empty() {
        if a.require_token {
            usage!("--require-token: give --keys-file or --token-file (or VLBIFLOW_MESH_TOKEN)");
        }
        if !listen.ip().is_loopback() {
            usage!(
                "--listen {} is not loopback: give keys (--keys-file, --token-file) so agents and readers authenticate",
                listen
            );
        }
    }
    let tls = match hub_tls(
        a.tls_cert.as_deref().or(sect.tls_cert.as_deref()),
        a.tls_key.as_deref().or(sect.tls_key.as_deref()),
    ) {
        Ok(t) => t,
        Err(e) => usage!("{e}"),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let h = vlbiflow_mesh::hub::spawn(
        vlbiflow_mesh::hub::HubOptions {
            config: cfg,
            listen,
            archive,
            token,
            host_keys,
            read_token,
            public_read,
            metrics_token: match crate::cmd::read_metrics_token(a.metrics_token_file.as_deref()) {
                Ok(t) => t,
                Err(e) => usage!("{e}"),
            },
            tls,
        },
        stop.clone(),
    )
    .map_err(|e| anyhow!(e))?;
    crate::service::notify_ready(&format!("serving on {scheme}://{}/", h.addr));
    // WATCHDOG=1 only when the hub's tick has moved since the last look
    let watchdog = crate::service::Watchdog::from_env();
    let mut ticks = h.ticks();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let now = h.ticks();
        if now != ticks {
            watchdog.alive();
        }
        ticks = now;
    }
    crate::service::notify_stopping();
    h.stop();
    Ok(ExitCode::SUCCESS)
}

const MESH_EXAMPLES: &str = "\
Examples:
  vlbiflow net mesh status
  vlbiflow net mesh runs --failed --limit 20
  vlbiflow net mesh runs --src Ef --dst J --json
  vlbiflow net mesh results
  vlbiflow net mesh alerts --hub http://hub:8090 --token-file mesh.token";

/// Ask the hub: agents and run counts, runs, latest results, alerts
#[derive(clap::Args)]
#[command(after_help = MESH_EXAMPLES, subcommand_required = true, arg_required_else_help = true)]
pub struct MeshArgs {
    #[command(subcommand)]
    cmd: MeshCmd,
}

#[derive(clap::Args)]
struct HubConn {
    /// The hub's URL
    #[arg(
        long,
        default_value = "http://127.0.0.1:8090",
        value_name = "URL",
        global = true
    )]
    hub: String,
    /// File with the shared token (or VLBIFLOW_MESH_TOKEN), for a hub not on loopback
    #[arg(long, value_name = "FILE", global = true)]
    token_file: Option<PathBuf>,
    /// Print JSON
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum MeshCmd {
    /// Agents (last contact), runs by test, status and reason, pending runs, active alerts
    #[command(
        after_help = "Examples:\n  vlbiflow net mesh status\n  vlbiflow net mesh status --hub http://hub.example.org:8090 --token-file mesh.token --json"
    )]
    Status {
        #[command(flatten)]
        conn: HubConn,
    },
    /// Runs, newest first, with their outcome or failure reason
    #[command(
        after_help = "Examples:\n  vlbiflow net mesh runs --failed\n  vlbiflow net mesh runs --src Ef --dst J --test bw --limit 20 --json"
    )]
    Runs {
        #[command(flatten)]
        conn: HubConn,
        /// Only runs from this host
        #[arg(long)]
        src: Option<String>,
        /// Only runs to this host
        #[arg(long)]
        dst: Option<String>,
        /// Only this test
        #[arg(long)]
        test: Option<String>,
        /// Only failed runs
        #[arg(long)]
        failed: bool,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// The newest result of every test and pair
    #[command(
        after_help = "Examples:\n  vlbiflow net mesh results\n  vlbiflow net mesh results --json | jq '.[] | select(.throughput_mbps < 400)'"
    )]
    Results {
        #[command(flatten)]
        conn: HubConn,
    },
    /// Active alerts and recent changes
    #[command(after_help = "Examples:\n  vlbiflow net mesh alerts\n  vlbiflow net mesh alerts --json")]
    Alerts {
        #[command(flatten)]
        conn: HubConn,
    },
}

fn api(c: &HubConn) -> anyhow::Result<vlbiflow_mesh::api::MeshApi> {
    Ok(vlbiflow_mesh::api::MeshApi::new(
        &c.hub,
        read_token(c.token_file.as_deref())?,
    ))
}

fn fig(v: Option<f64>, unit: &str) -> String {
    v.map(|v| format!("{v:.2} {unit}")).unwrap_or_default()
}

fn print_runs(rows: &[RunRow]) {
    outln!(
        "{:<24} {:<10} {:<12} {:<7} figures / reason",
        "planned",
        "test",
        "pair",
        "status"
    );
    for r in rows {
        let what = match r.status.as_str() {
            "failed" => format!(
                "{}: {}",
                r.reason.as_deref().unwrap_or(""),
                r.detail.as_deref().unwrap_or("")
            ),
            _ => [
                fig(r.throughput_mbps, "Mb/s"),
                fig(r.loss_percent, "% loss"),
                fig(r.rtt_ms, "ms"),
                fig(r.capacity_mbps, "Mb/s capacity"),
            ]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", "),
        };
        outln!(
            "{:<24} {:<10} {:<12} {:<7} {what}",
            rfc3339(r.planned_start),
            r.test,
            format!("{}->{}", r.src, r.dst),
            r.status
        );
    }
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn run_mesh(a: MeshArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        MeshCmd::Status { conn } => {
            let s: Status = api(&conn)?.get("/api/v1/status").map_err(|e| anyhow!(e))?;
            if conn.json {
                outln!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(ExitCode::SUCCESS);
            }
            outln!(
                "mesh {} (configuration {}), archive {}, hub up since {}, {} runs pending, {} alerts active",
                s.mesh,
                s.config_hash,
                s.archive,
                rfc3339(s.up_since),
                s.pending,
                s.active_alerts
            );
            outln!(
                "\n{:<12} {:<26} {:<8} software",
                "agent",
                "last contact",
                "config"
            );
            for ag in &s.agents {
                let seen = ag
                    .last_seen
                    .map(|t| format!("{} ({:.0} s ago)", rfc3339(t), (s.now - t) as f64 / 1000.0))
                    .unwrap_or_else(|| "never".into());
                outln!(
                    "{:<12} {:<26} {:<8} {}",
                    ag.name,
                    seen,
                    if ag.config_current { "current" } else { "OLD" },
                    ag.software
                );
            }
            outln!("\n{:<12} {:<8} {:<12} runs", "test", "status", "reason");
            for (t, st, r, n) in &s.counts {
                outln!("{t:<12} {st:<8} {r:<12} {n}");
            }
        }
        MeshCmd::Runs {
            conn,
            src,
            dst,
            test,
            failed,
            limit,
        } => {
            let mut q = format!("/api/v1/runs?limit={limit}&until={}", now_ms() + 1);
            for (k, v) in [("src", &src), ("dst", &dst), ("test", &test)] {
                if let Some(v) = v {
                    q += &format!("&{k}={}", enc(v));
                }
            }
            if failed {
                q += "&status=failed";
            }
            let rows: Vec<RunRow> = api(&conn)?.get(&q).map_err(|e| anyhow!(e))?;
            if conn.json {
                outln!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print_runs(&rows);
            }
        }
        MeshCmd::Results { conn } => {
            let rows: Vec<RunRow> = api(&conn)?.get("/api/v1/results").map_err(|e| anyhow!(e))?;
            if conn.json {
                outln!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print_runs(&rows);
            }
        }
        MeshCmd::Alerts { conn } => {
            let v: AlertsView = api(&conn)?.get("/api/v1/alerts").map_err(|e| anyhow!(e))?;
            if conn.json {
                outln!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            outln!("active ({}):", v.active.len());
            for e in &v.active {
                outln!("  since {}  {}", rfc3339(e.t), e.message);
            }
            outln!("recent changes:");
            for e in v.events.iter().take(30) {
                outln!("  {}  {:<7} {}", rfc3339(e.t), e.state, e.message);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

const CAPACITY_EXAMPLES: &str = "\
Examples:
  vlbiflow net capacity 10.0.0.2
  vlbiflow net capacity far.example.org:14233 --json > capacity.json
  vlbiflow net capacity 10.0.0.2 --size 8972 --train 16384 --min-train-mb 4
  vlbiflow net capacity 10.0.0.2 --hops

Sends back-to-back packet pairs and then trains to a vlbiflow responder (`vlbiflow net responder`
or a mesh agent); the responder returns every packet's kernel receive time stamp.
- Pairs: those whose first packet queued (cross traffic) are dropped; the modes of the rest are
  listed (pathrate). Behind a token-bucket shaper (tbf, htb, a policer) pairs pass at the peak.
- Trains double in length from 64 packets until their tails (last half against last quarter,
  across trains and with the length before) settle on one rate and carry at least --min-train-mb,
  so a shaper's burst is passed. Only gaps during which the bottleneck was surely busy count: a gap
  after which the sender had not yet handed over the next packet (a loaded core) is dropped, and a
  train with too few busy gaps is left out as sender-limited.
- Capacity: the trains' settled tail rate (a shaper is reported with its burst and peak when pairs
  or train heads ran well above it); when the tails vary (cross traffic), the strongest pair mode
  at or above them.
Rates are at the IP layer (payload + 28 bytes); tc counts the Ethernet header too, so a 100mbit
tbf passes 99.1 Mb/s of 1500-byte IP packets. A bucket larger than the longest train, or a shaper
queue that drops most of a train, is not seen past. Without shaping, a path faster than this host
can send leaves only the pairs (reported as such).

--hops: for TTL 1, 2, ... trains leave with that TTL; each router drops them and answers ICMP time
exceeded (the destination: port unreachable), read from the socket's error queue (IP_RECVERR, no
root needed) with kernel time stamps. The answers' spacing gives the capacity of the path up to and
including the link into that hop (same train analysis); the hop where it drops is the bottleneck.
Limits: routers rate-limit ICMP (Linux: net.ipv4.icmp_ratelimit, icmp_ratemask; a hop answering
under half a train is reported as rate-limited, without a rate); the answers come back over the
reverse path; ICMP is a router's slow path; an unshaped hop faster than this host sends datagram by
datagram gives only a lower bound.";

/// Bottleneck capacity of the path to a responder, by packet dispersion (pairs and trains)
#[derive(clap::Args)]
#[command(after_help = CAPACITY_EXAMPLES)]
pub struct CapacityArgs {
    /// Responder host or HOST:PORT (default port 14233)
    host: String,
    /// UDP payload bytes per probe packet
    #[arg(long, default_value_t = 1472)]
    size: usize,
    /// Packet pairs
    #[arg(long, default_value_t = 60)]
    pairs: usize,
    /// Longest train, packets (trains grow from 64 by doubling until settled)
    #[arg(long, default_value_t = 8192)]
    train: usize,
    /// Trains grow at least until they carry this many MB (10^6 bytes)
    #[arg(long, default_value_t = 1.0, value_name = "MB")]
    min_train_mb: f64,
    /// Trains per length
    #[arg(long, default_value_t = 3)]
    trains: usize,
    /// Send trains one datagram per packet instead of GSO super-datagrams
    #[arg(long)]
    no_gso: bool,
    /// Most packets per GSO super-datagram (0: as many as fit in 64 kB)
    #[arg(long, default_value_t = 0, value_name = "N")]
    gso_segments: usize,
    /// Longest wait for any control answer (5s, 500ms)
    #[arg(long, default_value = "5s", value_name = "TIME", value_parser = crate::renamed::seconds_with_unit)]
    timeout: f64,
    /// Print JSON (estimate, every pair and every train's fit; with --hops the hop list)
    #[arg(long)]
    json: bool,
    /// Hop by hop instead: TTL-limited trains, capacity up to each hop from the spacing of the
    /// routers' ICMP time-exceeded answers (no responder needed; IPv4)
    #[arg(long)]
    hops: bool,
    /// With --hops: highest TTL
    #[arg(long, default_value_t = 30, value_name = "N")]
    max_hops: u8,
    /// With --hops: destination UDP port (nothing may listen there)
    #[arg(long, default_value_t = 33434)]
    hops_port: u16,
}

fn run_hops(a: &CapacityArgs, target: std::net::IpAddr) -> anyhow::Result<ExitCode> {
    if a.max_hops == 0 {
        usage!("--max-hops must be at least 1");
    }
    if a.size > 8972 {
        usage!("--size {} above 8972 with --hops", a.size);
    }
    let p = vlbiflow_mesh::hops::HopsParams {
        size: a.size,
        port: a.hops_port,
        max_hops: a.max_hops,
        train: a.train,
        trains_per_length: a.trains,
        min_train_bytes: (a.min_train_mb * 1e6) as usize,
        ..vlbiflow_mesh::hops::HopsParams::default()
    };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let r = vlbiflow_mesh::hops::measure_hops(target, &p, &stop, &mut |m| eprintln!("{m}"))
        .map_err(|e| anyhow!(e))?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "capacity hop by hop to {} (IP layer, up to and including the link into each hop):",
        r.target
    );
    for h in &r.hops {
        outln!(
            "{:>3}  {:<16} {:>14}  {}/{} answered{}{}",
            h.ttl,
            h.address.map(|a| a.to_string()).unwrap_or_else(|| "*".into()),
            match (h.capacity_mbps, h.at_least_mbps) {
                (Some(c), _) => format!("{c:.1} Mb/s"),
                (None, Some(l)) => format!(">= {l:.1} Mb/s"),
                _ => "-".into(),
            },
            h.answered,
            h.sent,
            if h.destination { "  destination" } else { "" },
            if h.note.is_empty() {
                String::new()
            } else {
                format!("  ({})", h.note)
            }
        );
    }
    match r.limiting_ttl {
        Some(t) => outln!("narrowest link: into hop {t}"),
        None => outln!("no hop stands out as the bottleneck"),
    }
    outln!("{:.1} s", r.duration_s);
    Ok(ExitCode::SUCCESS)
}

pub fn run_capacity(a: CapacityArgs) -> anyhow::Result<ExitCode> {
    if !(vlbiflow_net::wire::HEADER_LEN..=65_507).contains(&a.size) {
        usage!(
            "--size {} outside {}..=65507",
            a.size,
            vlbiflow_net::wire::HEADER_LEN
        );
    }
    if !(10..=100_000).contains(&a.pairs) {
        usage!("--pairs {} outside 10..=100000", a.pairs);
    }
    if !(64..=vlbiflow_net::stats::MAX_TIMELINE as usize).contains(&a.train) {
        usage!(
            "--train {} outside 64..={}",
            a.train,
            vlbiflow_net::stats::MAX_TIMELINE
        );
    }
    if !(a.min_train_mb >= 0.0 && a.min_train_mb <= 1000.0) {
        usage!("--min-train-mb {} outside 0..=1000", a.min_train_mb);
    }
    if !(1..=1000).contains(&a.trains) {
        usage!("--trains {} outside 1..=1000", a.trains);
    }
    if !(a.timeout > 0.0 && a.timeout <= 600.0) {
        usage!("--timeout {} outside 0..=600 seconds", a.timeout);
    }
    let addr = vlbiflow_net::resolve_responder(&a.host).map_err(|e| anyhow!(e))?;
    if a.hops {
        return run_hops(&a, addr.ip());
    }
    let mut client = vlbiflow_net::Client::connect(addr, Duration::from_secs_f64(a.timeout))
        .with_context(|| format!("responder {addr}"))?;
    let p = CapacityParams {
        size: a.size,
        pairs: a.pairs,
        train: a.train,
        trains_per_length: a.trains,
        min_train_bytes: (a.min_train_mb * 1e6) as usize,
        gso: !a.no_gso,
        gso_segments: a.gso_segments,
        ..CapacityParams::default()
    };
    let stop = crate::stop::on_interrupt(crate::stop::Second::Wait)?;
    let r = capacity::measure(&mut client, &p, &stop, &mut |m| eprintln!("{m}")).map_err(|e| anyhow!(e))?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let e = &r.estimate;
    outln!("capacity to {addr}: {:.1} Mb/s ({})", e.capacity_mbps, e.method);
    if let Some(s) = &e.shaper {
        outln!(
            "token-bucket shaper: sustained {:.1} Mb/s, burst about {:.0} bytes, peak {:.1} Mb/s",
            s.rate_mbps,
            s.burst_bytes,
            s.peak_mbps
        );
    }
    for l in &r.trains {
        outln!(
            "trains of {:>5}: tail {} (spread {:.1} %, {}){}",
            l.packets,
            l.tail_mbps
                .map(|t| format!("{t:.1} Mb/s"))
                .unwrap_or_else(|| "-".into()),
            100.0 * l.spread.min(9.99),
            if l.settled { "settled" } else { "not settled" },
            if l.sender_limited > 0 {
                format!(", {} left out: sender behind", l.sender_limited)
            } else {
                String::new()
            }
        );
    }
    for m in &e.modes {
        outln!(
            "pair mode {:.1} Mb/s: {} pairs ({:.0} %)",
            m.mbps,
            m.count,
            100.0 * m.merit
        );
    }
    outln!(
        "{} probes sent, {} with loss, {} pairs kept, {} dropped as queued; {:.1} s",
        r.sent,
        r.incomplete,
        e.pairs_kept,
        e.pairs_dropped,
        r.duration_s
    );
    Ok(ExitCode::SUCCESS)
}
