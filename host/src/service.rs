//! The three operations behind the MCP tools, independent of any transport.
//!
//! [`Service`] owns the loaded plugins and the catalog built from them. The MCP
//! adapter decodes a request, calls one method here and projects the error; nothing
//! in this module knows MCP.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::catalog::{
    Catalog, CatalogBuilder, Description, SearchError, SearchResponse, SpecError,
};
use crate::error::ToolError;
use crate::plugins::{self, LoadedPlugin};

/// What the service is built from.
#[derive(Debug, Clone, Default)]
pub struct ServiceConfig {
    /// The folder whose `*.wasm` files (non-recursive) are the plugins.
    pub plugins_dir: PathBuf,
    /// Capability IDs to remove from search, describe and execute.
    pub disabled: Vec<String>,
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
}

/// Where a capability is served: plugin index and capability index in that plugin.
type Binding = (usize, usize);

/// The search / describe / execute service over one loaded plugin set.
pub struct Service {
    catalog: Arc<Catalog>,
    // Read by `execute` (issue #3); kept alive with the catalog they serve.
    #[expect(dead_code, reason = "read by execute (issue #3)")]
    plugins: Arc<Vec<LoadedPlugin>>,
    #[expect(dead_code, reason = "read by execute (issue #3)")]
    bindings: HashMap<String, Binding>,
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
        let mut builder = CatalogBuilder::new();
        let mut loaded = Vec::new();
        let mut build_time = std::time::Duration::ZERO;
        for path in files {
            let plugin = match plugins::load_file(&engine, &path) {
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
        let mut bindings = HashMap::new();
        for (p, plugin) in loaded.iter().enumerate() {
            for (c, cap) in plugin.capabilities.iter().enumerate() {
                if catalog.get(&cap.spec.name).is_some() {
                    bindings.insert(cap.spec.name.clone(), (p, c));
                }
            }
        }
        tracing::info!(
            plugins = loaded.len(),
            capabilities = catalog.len(),
            build_us = build_time.as_micros() as u64,
            "catalog ready"
        );
        Ok(Self {
            catalog: Arc::new(catalog),
            plugins: Arc::new(loaded),
            bindings,
        })
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
