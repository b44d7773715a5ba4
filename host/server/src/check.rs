//! `codemode-host check`: one plugin file loaded exactly as the server loads it (its
//! sidecar, the size limit, compiling or the cache, linking, `describe()`, the
//! WIT types, the catalog's rules for names, IDs and texts), and what it offers,
//! or every reason the server would skip it.

use std::path::Path;

use crate::catalog::{CatalogBuilder, Shape};
use crate::plugins::{self, LoadLimits, load_file};

/// One capability of a checked plugin, as agents will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The keyword signature and the result: `greet.hello(*, name: str) -> {text: str}`.
    pub signature: String,
    /// The stable ID policies and `--disable` use.
    pub id: String,
    /// The line `search_api` shows.
    pub summary: String,
    /// The effect hints it declares (`annotate()`), by their MCP names, as a
    /// policy reads them; empty when it declares none.
    pub annotations: Vec<(&'static str, bool)>,
}

/// Loads the plugin at `path` as the server would, compiling it or taking it from
/// the cache in `cache_dir`, and returns its capabilities in metadata order.
///
/// # Errors
///
/// Every reason the server would skip the file, one message each.
pub fn check_plugin(
    path: &Path,
    loading: &LoadLimits,
    cache_dir: Option<&Path>,
) -> Result<Vec<Checked>, Vec<String>> {
    let engine = plugins::engine(plugins::pool_instances(1, 1)).map_err(|error| {
        vec![format!(
            "cannot configure the WebAssembly engine: {error:#}"
        )]
    })?;
    let cache = crate::cache::open_cache(cache_dir);
    // `check` runs no execution: the default --max-memory stands in.
    let max_memory = crate::units::DEFAULT_MAX_MEMORY_BYTES;
    let plugin =
        load_file(&engine, path, cache.as_ref(), loading, max_memory).map_err(|e| e.messages())?;
    let mut builder = CatalogBuilder::new();
    builder
        .add(&plugin.capabilities)
        .map_err(|(_, error)| vec![error.to_string()])?;
    let catalog = builder
        .build(&[])
        .map_err(|error| vec![error.to_string()])?;
    Ok(plugin
        .capabilities
        .iter()
        .filter_map(|capability| {
            let description = catalog.describe(capability.name.as_str())?;
            let output = Shape::Record(capability.output.clone()).notation();
            Some(Checked {
                signature: format!("{} -> {output}", description.signature),
                id: capability.id.to_string(),
                summary: description.summary,
                annotations: capability.annotations.declared().collect(),
            })
        })
        .collect())
}
