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
use std::io::{Read, Write};
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
    /// The folder must be ours and writable by nobody else, and an existing key
    /// ours and readable by nobody else: whoever can write there could plant a key
    /// and artifacts that this host would then load as its own native code.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        create_private_dir(dir)?;
        check_private(dir, PRIVATE_DIR_BITS, "the cache folder")?;
        let key_path = dir.join(KEY_FILE);
        let key = match read_key(&key_path)? {
            Some(key) => key,
            None => create_key(&key_path)?,
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
        // BLAKE3 for the engine part too: its output is fixed by its specification,
        // where `DefaultHasher`'s may change with any Rust release.
        let mut engine_hash = Blake3Hasher(blake3::Hasher::new());
        engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        env!("CARGO_PKG_VERSION").hash(&mut engine_hash);
        let engine_hash = engine_hash.0.finalize().to_hex();
        self.dir.join(format!(
            "{prefix}-{}-{}.{ARTIFACT_EXT}",
            blake3::hash(wasm).to_hex(),
            &engine_hash[..16]
        ))
    }

    /// The component of a valid entry; `None` (logged unless simply absent) for an
    /// entry that is missing, foreign, damaged or unusable.
    fn load(&self, engine: &Engine, file: &Path) -> Option<Component> {
        let tag = std::fs::read(file.with_extension(TAG_EXT)).ok()?;
        // One open of the path: the tag is checked over the file this handle has
        // open, and that same file is deserialized, whatever the path names by then.
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        let opened = std::fs::File::open(file).and_then(|mut opened| {
            hasher.update_reader(&mut opened)?;
            Ok(opened)
        });
        let opened = match opened {
            Ok(opened) => opened,
            Err(error) => {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %file.display(), reason = %error, "unreadable cache entry; compiling afresh");
                }
                return None;
            }
        };
        // `blake3::Hash` compares in constant time.
        if tag.len() != TAG_LEN || hasher.finalize() != blake3::Hash::from_slice(&tag).ok()? {
            tracing::warn!(file = %file.display(), "cache entry not written by this host (or damaged); compiling afresh");
            return None;
        }
        match deserialize(engine, opened.try_clone()) {
            Ok(component) => {
                // In use: not for `prune` to remove.
                let _ = opened.set_modified(SystemTime::now());
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

/// The component in the artifact `opened` has open (its tag checked).
///
/// On Linux the file is mapped, not copied, through `/proc/self/fd/N`, which
/// opens the file the handle has open rather than whatever the entry's path names
/// now; elsewhere (or without `/proc`) it is read into memory.
#[allow(unsafe_code)]
fn deserialize(
    engine: &Engine,
    opened: std::io::Result<std::fs::File>,
) -> wasmtime::Result<Component> {
    let mut opened = opened?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let same_file = PathBuf::from(format!("/proc/self/fd/{}", opened.as_raw_fd()));
        if same_file.exists() {
            // SAFETY: `Component::deserialize_file` trusts the file to be wasmtime's
            // own output and to stay unchanged while mapped. It is ours: the tag
            // under this cache's key proves this host wrote these bytes (`store`),
            // and this is the file the tag was checked over; entries are only ever
            // replaced by rename, never written in place; and wasmtime still checks
            // the header, version and engine settings.
            return unsafe { Component::deserialize_file(engine, same_file) };
        }
    }
    use std::io::Seek;
    let mut artifact = Vec::new();
    opened.rewind()?;
    opened.read_to_end(&mut artifact)?;
    // SAFETY: as above; the bytes are in memory, read through the handle whose
    // file the tag was checked over.
    unsafe { Component::deserialize(engine, artifact) }
}

/// Feeds what a `Hash` implementation writes into BLAKE3.
struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let hash = self.0.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        u64::from_le_bytes(first)
    }
}

/// Mode bits the cache folder may not have: writable by group or others.
const PRIVATE_DIR_BITS: u32 = 0o022;
/// Mode bits the key file may not have: any access by group or others.
const PRIVATE_KEY_BITS: u32 = 0o077;

