//! The `codemode-host` binary: parse flags, set up logging, load plugins, serve MCP
//! over stdio or Streamable HTTP.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use cli::{Cli, Command, LogFormat};
use codemode_host::authz::Subject;
use codemode_host::mcp::http::{self, Authentication, HttpConfig, Readiness};
use codemode_host::mcp::{McpServer, SubjectSource, serve_stdio};
use codemode_host::tasks::{RedisTasks, TaskBoard, TaskStore};
use codemode_host::{DEFAULT_STARTUP_WAIT, Service, ServiceConfig, StartError, watch};
use codemode_host::{children, default_cache_dir, oci};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{self, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter::FilterExt};

mod assemble;
mod cli;
mod config;
mod reconfig;
mod scaffold;
mod secrets;
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
        .is_some_and(|a| a == codemode_host::COMPILE_COMMAND)
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
        [flag, value] if flag == codemode_host::COMPILE_MEMORY_ARG => {
            value.to_str().and_then(|v| v.parse::<u64>().ok())
        }
        _ => None,
    };
    let Some(max_memory) = max_memory else {
        eprintln!(
            "usage: codemode-host {} {} BYTES (the server runs this itself)",
            codemode_host::COMPILE_COMMAND,
            codemode_host::COMPILE_MEMORY_ARG
        );
        return ExitCode::from(2);
    };
    match codemode_host::compile_child(max_memory) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("{reason}");
            ExitCode::FAILURE
        }
    }
}

/// rmcp's per-session lines (`Service initialized as server peer_info=…`, `input
/// stream terminated`, `serve finished`) at WARN, unless the filter names rmcp:
/// over HTTP every request is a session of its own, so at INFO they were three
/// lines, one of them a whole Debug dump of the client's parameters, per request.
fn quiet_sessions(filter: EnvFilter) -> EnvFilter {
    if filter.to_string().contains("rmcp") {
        return filter;
    }
    match RMCP_SESSIONS.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// The directive [`quiet_sessions`] adds.
const RMCP_SESSIONS: &str = "rmcp::service=warn";

/// What rmcp logs, at ERROR, when it cannot deliver an answer because the HTTP
/// client hung up first: the message, and the error it carries.
const RMCP_CLIENT_GONE: [&str; 2] = [
    "fail to response message",
    "failed to send pending response during drain",
];
/// The error of a send to a connection that is gone.
const CHANNEL_CLOSED: &str = "channel closed";

/// Drops rmcp's ERROR lines for a client that hung up before its answer: the client
/// chose to go away, the server did nothing wrong, and an operator paged for every
/// closed connection would learn to ignore ERROR. The execution's own outcome is
/// still counted and audited.
struct ClientGone;

impl<S> Filter<S> for ClientGone {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &layer::Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &layer::Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::ERROR || !meta.target().starts_with("rmcp::") {
            return true;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        !(RMCP_CLIENT_GONE.contains(&fields.message.as_str()) && fields.error == CHANNEL_CLOSED)
    }
}

/// Drops rmcp's DEBUG and TRACE events, whatever the filter: they carry whole
/// requests, results and messages (`?request`, `?result`, `?message`), so
/// `RUST_LOG=trace` wrote every program, its arguments and its results into the
/// log. A log is read by more people than the agent's data is meant for.
struct NoValues;

impl<S> Filter<S> for NoValues {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &layer::Context<'_, S>) -> bool {
        !(meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO)
    }
}

