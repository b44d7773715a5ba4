//! The three operations behind the MCP tools, independent of any transport, and
//! the composition root that wires them: the engine, the artifact cache, the
//! capability-source providers (the plugins folder, each upstream), the
//! [`Registry`] that assembles the catalog from them, and the executor.
//!
//! The MCP adapter decodes a request, calls one method here and projects the error;
//! nothing in this module knows MCP.

use crate::quota::{QuotaGate, Quotas};
use crate::state::StateProvider;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::authz::{Authorizer, Subject};
use crate::cache::open_cache;
use crate::catalog::{Catalog, Description, SearchError, SearchResponse};
use crate::error::ToolError;
use crate::execute::{
    Executed, Execution, Executor, ExecutorConfig, LimitError, Limits, Retuned, RunOptions,
};
use crate::metrics::Metrics;
use crate::openapi::{OpenApiConfig, OpenApiProvider};
use crate::plugins::{self, GlobalCaps, PluginFolder, PluginsProvider, ReloadError, Reloaded};
use crate::registry::Registry;
use crate::source::{Provider, Skipped};
use crate::upstream::{STOP_GRACE, UpstreamConfig, UpstreamGate, UpstreamProvider};

pub use setup::{DEFAULT_STARTUP_WAIT, ServiceConfig, StartError};

mod setup;
mod views;

/// A file of the server's configuration reloaded while serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFile {
    /// `--tokens`.
    Tokens,
    /// `--policy`.
    Policy,
    /// `--config`.
    Config,
}

impl ConfigFile {
    /// Its name in `/metrics` (one of `metrics::CONFIG_FILES`).
    fn name(self) -> &'static str {
        match self {
            ConfigFile::Tokens => crate::metrics::CONFIG_FILES[0],
            ConfigFile::Policy => crate::metrics::CONFIG_FILES[1],
            ConfigFile::Config => crate::metrics::CONFIG_FILES[2],
        }
    }
}

/// The subject of the single local user of a stdio server.
pub const LOCAL_SUBJECT: &str = "local";

/// The search / describe / execute service over the plugins of one folder and the
/// upstreams configured.
///
/// What serves is one snapshot (the catalog and the routes to its sources),
/// replaced whole when a source changes ([`Service::reload`], an upstream's
/// restart); an execution keeps the snapshot it started with.
pub struct Service {
    registry: Registry,
    /// The plugins folder, also among the registry's providers.
    plugins: Arc<PluginsProvider>,
    /// The configured upstreams, also among the registry's providers, in
    /// configuration order ([`Service::set_upstreams`] replaces them).
    upstreams: Mutex<Vec<Arc<UpstreamProvider>>>,
    /// Held by [`Service::set_upstreams`] and [`Service::set_openapi`] from
    /// start to end.
    changing_upstreams: Mutex<()>,
    /// The configured OpenAPI services, in configuration order
    /// ([`Service::set_openapi`] replaces them).
    openapi: Mutex<Vec<Arc<OpenApiProvider>>>,
    executor: Executor,
    metrics: Arc<Metrics>,
    /// [`ServiceConfig::require_all_plugins`].
    require_all_plugins: bool,
    /// Who decides what each subject can find ([`ServiceConfig::authorizer`]).
    authorizer: Arc<dyn Authorizer>,
    /// Each subject's view, when the authorizer decides visibility.
    views: Arc<views::Views>,
    /// [`ServiceConfig::startup_wait`].
    startup_wait: Duration,
    /// [`ServiceConfig::upstreams_gate`], for the upstreams a reload adds.
    upstreams_gate: Option<UpstreamGate>,
    /// [`ServiceConfig::pulls`]; [`Service::set_pulls`] replaces them.
    pulls: Mutex<Option<Arc<crate::oci::Pulls>>>,
}

