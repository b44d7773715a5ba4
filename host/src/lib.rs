//! codemode-host: an MCP server for "code mode".
//!
//! Instead of one tool per capability, an agent gets three: `search_api` (ranked
//! discovery), `describe_api` (exact signature and field shapes) and `execute` (one
//! Starlark program calling many capabilities). Capabilities ship as WebAssembly
//! components dropped in a folder; their WIT types are their signatures.
//!
//! The crate is split by job: [`catalog`] validates and searches capabilities and
//! knows nothing of wasmtime or MCP; `plugins` loads and calls components;
//! [`execute`] runs programs in the sandboxed interpreter under one budget;
//! [`authz`] decides which native calls may run and [`audit`] records them; [`Service`] offers
//! the operations and [`watch`] reloads it when the plugins folder changes; [`mcp`] is a thin rmcp adapter over it; [`error`] holds every text
//! a model can see. The `codemode-host` binary parses flags and wires these together.

pub mod audit;
pub mod authz;
mod budget;
pub mod cache;
pub mod catalog;
pub mod cli;
pub mod error;
pub mod execute;
pub mod mcp;
pub mod metrics;
mod plugins;
mod service;
mod source;
mod units;
mod wait;
pub mod watch;

pub use error::ToolError;
pub use plugins::{DirGrant, FileError, Grants, HostPattern, LoadError, LoadLimits, TypeError};
pub use service::{
    LOCAL_SUBJECT, Precompiled, Reloaded, Service, ServiceConfig, StartError, precompile,
};
