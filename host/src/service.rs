//! The three operations behind the MCP tools, independent of any transport.
//!
//! [`Service`] owns the loaded plugins and the catalog built from them. The MCP
//! adapter decodes a request, calls one method here and projects the error; nothing
//! in this module knows MCP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::audit::AuditLog;
use crate::authz::{AllowAll, Authorizer, Subject};
use crate::cache::ArtifactCache;
use crate::catalog::{
    Catalog, CatalogBuilder, Description, SearchError, SearchResponse, SpecError,
};
use crate::error::ToolError;
use crate::execute::{
    Dispatch, Executed, Executor, ExecutorConfig, LimitError, Limits, Route, RunnerError,
};
use crate::metrics::Metrics;
use crate::plugins;

/// What the service is built from.
#[derive(Debug, Clone, Default)]
pub struct ServiceConfig {
    /// Who decides on native calls; `None` allows every call (the single local
    /// subject of a stdio server; the binary never leaves it `None` silently).
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// Where each native call's audit line goes; `None` keeps no audit log.
    pub audit: Option<Arc<AuditLog>>,
    /// The folder whose `*.wasm` files (non-recursive) are the plugins.
    pub plugins_dir: PathBuf,
    /// Capability IDs to remove from search, describe and execute.
    pub disabled: Vec<String>,
    /// The budgets of every execution.
    pub limits: Limits,
    /// Where compiled components (the interpreter and the plugins) are cached; `None`
    /// compiles them at every start.
    pub cache_dir: Option<PathBuf>,
}

