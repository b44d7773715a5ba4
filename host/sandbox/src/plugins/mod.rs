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

// The fuzz targets' entries (the host's `fuzzing`), always built: one feature set.
#[doc(hidden)]
pub use docs::{probe as docs_probe, read as docs_read};
pub use folder::PluginFolder;
pub use grants::{GlobalCaps, SIDECAR_EXTENSION};
pub use grants::{Grants, HostPattern};
pub use listing::{file_label, plugin_files};
pub use load::{PLUGIN_PREFIX, load_file};
pub use provider::Reloaded;
pub use provider::{PluginsProvider, ReloadError};
pub use sandbox::{MemoryCap, MemoryHit, engine, pool_instances};
#[doc(hidden)]
pub use session::full_pool_error;
