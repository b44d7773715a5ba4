//! The plugins folder over time: which files are served, and which version of each.
//!
//! A scan lists `*.wasm` (non-recursive, file-name order), loads only files that are
//! new or changed since the last scan (size, modification time or inode of the
//! `.wasm` or its sidecar), and reuses the loaded plugin of every unchanged file. A
//! changed file that fails to load (a half-copied file, a bad sidecar) keeps its
//! last good version serving; the next change retries it. A removed file is dropped.
//! The cache entry of a version that no longer serves (replaced or removed) is
//! removed too, so that rebuilding a plugin again and again does not fill the disk
//! (and `load_file` removes the entry it wrote for a version that failed to load).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use wasmtime::Engine;

use super::grants::{GlobalCaps, Grants, SIDECAR_EXTENSION};
use super::listing::file_label;
use super::load::{LoadLimits, LoadedPlugin, load_file};
use crate::cache::ArtifactCache;
use crate::source::Skipped;

/// Exports that component toolchains add for themselves, never capabilities:
/// componentize-py's pre-initialization entry point. Ignored without a warning,
/// which would otherwise greet every start of every Python plugin.
const TOOLCHAIN_EXPORTS: [&str; 1] = ["exports.init"];

/// The files of one folder and the version of each that serves.
pub struct PluginFolder {
    dir: PathBuf,
    limits: LoadLimits,
    files: BTreeMap<PathBuf, Tracked>,
    /// Files whose latest version failed to load, with the reason (an earlier
    /// version may still serve).
    failures: BTreeMap<PathBuf, String>,
    /// What caps a sidecar's own limits, for the warning that one is above.
    caps: GlobalCaps,
    /// Sidecars that match no plugin, as of the last scan (each is warned about
    /// once, when it appears).
    orphans: BTreeSet<PathBuf>,
    /// Whether a folder that does not exist holds no plugins rather than being an
    /// error.
    optional: bool,
}

/// One file as of the last scan.
struct Tracked {
    stamp: Stamp,
    /// The version that serves; `None` when it never loaded.
    serving: Option<Arc<LoadedPlugin>>,
}

/// What identifies one version of a plugin file and its sidecar without reading them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    wasm: FileStamp,
    sidecar: Option<FileStamp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: inode(&meta),
        })
    }
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> u64 {
    0
}

/// What a scan found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// Files loaded for the first time or again after a change.
    pub loaded: usize,
    /// Changed files that failed to load (their last good version, if any, serves).
    pub failed: usize,
    /// Files that disappeared.
    pub removed: usize,
    /// Of the failed files, those that failed for a reason that may pass (out of
    /// file descriptors): the next scan tries them again even if unchanged.
    pub transient: usize,
    /// The names of the files that failed to load in this scan.
    pub failures: Vec<String>,
}

impl ScanReport {
    /// Whether the set of served plugins may differ from the previous scan's.
    pub fn changed(&self) -> bool {
        self.loaded > 0 || self.removed > 0
    }
}

impl PluginFolder {
    /// A folder nothing has been scanned from yet, whose sidecars' limits `caps`
    /// caps.
    pub fn new(dir: PathBuf, limits: LoadLimits, caps: GlobalCaps) -> Self {
        Self {
            dir,
            limits,
            files: BTreeMap::new(),
            failures: BTreeMap::new(),
            caps,
            orphans: BTreeSet::new(),
            optional: false,
        }
    }

