//! The `codemode-host` binary: parse flags, set up logging, load plugins, serve MCP
//! over stdio or Streamable HTTP.
//!
//! Its modules are flags (`cli/`), the config file and environment (`config/`),
//! assembly of the server's settings (`assemble/`) and the commands beside serving;
//! the server itself is the `codemode-server` library, used through its public API
//! only (docs/architecture.md, the crate table).

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use cli::{Cli, Command, LogFormat};
use codemode_server::mcp::http::Authentication;
use codemode_server::quota::QuotaConfig;
use codemode_server::state::StateConfig;
use codemode_server::store::{Store, StoreLocation};
use codemode_server::{DEFAULT_STARTUP_WAIT, Service, ServiceConfig};
use codemode_server::{children, default_cache_dir};
use commands::{check, precompile, publish, pull};
use logfilter::{ClientGone, NoValues, quiet_sessions};
use serve::{approvals, serve_http, serve_stdio_while_loading, task_store};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter::FilterExt};

mod assemble;
mod cli;
mod commands;
mod config;
mod logfilter;
mod reconfig;
mod scaffold;
mod secrets;
mod serve;
mod textlog;

/// How long exiting waits for work still running on blocking threads (executions
/// end by their own deadlines; their results have nobody to go to).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How often the orphans adopted as a subreaper that exited are reaped.
const REAP_EVERY: Duration = Duration::from_secs(2);

