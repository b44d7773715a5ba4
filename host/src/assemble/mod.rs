//! Assembly: the library's settings made from the parsed flags ([`Cli`](crate::cli::Cli)):
//! the authorizer, the HTTP listener, the audit log, the token exchange and the
//! budgets. Each file adds its part to `Cli` and reads its files (tokens,
//! policy modules, a client secret) within their bounds; what goes wrong is a
//! [`ConfigError`] naming the flag or the file.

mod access;
mod budgets;
mod error;
mod net;
#[cfg(test)]
mod tests;

pub use access::{compile_policy, read_tokens};
pub use error::ConfigError;
