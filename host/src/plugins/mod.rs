//! Plugins: WebAssembly components loaded from a folder, reflected into capability
//! specs, and (later) instantiated to serve calls.
//!
//! This is the only module that knows wasmtime. It hands the catalog plain
//! [`CapabilitySpec`](crate::catalog::CapabilitySpec)s and keeps, per capability, which
//! plugin export serves it.

mod compile;
mod docs;
mod folder;
mod grants;
mod invoke;
mod load;
mod metadata;
mod output;
mod provider;
mod reflect;
mod reset_check;
mod sandbox;
mod session;
mod spare;
mod wire;

pub use compile::{
    COMPILE_COMMAND, COMPILE_MEMORY_ARG, Compiler, DEFAULT_COMPILE_MEMORY, compile_child,
};
pub use load::{LoadError, LoadLimits};
pub use reflect::TypeError;

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use docs::{probe as docs_probe, read as docs_read};
pub(crate) use folder::PluginFolder;
pub(crate) use grants::{GlobalCaps, SIDECAR_EXTENSION};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use grants::{Grants, HostPattern};
pub(crate) use load::{PLUGIN_PREFIX, load_file};
pub use provider::Reloaded;
pub(crate) use provider::{PluginsProvider, ReloadError};
pub(crate) use sandbox::{MemoryCap, MemoryHit, engine, pool_instances};

use std::path::{Path, PathBuf};

/// The `.wasm` entries directly in `dir` that are not folders, sorted by file name
/// (so load order, and with it which of two conflicting plugins wins, is
/// deterministic). Entries that are not regular files (a FIFO, a socket, a device)
/// are listed too, so that loading skips them with the reason.
///
/// # Errors
///
/// When `dir` cannot be listed.
pub(crate) fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// The name a plugin is known by in messages: its file name. Here, not in a file
/// of its own folder's, because loading, grants and the folder all name plugins.
pub(crate) fn file_label(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