impl Service {
    /// Loads every plugin in `config.plugins_dir`, connects every upstream and
    /// builds the catalog. A plugin that fails to load, or whose capabilities
    /// conflict with another's, is logged with the reason and skipped; an upstream
    /// that cannot connect is tried again in the background.
    ///
    /// # Errors
    ///
    /// [`StartError`] when the folder cannot be listed, the engine cannot be built, or
    /// a `--disable` ID names no capability.
    pub fn load(config: &ServiceConfig) -> Result<Self, StartError> {
        config.limits.validate().map_err(StartError::Limits)?;
        for upstream in &config.upstreams {
            warn_timeout(upstream, &config.limits);
        }
        // The folder is listed once more here to size the pool (plugins added later
        // fit if there is room; past it, executions fail with a resource limit), and
        // to fail before any upstream's child starts.
        let plugin_count = match plugins::plugin_files(&config.plugins_dir) {
            Ok(files) => files.len(),
            Err(error)
                if config.plugins_optional && error.kind() == std::io::ErrorKind::NotFound =>
            {
                0
            }
            Err(reason) => {
                return Err(StartError::PluginsDir {
                    path: config.plugins_dir.clone(),
                    reason,
                });
            }
        };
        let instances =
            plugins::pool_instances(config.limits.max_concurrent_executions, plugin_count);
        let engine = plugins::engine(instances).map_err(StartError::Engine)?;
        tracing::debug!(instances, "instance pool sized");
        let cache = open_cache(config.cache_dir.as_deref());
        let caps = GlobalCaps {
            max_memory: config.limits.max_memory_bytes,
            max_fuel: config.limits.max_fuel,
            max_execution_time: config.limits.max_execution_time,
        };
        let folder = PluginFolder::new(config.plugins_dir.clone(), config.loading.clone(), caps)
            .optional(config.plugins_optional);
        let metrics = Arc::new(Metrics::default());
        let plugins = Arc::new(PluginsProvider::new(
            folder,
            engine.clone(),
            cache.clone(),
            metrics.clone(),
            !config.upstreams.is_empty()
                || !config.openapi.is_empty()
                || !config.providers.is_empty(),
        ));
        // The plugins first: their capabilities enter the catalog first, so an
        // upstream's cannot push them past the catalog's limits. The registry
        // starts them last first: the upstreams connect while the folder is
        // scanned.
        let upstreams: Vec<Arc<UpstreamProvider>> = config
            .upstreams
            .iter()
            .map(|upstream| {
                Arc::new(UpstreamProvider::new(
                    upstream.clone(),
                    metrics.clone(),
                    config.upstreams_gate.clone(),
                ))
            })
            .collect();
        let openapi: Vec<Arc<OpenApiProvider>> = config
            .openapi
            .iter()
            .map(|service| Arc::new(OpenApiProvider::new(service.clone())))
            .collect();
        let mut providers: Vec<Arc<dyn Provider>> = vec![plugins.clone()];
        providers.extend(
            upstreams
                .iter()
                .map(|upstream| upstream.clone() as Arc<dyn Provider>),
        );
        providers.extend(
            openapi
                .iter()
                .map(|service| service.clone() as Arc<dyn Provider>),
        );
        providers.extend(config.providers.iter().cloned());
        // Built in, last: not a source the operator configured (an empty plugins
        // folder beside it is still worth a warning).
        if let Some(state) = &config.state {
            providers.push(Arc::new(StateProvider::new(
                state.store.clone(),
                state.limits,
            )));
        }
        let registry = Registry::start(providers, config.disabled.clone(), metrics.clone())
            .map_err(StartError::Catalog);
        // A start that fails ends the upstreams it started, children included.
        let fail = |registry: &Registry, error: StartError| {
            registry.stop(Instant::now() + STOP_GRACE + Duration::from_secs(1));
            Err(error)
        };
        if let Some(reason) = plugins.take_first_error() {
            let error = StartError::PluginsDir {
                path: config.plugins_dir.clone(),
                reason,
            };
            return match &registry {
                Ok(registry) => fail(registry, error),
                Err(_) => Err(error),
            };
        }
        let registry = registry?;
        let snapshot = registry.snapshot();
        if config.require_all_plugins && !snapshot.skipped().is_empty() {
            return fail(
                &registry,
                StartError::PluginsRequired(snapshot.skipped().to_vec()),
            );
        }
        tracing::info!(
            plugins = metrics.plugins_loaded(),
            capabilities = snapshot.catalog.len(),
            upstreams = upstreams.iter().filter(|upstream| upstream.is_up()).count(),
            "catalog ready"
        );
        let executor = match Executor::new(ExecutorConfig {
            engine: &engine,
            limits: config.limits.clone(),
            authorizer: config.authorizer.clone(),
            token_exchange: config.token_exchange.clone(),
            audit: config.audit.clone(),
            metrics: metrics.clone(),
            cache: cache.as_ref(),
            telemetry: config.telemetry.clone(),
            quotas: config
                .quotas
                .clone()
                .map(|quotas| Arc::new(QuotaGate::new(quotas, metrics.clone()))),
        }) {
            Ok(executor) => executor,
            Err(error) => return fail(&registry, StartError::Runner(error)),
        };
        Ok(Self {
            registry,
            plugins,
            upstreams: Mutex::new(upstreams),
            changing_upstreams: Mutex::new(()),
            openapi: Mutex::new(openapi),
            executor,
            metrics,
            require_all_plugins: config.require_all_plugins,
            authorizer: config.authorizer.clone(),
            views: Arc::default(),
            startup_wait: config.startup_wait,
            upstreams_gate: config.upstreams_gate.clone(),
            pulls: Mutex::new(config.pulls.clone()),
        })
    }

