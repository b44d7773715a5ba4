//! The three operations behind the MCP tools, independent of any transport.
//!
//! [`Service`] owns the loaded plugins and the catalog built from them. The MCP
//! adapter decodes a request, calls one method here and projects the error; nothing
//! in this module knows MCP.

use std::collections::{BTreeMap, HashSet, btree_map};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use wasmtime::Engine;

use crate::audit::AuditLog;
use crate::authz::{Authorizer, Subject};
use crate::cache::{ArtifactCache, UNUSED_ENTRY_AGE};
use crate::catalog::{
    Catalog, CatalogBuilder, Description, SearchError, SearchResponse, SpecError,
};
use crate::error::ToolError;
use crate::execute::{
    Dispatch, Executed, Execution, Executor, ExecutorConfig, LimitError, Limits, Route, RunnerError,
};
use crate::metrics::{Metrics, RELOAD_ERROR, RELOAD_FAILED, RELOAD_OK};
use crate::plugins::{self, GlobalCaps, LoadLimits, LoadedPlugin, PluginFolder, Skipped};
use crate::source::CapabilitySource;
use crate::upstream::{ID_PREFIX as UPSTREAM_ID_PREFIX, Publish, Upstream, UpstreamConfig};

/// What the service is built from.
///
/// There is no default: who decides on native calls must be said
/// ([`ServiceConfig::new`]); allowing every call is a choice
/// ([`crate::authz::AllowAll`]), never what an omission means.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Who decides on native calls.
    pub authorizer: Arc<dyn Authorizer>,
    /// Where each native call's audit line goes; `None` keeps no audit log.
    pub audit: Option<Arc<AuditLog>>,
    /// The folder whose `*.wasm` files (non-recursive) are the plugins, each with its
    /// optional sidecar `<plugin>.toml` of grants.
    pub plugins_dir: PathBuf,
    /// Capability IDs to remove from search, describe and execute.
    pub disabled: Vec<String>,
    /// The budgets of every execution.
    pub limits: Limits,
    /// What loading one plugin may cost (size, compile and describe time).
    pub loading: LoadLimits,
    /// Where compiled components (the interpreter and the plugins) are cached; `None`
    /// compiles them at every start.
    pub cache_dir: Option<PathBuf>,
    /// MCP servers whose tools are capabilities too, connected while the plugins
    /// load.
    pub upstreams: Vec<UpstreamConfig>,
    /// Whether every plugin file must load: one that does not is a start error, and
    /// after a reload it makes [`Service::ready`] false.
    pub require_all_plugins: bool,
    /// Whether a missing plugins folder means no plugins (a gateway of upstreams
    /// only) instead of a start error.
    pub plugins_optional: bool,
}

impl ServiceConfig {
    /// Serves the plugins in `plugins_dir`, every native call decided by
    /// `authorizer`; everything else at its default: the default budgets and load
    /// limits, nothing disabled, no audit log, no artifact cache.
    pub fn new(plugins_dir: impl Into<PathBuf>, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            authorizer,
            audit: None,
            plugins_dir: plugins_dir.into(),
            disabled: Vec::new(),
            limits: Limits::default(),
            loading: LoadLimits::default(),
            cache_dir: None,
            upstreams: Vec::new(),
            require_all_plugins: false,
            plugins_optional: false,
        }
    }
}

/// Why the service could not start. Problems of single plugins are not start errors:
/// those plugins are logged and skipped.
///
/// An I/O cause is a `reason`, not an error `source`: the message already says it,
/// and a printer of error chains (`{:#}`) would say it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The plugins folder could not be listed.
    #[error("plugins folder `{path}`: {reason}")]
    PluginsDir {
        /// The folder.
        path: PathBuf,
        /// Why it could not be listed.
        reason: std::io::Error,
    },
    /// The wasmtime engine could not be configured.
    #[error("cannot configure the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The catalog could not be built (e.g. an unknown `--disable` ID).
    #[error("{0}")]
    Catalog(SpecError),
    /// A budget is zero or out of range.
    #[error("{0}")]
    Limits(LimitError),
    /// The cache folder cannot be used (`precompile` needs it).
    #[error("cache folder `{path}`: {reason}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// Why it cannot be used.
        reason: std::io::Error,
    },
    /// The interpreter could not be prepared.
    #[error("{0}")]
    Runner(RunnerError),
    /// Every plugin must load ([`ServiceConfig::require_all_plugins`]) and these
    /// did not.
    #[error("{}", required_message(.0))]
    PluginsRequired(Vec<Skipped>),
}

