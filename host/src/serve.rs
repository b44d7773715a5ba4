//! Serving: the service loaded, then MCP over stdio (answering while it loads) or
//! Streamable HTTP, the plugins folder watched, the task store and the approval
//! key made, and everything closed in order at the end.

use std::sync::{Arc, OnceLock};

use anyhow::Context;
use codemode_server::authz::Subject;
use codemode_server::mcp::http::{self, Authentication, HttpConfig, Readiness};
use codemode_server::mcp::{McpServer, SubjectSource, serve_stdio};
use codemode_server::oci;
use codemode_server::store::{Store, StoreLocation};
use codemode_server::tasks::{RedisTasks, StoredTasks, TaskBoard, TaskStore};
use codemode_server::{Service, ServiceConfig, StartError, watch};

use crate::cli::Cli;

/// Where tasks (and approvals' single-use claims) are kept: in the Redis of
/// `--task-store`, else in that of `--store` when it is one (one URL keeps
/// all that replicas share), else in memory. A URL it cannot use stops the
/// start; a Redis that does not answer does not.
pub(crate) async fn task_store(cli: &Cli, store: &Arc<Store>) -> anyhow::Result<Arc<TaskStore>> {
    let limits = cli.task_limits();
    let url = match (&cli.budgets.task_store, store.location()) {
        (Some(url), _) => url.clone(),
        (None, StoreLocation::Redis(url)) => url.clone(),
        (None, StoreLocation::Memory) => {
            return Ok(Arc::new(TaskStore::Memory(TaskBoard::new(limits))));
        }
        (None, StoreLocation::File(_)) => {
            return Ok(Arc::new(TaskStore::Stored(StoredTasks::new(
                store.clone(),
                limits,
            ))));
        }
    };
    let redis = RedisTasks::connect(&url, limits).await?;
    Ok(Arc::new(TaskStore::Redis(redis)))
}

/// How approvals are asked: `--approval-timeout`, and the key that signs the
/// `requestState` of 2026-07-28 approvals (`--approval-key`, else the cache
/// folder's), loaded only when a policy can ask.
type Approvals = (
    std::time::Duration,
    Option<Arc<codemode_server::mcp::ApprovalKey>>,
);

pub(crate) fn approvals(
    cli: &Cli,
    cache_dir: Option<&std::path::Path>,
) -> anyhow::Result<Approvals> {
    let timeout = cli
        .access
        .approval_timeout
        .unwrap_or(codemode_server::mcp::DEFAULT_APPROVAL_TIMEOUT);
    if cli.access.policy.is_empty() && cli.access.approval_key.is_none() {
        return Ok((timeout, None));
    }
    let key = codemode_server::mcp::load_key(cli.access.approval_key.as_deref(), cache_dir)?;
    Ok((timeout, Some(Arc::new(key))))
}

/// Cancels the tasks running here, then closes the upstreams: no upstream
/// child outlives the server, and no task's call fails as unavailable first.
pub(crate) async fn close(service: Arc<Service>, tasks: &TaskStore) -> anyhow::Result<()> {
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
pub(crate) fn load(config: &ServiceConfig) -> anyhow::Result<Service> {
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
pub(crate) async fn serve_http(
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
pub(crate) async fn serve_stdio_while_loading(
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
    let gate = codemode_server::UpstreamGate::closed();
    config.upstreams_gate = Some(gate.clone());
    let hook = Arc::new(move || gate.open()) as codemode_server::mcp::ClientHook;
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
pub(crate) fn start_watch(
    cli: &Cli,
    service: &Arc<Service>,
) -> anyhow::Result<Option<watch::Watch>> {
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
