//! Plugins: WebAssembly components loaded from a folder, reflected into capability
//! specs, and (later) instantiated to serve calls.
//!
//! This is the only module that knows wasmtime. It hands the catalog plain
//! [`CapabilitySpec`](crate::catalog::CapabilitySpec)s and keeps, per capability, which
//! plugin export serves it.

mod folder;
mod grants;
mod invoke;
mod load;
mod metadata;
mod reflect;
mod sandbox;

pub use grants::{DirGrant, Grants, HostPattern};
pub use load::LoadError;
pub use reflect::TypeError;

pub(crate) use folder::PluginFolder;
pub(crate) use grants::SIDECAR_EXTENSION;
pub(crate) use invoke::{BindError, CallTarget, OutputError, bind, canonical, output};
pub(crate) use load::{LoadedPlugin, PLUGIN_PREFIX, file_label, load_file};
pub(crate) use sandbox::{MemoryCap, PluginState, Unprovided, engine};

use std::path::{Path, PathBuf};

/// The `.wasm` files directly in `dir`, sorted by file name (so load order, and with
/// it which of two conflicting plugins wins, is deterministic).
///
/// # Errors
///
/// When `dir` cannot be listed.
pub(crate) fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}