/// The message of [`StartError::PluginsRequired`]: each file and its reason.
fn required_message(skipped: &[Skipped]) -> String {
    let mut message = format!(
        "every plugin must load, and {} did not:",
        if skipped.len() == 1 {
            "1 plugin".to_owned()
        } else {
            format!("{} plugins", skipped.len())
        }
    );
    for s in skipped {
        message.push_str(&format!("\n  {}: {}", s.plugin, s.reason));
    }
    message
}

/// What `precompile` did with one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precompiled {
    /// `interpreter`, or the plugin's file name.
    pub name: String,
    /// `Ok(true)` when it was already cached, `Ok(false)` when compiled now, `Err`
    /// with the reason it cannot load.
    pub outcome: Result<bool, String>,
    /// Milliseconds it took.
    pub millis: u64,
}

/// Fills the artifact cache in `cache_dir` with the interpreter and every plugin in
/// `plugins_dir`, so that the next start compiles nothing. Each plugin is loaded in
/// full (linked, described), so one that would be skipped at start is reported.
///
/// # Errors
///
/// [`StartError`] when the engine, the folder, the cache or the interpreter fails.
pub fn precompile(
    plugins_dir: &Path,
    cache_dir: &Path,
    loading: &LoadLimits,
) -> Result<Vec<Precompiled>, StartError> {
    // One execution's worth: precompiling instantiates only to describe.
    let engine = plugins::engine(plugins::pool_instances(1, 1)).map_err(StartError::Engine)?;
    let cache = ArtifactCache::open(cache_dir).map_err(|source| StartError::Cache {
        path: cache_dir.to_owned(),
        reason: source,
    })?;
    let files = plugins::plugin_files(plugins_dir).map_err(|source| StartError::PluginsDir {
        path: plugins_dir.to_owned(),
        reason: source,
    })?;
    let prepared = crate::execute::prepare_runner(&engine, &cache).map_err(StartError::Runner)?;
    let mut report = vec![Precompiled {
        name: "interpreter".to_owned(),
        outcome: Ok(prepared.0),
        millis: prepared.1.as_millis() as u64,
    }];
    for path in files {
        let started = Instant::now();
        // Precompiling runs no execution: the default --max-memory stands in.
        let max_memory = crate::units::DEFAULT_MAX_MEMORY_BYTES;
        let outcome = plugins::load_file(&engine, &path, Some(&cache), loading, max_memory)
            .map(|plugin| plugin.cached)
            .map_err(|error| error.to_string());
        report.push(Precompiled {
            name: plugins::file_label(&path),
            outcome,
            millis: started.elapsed().as_millis() as u64,
        });
    }
    Ok(report)
}

/// Opens the artifact cache in `dir`; one that cannot be opened is logged and
/// bypassed (everything is compiled).
pub(crate) fn open_cache(dir: Option<&std::path::Path>) -> Option<ArtifactCache> {
    let dir = dir?;
    match ArtifactCache::open(dir) {
        Ok(cache) => Some(cache),
        Err(error) => {
            tracing::warn!(folder = %dir.display(), reason = %error, "cannot use the cache folder; compiling everything");
            None
        }
    }
}

/// The subject of the single local user of a stdio server.
pub const LOCAL_SUBJECT: &str = "local";