/// Why the service could not start. Problems of single plugins are not start errors:
/// those plugins are logged and skipped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The plugins folder could not be listed.
    #[error("plugins folder `{path}`: {source}")]
    PluginsDir {
        /// The folder.
        path: PathBuf,
        /// Why it could not be listed.
        source: std::io::Error,
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
    #[error("cache folder `{path}`: {source}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// Why it cannot be used.
        source: std::io::Error,
    },
    /// The interpreter could not be prepared.
    #[error("{0}")]
    Runner(RunnerError),
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
pub fn precompile(plugins_dir: &Path, cache_dir: &Path) -> Result<Vec<Precompiled>, StartError> {
    let engine = plugins::engine().map_err(StartError::Engine)?;
    let cache = ArtifactCache::open(cache_dir).map_err(|source| StartError::Cache {
        path: cache_dir.to_owned(),
        source,
    })?;
    let files = plugins::plugin_files(plugins_dir).map_err(|source| StartError::PluginsDir {
        path: plugins_dir.to_owned(),
        source,
    })?;
    let prepared = crate::execute::prepare_runner(&engine, &cache).map_err(StartError::Runner)?;
    let mut report = vec![Precompiled {
        name: "interpreter".to_owned(),
        outcome: Ok(prepared.0),
        millis: prepared.1.as_millis() as u64,
    }];
    for path in files {
        let started = Instant::now();
        let outcome = plugins::load_file(&engine, &path, Some(&cache))
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

/// The search / describe / execute service over one loaded plugin set.
pub struct Service {
    catalog: Arc<Catalog>,
    executor: Executor,
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
        let engine = plugins::engine().map_err(StartError::Engine)?;
        let files = plugins::plugin_files(&config.plugins_dir).map_err(|source| {
            StartError::PluginsDir {
                path: config.plugins_dir.clone(),
                source,
            }
        })?;
        if files.is_empty() {
            tracing::warn!(folder = %config.plugins_dir.display(), "no *.wasm plugins found; serving no capabilities");
        }
        let cache = open_cache(config.cache_dir.as_deref());
        let mut builder = CatalogBuilder::new();
        let mut loaded = Vec::new();
        let mut build_time = std::time::Duration::ZERO;
        for path in files {
            let plugin = match plugins::load_file(&engine, &path, cache.as_ref()) {
                Ok(plugin) => plugin,
                Err(error) => {
                    tracing::warn!(plugin = %plugins::file_label(&path), reason = %error, "plugin skipped");
                    continue;
                }
            };
            let specs: Vec<_> = plugin.capabilities.iter().map(|c| c.spec.clone()).collect();
            let started = Instant::now();
            let added = builder.add_group(&specs);
            build_time += started.elapsed();
            if let Err((index, error)) = added {
                let export = &plugin.capabilities[index].export;
                tracing::warn!(plugin = %plugin.file, reason = %format!("export `{export}`: {error}"), "plugin skipped");
                continue;
            }
            for export in &plugin.ignored_exports {
                tracing::warn!(plugin = %plugin.file, export = %export, "export not named by metadata; ignored");
            }
            tracing::info!(
                plugin = %plugin.file,
                capabilities = plugin.capabilities.len(),
                cached = plugin.cached,
                load_ms = format_args!("{:.1}", plugin.load_time.as_secs_f64() * 1e3),
                "plugin loaded"
            );
            loaded.push(plugin);
        }
        let started = Instant::now();
        let catalog = builder
            .build(&config.disabled)
            .map_err(StartError::Catalog)?;
        build_time += started.elapsed();
        let mut routes = HashMap::new();
        for (p, plugin) in loaded.iter().enumerate() {
            for (cap, target) in plugin.capabilities.iter().zip(&plugin.targets) {
                if let Some(entry) = catalog.get(&cap.spec.name) {
                    routes.insert(
                        cap.spec.name.clone(),
                        Route {
                            plugin: p,
                            id: entry.id.to_string(),
                            target: target.clone(),
                        },
                    );
                }
            }
        }
        let metrics = Arc::new(Metrics::default());
        metrics.catalog(loaded.len(), catalog.len());
        let mut names: Vec<String> = routes.keys().cloned().collect();
        names.sort();
        tracing::info!(
            plugins = loaded.len(),
            capabilities = catalog.len(),
            build_us = build_time.as_micros() as u64,
            "catalog ready"
        );
        let executor = Executor::new(ExecutorConfig {
            engine: &engine,
            dispatch: Dispatch {
                names,
                routes,
                plugins: Arc::new(loaded),
            },
            limits: config.limits.clone(),
            authorizer: config
                .authorizer
                .clone()
                .unwrap_or_else(|| Arc::new(AllowAll)),
            audit: config.audit.clone(),
            metrics: metrics.clone(),
            cache: cache.as_ref(),
        })
        .map_err(StartError::Runner)?;
        Ok(Self {
            catalog: Arc::new(catalog),
            executor,
        })
    }

    /// `execute`: runs one program for `subject`, whose native calls the authorizer
    /// decides on. Dropping the future cancels it.
    ///
    /// # Errors
    ///
    /// The [`ToolError`] the model sees; [`ToolError::Unauthenticated`] for an empty
    /// subject.
    pub async fn execute(&self, subject: &Subject, source: &str) -> Result<Executed, ToolError> {
        if subject.id.is_empty() {
            return Err(ToolError::Unauthenticated);
        }
        self.executor.execute(subject, source).await
    }

    /// What the service counts, for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        self.executor.metrics()
    }

    /// The executor (budgets, the language surface).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// `search_api`: ranked discovery.
    ///
    /// # Errors
    ///
    /// [`ToolError::ResourceLimit`] for a query over 256 bytes or 16 distinct tokens.
    pub fn search(&self, query: &str) -> Result<SearchResponse, ToolError> {
        self.catalog.search(query).map_err(|e| match e {
            SearchError::QueryLimit => ToolError::ResourceLimit,
        })
    }

    /// `describe_api`: the exact name's signature and field shapes.
    ///
    /// # Errors
    ///
    /// [`ToolError::NotFound`] for any name that is not exactly an enabled capability.
    pub fn describe(&self, name: &str) -> Result<Description, ToolError> {
        self.catalog.describe(name).ok_or(ToolError::NotFound)
    }

    /// The catalog this service answers from.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}