    /// Closes every upstream's session and waits (a few seconds at most) for
    /// their children to exit; calls of their capabilities then fail as
    /// unavailable. For the end of serving (running tasks are cancelled first).
    pub fn close_upstreams(&self) {
        self.registry
            .stop(Instant::now() + STOP_GRACE + Duration::from_secs(1));
    }

    /// Rescans the plugins folder: loads new and changed files (a changed file that
    /// fails to load keeps its last good version), drops removed ones, and when
    /// anything changed builds a new catalog and swaps it in. Searches, describes and
    /// executions that start after the swap see the new catalog; running executions
    /// finish on theirs. Reloads run one at a time.
    ///
    /// # Errors
    ///
    /// [`StartError::PluginsDir`] when the folder cannot be listed (the current
    /// catalog keeps serving).
    pub fn reload(&self) -> Result<Reloaded, StartError> {
        self.plugins.reload().map_err(|error| match error {
            ReloadError::Folder(reason) => StartError::PluginsDir {
                path: self.plugins.dir(),
                reason,
            },
            ReloadError::Catalog(error) => StartError::Catalog(error),
        })
    }

    /// The configured upstreams now.
    fn upstreams(&self) -> MutexGuard<'_, Vec<Arc<UpstreamProvider>>> {
        self.upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves the upstreams of `configs` from now on (a reloaded config file): an
    /// upstream no longer configured is removed (its names leave the catalog, its
    /// child is stopped), one configured anew is started (its names enter with its
    /// first list), one whose configuration changed is restarted (its names stay,
    /// their calls failing as unavailable, until the new one lists); the others go
    /// on untouched. Blocks while the stopped ones stop (a few seconds at most),
    /// holding nothing `/readyz` needs.
    pub fn set_upstreams(&self, configs: &[UpstreamConfig]) -> UpstreamChanges {
        // One change at a time: the list and the registry's slots change in two
        // steps (the lock on the list is not held while upstreams stop).
        let _changing = self
            .changing_upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let limits = self.executor.limits();
        let mut changes = UpstreamChanges::default();
        let mut gone = Vec::new();
        let mut replaced = Vec::new();
        let mut added = Vec::new();
        {
            let mut upstreams = self.upstreams();
            let mut kept = Vec::with_capacity(configs.len());
            for upstream in upstreams.drain(..) {
                let name = upstream.upstream().to_owned();
                match configs.iter().find(|config| config.name == name) {
                    None => {
                        changes.removed.push(name);
                        gone.push(upstream);
                    }
                    Some(config) if config != upstream.config() => {
                        changes.restarted.push(name);
                        let new = Arc::new(UpstreamProvider::new(
                            config.clone(),
                            self.metrics.clone(),
                            self.upstreams_gate.clone(),
                        ));
                        replaced.push((upstream, new.clone()));
                        kept.push(new);
                    }
                    Some(_) => kept.push(upstream),
                }
            }
            for config in configs {
                if kept
                    .iter()
                    .any(|upstream| upstream.upstream() == config.name)
                {
                    continue;
                }
                changes.added.push(config.name.clone());
                let new = Arc::new(UpstreamProvider::new(
                    config.clone(),
                    self.metrics.clone(),
                    self.upstreams_gate.clone(),
                ));
                added.push(new.clone());
                kept.push(new);
            }
            // Configuration order, as `upstreams_down` lists them.
            kept.sort_by_key(|upstream| {
                configs
                    .iter()
                    .position(|config| config.name == upstream.upstream())
            });
            *upstreams = kept;
        }
        // Every stopping one is asked first, then all are waited for together.
        let now = Instant::now();
        for upstream in &gone {
            self.registry.remove(upstream.name(), now);
        }
        for (old, new) in &replaced {
            warn_timeout(new.config(), &limits);
            if !self.registry.replace(old.name(), new.clone(), now) {
                self.registry.add(new.clone());
            }
        }
        for new in &added {
            warn_timeout(new.config(), &limits);
            self.registry.add(new.clone());
        }
        let deadline = now + STOP_GRACE + Duration::from_secs(1);
        for old in gone.iter().chain(replaced.iter().map(|(old, _)| old)) {
            old.stop(deadline);
        }
        for upstream in &gone {
            self.metrics.upstream_removed(upstream.upstream());
        }
        changes
    }

