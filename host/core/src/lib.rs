//! codemode-core: what a capability is, independent of where it runs.
//!
//! What it owns: the [`catalog`] (a capability as its source declares it, checked
//! into a `Capability`; names and stable IDs; shapes and their notation; binding a
//! program's arguments with the contract's diagnostics; search, describe and the
//! suggestions for an unknown name), the [`budget`]s one value may spend, every
//! [`error`] a model can see with its fixed texts, and the
//! capability-source port ([`source`]: what serves capabilities to the executor,
//! with what it deals in: a [`secret`] credential, the [`cancel`] flag of a
//! request, the [`exchange`] of a caller's token). Pure data, functions and
//! traits: no I/O, no threads, no wasmtime, MCP or Rego (tokio only for the
//! cancel flag's wake-up).
//!
//! What it may import: `codemode-value` (the values programs and capabilities
//! exchange), and no other crate of the workspace. The host's sources (plugins,
//! upstream MCP servers, OpenAPI services), its executor and a library user's own
//! sources build on it.

pub mod budget;
pub mod cancel;
pub mod catalog;
pub mod error;
pub mod exchange;
pub mod secret;
pub mod source;