/// Creates `dir` (and missing parents) readable by its owner only; an existing
/// folder keeps its mode (checked by [`check_private`]).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Refuses `path` unless it is owned by this process's user, is not a symbolic
/// link, and has none of `forbidden` mode bits.
fn check_private(path: &Path, forbidden: u32, what: &str) -> std::io::Result<()> {
    let metadata = std::fs::symlink_metadata(path)?;
    if metadata.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{what} {} is a symbolic link",
            path.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let user = unsafe { libc::geteuid() };
        if metadata.uid() != user {
            return Err(std::io::Error::other(format!(
                "{what} {} belongs to another user (uid {}, this server runs as uid {user})",
                path.display(),
                metadata.uid()
            )));
        }
        if metadata.mode() & forbidden != 0 {
            return Err(std::io::Error::other(format!(
                "{what} {} has mode {:o}; it must not be {} by group or others",
                path.display(),
                metadata.mode() & 0o777,
                if forbidden == PRIVATE_KEY_BITS {
                    "accessible"
                } else {
                    "writable"
                }
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (forbidden, what);
    Ok(())
}

/// The key in `path`, if there is one, after checking that only we can read it.
fn read_key(path: &Path) -> std::io::Result<Option<[u8; 32]>> {
    read_named_key(path, "the cache key")
}

/// The key (`what`) in `path`, if there is one, after checking that only we
/// can read it and that it is a regular file of 32 bytes.
fn read_named_key(path: &Path, what: &str) -> std::io::Result<Option<[u8; 32]>> {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
        Ok(_) => check_private(path, PRIVATE_KEY_BITS, what)?,
    }
    let bytes = crate::files::read_regular(path, 32, "a 32-byte key")
        .map_err(|error| std::io::Error::other(format!("{what} {}: {error}", path.display())))?;
    let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        std::io::Error::other(format!(
            "{what} {} is {} bytes long, not 32",
            path.display(),
            bytes.len()
        ))
    })?;
    Ok(Some(key))
}

/// The key named `file` in the cache folder `dir` (`what` in errors): read when
/// there, else made (32 random bytes, readable by the owner only, linked into
/// place whole: a process starting at the same time reads the one that won).
/// The folder is created private when missing.
///
/// # Errors
///
/// When it cannot be read or made, or is not private to this user.
pub fn private_key(dir: &Path, file: &str, what: &str) -> std::io::Result<[u8; 32]> {
    create_private_dir(dir)?;
    let path = dir.join(file);
    if let Some(key) = read_named_key(&path, what)? {
        return Ok(key);
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(std::io::Error::other)?;
    let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    temp.write_all(&key)?;
    temp.as_file().sync_all()?;
    match temp.persist_noclobber(&path) {
        Ok(_) => Ok(key),
        Err(error) if error.error.kind() == std::io::ErrorKind::AlreadyExists => {
            read_named_key(&path, what)?.ok_or(error.error)
        }
        Err(error) => Err(error.error),
    }
}

/// A new random key, created readable by its owner only: written to a temporary
/// file made with mode 0600, then linked into place only if no key is there yet
/// (another process starting at the same time may have made one: then that one
/// is the key).
fn create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(std::io::Error::other)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    temp.write_all(&key)?;
    match temp.persist_noclobber(path) {
        Ok(_) => Ok(key),
        Err(error) if error.error.kind() == std::io::ErrorKind::AlreadyExists => {
            read_key(path)?.ok_or(error.error)
        }
        Err(error) => Err(error.error),
    }
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

/// The default cache folder: `$XDG_CACHE_HOME/codemode-host`, else
/// `$HOME/.cache/codemode-host`; none when neither is set. Written here rather
/// than taken from the `dirs` crate, whose `option-ext` dependency is MPL-2.0,
/// a license deny.toml does not allow.
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })
        .map(|dir| dir.join("codemode-host"))
}

