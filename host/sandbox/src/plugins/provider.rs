//! The plugins folder as a capability-source provider: its first scan at start,
//! and a rescan on every reload (the watcher's, SIGHUP's), each offering the
//! plugins that serve and the files that failed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use wasmtime::Engine;

use super::folder::PluginFolder;
use crate::cache::{ArtifactCache, UNUSED_ENTRY_AGE};
use crate::catalog::SpecError;
use crate::metrics::{Metrics, RELOAD_ERROR, RELOAD_FAILED, RELOAD_OK};
use crate::source::{Accepted, Assembly, CapabilitySource, Offer, Provider, Publisher};

/// The plugins folder, as [`Provider`].
pub struct PluginsProvider {
    folder: Mutex<PluginFolder>,
    engine: Engine,
    cache: Option<ArtifactCache>,
    metrics: Arc<Metrics>,
    /// Whether other sources (upstreams, a library user's) serve beside the
    /// plugins (an empty folder is then no cause for a warning).
    others: bool,
    /// Set at start.
    publisher: OnceLock<Publisher>,
    /// Why the first scan could not list the folder.
    first_error: Mutex<Option<std::io::Error>>,
    /// Whether the refusals of the next catalog built from its own offer are
    /// counted as load failures.
    count_refusals: AtomicBool,
}

/// What one reload of the plugins folder did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Whether a new catalog now serves (something loaded or was removed).
    pub swapped: bool,
    /// Plugins serving after the reload.
    pub plugins: usize,
    /// Capabilities serving after the reload.
    pub capabilities: usize,
    /// Changed files that failed to load (their last good version serves), and
    /// plugins refused.
    pub failed: usize,
    /// Whether some failed for a reason that may pass (out of file descriptors), so
    /// the reload should be tried again.
    pub retry: bool,
    /// Wall time of the reload: scanning, loading the changed files, the new catalog.
    pub elapsed: std::time::Duration,
}

/// Why a reload changed nothing.
#[derive(Debug)]
pub enum ReloadError {
    /// The folder could not be listed.
    Folder(std::io::Error),
    /// The catalog could not be rebuilt.
    Catalog(SpecError),
}

impl PluginsProvider {
    /// The plugins of `folder`, loaded with `engine` through `cache`; `others`
    /// says whether other sources serve beside them.
    pub fn new(
        folder: PluginFolder,
        engine: Engine,
        cache: Option<ArtifactCache>,
        metrics: Arc<Metrics>,
        others: bool,
    ) -> Self {
        Self {
            folder: Mutex::new(folder),
            engine,
            cache,
            metrics,
            others,
            publisher: OnceLock::new(),
            first_error: Mutex::new(None),
            count_refusals: AtomicBool::new(true),
        }
    }

    fn folder(&self) -> MutexGuard<'_, PluginFolder> {
        self.folder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The folder.
    pub fn dir(&self) -> PathBuf {
        self.folder().dir().to_owned()
    }

