//! The artifact cache: compiled components kept on disk so that a start does not
//! compile what an earlier start (or `codemode-host precompile`) already compiled.
//!
//! An entry is named by the BLAKE3 hash of the WebAssembly it was compiled from and
//! the engine's compatibility hash (wasmtime version and every setting that affects
//! compiled code), so a changed plugin or engine never finds a stale entry. Loading
//! compiled code means trusting it as native code, so only entries this host wrote
//! are loaded: beside each artifact (`.cwasm`) lies its tag (`.tag`), a keyed BLAKE3
//! MAC under a key created in the cache folder on first use (readable by its owner
//! only). An entry copied from elsewhere, cut short or corrupted fails the check and
//! is compiled afresh; files are written to a temporary name and renamed, so a
//! reader never sees half a file.
//!
//! A start loads every plugin from here, so loading is built for speed: BLAKE3 runs
//! at several GB/s (the 40 MB artifact of a Python plugin is checked in a few
//! milliseconds, where HMAC-SHA256 took ~25 ms), and the artifact is mapped from
//! the file rather than read and copied.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

/// The file holding the cache's MAC key.
const KEY_FILE: &str = "cache.key";
/// The extension of an entry's compiled artifact.
const ARTIFACT_EXT: &str = "cwasm";
/// The extension of an entry's tag: the keyed BLAKE3 hash of the artifact.
const TAG_EXT: &str = "tag";
/// Bytes of a tag.
const TAG_LEN: usize = blake3::OUT_LEN;

/// How long an entry nothing has loaded stays: [`ArtifactCache::prune`] removes
/// older ones (a load refreshes an entry's modification time).
pub const UNUSED_ENTRY_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A folder of compiled components, signed by this host.
#[derive(Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    key: [u8; 32],
}

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Loaded from a valid cache entry.
    Cached,
    /// Compiled (and, when the cache is writable, stored).
    Compiled,
}