/// The `message` and `error` fields of an event, as text.
#[derive(Default)]
struct Fields {
    message: String,
    error: String,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "error" => self.error = format!("{value:?}"),
            _ => {}
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
    let http = cli.http()?;
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
    let telemetry = codemode_host::telemetry::Telemetry::start(cli.otlp_endpoint.as_deref())
        .context("cannot export traces")?
        .map(Arc::new);
    if telemetry.is_some() {
        tracing::info!("traces are exported over OTLP");
    }
    if cli.net.oauth_issuer.is_none() {
        for upstream in &cli.upstreams {
            if let codemode_host::UpstreamTransport::Http {
                auth: codemode_host::UpstreamAuth::Forward(_),
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
        let tasks = task_store(&cli).await?;
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

/// Where tasks are kept: in memory, or in the Redis of `--task-store` (a URL
/// it cannot use stops the start; a Redis that does not answer does not).
async fn task_store(cli: &Cli) -> anyhow::Result<Arc<TaskStore>> {
    let limits = cli.task_limits();
    let Some(url) = &cli.budgets.task_store else {
        return Ok(Arc::new(TaskStore::Memory(TaskBoard::new(limits))));
    };
    let redis = RedisTasks::connect(url, limits).await?;
    Ok(Arc::new(TaskStore::Redis(redis)))
}

/// How approvals are asked: `--approval-timeout`, and the key that signs the
/// `requestState` of 2026-07-28 approvals (`--approval-key`, else the cache
/// folder's), loaded only when a policy can ask.
type Approvals = (
    std::time::Duration,
    Option<Arc<codemode_host::mcp::ApprovalKey>>,
);

fn approvals(cli: &Cli, cache_dir: Option<&std::path::Path>) -> anyhow::Result<Approvals> {
    let timeout = cli
        .access
        .approval_timeout
        .unwrap_or(codemode_host::mcp::DEFAULT_APPROVAL_TIMEOUT);
    if cli.access.policy.is_empty() && cli.access.approval_key.is_none() {
        return Ok((timeout, None));
    }
    let key = codemode_host::mcp::load_key(cli.access.approval_key.as_deref(), cache_dir)?;
    Ok((timeout, Some(Arc::new(key))))
}

/// Cancels the tasks running here, then closes the upstreams: no upstream
/// child outlives the server, and no task's call fails as unavailable first.
async fn close(service: Arc<Service>, tasks: &TaskStore) -> anyhow::Result<()> {
    let cancelled = tasks.cancel_all().await;
    if cancelled > 0 {
        tracing::info!(
            tasks = cancelled,
            "running tasks cancelled: the server is ending"
        );
    }
    tokio::task::spawn_blocking(move || service.close_upstreams()).await?;
    Ok(())
}

/// Where `cargo xtask plugins` puts the example plugins, relative to a checkout.
const EXAMPLE_PLUGINS: &str = "target/plugins";

/// [`Service::load`], with a hint when the plugins folder does not exist.
fn load(config: &ServiceConfig) -> anyhow::Result<Service> {
    match Service::load(config) {
        Ok(service) => Ok(service),
        Err(StartError::PluginsDir { path, reason })
            if reason.kind() == std::io::ErrorKind::NotFound =>
        {
            let examples = std::path::Path::new(EXAMPLE_PLUGINS);
            let hint = if examples.is_dir() && path != examples {
                format!("the example plugins are in {EXAMPLE_PLUGINS}: --plugins {EXAMPLE_PLUGINS}")
            } else {
                "create it, or name the folder with --plugins".to_owned()
            };
            Err(anyhow::anyhow!(
                "{}; {hint}",
                StartError::PluginsDir { path, reason }
            ))
        }
        Err(error) => Err(error.into()),
    }
}

/// Binds first, so probes answer while plugins load; then loads and serves until
/// SIGTERM/SIGINT.
async fn serve_http(
    address: std::net::SocketAddr,
    http: HttpConfig,
    config: ServiceConfig,
    cli: &Cli,
    loaded: &OnceLock<Arc<Service>>,
    tasks: Arc<TaskStore>,
    approvals: Approvals,
) -> anyhow::Result<()> {
    let listener = http::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let local = listener.local_addr()?;
    let readiness = Readiness::default();
    let router = http::router(&http, readiness.clone());
    if let Authentication::Bearer {
        oauth: Some(verifier),
        ..
    } = &http.authentication
    {
        // A wrong issuer URL is logged now, not at the first token.
        let verifier = verifier.clone();
        tokio::spawn(async move { verifier.prefetch().await });
    }
    let mut server = tokio::spawn(http::serve(
        listener,
        router,
        &http,
        http::shutdown_signal(),
    ));
    tracing::info!(address = %local, "listening: MCP at http://{local}{}", http::MCP_PATH);
    let probes = match http.metrics_listen {
        Some(address) => {
            let listener = http::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address} (--metrics-listen)"))?;
            let local = listener.local_addr()?;
            tracing::info!(address = %local, "listening: probes and metrics at http://{local}");
            Some(tokio::spawn(http::serve(
                listener,
                http::probes_router(readiness.clone()),
                &http,
                http::shutdown_signal(),
            )))
        }
        None => None,
    };
    // A shutdown signal while plugins load ends the server too.
    let loading = tokio::task::spawn_blocking(move || load(&config));
    let service = tokio::select! {
        loaded = loading => Arc::new(loaded??),
        served = &mut server => {
            tracing::info!("stopped before the plugins finished loading");
            return served?.map_err(anyhow::Error::from);
        }
    };
    let _watch = start_watch(cli, &service)?;
    let _ = loaded.set(service.clone());
    readiness.set(service.clone(), tasks.clone(), approvals);
    tracing::info!("ready to serve");
    server.await??;
    if let Some(probes) = probes {
        probes.await??;
    }
    close(service, &tasks).await
}

/// Serves MCP on stdio at once while the plugins load: a cold cache takes tens of
/// seconds to compile, longer than clients wait for `initialize`. `initialize` and
/// `tools/list` are answered at once; the tools wait for the load (`execute` no
/// longer than its time budget). Ends when stdin closes, but not before the load
/// did, so that a start with stdin at its end still fills the cache.
async fn serve_stdio_while_loading(
    mut config: ServiceConfig,
    cli: &Cli,
    service_cell: &OnceLock<Arc<Service>>,
    tasks: Arc<TaskStore>,
    approvals: Approvals,
) -> anyhow::Result<()> {
    let (publish, loaded) = tokio::sync::watch::channel(None);
    let subjects = SubjectSource::Fixed(Subject::new(cli.access.subject.clone()));
    let server = McpServer::loading(loaded, config.startup_wait, subjects, tasks.clone())
        .with_approvals(approvals.0, approvals.1);
    // The upstreams start once a client speaks: a start without one (stdin at
    // its end, to fill the cache) starts no child.
    let gate = codemode_host::UpstreamGate::closed();
    config.upstreams_gate = Some(gate.clone());
    let hook = Arc::new(move || gate.open()) as codemode_host::mcp::ClientHook;
    let server = server.with_client_hook(hook);
    let serving = serve_stdio(server);
    tokio::pin!(serving);
    let mut loading = tokio::task::spawn_blocking(move || load(&config));
    let (service, served) = tokio::select! {
        loaded = &mut loading => (Arc::new(loaded??), None),
        served = &mut serving => (Arc::new(loading.await??), Some(served)),
    };
    let _watch = start_watch(cli, &service)?;
    let _ = service_cell.set(service.clone());
    publish.send_replace(Some(service.clone()));
    let served = match served {
        Some(served) => served,
        None => serving.await,
    };
    close(service, &tasks).await?;
    served.map_err(anyhow::Error::from)
}

/// Watches the plugins folder unless --no-watch; the watch lasts as long as the
/// returned value.
/// Watches the plugins folder (unless `--no-watch`), then starts pulling the
/// config file's `[[plugin]]` entries into it: what a pull writes is reloaded
/// as any plugin file.
fn start_watch(cli: &Cli, service: &Arc<Service>) -> anyhow::Result<Option<watch::Watch>> {
    let watch = watch_folder(cli, service)?;
    if !cli.plugin_entries.is_empty() && watch.is_none() {
        tracing::warn!("--no-watch: plugins pulled while serving are loaded at the next start");
    }
    let pulls = oci::Pulls::start_all(&cli.plugin_entries, &cli.plugins, cli.pull_limits())
        .map_err(anyhow::Error::msg)?;
    service.set_pulls(pulls);
    Ok(watch)
}

fn watch_folder(cli: &Cli, service: &Arc<Service>) -> anyhow::Result<Option<watch::Watch>> {
    if cli.no_watch {
        return Ok(None);
    }
    if !cli.plugins.exists()
        && !cli.plugins_given
        && (!cli.upstreams.is_empty() || !cli.openapi.is_empty())
    {
        tracing::info!(folder = %cli.plugins.display(), "no plugins folder: serving the upstreams only, not watching for plugins");
        return Ok(None);
    }
    let watch = watch::watch(service).with_context(|| {
        format!(
            "cannot watch the plugins folder `{}` (pass --no-watch to serve without reloading)",
            cli.plugins.display()
        )
    })?;
    tracing::info!(folder = %cli.plugins.display(), "watching the plugins folder for changes");
    Ok(Some(watch))
}

/// `codemode-host check FILE..`: each file's capabilities, or every reason it cannot
/// load, on stdout.
fn check(cli: &Cli, files: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let cache_dir = cli.cache_dir.clone().or_else(default_cache_dir);
    let mut failed = 0;
    for file in files {
        let label = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        match codemode_host::check_plugin(file, &cli.offline_loading(), cache_dir.as_deref()) {
            Ok(capabilities) => {
                let count = capabilities.len();
                println!(
                    "{label}: {count} {}",
                    if count == 1 {
                        "capability"
                    } else {
                        "capabilities"
                    }
                );
                if let Some(provenance) = oci::provenance_of(file, None) {
                    println!(
                        "  pulled from {} ({}), {}",
                        provenance.reference,
                        provenance.digest,
                        match &provenance.key_id {
                            Some(key_id) => format!("signature verified by key {key_id}"),
                            None => "signature not verified".to_owned(),
                        }
                    );
                }
                for capability in capabilities {
                    println!("  {}", capability.signature);
                    println!("    id: {}", capability.id);
                    if !capability.annotations.is_empty() {
                        let hints: Vec<String> = capability
                            .annotations
                            .iter()
                            .map(|(name, value)| format!("{name}={value}"))
                            .collect();
                        println!("    annotations: {}", hints.join(" "));
                    }
                    println!("    {}", capability.summary);
                }
            }
            Err(reasons) => {
                failed += 1;
                println!("{label}: cannot load");
                for reason in reasons {
                    println!("  {reason}");
                }
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} plugin file(s) cannot load");
    Ok(())
}

/// `codemode-host precompile`: fills the cache, one line per component on stdout.
/// `pull`: one plugin from a registry into the plugins folder.
fn pull(cli: &Cli) -> anyhow::Result<()> {
    let Some(Command::Pull {
        reference,
        name,
        digest,
        registry_auth,
        registry_token,
        insecure,
    }) = &cli.command
    else {
        anyhow::bail!("not the pull command");
    };
    let source = oci::PluginSource {
        reference: reference.clone(),
        name: name.clone().unwrap_or_else(|| reference.name().to_owned()),
        pinned: digest.clone(),
        policy: cli.pull.verify,
        keys: cli.pull.verify_keys.clone(),
        auth: self::registry_auth(registry_auth.as_ref(), registry_token.as_ref()),
        insecure: *insecure,
    };
    let limits = cli.pull_limits();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let pulled = runtime
        .block_on(oci::pull(&source, &cli.plugins, limits))
        .map_err(|failure| anyhow::Error::msg(failure.message))?;
    println!(
        "{}: {} ({}) from {}; {}",
        pulled.file.display(),
        if pulled.changed {
            "pulled"
        } else {
            "already up to date"
        },
        pulled.digest,
        source.reference,
        pulled.verification
    );
    Ok(())
}

/// The registry credentials `--registry-auth` or `--registry-token` name.
fn registry_auth(
    config: Option<&std::path::PathBuf>,
    token: Option<&std::path::PathBuf>,
) -> oci::RegistryAuth {
    match (config, token) {
        (_, Some(token)) => oci::RegistryAuth::TokenFile(token.clone()),
        (Some(config), None) => oci::RegistryAuth::DockerConfig(config.clone()),
        (None, None) => oci::RegistryAuth::DockerDefault,
    }
}

/// `push` and `sign`: a plugin published to a registry.
fn publish(cli: &Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match &cli.command {
        Some(Command::Push {
            file,
            reference,
            key,
            registry_auth: config,
            registry_token,
            insecure,
        }) => {
            let destination = oci::Destination {
                reference: reference.clone(),
                auth: registry_auth(config.as_ref(), registry_token.as_ref()),
                insecure: *insecure,
            };
            let published = runtime
                .block_on(oci::push(
                    file,
                    &destination,
                    key.as_deref(),
                    cli.pull_limits(),
                ))
                .map_err(anyhow::Error::msg)?;
            match &published.key_id {
                Some(key_id) => println!(
                    "pushed {} to {reference} ({}), signed with key {key_id}",
                    file.display(),
                    published.digest
                ),
                None => println!(
                    "pushed {} to {reference} ({})",
                    file.display(),
                    published.digest
                ),
            }
        }
        Some(Command::Sign {
            reference,
            key,
            registry_auth: config,
            registry_token,
            insecure,
        }) => {
            let destination = oci::Destination {
                reference: reference.clone(),
                auth: registry_auth(config.as_ref(), registry_token.as_ref()),
                insecure: *insecure,
            };
            let published = runtime
                .block_on(oci::sign(&destination, key, cli.pull_limits()))
                .map_err(anyhow::Error::msg)?;
            println!(
                "signed {reference} ({}) with key {}",
                published.digest,
                published.key_id.unwrap_or_default()
            );
        }
        _ => anyhow::bail!("not the push or sign command"),
    }
    Ok(())
}

fn precompile(cli: &Cli) -> anyhow::Result<()> {
    let cache_dir = cli
        .cache_dir
        .clone()
        .or_else(default_cache_dir)
        .context("no cache folder: pass --cache-dir DIR (HOME and XDG_CACHE_HOME are unset)")?;
    let report = codemode_host::precompile(&cli.plugins, &cache_dir, &cli.offline_loading())?;
    let mut failed = 0;
    for entry in &report {
        match &entry.outcome {
            Ok(true) => println!("{}: already cached", entry.name),
            Ok(false) => println!("{}: compiled in {} ms", entry.name, entry.millis),
            Err(reason) => {
                failed += 1;
                println!("{}: cannot load: {reason}", entry.name);
            }
        }
    }
    println!("cache: {}", cache_dir.display());
    anyhow::ensure!(failed == 0, "{failed} plugin(s) cannot load");
    Ok(())
}