    /// Replaces the configured OpenAPI services with `configs` (a reloaded
    /// config file): those no longer configured leave the catalog, those whose
    /// entry changed are loaded again, new ones are loaded; those kept as they
    /// were read their specs again, and one whose text changed is offered anew
    /// (a spec that no longer loads leaves the last version serving).
    pub fn set_openapi(&self, configs: &[OpenApiConfig]) -> UpstreamChanges {
        let _changing = self
            .changing_upstreams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut changes = UpstreamChanges::default();
        let (mut gone, mut replaced, mut added, mut refreshed) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        {
            let mut services = self
                .openapi
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut kept = Vec::with_capacity(configs.len());
            for service in services.drain(..) {
                let name = service.config().name.clone();
                match configs.iter().find(|config| config.name == name) {
                    None => {
                        changes.removed.push(name);
                        gone.push(service);
                    }
                    Some(config) if config != service.config() => {
                        changes.restarted.push(name);
                        let new = Arc::new(OpenApiProvider::new(config.clone()));
                        replaced.push((service, new.clone()));
                        kept.push(new);
                    }
                    Some(_) => {
                        refreshed.push(service.clone());
                        kept.push(service);
                    }
                }
            }
            for config in configs {
                if kept
                    .iter()
                    .any(|service| service.config().name == config.name)
                {
                    continue;
                }
                changes.added.push(config.name.clone());
                let new = Arc::new(OpenApiProvider::new(config.clone()));
                added.push(new.clone());
                kept.push(new);
            }
            kept.sort_by_key(|service| {
                configs
                    .iter()
                    .position(|config| config.name == service.config().name)
            });
            *services = kept;
        }
        let now = Instant::now();
        for service in &gone {
            self.registry.remove(service.name(), now);
        }
        for (old, new) in &replaced {
            if !self.registry.replace(old.name(), new.clone(), now) {
                self.registry.add(new.clone());
            }
        }
        for new in &added {
            self.registry.add(new.clone());
        }
        for service in &refreshed {
            service.refresh();
        }
        let deadline = now + Duration::from_secs(2);
        for old in gone.iter().chain(replaced.iter().map(|(old, _)| old)) {
            old.stop(deadline);
        }
        changes
    }

    /// Leaves out the capability IDs of `disabled` from now on (a reloaded
    /// config file's `disable`): the catalog is rebuilt at once.
    ///
    /// # Errors
    ///
    /// [`StartError::Catalog`] when it cannot be rebuilt; the last one serves.
    pub fn set_disabled(&self, disabled: Vec<String>) -> Result<(), StartError> {
        self.registry
            .set_disabled(disabled)
            .map_err(StartError::Catalog)
    }

    /// Applies `limits` for the executions that start after it: every budget of
    /// one execution; what sized the sandboxes keeps its value until a restart
    /// ([`Limits::retune`]).
    ///
    /// # Errors
    ///
    /// [`LimitError`] when `limits` are not valid; the limits in force stay.
    pub fn retune(&self, limits: &Limits) -> Result<Retuned, LimitError> {
        self.executor.retune(limits)
    }

    /// Applies `quotas` to the executions that start after it (a reload of the
    /// config file's `[[quota]]` tables); without a store for quotas
    /// (`ServiceConfig::quotas`), nothing.
    pub fn set_quotas(&self, quotas: Quotas) {
        self.executor.set_quotas(quotas);
    }

    /// The plugin files left out of the catalog now (failed to load, or refused),
    /// by file name. A file whose new version failed while an earlier one serves is
    /// listed too ([`Skipped::earlier_serves`]).
    pub fn skipped(&self) -> Vec<Skipped> {
        self.registry.snapshot().skipped().to_vec()
    }