/// The search / describe / execute service over the plugins of one folder.
///
/// What serves is one snapshot (the catalog and the routes to its plugins),
/// replaced whole on [`Service::reload`]; an execution keeps the plugin set it
/// started with.
pub struct Service {
    shared: Arc<Shared>,
    executor: Executor,
    /// [`ServiceConfig::require_all_plugins`].
    require_all_plugins: bool,
    /// Tells the upstreams' supervisors to close their sessions and stop.
    stop_upstreams: tokio::sync::watch::Sender<bool>,
    /// The supervisors, one per configured upstream.
    supervisors: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What the service and its upstreams' supervisors share: the serving snapshot and
/// what rebuilds it.
struct Shared {
    snapshot: ArcSwap<Snapshot>,
    reloader: Mutex<Reloader>,
    metrics: Arc<Metrics>,
}

/// One plugin set as it serves: the catalog that searches and describes read and the
/// routes executions call, built together and swapped in together, so that no
/// request sees the catalog of one set and the routes of another.
struct Snapshot {
    catalog: Arc<Catalog>,
    dispatch: Arc<Dispatch>,
    /// Plugins that loaded but were left out of this set.
    refusals: Vec<Skipped>,
    /// Plugin files whose latest version failed to load.
    failures: Vec<Skipped>,
}

impl Snapshot {
    /// The snapshot of `assembled`, whose folder could not load `failures`.
    fn new(assembled: Assembled, failures: Vec<Skipped>) -> Self {
        Self {
            catalog: Arc::new(assembled.catalog),
            dispatch: Arc::new(assembled.dispatch),
            refusals: assembled.refusals,
            failures,
        }
    }

    /// The same set, after a scan that loaded nothing new found `failures`.
    fn with_failures(&self, failures: Vec<Skipped>) -> Self {
        Self {
            catalog: self.catalog.clone(),
            dispatch: self.dispatch.clone(),
            refusals: self.refusals.clone(),
            failures,
        }
    }

    /// Every plugin file left out, by file name.
    fn skipped(&self) -> Vec<Skipped> {
        let mut skipped: Vec<Skipped> = self
            .failures
            .iter()
            .chain(&self.refusals)
            .cloned()
            .collect();
        skipped.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        skipped
    }
}

/// What a reload needs besides the service.
struct Reloader {
    engine: Engine,
    cache: Option<ArtifactCache>,
    folder: PluginFolder,
    disabled: Vec<String>,
    /// Each configured upstream, in order: its name, and itself while it serves.
    upstreams: Vec<(String, Option<Arc<Upstream>>)>,
}

/// What one [`Service::reload`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Whether a new catalog now serves (something loaded or was removed).
    pub swapped: bool,
    /// Plugins serving after the reload.
    pub plugins: usize,
    /// Capabilities serving after the reload.
    pub capabilities: usize,
    /// Changed files that failed to load (their last good version serves).
    pub failed: usize,
    /// Whether some failed for a reason that may pass (out of file descriptors), so
    /// the reload should be tried again.
    pub retry: bool,
    /// Wall time of the reload: scanning, loading the changed files, the new catalog.
    pub elapsed: std::time::Duration,
}

/// A catalog and the routes of its capabilities, built from one plugin set.
struct Assembled {
    catalog: Catalog,
    dispatch: Dispatch,
    build_time: std::time::Duration,
    /// Plugins that loaded but were left out: another plugin claims the same name
    /// or ID, or their capabilities do not fit the catalog.
    refusals: Vec<Skipped>,
    /// How many of the sources are upstreams (they come after the plugins).
    upstreams: usize,
}

impl Assembled {
    /// How many plugins serve.
    fn plugins(&self) -> usize {
        self.dispatch.sources.len() - self.upstreams
    }
}

/// Why `plugin` may not serve whatever else serves: it claims a stable ID in the
/// `mcp:` namespace of upstream tools, or a capability name under the root of a
/// configured upstream (`upstream_roots`), which policies and agents would take
/// for the upstream's. `None` when it claims neither.
fn reserved_claim(plugin: &LoadedPlugin, upstream_roots: &[&str]) -> Option<String> {
    plugin.capabilities.iter().find_map(|capability| {
        let spec = &capability.spec;
        if let Some(id) = spec.id.as_deref().filter(|id| id.starts_with(UPSTREAM_ID_PREFIX)) {
            return Some(format!(
                "capability ID `{id}` is in the `{UPSTREAM_ID_PREFIX}` namespace, which only upstream MCP servers' tools use"
            ));
        }
        let root = spec.name.split('.').next().unwrap_or_default();
        upstream_roots.contains(&root).then(|| {
            format!(
                "capability name `{}` is under `{root}`, the root of the configured upstream {root}",
                spec.name
            )
        })
    })
}