/// Opens the artifact cache in `dir`; one that cannot be opened is logged and
/// bypassed (everything is compiled).
pub fn open_cache(dir: Option<&Path>) -> Option<ArtifactCache> {
    let dir = dir?;
    match ArtifactCache::open(dir) {
        Ok(cache) => Some(cache),
        Err(error) => {
            tracing::warn!(folder = %dir.display(), reason = %error, "cannot use the cache folder; compiling everything");
            None
        }
    }
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
    fn the_file_checked_is_the_file_deserialized() -> anyhow::Result<()> {
        let engine = Engine::default();
        let dir = scratch("same-file");
        let cache = ArtifactCache::open(&dir)?;
        let checked = Component::new(
            &engine,
            component("(component (import \"checked\" (func)))"),
        )?;
        let swapped = Component::new(
            &engine,
            component("(component (import \"swapped\" (func)))"),
        )?;
        let entry = dir.join("plugin-x.cwasm");
        let other = dir.join("plugin-y.cwasm");
        cache.store(&checked, &entry)?;
        cache.store(&swapped, &other)?;
        // The handle the tag was checked through, then another artifact renamed
        // over the entry's path before deserializing.
        let opened = std::fs::File::open(&entry);
        std::fs::rename(&other, &entry)?;
        let loaded = deserialize(&engine, opened)?;
        let imports: Vec<String> = loaded
            .component_type()
            .imports(&engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        assert_eq!(imports, ["checked"]);
        Ok(())
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
            let mode = std::fs::metadata(&dir)?.permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "a new cache folder is private");
        }
        Ok(())
    }

    /// The message of a refused `open`.
    fn refused(dir: &Path) -> String {
        match ArtifactCache::open(dir) {
            Ok(_) => panic!("{} was trusted", dir.display()),
            Err(error) => error.to_string(),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_key_or_folder_others_could_have_written_is_not_trusted() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        };
        // A key readable (or planted) by others.
        let dir = scratch("planted-key");
        std::fs::create_dir_all(&dir)?;
        mode(&dir, 0o700)?;
        std::fs::write(dir.join(KEY_FILE), [7u8; 32])?;
        mode(&dir.join(KEY_FILE), 0o644)?;
        assert_eq!(
            refused(&dir),
            format!(
                "the cache key {} has mode 644; it must not be accessible by group or others",
                dir.join(KEY_FILE).display()
            )
        );
        // A key of the wrong length is not a key.
        mode(&dir.join(KEY_FILE), 0o600)?;
        std::fs::write(dir.join(KEY_FILE), [7u8; 5])?;
        assert_eq!(
            refused(&dir),
            format!(
                "the cache key {} is 5 bytes long, not 32",
                dir.join(KEY_FILE).display()
            )
        );
        // A key that is a link to somewhere else.
        std::fs::remove_file(dir.join(KEY_FILE))?;
        std::os::unix::fs::symlink("/dev/null", dir.join(KEY_FILE))?;
        assert_eq!(
            refused(&dir),
            format!(
                "the cache key {} is a symbolic link",
                dir.join(KEY_FILE).display()
            )
        );
        // A folder anyone can write to.
        let open = scratch("world-writable");
        std::fs::create_dir_all(&open)?;
        mode(&open, 0o777)?;
        assert_eq!(
            refused(&open),
            format!(
                "the cache folder {} has mode 777; it must not be writable by group or others",
                open.display()
            )
        );
        Ok(())
    }

    #[test]
    fn entry_names_hash_the_engine_with_blake3() {
        let engine = Engine::default();
        let cache = ArtifactCache {
            dir: PathBuf::from("/c"),
            key: [0; 32],
        };
        let entry = cache.entry(&engine, "plugin", b"wasm");
        let name = entry
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parts: Vec<&str> = name.trim_end_matches(".cwasm").split('-').collect();
        assert_eq!(parts.len(), 3, "{name}");
        assert_eq!(parts[1], blake3::hash(b"wasm").to_hex().as_str());
        assert_eq!(parts[2].len(), 16);
        assert!(parts[2].chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        // The same engine and code name the same entry.
        assert_eq!(entry, cache.entry(&engine, "plugin", b"wasm"));
    }
}