    /// The references of `[[plugin]]` entries not pulled yet whose plugin file
    /// is not in the folder either ([`crate::oci::Pulls::pending`]).
    pub fn pulls_pending(&self) -> Vec<String> {
        self.pulls
            .lock()
            .ok()
            .and_then(|pulls| pulls.as_ref().map(|pulls| pulls.pending()))
            .unwrap_or_default()
    }

    /// Replaces the plugins pulled from registries (a config reload changed
    /// `[[plugin]]` entries, keys or pull settings); the old pulls are stopped
    /// and waited for. A caller replacing running pulls stops them first
    /// (`set_pulls(None)`), so that old and new never write the same file.
    pub fn set_pulls(&self, pulls: Option<Arc<crate::oci::Pulls>>) {
        let old = match self.pulls.lock() {
            Ok(mut held) => std::mem::replace(&mut *held, pulls),
            Err(_) => None,
        };
        // Dropped outside the lock: it waits for its thread (`/readyz` reads
        // the lock meanwhile).
        drop(old);
    }

    /// The configured upstreams without a session now (connecting or restarting),
    /// by name, in configuration order.
    pub fn upstreams_down(&self) -> Vec<String> {
        self.upstreams()
            .iter()
            .filter(|upstream| !upstream.is_up())
            .map(|upstream| upstream.upstream().to_owned())
            .collect()
    }

    /// Whether the service is fit to serve: always, unless every plugin is required
    /// ([`ServiceConfig::require_all_plugins`]) and [`Service::skipped`] lists one.
    pub fn ready(&self) -> bool {
        !self.require_all_plugins || self.registry.snapshot().skipped().is_empty()
    }

    /// Whether every plugin file must load ([`ServiceConfig::require_all_plugins`]).
    pub fn requires_all_plugins(&self) -> bool {
        self.require_all_plugins
    }

    /// The plugins folder this service serves.
    pub fn plugins_dir(&self) -> PathBuf {
        self.plugins.dir()
    }

    /// `execute`: runs one program for `subject`, whose native calls the authorizer
    /// decides on. Dropping the future cancels it.
    ///
    /// # Errors
    ///
    /// The [`ToolError`] the model sees; [`ToolError::Unauthenticated`] for an empty
    /// subject.
    pub async fn execute(&self, subject: &Subject, source: &str) -> Result<Executed, ToolError> {
        self.run(subject, source).await.into_result()
    }

    /// `execute`, with its cost whether it succeeded or not: on a resource limit,
    /// [`Stats::limit`](crate::Stats::limit) names the budget that ran out. Dropping
    /// the future cancels it.
    pub async fn run(&self, subject: &Subject, source: &str) -> Execution {
        self.run_since(subject, source, Instant::now(), RunOptions::default())
            .await
    }

    /// The encoded size any value crossing the sandbox may have
    /// (`--max-value-bytes`), in force now.
    pub(crate) fn max_value_bytes(&self) -> usize {
        self.executor.limits().max_value_bytes
    }

    /// [`Service::run`] of a request that arrived at `arrived`: its time budget
    /// runs from then, so a wait before the service could take it (the load, over
    /// stdio) is part of it. `options` says who hears of each successful native
    /// call and the trace context the request carried.
    pub(crate) async fn run_since(
        &self,
        subject: &Subject,
        source: &str,
        arrived: Instant,
        options: RunOptions,
    ) -> Execution {
        if subject.id.is_empty() {
            return Execution::refused(ToolError::Unauthenticated, None);
        }
        // A source the program names that is still starting (an upstream's
        // first connection) is waited for, off the program's time: its budget
        // starts when the wait ends. One that did not start in time fails the
        // execution, naming it.
        let mut options = options;
        let names = program_names(source);
        let (waited, outcome) = self
            .wait_started(|root| names.contains(root), arrived + self.startup_wait)
            .await;
        if let Err(provider) = outcome {
            options.not_started = Some(provider);
        }
        let started = if waited { Instant::now() } else { arrived };
        let dispatch = self.view(subject).await.dispatch.clone();
        self.executor
            .execute(dispatch, subject, source, started, options)
            .await
    }