/// Which of `plugins` are refused: those already in `refused` (with their
/// reasons), and those losing a claim on a capability name or ID that another one
/// also makes: a plugin already serving (`incumbents`, by file) keeps what it has and
/// every newcomer claiming it is refused; among newcomers (every plugin at start)
/// none gets a contested name silently, so all of them are refused. Each refusal is
/// logged naming the files and the name.
fn contested(
    plugins: &[Arc<LoadedPlugin>],
    incumbents: &HashSet<String>,
    mut refused: BTreeMap<usize, String>,
) -> BTreeMap<usize, String> {
    let mut claims: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (p, plugin) in plugins.iter().enumerate() {
        // Refused already: it claims nothing.
        if refused.contains_key(&p) {
            continue;
        }
        for capability in &plugin.capabilities {
            let spec = &capability.spec;
            claims.entry(("name", &spec.name)).or_default().push(p);
            let id = spec.id.as_deref().unwrap_or(&spec.name);
            claims.entry(("ID", id)).or_default().push(p);
        }
    }
    for ((kind, key), mut claimants) in claims {
        claimants.dedup();
        if claimants.len() < 2 {
            continue;
        }
        let files: Vec<&str> = claimants
            .iter()
            .map(|&p| plugins[p].file.as_str())
            .collect();
        let holder = claimants
            .iter()
            .copied()
            .find(|&p| incumbents.contains(&plugins[p].file));
        match holder {
            Some(holder) => {
                for &p in claimants.iter().filter(|&&p| p != holder) {
                    if let btree_map::Entry::Vacant(entry) = refused.entry(p) {
                        let reason = format!(
                            "capability {kind} `{key}` is already served by {}",
                            plugins[holder].file
                        );
                        tracing::warn!(
                            plugin = %plugins[p].file,
                            serving = %plugins[holder].file,
                            reason = %reason,
                            "plugin refused"
                        );
                        entry.insert(reason);
                    }
                }
            }
            None => {
                for &p in &claimants {
                    if let btree_map::Entry::Vacant(entry) = refused.entry(p) {
                        let reason = format!(
                            "capability {kind} `{key}` is claimed by {}",
                            files.join(" and ")
                        );
                        tracing::error!(
                            plugin = %plugins[p].file,
                            reason = %reason,
                            "plugin refused: no plugin gets a contested name"
                        );
                        entry.insert(reason);
                    }
                }
            }
        }
    }
    refused
}

/// Builds the catalog from `plugins` (in order; a plugin whose capabilities conflict
/// with an earlier one's, or claim what is reserved for `upstreams`, is logged and
/// skipped) and then the `upstreams` serving (each configured one by name, with
/// itself while it serves), and routes every enabled capability. With `strict`, a `disabled` ID that names no capability
/// is an error (start); otherwise it is ignored (reload: the plugin that had it may
/// be gone).
fn assemble(
    plugins: Vec<Arc<LoadedPlugin>>,
    upstreams: &[(String, Option<Arc<Upstream>>)],
    incumbents: &HashSet<String>,
    disabled: &[String],
    strict: bool,
) -> Result<Assembled, SpecError> {
    let started = Instant::now();
    let upstream_roots: Vec<&str> = upstreams.iter().map(|(name, _)| name.as_str()).collect();
    let mut reserved = BTreeMap::new();
    for (p, plugin) in plugins.iter().enumerate() {
        if let Some(reason) = reserved_claim(plugin, &upstream_roots) {
            tracing::error!(plugin = %plugin.file, reason = %reason, "plugin refused");
            reserved.insert(p, reason);
        }
    }
    let mut refused = contested(&plugins, incumbents, reserved);
    let mut refusals = Vec::new();
    let mut builder = CatalogBuilder::new();
    let mut serving: Vec<Arc<dyn CapabilitySource>> = Vec::new();
    let mut upstreams_serving = 0;
    for (p, plugin) in plugins.into_iter().enumerate() {
        if let Some(reason) = refused.remove(&p) {
            refusals.push(Skipped {
                plugin: plugin.file.clone(),
                reason,
                earlier_serves: false,
            });
            continue;
        }
        let specs: Vec<_> = plugin.capabilities.iter().map(|c| c.spec.clone()).collect();
        if let Err((index, error)) = builder.add_group(&specs) {
            let export = &plugin.capabilities[index].export;
            let reason = format!("export `{export}`: {error}");
            tracing::warn!(plugin = %plugin.file, reason = %reason, "plugin skipped");
            refusals.push(Skipped {
                plugin: plugin.file.clone(),
                reason,
                earlier_serves: false,
            });
            continue;
        }
        serving.push(plugin);
    }
    // A plugin under an upstream's root was refused above, so an upstream's names
    // can only clash among its own tools (which it leaves out when listing).
    for upstream in upstreams
        .iter()
        .filter_map(|(_, upstream)| upstream.as_ref())
    {
        let specs: Vec<_> = upstream.capabilities().into_iter().cloned().collect();
        if let Err((index, error)) = builder.add_group(&specs) {
            let name = specs.get(index).map_or("", |s| s.name.as_str());
            tracing::error!(upstream = %upstream.name(), reason = %format!("`{name}`: {error}"), "upstream refused");
            continue;
        }
        serving.push(upstream.clone());
        upstreams_serving += 1;
    }
    let disabled: Vec<String> = if strict {
        disabled.to_vec()
    } else {
        disabled
            .iter()
            .filter(|id| builder.has_id(id))
            .cloned()
            .collect()
    };
    let catalog = builder.build(&disabled)?;
    let sources = serving;
    let mut routes = Vec::new();
    for (s, source) in sources.iter().enumerate() {
        for (index, spec) in source.capabilities().into_iter().enumerate() {
            if let Some(entry) = catalog.get(&spec.name) {
                routes.push((
                    spec.name.clone(),
                    Route {
                        source: s,
                        index,
                        id: entry.id.to_string(),
                        params: spec.params.clone(),
                    },
                ));
            }
        }
    }
    // The catalog holds each name once, so sorting by name alone is a total order.
    routes.sort_by(|(a, _), (b, _)| a.cmp(b));
    let (names, routes): (Vec<String>, Vec<Route>) = routes.into_iter().unzip();
    Ok(Assembled {
        catalog,
        dispatch: Dispatch {
            names,
            routes,
            sources,
        },
        build_time: started.elapsed(),
        refusals,
        upstreams: upstreams_serving,
    })
}

