//! The OAuth resource server in a build without the feature `oauth`: no
//! [`Verifier`] can be made (it has no values), so the HTTP layer's OAuth paths
//! are never taken and bearer tokens are looked up in the tokens file alone.
//! The methods are the real verifier's that the HTTP layer calls, each
//! unreachable by construction.

use serde_json::Value;

use super::bearer::Rejection;
use super::subject::Subject;

/// The OAuth resource server, absent from this build. Not to be matched on or
/// named by its kind: with the feature `oauth` (which another crate of the same
/// build may turn on) it is the real verifier, a struct.
#[derive(Debug)]
pub enum Verifier {}

impl Verifier {
    /// See the real verifier's.
    #[allow(clippy::unused_async)] // the real one's signature
    pub async fn verify(&self, _token: &str) -> Result<Subject, Rejection> {
        match *self {}
    }

    /// See the real verifier's.
    pub fn resource(&self) -> &str {
        match *self {}
    }

    /// See the real verifier's.
    pub fn resource_metadata(&self) -> Value {
        match *self {}
    }

    /// See the real verifier's.
    pub fn challenge(&self, _error: Option<&str>) -> String {
        match *self {}
    }
}