    /// Waits until no provider of a root `wanted` accepts is still starting, at
    /// most until `deadline`: whether it waited at all, and the provider still
    /// starting at the deadline.
    async fn wait_started(
        &self,
        wanted: impl Fn(&str) -> bool,
        deadline: Instant,
    ) -> (bool, Result<(), String>) {
        if !self
            .registry
            .snapshot()
            .starting()
            .iter()
            .any(|starting| wanted(&starting.root))
        {
            return (false, Ok(()));
        }
        let outcome = self.registry.wait_started(wanted, deadline).await;
        if let Err(provider) = &outcome {
            tracing::info!(provider = %provider, waited_ms = crate::units::millis(self.startup_wait), "a source a request needs did not finish starting in time");
        }
        (true, outcome)
    }

    /// Counts one reload of `file` while serving (`/metrics`:
    /// `codemode_config_reloads_total`), which put the new version in force
    /// (`ok`) or left the one before.
    pub fn config_reloaded(&self, file: ConfigFile, ok: bool) {
        let outcome = if ok {
            crate::metrics::CONFIG_RELOAD_OK
        } else {
            crate::metrics::CONFIG_RELOAD_ERROR
        };
        self.metrics.config_reload(file.name(), outcome);
    }

    /// What the service counts, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// How many executions got a slot and started running (queued ones that were
    /// cancelled or timed out never count).
    pub fn executions_started(&self) -> u64 {
        self.executor.executions_started()
    }

    /// The language surface the interpreter actually provides, as the seed prints it
    /// (read from a fresh interpreter instance).
    ///
    /// # Errors
    ///
    /// When the interpreter cannot be instantiated.
    pub fn surface(&self) -> anyhow::Result<String> {
        Ok(self.executor.surface()?)
    }

    /// How many capabilities serve now.
    pub fn capability_count(&self) -> usize {
        self.catalog().len()
    }

    /// `search_api`: ranked discovery among what `subject` can see.
    ///
    /// # Errors
    ///
    /// [`ToolError::ResourceLimit`] for a query over 256 bytes or 16 distinct tokens.
    pub async fn search(
        &self,
        subject: &Subject,
        query: &str,
    ) -> Result<SearchResponse, ToolError> {
        // Every source still starting may hold what is searched for: the answer
        // waits for them (at most the startup wait), then holds what serves.
        let _ = self
            .wait_started(|_| true, Instant::now() + self.startup_wait)
            .await;
        self.view(subject)
            .await
            .catalog
            .search(query)
            .map_err(|e| match e {
                SearchError::QueryLimit => ToolError::ResourceLimit,
            })
    }

    /// `describe_api`: the exact name's signature and field shapes.
    ///
    /// # Errors
    ///
    /// [`ToolError::NotFound`] for any name that is not exactly an enabled
    /// capability `subject` can see.
    pub async fn describe(&self, subject: &Subject, name: &str) -> Result<Description, ToolError> {
        let root = name.split('.').next().unwrap_or(name);
        let _ = self
            .wait_started(
                |starting| starting == root,
                Instant::now() + self.startup_wait,
            )
            .await;
        self.view(subject)
            .await
            .catalog
            .describe(name)
            .ok_or(ToolError::NotFound)
    }

    /// What `subject` can find and call now: the whole snapshot, unless the
    /// policy decides visibility. A view not remembered is decided on a
    /// blocking thread (one evaluation per capability), not on the runtime's.
    async fn view(&self, subject: &Subject) -> Arc<views::View> {
        let snapshot = self.registry.snapshot();
        if !self.authorizer.decides_visibility() {
            return Arc::new(views::View {
                catalog: snapshot.catalog.clone(),
                dispatch: snapshot.dispatch.clone(),
            });
        }
        if let Some(view) = self.views.remembered(&*self.authorizer, &snapshot, subject) {
            return view;
        }
        let views = self.views.clone();
        let authorizer = self.authorizer.clone();
        let decided_for = subject.clone();
        let decided =
            tokio::task::spawn_blocking(move || views.view(&*authorizer, &snapshot, &decided_for))
                .await;
        match decided {
            Ok(view) => view,
            Err(error) => {
                // Nothing is shown when the decisions could not be made.
                tracing::error!(subject = %subject.id, reason = %error, "visibility could not be decided; nothing is visible to this subject");
                Arc::new(views::View {
                    catalog: Arc::new(self.catalog().subset(|_| false)),
                    dispatch: Arc::new(self.registry.snapshot().dispatch.subset(|_| false)),
                })
            }
        }
    }

