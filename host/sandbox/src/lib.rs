//! codemode-sandbox: WebAssembly plugins as a capability source, in sandboxes.
//!
//! What it owns: the plugins folder and each plugin's loading, reflection,
//! grants, compilation (in a child process) and per-execution instances
//! ([`plugins`]); the signed cache of compiled components ([`cache`]); plugins
//! pulled from OCI registries and verified ([`oci`]); the epoch callback every
//! store gets, which stops a sandbox at its deadline or cancellation ([`wait`]).
//! wasmtime lives here and in the host's executor, nowhere else.
//!
//! What it may import: `codemode-core` (the port, the catalog, the fixed texts),
//! `codemode-runtime` (processes, files, waits, memory, metrics), `codemode-oci`
//! (references, manifests, signatures), `codemode-value` and
//! `codemode-wit-docs`, and no other crate of the workspace.

pub mod cache;
pub mod oci;
pub mod plugins;
pub mod wait;

// The core and runtime modules, under the paths the sandbox was written with.
pub(crate) use codemode_core::{budget, catalog, error, source};
pub(crate) use codemode_runtime::{children, files, memory, metrics, units, worker};