    /// Why the first scan could not list the folder, once.
    pub fn take_first_error(&self) -> Option<std::io::Error> {
        self.first_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The plugins serving and the files that failed, as an offer.
    fn offer(folder: &PluginFolder) -> Offer {
        Offer {
            sources: folder
                .serving()
                .into_iter()
                .map(|plugin| plugin as Arc<dyn CapabilitySource>)
                .collect(),
            failures: folder.failures(),
            starting: false,
        }
    }

    /// Offers `offer`.
    fn publish(&self, offer: Offer) -> Result<Accepted, SpecError> {
        match self.publisher.get() {
            Some(publisher) => publisher.offer(offer),
            None => Ok(Accepted::Gone),
        }
    }

    /// Rescans the folder: loads new and changed files (a changed file that fails
    /// to load keeps its last good version), drops removed ones, and when anything
    /// changed offers the new set. Reloads run one at a time.
    ///
    /// # Errors
    ///
    /// When the folder cannot be listed or the catalog not rebuilt (the current
    /// one keeps serving).
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let started = Instant::now();
        let mut folder = self.folder();
        let report = folder
            .scan(&self.engine, self.cache.as_ref())
            .map_err(|error| {
                self.metrics.reload(RELOAD_ERROR);
                ReloadError::Folder(error)
            })?;
        for plugin in &report.failures {
            self.metrics.plugin_load_failure(plugin);
        }
        if !report.changed() && report.failed == 0 {
            self.metrics.reload(RELOAD_OK);
            return Ok(Reloaded {
                swapped: false,
                plugins: self.metrics.plugins_loaded(),
                capabilities: self.metrics.capabilities_serving(),
                failed: 0,
                retry: report.transient > 0,
                elapsed: started.elapsed(),
            });
        }
        self.count_refusals
            .store(report.changed(), Ordering::Release);
        let accepted = self.publish(Self::offer(&folder)).map_err(|error| {
            self.metrics.reload(RELOAD_ERROR);
            ReloadError::Catalog(error)
        })?;
        let refused = match &accepted {
            Accepted::Serving(assembly) => assembly.refused.len(),
            Accepted::Held | Accepted::Gone => 0,
        };
        let failed = report.failed + if report.changed() { refused } else { 0 };
        self.metrics
            .reload(if failed > 0 { RELOAD_FAILED } else { RELOAD_OK });
        let reloaded = Reloaded {
            swapped: report.changed(),
            plugins: self.metrics.plugins_loaded(),
            capabilities: self.metrics.capabilities_serving(),
            failed,
            retry: report.transient > 0,
            elapsed: started.elapsed(),
        };
        if reloaded.swapped {
            tracing::info!(
                plugins = reloaded.plugins,
                capabilities = reloaded.capabilities,
                failed,
                reload_ms = crate::units::millis(reloaded.elapsed),
                "catalog reloaded"
            );
        }
        Ok(reloaded)
    }
}

impl Provider for PluginsProvider {
    fn name(&self) -> &str {
        "plugins folder"
    }

    /// Scans the folder for the first time, on the calling thread (the registry
    /// starts it last, so the upstreams connect meanwhile), and offers what loaded.
    /// Not on a thread of its own: that made each large plugin's load ~10 ms
    /// slower (the warm start bench row, 10 plugins: ~100 ms against ~80 ms).
    fn start(self: Arc<Self>, publisher: Publisher) {
        let _ = self.publisher.set(publisher);
        self.first_scan();
    }

    /// Records how many plugins serve, and counts each refused plugin as a load
    /// failure when the refusal follows the first scan or a reload that loaded or
    /// removed something (not a scan that only found a failure, which would count
    /// the same refusal again).
    fn served(&self, assembly: &Assembly, own: bool) {
        self.metrics.plugins(assembly.serving);
        if own && self.count_refusals.swap(false, Ordering::AcqRel) {
            for refused in &assembly.refused {
                self.metrics.plugin_load_failure(refused);
            }
        }
    }

    fn stop(&self, _deadline: Instant) {}
}

impl PluginsProvider {
    /// The first scan, offered; a folder that cannot be listed offers nothing
    /// ([`PluginsProvider::take_first_error`]).
    fn first_scan(&self) {
        let mut folder = self.folder();
        let report = match folder.scan(&self.engine, self.cache.as_ref()) {
            Ok(report) => report,
            Err(error) => {
                *self
                    .first_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
                drop(folder);
                let _ = self.publish(Offer::default());
                return;
            }
        };
        for plugin in &report.failures {
            self.metrics.plugin_load_failure(plugin);
        }
        if let Some(cache) = &self.cache {
            // After the scan, which marked the entries it loaded as used.
            let pruned = cache.prune(super::PLUGIN_PREFIX, UNUSED_ENTRY_AGE);
            if pruned > 0 {
                tracing::info!(
                    entries = pruned,
                    unused_days = UNUSED_ENTRY_AGE.as_secs() / 86_400,
                    folder = %cache.dir().display(),
                    "removed cache entries nothing loaded for a long time"
                );
            }
        }
        let offer = Self::offer(&folder);
        if offer.sources.is_empty() {
            let reason = empty_folder_reason(folder.dir());
            if self.others {
                tracing::info!(folder = %folder.dir().display(), reason = %reason, "no plugin loaded; serving the other sources' capabilities only");
            } else {
                tracing::warn!(folder = %folder.dir().display(), reason = %reason, "no plugin loaded; serving no plugin capabilities");
            }
        }
        drop(folder);
        // Held for the first catalog: it cannot fail yet.
        let _ = self.publish(offer);
    }
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