    /// The catalog this service answers from now.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        self.registry.snapshot().catalog.clone()
    }
}

/// What [`Service::set_upstreams`] (or [`Service::set_openapi`]) changed, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamChanges {
    /// Configured anew, started.
    pub added: Vec<String>,
    /// No longer configured, stopped.
    pub removed: Vec<String>,
    /// Configured differently, stopped and started again.
    pub restarted: Vec<String>,
}

impl UpstreamChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.restarted.is_empty()
    }
}

/// Warns when `upstream`'s timeout is above the execution's time, which ends its
/// calls first.
fn warn_timeout(upstream: &UpstreamConfig, limits: &Limits) {
    let max_time = limits.max_execution_time;
    if let Some(timeout) = upstream.timeout.filter(|timeout| *timeout > max_time) {
        tracing::warn!(upstream = %upstream.name, timeout = ?timeout, max_execution_time = ?max_time, "an upstream's timeout is above --max-execution-time, which ends its calls first (in a task, --max-task-time does)");
    }
}

/// The identifiers a program's text holds (`git` of `git.log(...)`), for the
/// roots of sources still starting it names: a scan of the text, not a parse, so
/// a root named only in a string or a comment is waited for too (at most the
/// startup wait), never the other way round.
fn program_names(source: &str) -> std::collections::HashSet<&str> {
    let mut names = std::collections::HashSet::new();
    let bytes = source.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let starts = bytes[at].is_ascii_alphabetic() || bytes[at] == b'_';
        if !starts {
            at += 1;
            continue;
        }
        let begin = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        names.insert(&source[begin..at]);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_s_names_are_its_identifiers() {
        let names = program_names("def main():\n    return git.log(n=2) + _x9[\"time\"] # é\n");
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["_x9", "def", "git", "log", "main", "n", "return", "time"]
        );
    }
    use crate::authz::AllowAll;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh folder under the system's temporary folder, holding `files`.
    fn folder(files: &[(&str, &[u8])]) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "codemode-service-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the folder");
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write a file");
        }
        dir
    }

    /// The service of `dir`, allowing every call, with the tests' artifact cache (the
    /// interpreter compiles once for all of them).
    fn service(dir: &Path) -> Service {
        Service::load(&ServiceConfig {
            cache_dir: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-cache")),
            ..ServiceConfig::new(dir, Arc::new(AllowAll))
        })
        .expect("the service starts")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_folder_without_loadable_plugins_serves_no_capabilities_and_still_executes() {
        // Not WebAssembly, and a core module: both skipped, neither stops the start.
        let dir = folder(&[
            ("notes.wasm", b"not a component"),
            ("core.wasm", b"\0asm\x01\0\0\0"),
            ("readme.txt", b"ignored"),
        ]);
        let service = service(&dir);
        assert_eq!(service.capability_count(), 0);
        assert_eq!(service.plugins_dir(), dir);
        let runtime = runtime();
        let subject = Subject::new("test");
        let found = runtime
            .block_on(service.search(&subject, "records"))
            .expect("a search");
        assert!(found.results.is_empty() && !found.truncated);
        assert_eq!(
            runtime
                .block_on(service.describe(&subject, "records.lookup"))
                .map(|d| d.name),
            Err(ToolError::NotFound)
        );
        assert_eq!(
            runtime
                .block_on(service.execute(&Subject::new(""), "def main():\n    return 1"))
                .map(|e| e.value),
            Err(ToolError::Unauthenticated),
            "an empty subject is refused before the program runs"
        );
        assert_eq!(service.executions_started(), 0);
        assert_eq!(
            runtime
                .block_on(service.execute(&Subject::new("test"), "def main():\n    return 1"))
                .map(|e| e.value),
            Ok(serde_json::json!(1))
        );
        assert_eq!(service.executions_started(), 1);
        // A reload of an unchanged folder keeps serving the same (empty) set.
        let reloaded = service.reload().expect("a reload");
        assert_eq!((reloaded.plugins, reloaded.capabilities), (0, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_search_over_its_budget_is_a_resource_limit() {
        let dir = folder(&[]);
        let service = service(&dir);
        assert_eq!(
            runtime()
                .block_on(service.search(&Subject::new("test"), &"a ".repeat(200)))
                .map(|r| r.results.len()),
            Err(ToolError::ResourceLimit)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
