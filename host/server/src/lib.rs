//! codemode-server: the codemode-host server as a library, an MCP server for
//! "code mode".
//!
//! Instead of one tool per capability, an agent gets three: `search_api` (ranked
//! discovery), `describe_api` (exact signature and field shapes) and `execute` (one
//! Starlark program calling many capabilities). Capabilities ship as WebAssembly
//! components dropped in a folder; their WIT types are their signatures.
//!
//! It is what the `codemode-host` binary (the package `codemode-host` in `host/`:
//! flags, files, wiring) is built from, and what a program embedding the server
//! uses: [`Service`] (search,
//! describe, execute, reload) with its [`ServiceConfig`] and [`Limits`];
//! [`ToolError`], every error a model can see; the [`authz`] port ([`Authorizer`],
//! with the Rego and allow-all adapters and bearer [`Tokens`]); the [`mcp`] adapter
//! (stdio and Streamable HTTP); [`watch`], which reloads a service when its plugins
//! folder changes; [`audit`], the log of native calls; [`oci`], plugins pulled
//! from OCI registries and verified; and [`units`], how sizes and durations are
//! written.
//!
//! It imports the crates of the layers below it (core, runtime, sandbox, gateway,
//! the registry client) and none above. Inside, layers point one way
//! (docs/architecture.md): the catalog (names, shapes,
//! binding, search; no wasmtime, MCP or Rego) ← capability sources (WebAssembly
//! plugins, behind the crate's capability-source port) ← execute (the sandboxed
//! interpreter, the ledger, dispatch) ← the service ← the adapters.
//!
//! [`Authorizer`]: authz::Authorizer
//! [`Tokens`]: authz::Tokens

#[cfg(test)]
mod architecture;
pub mod audit;
pub mod authz;
mod check;
pub mod children;
mod execute;
pub mod files;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod hidden;
pub mod mcp;
pub mod memory;
mod precompile;
pub mod quota;
mod registry;
mod service;
pub mod state;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod units;
pub mod watch;

// The catalog and the budgets are the core crate's (docs/architecture.md): used
// here under their old paths, `crate::catalog` and `crate::budget`.
/// The capability-source port (the core crate's): what a source of capabilities
/// implements to serve the executor.
pub use codemode_core::source;
pub(crate) use codemode_core::{budget, catalog, error, secret};
// Processes, files, TLS, waits, memory and metrics are the runtime crate's:
// used here under their old paths.
pub(crate) use codemode_runtime::{metrics, worker};
// The HTTP clients of the OAuth resource server and of the OTLP exporter.
#[cfg(any(feature = "oauth", feature = "otel"))]
pub(crate) use codemode_runtime::tls;
// The WebAssembly sandboxes, the plugins and their cache are the sandbox crate's.
pub use codemode_sandbox::oci;
pub(crate) use codemode_sandbox::{cache, plugins, wait};
// The sources that speak to other servers are the gateway crate's.
pub(crate) use codemode_gateway::{json, openapi, upstream};

pub use cache::default_cache_dir;
pub use catalog::{Description, FieldShape, SearchResponse, SearchResult};
pub use check::{Checked, check_plugin};
pub use error::ToolError;
pub use execute::{
    Executed, Execution, FailedCall, LimitError, Limits, Retuned, RunnerError, Stats,
};
pub use openapi::{OpenApiAuth, OpenApiConfig, SpecLocation};
pub use plugins::{
    COMPILE_COMMAND, COMPILE_MEMORY_ARG, Compiler, DEFAULT_COMPILE_MEMORY, LoadError, LoadLimits,
    Reloaded, TypeError, compile_child,
};
pub use precompile::{Precompiled, precompile};
pub use service::{
    ConfigFile, DEFAULT_STARTUP_WAIT, LOCAL_SUBJECT, Service, ServiceConfig, StartError,
    UpstreamChanges,
};
pub use source::Skipped;
pub use upstream::{
    Secret, UpstreamAuth, UpstreamConfig, UpstreamGate, UpstreamTransport,
    check_name as check_upstream_name,
};