/// File names that say a folder holds a plugin's sources rather than its component.
const SOURCE_MARKERS: [&str; 5] = ["Cargo.toml", "pyproject.toml", "package.json", "wit", "src"];
/// Extensions of plugin sources.
const SOURCE_EXTENSIONS: [&str; 6] = ["rs", "py", "js", "ts", "wit", "go"];

/// Why a plugins folder from which nothing loaded serves nothing, and what to do:
/// it is empty, it holds sources (or folders of sources, as the checkout's
/// `plugins/` does) but no components, or its components failed (named in the log
/// lines before).
fn empty_folder_reason(dir: &Path) -> String {
    const BUILD: &str =
        "in a checkout, `cargo xtask plugins` builds the examples into target/plugins";
    if !dir.exists() {
        return "there is no plugins folder".to_owned();
    }
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|entry| {
                        Some(entry.ok()?.file_name().to_string_lossy().into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let is_source = |name: &str| {
        SOURCE_MARKERS.contains(&name)
            || Path::new(name)
                .extension()
                .is_some_and(|e| SOURCE_EXTENSIONS.iter().any(|s| e == *s))
    };
    let names = names(dir);
    if names.iter().any(|n| n.ends_with(".wasm")) {
        return "every *.wasm file failed to load (each is named above with its reason)".to_owned();
    }
    let mut sources: Vec<String> = names.iter().filter(|n| is_source(n)).cloned().collect();
    // A folder of plugin projects: `records/Cargo.toml`. Only the first level, and
    // only a bounded number of folders.
    for sub in names.iter().filter(|n| dir.join(n).is_dir()).take(64) {
        if let Some(marker) = std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .filter_map(|entry| Some(entry.ok()?.file_name().to_string_lossy().into_owned()))
            .filter(|n| SOURCE_MARKERS.contains(&n.as_str()))
            .min()
        {
            sources.push(format!("{sub}/{marker}"));
        }
    }
    if let Some(source) = sources.iter().min() {
        return format!(
            "the folder holds sources ({source}) but no built components (*.wasm): build them and put the .wasm files here; {BUILD}"
        );
    }
    if names.is_empty() {
        format!("the folder is empty: put plugin components (*.wasm) in it; {BUILD}")
    } else {
        format!("the folder holds no *.wasm files; {BUILD}")
    }
}

/// The publisher of the upstream in slot `index`: each new version (or `None`)
/// replaces the slot and rebuilds the catalog, while the service lives.
fn publisher(shared: &Arc<Shared>, index: usize) -> Publish {
    let shared = Arc::downgrade(shared);
    Arc::new(move |upstream| match shared.upgrade() {
        Some(shared) => {
            shared.set_upstream(index, upstream);
            true
        }
        None => false,
    })
}

impl Shared {
    /// The labels of the sources serving now: who keeps a contested name.
    fn incumbents(&self) -> HashSet<String> {
        self.snapshot
            .load()
            .dispatch
            .sources
            .iter()
            .map(|source| source.label().to_owned())
            .collect()
    }

    /// The catalog of the plugins serving and the upstreams now; the sources serving
    /// now keep contested names.
    fn reassemble(&self, reloader: &Reloader) -> Result<Assembled, SpecError> {
        assemble(
            reloader.folder.serving(),
            &reloader.upstreams,
            &self.incumbents(),
            &reloader.disabled,
            false,
        )
    }

    /// Puts `upstream` in slot `index` (`None`: it is down) and swaps in the catalog
    /// built from the plugins serving and the upstreams now, as a reload does.
    fn set_upstream(&self, index: usize, upstream: Option<Arc<Upstream>>) {
        let started = Instant::now();
        let mut reloader = self
            .reloader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((name, slot)) = reloader.upstreams.get_mut(index) {
            self.metrics.upstream(name, upstream.is_some());
            *slot = upstream;
        }
        let assembled = self.reassemble(&reloader);
        match assembled {
            Ok(assembled) => {
                let plugins = assembled.plugins();
                let upstreams = assembled.upstreams;
                let capabilities = assembled.catalog.len();
                let failures = reloader.folder.failures();
                self.snapshot
                    .store(Arc::new(Snapshot::new(assembled, failures)));
                self.metrics.catalog(plugins, capabilities);
                tracing::info!(
                    plugins,
                    capabilities,
                    upstreams,
                    build_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
                    "catalog updated for an upstream"
                );
            }
            Err(error) => {
                tracing::error!(reason = %error, "the catalog could not be rebuilt; the last one serves");
            }
        }
    }

    /// [`Service::reload`].
    fn reload(&self) -> Result<Reloaded, StartError> {
        let started = Instant::now();
        let mut reloader = self
            .reloader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let reloader = &mut *reloader;
        let report = reloader
            .folder
            .scan(&reloader.engine, reloader.cache.as_ref())
            .map_err(|source| {
                self.metrics.reload(RELOAD_ERROR);
                StartError::PluginsDir {
                    path: reloader.folder.dir().to_owned(),
                    reason: source,
                }
            })?;
        for plugin in &report.failures {
            self.metrics.plugin_load_failure(plugin);
        }
        if !report.changed() {
            if report.failed > 0 {
                let failures = reloader.folder.failures();
                self.snapshot
                    .store(Arc::new(self.snapshot.load().with_failures(failures)));
            }
            self.metrics.reload(if report.failed > 0 {
                RELOAD_FAILED
            } else {
                RELOAD_OK
            });
            return Ok(Reloaded {
                swapped: false,
                plugins: self.metrics.plugins_loaded(),
                capabilities: self.snapshot.load().catalog.len(),
                failed: report.failed,
                retry: report.transient > 0,
                elapsed: started.elapsed(),
            });
        }
        let assembled = self.reassemble(reloader).map_err(|error| {
            self.metrics.reload(RELOAD_ERROR);
            StartError::Catalog(error)
        })?;
        for refused in &assembled.refusals {
            self.metrics.plugin_load_failure(&refused.plugin);
        }
        let failed = report.failed + assembled.refusals.len();
        let plugins = assembled.plugins();
        let capabilities = assembled.catalog.len();
        let failures = reloader.folder.failures();
        self.snapshot
            .store(Arc::new(Snapshot::new(assembled, failures)));
        self.metrics.catalog(plugins, capabilities);
        self.metrics
            .reload(if failed > 0 { RELOAD_FAILED } else { RELOAD_OK });
        let reloaded = Reloaded {
            swapped: true,
            plugins,
            capabilities,
            failed,
            retry: report.transient > 0,
            elapsed: started.elapsed(),
        };
        tracing::info!(
            plugins,
            capabilities,
            failed,
            reload_ms = format_args!("{:.1}", reloaded.elapsed.as_secs_f64() * 1e3),
            "catalog reloaded"
        );
        Ok(reloaded)
    }
}

impl Service {
    /// Loads every plugin in `config.plugins_dir` and builds the catalog. A plugin that
    /// fails to load, or whose capabilities conflict with an earlier plugin's (files
    /// load in name order), is logged with the reason and skipped.
    ///
    /// # Errors
    ///
    /// [`StartError`] when the folder cannot be listed, the engine cannot be built, or
    /// a `--disable` ID names no capability.
    pub fn load(config: &ServiceConfig) -> Result<Self, StartError> {
        config.limits.validate().map_err(StartError::Limits)?;
        // Upstreams connect in the background while the plugins load.
        let connecting = crate::upstream::connect_all(&config.upstreams);
        // The folder is listed once more here to size the pool (plugins added later
        // fit if there is room; past it, executions fail with a resource limit).
        let plugin_count = plugins::plugin_files(&config.plugins_dir).map_or(0, |f| f.len());
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
        let mut folder =
            PluginFolder::new(config.plugins_dir.clone(), config.loading.clone(), caps)
                .optional(config.plugins_optional);
        let report =
            folder
                .scan(&engine, cache.as_ref())
                .map_err(|source| StartError::PluginsDir {
                    path: config.plugins_dir.clone(),
                    reason: source,
                })?;
        if let Some(cache) = &cache {
            // After the scan, which marked the entries it loaded as used.
            let pruned = cache.prune(plugins::PLUGIN_PREFIX, UNUSED_ENTRY_AGE);
            if pruned > 0 {
                tracing::info!(
                    entries = pruned,
                    unused_days = UNUSED_ENTRY_AGE.as_secs() / 86_400,
                    folder = %cache.dir().display(),
                    "removed cache entries nothing loaded for a long time"
                );
            }
        }
        let plugins = folder.serving();
        if plugins.is_empty() {
            let reason = empty_folder_reason(&config.plugins_dir);
            if config.upstreams.is_empty() {
                tracing::warn!(folder = %config.plugins_dir.display(), reason = %reason, "no plugin loaded; serving no capabilities");
            } else {
                tracing::info!(folder = %config.plugins_dir.display(), reason = %reason, "no plugin loaded; serving the upstreams' capabilities only");
            }
        }
        let slots = connecting.finish();
        let upstreams: Vec<(String, Option<Arc<Upstream>>)> = slots
            .iter()
            .map(|slot| {
                let first = slot.first.as_ref().map(|c| c.upstream.clone());
                (slot.config.name.clone(), first)
            })
            .collect();
        let assembled = assemble(plugins, &upstreams, &HashSet::new(), &config.disabled, true)
            .map_err(StartError::Catalog)?;
        let failures = folder.failures();
        if config.require_all_plugins && (!failures.is_empty() || !assembled.refusals.is_empty()) {
            let mut skipped: Vec<Skipped> =
                failures.into_iter().chain(assembled.refusals).collect();
            skipped.sort_by(|a, b| a.plugin.cmp(&b.plugin));
            return Err(StartError::PluginsRequired(skipped));
        }
        let metrics = Arc::new(Metrics::default());
        for plugin in report
            .failures
            .iter()
            .chain(assembled.refusals.iter().map(|r| &r.plugin))
        {
            metrics.plugin_load_failure(plugin);
        }
        metrics.catalog(assembled.plugins(), assembled.catalog.len());
        for (name, upstream) in &upstreams {
            metrics.upstream(name, upstream.is_some());
        }
        tracing::info!(
            plugins = assembled.plugins(),
            capabilities = assembled.catalog.len(),
            upstreams = assembled.upstreams,
            build_us = assembled.build_time.as_micros() as u64,
            "catalog ready"
        );
        let executor = Executor::new(ExecutorConfig {
            engine: &engine,
            limits: config.limits.clone(),
            authorizer: config.authorizer.clone(),
            audit: config.audit.clone(),
            metrics: metrics.clone(),
            cache: cache.as_ref(),
        })
        .map_err(StartError::Runner)?;
        let shared = Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(Snapshot::new(assembled, failures)),
            reloader: Mutex::new(Reloader {
                engine,
                cache,
                folder,
                disabled: config.disabled.clone(),
                upstreams,
            }),
            metrics,
        });
        let (stop_upstreams, stop) = tokio::sync::watch::channel(false);
        let supervisors = slots
            .into_iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                crate::wait::spawn(crate::upstream::supervise(
                    slot,
                    publisher(&shared, index),
                    stop.clone(),
                ))
            })
            .collect();
        Ok(Self {
            shared,
            executor,
            require_all_plugins: config.require_all_plugins,
            stop_upstreams,
            supervisors: Mutex::new(supervisors),
        })
    }

    /// Closes every upstream's session and waits (a few seconds at most) for their
    /// children to exit; calls of their capabilities then fail as unavailable. For
    /// the end of serving.
    pub fn close_upstreams(&self) {
        let _ = self.stop_upstreams.send(true);
        let supervisors = std::mem::take(
            &mut *self
                .supervisors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let deadline =
            Instant::now() + crate::upstream::STOP_GRACE + std::time::Duration::from_secs(1);
        for supervisor in supervisors {
            let _ = crate::wait::until(deadline, None, supervisor);
        }
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
        self.shared.reload()
    }

    /// The plugin files left out of the catalog now (failed to load, or refused),
    /// by file name. A file whose new version failed while an earlier one serves is
    /// listed too ([`Skipped::earlier_serves`]).
    pub fn skipped(&self) -> Vec<Skipped> {
        self.shared.snapshot.load().skipped()
    }

    /// Whether the service is fit to serve: always, unless every plugin is required
    /// ([`ServiceConfig::require_all_plugins`]) and [`Service::skipped`] lists one.
    pub fn ready(&self) -> bool {
        !self.require_all_plugins || self.shared.snapshot.load().skipped().is_empty()
    }

    /// Whether every plugin file must load ([`ServiceConfig::require_all_plugins`]).
    pub fn requires_all_plugins(&self) -> bool {
        self.require_all_plugins
    }

    /// The plugins folder this service serves.
    pub fn plugins_dir(&self) -> PathBuf {
        self.shared
            .reloader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .folder
            .dir()
            .to_owned()
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
        self.run_since(subject, source, Instant::now()).await
    }

    /// [`Service::run`] of a request that arrived at `arrived`: its time budget
    /// runs from then, so a wait before the service could take it (the load, over
    /// stdio) is part of it.
    pub(crate) async fn run_since(
        &self,
        subject: &Subject,
        source: &str,
        arrived: Instant,
    ) -> Execution {
        if subject.id.is_empty() {
            return Execution::refused(ToolError::Unauthenticated, None);
        }
        let dispatch = self.shared.snapshot.load().dispatch.clone();
        self.executor
            .execute(dispatch, subject, source, arrived)
            .await
    }

    /// What the service counts, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.shared.metrics
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

    /// `search_api`: ranked discovery.
    ///
    /// # Errors
    ///
    /// [`ToolError::ResourceLimit`] for a query over 256 bytes or 16 distinct tokens.
    pub fn search(&self, query: &str) -> Result<SearchResponse, ToolError> {
        self.catalog().search(query).map_err(|e| match e {
            SearchError::QueryLimit => ToolError::ResourceLimit,
        })
    }

    /// `describe_api`: the exact name's signature and field shapes.
    ///
    /// # Errors
    ///
    /// [`ToolError::NotFound`] for any name that is not exactly an enabled capability.
    pub fn describe(&self, name: &str) -> Result<Description, ToolError> {
        self.catalog().describe(name).ok_or(ToolError::NotFound)
    }

    /// The catalog this service answers from now.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        self.shared.snapshot.load().catalog.clone()
    }
}

impl Drop for Service {
    /// Tells the upstreams' supervisors to close their sessions (their children then
    /// exit in the background); [`Service::close_upstreams`] also waits for that.
    fn drop(&mut self) {
        let _ = self.stop_upstreams.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::AllowAll;
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
            cache_dir: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-cache")),
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
        let found = service.search("records").expect("a search");
        assert!(found.results.is_empty() && !found.truncated);
        assert_eq!(
            service.describe("records.lookup").map(|d| d.name),
            Err(ToolError::NotFound)
        );
        let runtime = runtime();
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
            service.search(&"a ".repeat(200)).map(|r| r.results.len()),
            Err(ToolError::ResourceLimit)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