    /// Makes a missing folder hold no plugins instead of an error, when
    /// `optional` (a gateway of upstreams only).
    pub fn optional(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings the folder's state up to date (see the module docs) and logs each
    /// plugin loaded, skipped, kept or removed.
    ///
    /// # Errors
    ///
    /// When the folder cannot be listed; nothing changes then.
    pub fn scan(
        &mut self,
        engine: &Engine,
        cache: Option<&ArtifactCache>,
    ) -> std::io::Result<ScanReport> {
        let paths = match super::listing::plugin_files(&self.dir) {
            Ok(paths) => paths,
            Err(error) if self.optional && error.kind() == std::io::ErrorKind::NotFound => {
                Vec::new()
            }
            Err(error) => return Err(error),
        };
        let mut report = ScanReport::default();
        // Cache entries of versions that stopped serving.
        let mut released = Vec::new();
        let before = self.files.len();
        self.files.retain(|path, tracked| {
            let keep = paths.contains(path);
            if let (false, Some(serving)) = (keep, &tracked.serving) {
                tracing::info!(plugin = %file_label(path), "plugin removed");
                released.extend(serving.cache_entry.clone());
            }
            keep
        });
        report.removed = before - self.files.len();
        self.failures.retain(|path, _| paths.contains(path));
        self.warn_orphans(&paths);
        for path in paths {
            let Some(wasm) = FileStamp::of(&path) else {
                continue;
            };
            let stamp = Stamp {
                wasm,
                sidecar: FileStamp::of(&Grants::sidecar_path(&path)),
            };
            let previous = self.files.get(&path);
            if previous.is_some_and(|t| t.stamp == stamp) {
                continue;
            }
            let last_good = previous.and_then(|t| t.serving.clone());
            let serving = match load_valid(engine, &path, cache, &self.limits, &self.caps) {
                Ok(plugin) => {
                    let provenance = plugin.provenance.as_ref();
                    tracing::info!(
                        plugin = %plugin.file,
                        capabilities = plugin.capabilities.len(),
                        cached = plugin.cached,
                        load_ms = crate::units::millis(plugin.load_time),
                        reference = provenance.map(|p| tracing::field::display(&p.reference)),
                        digest = provenance.map(|p| tracing::field::display(&p.digest)),
                        key_id = provenance
                            .and_then(|p| p.key_id.as_ref())
                            .map(tracing::field::display),
                        "plugin loaded"
                    );
                    for (setting, asks, cap) in plugin.grants.above(&self.caps) {
                        tracing::warn!(
                            plugin = %plugin.file,
                            reason = %format!("{setting} = {asks} is above {cap}"),
                            "sidecar limit capped by the global budget"
                        );
                    }
                    for export in &plugin.ignored_exports {
                        if TOOLCHAIN_EXPORTS.contains(&export.as_str()) {
                            tracing::debug!(plugin = %plugin.file, export = %export, "toolchain export; ignored");
                            continue;
                        }
                        tracing::warn!(plugin = %plugin.file, export = %export, "export not named by metadata; ignored");
                    }
                    report.loaded += 1;
                    self.failures.remove(&path);
                    released.extend(last_good.and_then(|old| old.cache_entry.clone()));
                    Some(Arc::new(plugin))
                }
                Err((reason, transient)) => {
                    report.failed += 1;
                    let plugin = file_label(&path);
                    report.failures.push(plugin.clone());
                    self.failures.insert(path.clone(), reason.clone());
                    if last_good.is_some() {
                        tracing::warn!(plugin = %plugin, reason = %reason, "plugin reload failed; its last good version keeps serving");
                    } else {
                        tracing::warn!(plugin = %plugin, reason = %reason, "plugin skipped");
                    }
                    if transient {
                        // Not remembered as tried: the next scan loads it again.
                        report.transient += 1;
                        if let Some(last_good) = last_good {
                            let stamp = previous.map(|t| t.stamp.clone());
                            if let Some(stamp) = stamp {
                                self.files.insert(
                                    path,
                                    Tracked {
                                        stamp,
                                        serving: Some(last_good),
                                    },
                                );
                            }
                        }
                        continue;
                    }
                    last_good
                }
            };
            self.files.insert(path, Tracked { stamp, serving });
        }
        if let Some(cache) = cache {
            let in_use: HashSet<&Path> = self
                .files
                .values()
                .filter_map(|t| t.serving.as_ref()?.cache_entry.as_deref())
                .collect();
            for entry in released.iter().filter(|e| !in_use.contains(e.as_path())) {
                cache.remove(entry);
            }
        }
        Ok(report)
    }

    /// Warns once about each sidecar (`*.toml`) that no plugin of `plugins` reads,
    /// with the name it probably meant: a grant in it is silently not granted.
    fn warn_orphans(&mut self, plugins: &[PathBuf]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let read: HashSet<PathBuf> = plugins.iter().map(|p| Grants::sidecar_path(p)).collect();
        let orphans: BTreeSet<PathBuf> = entries
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| {
                path.extension().is_some_and(|e| e == SIDECAR_EXTENSION)
                    && !read.contains(path)
                    && !path.is_dir()
            })
            .collect();
        for orphan in orphans.difference(&self.orphans) {
            tracing::warn!(
                sidecar = %file_label(orphan),
                reason = %orphan_reason(orphan, plugins),
                "sidecar matches no plugin; its grants are not given"
            );
        }
        self.orphans = orphans;
    }

    /// The files whose latest version failed to load, in file-name order.
    pub fn failures(&self) -> Vec<Skipped> {
        self.failures
            .iter()
            .map(|(path, reason)| Skipped {
                plugin: file_label(path),
                reason: reason.clone(),
                earlier_serves: self.files.get(path).is_some_and(|t| t.serving.is_some()),
            })
            .collect()
    }

    /// The plugins to serve, in file-name order.
    pub fn serving(&self) -> Vec<Arc<LoadedPlugin>> {
        self.files
            .values()
            .filter_map(|t| t.serving.clone())
            .collect()
    }
}

/// Loads the plugin at `path`, whose capabilities loading checks on their own
/// (names, IDs, texts), so that a version the catalog would refuse never replaces
/// a good one. Conflicts with other plugins are the registry's to settle. A failure
/// comes with whether it may pass if tried again.
fn load_valid(
    engine: &Engine,
    path: &Path,
    cache: Option<&ArtifactCache>,
    limits: &LoadLimits,
    caps: &GlobalCaps,
) -> Result<LoadedPlugin, (String, bool)> {
    load_file(engine, path, cache, limits, caps.max_memory)
        .map_err(|e| (e.to_string(), e.is_transient()))
}

/// Why `sidecar` matches none of `plugins`, and the name it probably meant.
fn orphan_reason(sidecar: &Path, plugins: &[PathBuf]) -> String {
    let name = file_label(sidecar);
    let stem = name.strip_suffix(".toml").unwrap_or(&name);
    let stems: Vec<String> = plugins
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    // `fetch.wasm.toml`: the plugin's file name with `.toml` added.
    if let Some(base) = stem.strip_suffix(".wasm")
        && stems.iter().any(|s| s == base)
    {
        return format!("the sidecar of {base}.wasm is {base}.toml");
    }
    // `Fetch.toml`: names are case-sensitive.
    if let Some(plugin) = stems.iter().find(|s| s.eq_ignore_ascii_case(stem)) {
        return format!("the sidecar of {plugin}.wasm is {plugin}.toml");
    }
    format!("there is no {stem}.wasm; the sidecar of a plugin NAME.wasm is NAME.toml")
}