impl ArtifactCache {
    /// Opens (creating if needed) the cache in `dir` and its key.
    ///
    /// # Errors
    ///
    /// When the folder or the key cannot be created or read.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let key_path = dir.join(KEY_FILE);
        let key = match std::fs::read(&key_path) {
            Ok(bytes) if bytes.len() == 32 => {
                let mut key = [0; 32];
                key.copy_from_slice(&bytes);
                key
            }
            _ => create_key(&key_path)?,
        };
        Ok(Self {
            dir: dir.to_owned(),
            key,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The component of the cache entry `entry` (see [`Self::entry`]), from the
    /// entry if it is valid, else compiled now with `compile` and stored. A cache
    /// that cannot be read or written is logged and bypassed.
    ///
    /// # Errors
    ///
    /// What `compile` returns.
    pub fn component(
        &self,
        engine: &Engine,
        entry: &Path,
        compile: impl FnOnce() -> wasmtime::Result<Component>,
    ) -> wasmtime::Result<(Component, Origin)> {
        if let Some(component) = self.load(engine, entry) {
            return Ok((component, Origin::Cached));
        }
        let component = compile()?;
        if let Err(error) = self.store(&component, entry) {
            tracing::warn!(file = %entry.display(), reason = %error, "cannot cache a compiled component");
        }
        Ok((component, Origin::Compiled))
    }

    /// The entry of the component compiled from `wasm` for `engine`:
    /// `prefix-<blake3 of wasm>-<engine hash>.cwasm` (the tag beside it: `.tag`).
    pub fn entry(&self, engine: &Engine, prefix: &str, wasm: &[u8]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        self.dir.join(format!(
            "{prefix}-{}-{:016x}.{ARTIFACT_EXT}",
            blake3::hash(wasm).to_hex(),
            hasher.finish()
        ))
    }

    /// The component of a valid entry; `None` (logged unless simply absent) for an
    /// entry that is missing, foreign, damaged or unusable.
    fn load(&self, engine: &Engine, file: &Path) -> Option<Component> {
        let tag = std::fs::read(file.with_extension(TAG_EXT)).ok()?;
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        if let Err(error) = hasher.update_mmap(file) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %file.display(), reason = %error, "unreadable cache entry; compiling afresh");
            }
            return None;
        }
        // `blake3::Hash` compares in constant time.
        if tag.len() != TAG_LEN || hasher.finalize() != blake3::Hash::from_slice(&tag).ok()? {
            tracing::warn!(file = %file.display(), "cache entry not written by this host (or damaged); compiling afresh");
            return None;
        }
        match deserialize(engine, file) {
            Ok(component) => {
                // In use: not for `prune` to remove.
                let _ = std::fs::File::open(file).and_then(|f| f.set_modified(SystemTime::now()));
                Some(component)
            }
            Err(error) => {
                tracing::warn!(file = %file.display(), reason = %format!("{error:#}"), "unusable cache entry; compiling afresh");
                None
            }
        }
    }

    fn store(&self, component: &Component, file: &Path) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(std::io::Error::other)?;
        let tag = blake3::keyed_hash(&self.key, &artifact);
        // The artifact first: a tag without its artifact (or with an older one) only
        // fails the check.
        write_atomically(file, &artifact)?;
        write_atomically(&file.with_extension(TAG_EXT), tag.as_bytes())
    }

    /// Removes the entries named `prefix-*` other than `keep`: they belong to code or
    /// engine settings that are gone.
    pub fn retain_only(&self, prefix: &str, keep: &Path) {
        for artifact in self.artifacts(prefix) {
            if artifact != keep {
                self.remove(&artifact);
            }
        }
    }

    /// Removes the entries named `prefix-*` that nothing loaded for `unused_for`;
    /// returns how many. Other servers sharing the folder only compile them again.
    pub fn prune(&self, prefix: &str, unused_for: Duration) -> usize {
        let now = SystemTime::now();
        let mut removed = 0;
        for artifact in self.artifacts(prefix) {
            let age = std::fs::metadata(&artifact)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok());
            if age.is_some_and(|age| age > unused_for) {
                self.remove(&artifact);
                removed += 1;
            }
        }
        removed
    }

    /// Removes one entry (its artifact and tag); a missing file is fine. A process
    /// that still maps the artifact keeps using it.
    pub fn remove(&self, entry: &Path) {
        let _ = std::fs::remove_file(entry);
        let _ = std::fs::remove_file(entry.with_extension(TAG_EXT));
    }

    /// The artifacts of the entries named `prefix-*` (also of a tag whose artifact
    /// is gone, so that removing the entry removes the tag).
    fn artifacts(&self, prefix: &str) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let start = format!("{prefix}-");
        let mut artifacts: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|e| e == ARTIFACT_EXT || e == TAG_EXT)
                    && path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&start))
            })
            .map(|path| path.with_extension(ARTIFACT_EXT))
            .collect();
        artifacts.sort();
        artifacts.dedup();
        artifacts
    }
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize_file` trusts the file to be wasmtime's own
    // output and to stay unchanged while mapped. It is ours: the tag under this
    // cache's key proves this host wrote these exact bytes (`store`); entries are
    // only ever replaced by rename, never written in place; and wasmtime still
    // checks the header, version and engine settings.
    unsafe { Component::deserialize_file(engine, file) }
}

/// A new random key, written readable by its owner only (a temporary file is
/// created with mode 0600 before the key is in it, then renamed into place).
fn create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(std::io::Error::other)?;
    write_atomically(path, &key)?;
    // Another process may have created its key at the same time: whichever rename
    // won is the key.
    let written = std::fs::read(path)?;
    if written.len() == 32 {
        key.copy_from_slice(&written);
    }
    Ok(key)
}

/// Writes `bytes` to a new temporary file beside `file` (unique, mode 0600) and
/// renames it over `file`: readers see the old bytes or the new ones, never part.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.persist(file).map_err(|error| error.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("codemode-cache-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    const WAT: &str = "(component (core module (func (export \"f\"))))";

    /// A component from its text form (the server itself reads binaries only).
    fn component(text: &str) -> Vec<u8> {
        wat::parse_str(text).expect("valid WAT")
    }

    #[test]
    fn an_entry_is_reused_and_a_foreign_one_is_not() -> anyhow::Result<()> {
        let engine = Engine::default();
        let dir = scratch("reuse");
        let cache = ArtifactCache::open(&dir)?;
        let binary = component(WAT);
        let wasm = binary.as_slice();
        let compile = || Component::new(&engine, wasm);
        let entry = cache.entry(&engine, "plugin", wasm);
        let (_, first) = cache.component(&engine, &entry, compile)?;
        let (_, second) = cache.component(&engine, &entry, compile)?;
        assert_eq!((first, second), (Origin::Compiled, Origin::Cached));
        // Another cache (another key) does not trust this one's entries.
        let other = ArtifactCache::open(&scratch("other"))?;
        let other_entry = other.entry(&engine, "plugin", wasm);
        std::fs::copy(&entry, &other_entry)?;
        std::fs::copy(
            entry.with_extension(TAG_EXT),
            other_entry.with_extension(TAG_EXT),
        )?;
        let (_, foreign) = other.component(&engine, &other_entry, compile)?;
        assert_eq!(foreign, Origin::Compiled);
        // A damaged entry is compiled afresh, then valid again.
        let mut bytes = std::fs::read(&entry)?;
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&entry, &bytes)?;
        let (_, damaged) = cache.component(&engine, &entry, compile)?;
        let (_, again) = cache.component(&engine, &entry, compile)?;
        assert_eq!((damaged, again), (Origin::Compiled, Origin::Cached));
        // Cut short, a missing tag, a short tag.
        std::fs::write(&entry, [1, 2, 3])?;
        let (_, short) = cache.component(&engine, &entry, compile)?;
        std::fs::remove_file(entry.with_extension(TAG_EXT))?;
        let (_, untagged) = cache.component(&engine, &entry, compile)?;
        std::fs::write(entry.with_extension(TAG_EXT), [0; 31])?;
        let (_, short_tag) = cache.component(&engine, &entry, compile)?;
        assert_eq!(
            (short, untagged, short_tag),
            (Origin::Compiled, Origin::Compiled, Origin::Compiled)
        );
        let (_, fine) = cache.component(&engine, &entry, compile)?;
        assert_eq!(fine, Origin::Cached);
        Ok(())
    }

    #[test]
    fn entries_unused_for_too_long_are_pruned_and_a_load_keeps_one() -> anyhow::Result<()> {
        let engine = Engine::default();
        let dir = scratch("prune");
        let cache = ArtifactCache::open(&dir)?;
        let (old_binary, new_binary) = (
            component(WAT),
            component("(component (core module (func (export \"g\"))))"),
        );
        let (old_wasm, new_wasm) = (old_binary.as_slice(), new_binary.as_slice());
        let old = cache.entry(&engine, "plugin", old_wasm);
        let new = cache.entry(&engine, "plugin", new_wasm);
        cache.component(&engine, &old, || Component::new(&engine, old_wasm))?;
        cache.component(&engine, &new, || Component::new(&engine, new_wasm))?;
        let runner = cache.entry(&engine, "runner", old_wasm);
        std::fs::write(&runner, b"x")?;
        let long_ago = SystemTime::now() - Duration::from_secs(40 * 24 * 60 * 60);
        for file in [&old, &new, &runner] {
            std::fs::File::open(file)?.set_modified(long_ago)?;
        }
        // Loading the new one marks it used.
        let (_, origin) = cache.component(&engine, &new, || Component::new(&engine, new_wasm))?;
        assert_eq!(origin, Origin::Cached);
        assert_eq!(cache.prune("plugin", UNUSED_ENTRY_AGE), 1);
        assert!(!old.exists() && !old.with_extension(TAG_EXT).exists());
        assert!(new.exists() && new.with_extension(TAG_EXT).exists());
        assert!(runner.exists(), "other prefixes are left alone");
        assert!(dir.join(KEY_FILE).exists());
        // retain_only keeps exactly one entry of a prefix.
        cache.retain_only("plugin", &old);
        assert!(!new.exists() && !new.with_extension(TAG_EXT).exists());
        Ok(())
    }

    #[test]
    fn the_key_persists_and_is_private() -> anyhow::Result<()> {
        let dir = scratch("key");
        let first = ArtifactCache::open(&dir)?;
        let second = ArtifactCache::open(&dir)?;
        assert_eq!(first.key, second.key);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(KEY_FILE))?.permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        Ok(())
    }
}
