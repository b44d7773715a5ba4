//! End-to-end tests: the real `codemode-host` binary, the example plugins built by
//! `cargo xtask plugins`, and a real MCP client (the Python SDK, installed into a
//! local venv on first use).

// A failed expectation in a test helper is a test failure; panicking with the message
// is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod approval;
mod authorize;
mod canary;
mod compile;
mod concurrency;
mod config;
mod conformance;
mod deploy;
mod execute;
mod grants;
mod hostile;
mod http;
mod isolation;
mod limits;
mod loading;
mod oauth;
mod openapi;
mod policy;
mod polyglot;
mod precompile;
mod probe;
mod progress;
mod provider;
mod quota;
mod registry;
mod registry_hostile;
mod reload;
mod scaffold;
mod secrets;
mod state;
mod stdio;
mod support;
mod tasks;
mod traces;
mod upstream;
mod waits;
