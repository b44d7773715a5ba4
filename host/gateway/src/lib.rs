//! codemode-gateway: the capability sources that speak to other servers.
//!
//! What it owns: upstream MCP servers as capabilities ([`upstream`]: each tool
//! of a server on stdio or Streamable HTTP is a capability), services described
//! by OpenAPI ([`openapi`]: each operation is one), and the JSON both speak
//! ([`json`]: JSON Schema as shapes, JSON values as the program's). Each is an
//! adapter of the capability-source port (`codemode_core::source`): a provider
//! the host's registry starts, and sources whose calls the executor binds,
//! authorizes, audits and budgets as every other's. No wasmtime, no Rego, and
//! nothing of the MCP server side.
//!
//! What it may import: `codemode-core` (the port, the catalog, the fixed texts)
//! and `codemode-runtime` (processes, TLS, waits, metrics), and no other crate
//! of the workspace.

pub mod json;
pub mod openapi;
pub mod upstream;

// The core and runtime modules, under the paths the sources were written with.
pub(crate) use codemode_core::{budget, catalog, error, secret, source};
pub(crate) use codemode_runtime::{children, files, metrics, tls, url, wait};
