//! End-to-end tests: the real `codemode-host` binary, the example plugins built by
//! `cargo xtask plugins`, and a real MCP client (the Python SDK, installed into a
//! local venv on first use).

mod loading;
mod stdio;
mod support;
