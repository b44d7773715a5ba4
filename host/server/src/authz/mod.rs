//! Who may call what: the subject of a request and the [`Authorizer`] port every
//! native call passes after binding and before the plugin runs.
//!
//! The port knows nothing of MCP, wasmtime or Rego; adapters implement the trait:
//! [`AllowAll`] in `port.rs` (beside the port and the [`Subject`] of `subject.rs`, which every adapter reads, so they import no adapter), [`RegoAuthorizer`] in [`rego`].
//!
//! The OAuth resource server (`oauth`) and token exchange (`exchange`) are the
//! feature `oauth`; without it [`Verifier`] is `no_oauth.rs`'s, which has no
//! values.

/// What a capability's source says of its effects, as policies read it.
pub use crate::catalog::Annotations;

mod bearer;
mod bounded;
#[cfg(feature = "oauth")]
pub mod exchange;
#[cfg(not(feature = "oauth"))]
mod no_oauth;
#[cfg(feature = "oauth")]
pub mod oauth;
mod port;
pub mod rego;
mod subject;
pub mod tokens;

pub use bearer::{PROTECTED_RESOURCE_PATH, Rejection};
#[cfg(not(feature = "oauth"))]
pub use no_oauth::Verifier;
#[cfg(feature = "oauth")]
pub use oauth::Verifier;
pub use port::{
    AllowAll, AuthorizationInput, Authorizer, AuthzError, MAX_QUESTION_BYTES, Replaceable, Verdict,
};
pub use rego::{DEFAULT_DECISION, RegoAuthorizer, RegoError};
pub use subject::Subject;
pub use tokens::{Tokens, TokensError, token_hash};
