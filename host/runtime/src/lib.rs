//! codemode-runtime: what the host's capability sources and its server share at
//! run time.
//!
//! What it owns: child processes that die with the server ([`children`]), files
//! read within their bounds ([`files`]), the TLS of the server's HTTP clients
//! ([`tls`]) and the URLs they may reach with a credential ([`url`]), bounded
//! waits for work outside WebAssembly and the runtimes behind them ([`wait`]),
//! the process-wide memory of the sandboxes ([`memory`]), the server's
//! metrics ([`metrics`]), how sizes and durations are written ([`units`]) and a
//! thread for work done after an answer ([`worker`]). No wasmtime, MCP or Rego.
//!
//! What it may import: `codemode-core` (the fixed texts the metrics label, the
//! cancel flag waits notice), and no other crate of the workspace.

pub mod children;
pub mod files;
pub mod memory;
pub mod metrics;
pub mod tls;
pub mod units;
pub mod url;
pub mod wait;
pub mod worker;

// The fixed texts, as `crate::error` in the modules moved here from the host.
pub(crate) use codemode_core::error;
