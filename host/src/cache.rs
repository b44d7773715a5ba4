//! The artifact cache: compiled components kept on disk so that a start does not
//! compile what an earlier start (or `codemode-host precompile`) already compiled.
//!
//! An entry is named by the SHA-256 of the WebAssembly it was compiled from and the
//! engine's compatibility hash (wasmtime version and every setting that affects
//! compiled code), so a changed plugin or engine never finds a stale entry. Loading
//! compiled code means trusting it as native code, so only entries this host wrote
//! are loaded: each carries an HMAC-SHA256 under a key created in the cache folder
//! on first use (readable by its owner only). An entry copied from elsewhere, cut
//! short or corrupted fails the check and is compiled afresh; files are written to a
//! temporary name and renamed, so a reader never sees half an entry.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The file holding the cache's HMAC key.
const KEY_FILE: &str = "cache.key";
/// Bytes of an entry's HMAC, before the compiled artifact.
const TAG_LEN: usize = 32;
/// SHA-256's block size, for HMAC.
const BLOCK: usize = 64;

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

    /// The component compiled from `wasm` (named `prefix` in the cache), from a
    /// valid entry or compiled now with `compile` and stored. A cache that cannot be
    /// read or written is logged and bypassed.
    ///
    /// # Errors
    ///
    /// What `compile` returns.
    pub fn component(
        &self,
        engine: &Engine,
        prefix: &str,
        wasm: &[u8],
        compile: impl FnOnce() -> wasmtime::Result<Component>,
    ) -> wasmtime::Result<(Component, Origin)> {
        let file = self.entry(engine, prefix, wasm);
        if let Some(component) = self.load(engine, &file) {
            return Ok((component, Origin::Cached));
        }
        let component = compile()?;
        if let Err(error) = self.store(&component, &file) {
            tracing::warn!(file = %file.display(), reason = %error, "cannot cache a compiled component");
        }
        Ok((component, Origin::Compiled))
    }

    /// `prefix-<sha256 of wasm>-<engine hash>.cwasm`.
    fn entry(&self, engine: &Engine, prefix: &str, wasm: &[u8]) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        self.dir.join(format!(
            "{prefix}-{}-{:016x}.cwasm",
            hex(&Sha256::digest(wasm)),
            hasher.finish()
        ))
    }

    fn load(&self, engine: &Engine, file: &Path) -> Option<Component> {
        let bytes = std::fs::read(file).ok()?;
        let (tag, artifact) = bytes.split_at_checked(TAG_LEN)?;
        if !constant_time_eq(tag, &hmac(&self.key, artifact)) {
            tracing::warn!(file = %file.display(), "cache entry not written by this host (or damaged); compiling afresh");
            return None;
        }
        match deserialize(engine, artifact) {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(file = %file.display(), reason = %format!("{error:#}"), "unusable cache entry; compiling afresh");
                None
            }
        }
    }

    fn store(&self, component: &Component, file: &Path) -> std::io::Result<()> {
        let artifact = component.serialize().map_err(std::io::Error::other)?;
        let mut bytes = Vec::with_capacity(TAG_LEN + artifact.len());
        bytes.extend_from_slice(&hmac(&self.key, &artifact));
        bytes.extend_from_slice(&artifact);
        write_atomically(file, &bytes)
    }

    /// Removes the entries named `prefix-*.cwasm` other than the one for `wasm`:
    /// they belong to code or engine settings that are gone.
    pub fn retain_only(&self, engine: &Engine, prefix: &str, wasm: &[u8]) {
        let keep = self.entry(engine, prefix, wasm);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&format!("{prefix}-"))
                && name.ends_with(".cwasm")
                && entry.path() != keep
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts its input to be wasmtime's own output.
    // It is: the HMAC under this cache's key proves this host wrote these exact bytes
    // (`store`), and wasmtime still checks the header, version and engine settings.
    unsafe { Component::deserialize(engine, artifact) }
}

/// A new random key, written readable by its owner only.
fn create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    write_atomically(path, &key)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    // Another process may have created its key at the same time: whichever rename
    // won is the key.
    let written = std::fs::read(path)?;
    if written.len() == 32 {
        key.copy_from_slice(&written);
    }
    Ok(key)
}

fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, file)
}

/// HMAC-SHA256 (RFC 2104) with a 32-byte key.
fn hmac(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut padded = [0u8; BLOCK];
    padded[..key.len()].copy_from_slice(key);
    let inner_key: Vec<u8> = padded.iter().map(|b| b ^ 0x36).collect();
    let outer_key: Vec<u8> = padded.iter().map(|b| b ^ 0x5c).collect();
    let inner = Sha256::new()
        .chain_update(&inner_key)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(&outer_key)
        .chain_update(inner)
        .finalize()
        .into()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_is_hmac_sha256() {
        // Python: hmac.new(b"\x0b" * 32, b"Hi There", hashlib.sha256).hexdigest()
        let key = [0x0b; 32];
        assert_eq!(
            hex(&hmac(&key, b"Hi There")),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("codemode-cache-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    const WAT: &str = "(component (core module (func (export \"f\"))))";

    #[test]
    fn an_entry_is_reused_and_a_foreign_one_is_not() -> anyhow::Result<()> {
        let engine = Engine::default();
        let dir = scratch("reuse");
        let cache = ArtifactCache::open(&dir)?;
        let wasm = WAT.as_bytes();
        let compile = || Component::new(&engine, wasm);
        let (_, first) = cache.component(&engine, "plugin", wasm, compile)?;
        let (_, second) = cache.component(&engine, "plugin", wasm, compile)?;
        assert_eq!((first, second), (Origin::Compiled, Origin::Cached));
        // Another cache (another key) does not trust this one's entries.
        let entry = cache.entry(&engine, "plugin", wasm);
        let other = ArtifactCache::open(&scratch("other"))?;
        std::fs::copy(&entry, other.entry(&engine, "plugin", wasm))?;
        let (_, foreign) = other.component(&engine, "plugin", wasm, compile)?;
        assert_eq!(foreign, Origin::Compiled);
        // A damaged entry is compiled afresh, then valid again.
        let mut bytes = std::fs::read(&entry)?;
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&entry, &bytes)?;
        let (_, damaged) = cache.component(&engine, "plugin", wasm, compile)?;
        let (_, again) = cache.component(&engine, "plugin", wasm, compile)?;
        assert_eq!((damaged, again), (Origin::Compiled, Origin::Cached));
        // Truncated to less than a tag.
        std::fs::write(&entry, [1, 2, 3])?;
        let (_, short) = cache.component(&engine, "plugin", wasm, compile)?;
        assert_eq!(short, Origin::Compiled);
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
