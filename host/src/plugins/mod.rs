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
mod listing;
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
pub(crate) use listing::{file_label, plugin_files};
pub(crate) use load::{PLUGIN_PREFIX, load_file};
pub use provider::Reloaded;
pub(crate) use provider::{PluginsProvider, ReloadError};
pub(crate) use sandbox::{MemoryCap, MemoryHit, engine, pool_instances};
