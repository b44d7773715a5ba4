//! codemode-core: what a capability is, independent of where it runs.
//!
//! What it owns: the [`catalog`] (a capability as its source declares it, checked
//! into a `Capability`; names and stable IDs; shapes and their notation; binding a
//! program's arguments with the contract's diagnostics; search, describe and the
//! suggestions for an unknown name) and the [`budget`]s one value may spend. Pure
//! data and functions: no I/O, no threads, no wasmtime, MCP or Rego.
//!
//! What it may import: `codemode-value` (the values programs and capabilities
//! exchange), and no other crate of the workspace. The host's sources (plugins,
//! upstream MCP servers) and its executor build on it.

pub mod budget;
pub mod catalog;
