//! [`TokenExchange`]: the port a source calls to act for its caller at another
//! audience (RFC 8693); the host's OAuth client implements it.

use std::future::Future;
use std::pin::Pin;

use crate::secret::Secret;

/// What an exchange gives: a token for another audience, or why not (for the
/// log only; the caller is told the upstream refused its credentials).
pub type Exchanged<'a> = Pin<Box<dyn Future<Output = Result<Secret, String>> + Send + 'a>>;

/// Trades a caller's access token for one meant for `audience`.
pub trait TokenExchange: Send + Sync {
    /// A token for `audience` acting for the holder of `token`.
    fn exchange<'a>(&'a self, token: &'a Secret, audience: &'a str) -> Exchanged<'a>;
}