/// How long child processes left at exit get between SIGTERM and SIGKILL.
const ORPHAN_GRACE: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    // A compiler process (plugins/compile.rs) reads no flags, variables or config
    // file: its parent gave it everything.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == codemode_server::COMPILE_COMMAND)
    {
        return compile_plugin(&args[2..]);
    }
    let cli = match config::parse(args.clone()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cli.log))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let filter = quiet_sessions(filter);
    // stdout belongs to the MCP protocol: logs go to stderr, without colors so they
    // read well in client log files.
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match cli.log_format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(
                layer
                    .fmt_fields(textlog::escaped_fields())
                    .with_filter(filter.and(ClientGone).and(NoValues)),
            )
            .init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                layer
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_filter(filter.and(ClientGone).and(NoValues)),
            )
            .init(),
    }
    match run(cli, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One event per line: a list of reasons stays readable, and each line
            // is escaped on its own (textlog.rs).
            for line in format!("{error:#}").lines() {
                tracing::error!("{line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The compiler process: `compile-plugin --max-memory BYTES`, the component on
/// stdin, the artifact on stdout, the reason on stderr.
fn compile_plugin(args: &[std::ffi::OsString]) -> ExitCode {
    let max_memory = match args {
        [flag, value] if flag == codemode_server::COMPILE_MEMORY_ARG => {
            value.to_str().and_then(|v| v.parse::<u64>().ok())
        }
        _ => None,
    };
    let Some(max_memory) = max_memory else {
        eprintln!(
            "usage: codemode-host {} {} BYTES (the server runs this itself)",
            codemode_server::COMPILE_COMMAND,
            codemode_server::COMPILE_MEMORY_ARG
        );
        return ExitCode::from(2);
    };
    match codemode_server::compile_child(max_memory) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("{reason}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, args: Vec<std::ffi::OsString>) -> anyhow::Result<()> {
    match &cli.command {
        Some(Command::Precompile) => return precompile(&cli),
        Some(Command::Check { files }) => return check(&cli, files),
        Some(Command::WitDocs { wit, file }) => {
            let bytes = codemode_wit_docs::embed_file(wit, file)
                .with_context(|| format!("cannot write the WIT docs into {}", file.display()))?;
            println!(
                "{}: {bytes} bytes of WIT docs from {}",
                file.display(),
                wit.display()
            );
            return Ok(());
        }
        Some(Command::NewPlugin { name, lang, dir }) => {
            return scaffold::new_plugin(name, *lang, dir.as_deref());
        }
        Some(Command::Pull { .. }) => return pull(&cli),
        Some(Command::Push { .. } | Command::Sign { .. }) => return publish(&cli),
        None => {}
    }
    let mut http = cli.http()?;
    let token_exchange = cli.token_exchange(http.as_ref().map(|(_, config)| config))?;
    let authorization = cli.authorization(http.is_some())?;
    tracing::info!("authorization: {}", authorization.summary);
    let audit = Arc::new(cli.audit()?);
    // The service, once loaded: what a reloaded config file is applied to.
    let loaded: Arc<OnceLock<Arc<Service>>> = Arc::default();
    let reloadable = secrets::Reloadable {
        tokens: match (
            &cli.net.tokens,
            http.as_ref().map(|(_, h)| &h.authentication),
        ) {
            (
                Some(path),
                Some(Authentication::Bearer {
                    tokens: Some(tokens),
                    ..
                }),
            ) => Some((path.clone(), tokens.clone())),
            _ => None,
        },
        policy: authorization
            .policy
            .clone()
            .map(|policy| secrets::PolicyFiles {
                paths: cli.access.policy.clone(),
                decision: cli.access.policy_decision.clone(),
                visibility: cli.access.visibility_decision.clone(),
                quota: cli.access.quota_decision.clone(),
                policy,
            }),
        config: cli
            .config
            .clone()
            .map(|path| reconfig::ConfigReload::new(path, args, &cli, loaded.clone())),
        reading: Arc::default(),
        service: loaded.clone(),
    };
    // Before the runtime: the exporter's HTTP client has a runtime of its own.
    let telemetry = codemode_server::telemetry::Telemetry::start(cli.otlp_endpoint.as_deref())
        .context("cannot export traces")?
        .map(Arc::new);
    if telemetry.is_some() {
        tracing::info!("traces are exported over OTLP");
    }
    if cli.net.oauth_issuer.is_none() {
        for upstream in &cli.upstreams {
            if let codemode_server::UpstreamTransport::Http {
                auth: codemode_server::UpstreamAuth::Forward(_),
                ..
            } = &upstream.transport
            {
                tracing::warn!(upstream = %upstream.name, "auth = \"forward\" without --oauth-issuer: no caller has an access token, so every call of this upstream fails");
            }
            // token-exchange without the issuer stopped the start (Cli::token_exchange).
        }
    }
    if !cli.plugin_entries.is_empty() && !cli.plugins.exists() {
        // The [[plugin]] entries are pulled into it once it is watched.
        std::fs::create_dir_all(&cli.plugins).with_context(|| {
            format!(
                "cannot make the plugins folder `{}` for the [[plugin]] entries",
                cli.plugins.display()
            )
        })?;
        tracing::info!(folder = %cli.plugins.display(), "made the plugins folder for the [[plugin]] entries");
    }
    let store = cli.state.location();
    if cli.state.store.is_none() && store == StoreLocation::Memory {
        tracing::warn!(
            "neither HOME nor XDG_STATE_HOME is set: what agents keep (state.put) lasts until exit; name a file with --store"
        );
    }
    let store = Arc::new(Store::new(store));
    // Tasks and approvals' claims are kept in the same store.
    let task_backing = store.clone();
    if let Some((_, http)) = &mut http {
        // Sessions any replica sharing the store can serve (`--http-sessions`).
        http.session_store = Some(store.clone());
    }
    let config = ServiceConfig {
        telemetry: telemetry.clone(),
        limits: cli.limits(),
        loading: cli.loading(),
        cache_dir: cli.cache_dir.clone().or_else(default_cache_dir),
        plugins_dir: cli.plugins.clone(),
        disabled: cli.disable.clone(),
        authorizer: authorization.authorizer,
        audit: Some(audit.clone()),
        upstreams: cli.upstreams.clone(),
        openapi: cli.openapi.clone(),
        require_all_plugins: cli.require_all_plugins,
        // A gateway of upstreams (or OpenAPI services) needs no plugins folder
        // unless one was named.
        plugins_optional: !cli.plugins_given
            && (!cli.upstreams.is_empty() || !cli.openapi.is_empty()),
        providers: Vec::new(),
        // What agents keep between executions (`state.*`).
        state: Some(StateConfig {
            store: store.clone(),
            limits: cli.state.limits(),
        }),
        // How much each subject may run, counted in the same store.
        quotas: Some(QuotaConfig {
            store,
            quotas: cli.quotas.clone(),
            fail_open: cli.state.quota_fail_open,
        }),
        token_exchange,
        startup_wait: cli.budgets.startup_wait.unwrap_or(DEFAULT_STARTUP_WAIT),
        upstreams_gate: None,
        // Started once the folder is watched (`start_watch`): a pull that ends
        // before the watch would be seen by nothing.
        pulls: None,
    };
    // Orphaned grandchildren of upstream children become ours, not init's, so that
    // none outlives the server (ended below).
    match children::become_subreaper() {
        Ok(()) => {
            // Orphans that exit while serving are reaped here (tokio and std only
            // wait for the children they started).
            let reaper = std::thread::Builder::new()
                .name("codemode-reaper".into())
                .spawn(|| {
                    loop {
                        std::thread::sleep(REAP_EVERY);
                        children::reap_adopted();
                    }
                });
            if let Err(error) = reaper {
                tracing::warn!(reason = %error, "cannot start the reaper thread; orphaned grandchildren that exit stay zombies until the server exits");
            }
        }
        Err(error) => {
            tracing::warn!(reason = %error, "cannot become a child subreaper; an upstream's orphaned grandchildren may outlive the server");
        }
    }
    // Over stdio one client's requests arrive one line at a time: one thread runs
    // them, so no request wakes a second worker to steal its task (a wake costs
    // tens of µs on a virtual machine). Executions run on blocking threads either
    // way. HTTP serves many connections at once on a worker per core.
    let runtime = match http {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(_) => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()?;
    // Before serving: from here on SIGHUP reloads instead of ending the server.
    let _reloading = secrets::start(reloadable, runtime.handle())
        .context("cannot watch the tokens and policy files for changes")?;
    let approvals = approvals(&cli, config.cache_dir.as_deref())?;
    let served = runtime.block_on(async {
        let tasks = task_store(&cli, &task_backing).await?;
        match http {
            None => serve_stdio_while_loading(config, &cli, &loaded, tasks, approvals).await,
            Some((address, http)) => {
                serve_http(address, http, config, &cli, &loaded, tasks, approvals).await
            }
        }
    });
    // Executions (and a load) still running on blocking threads end by their own
    // deadlines; exiting does not wait for them past this.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    if let Some(telemetry) = &telemetry {
        telemetry.shutdown();
    }
    // The upstreams were stopped (their process groups ended); what is left are
    // orphans adopted as a subreaper, or children of a start that never finished.
    let ended = children::end_orphans(ORPHAN_GRACE);
    if ended > 0 {
        tracing::info!(processes = ended, "ended child processes left at exit");
    }
    audit.close();
    served
}
