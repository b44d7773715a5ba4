//! `codemode-host precompile`: fills the artifact cache with the interpreter and
//! every plugin of a folder, so that the next start compiles nothing.

use std::path::Path;
use std::time::Instant;

use crate::cache::ArtifactCache;
use crate::plugins::{self, LoadLimits};
use crate::service::StartError;

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
