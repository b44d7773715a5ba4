//! The caller's credentials on an upstream's calls (`auth = "forward"`).
//!
//! An upstream's calls share one MCP session, whose requests rmcp numbers and
//! sends from a task of its own: a call cannot hand its transport a header.
//! Instead the call lends its token to the upstream's [`Credentials`] under a
//! random reference and names that reference in its request's `_meta`
//! ([`CREDENTIAL_META`]). The transport takes the reference out of the request
//! (the upstream never sees it), sends the token as the request's
//! `Authorization`, and turns a refusal of it (401, 403) into an answer to that
//! request alone ([`REFUSED_CODE`]), so the session serves on. The token is in
//! the map only while its call runs ([`Lent`]), and never in a request's body,
//! so a trace of rmcp's messages shows only the reference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientJsonRpcMessage, ClientRequest};

use crate::secret::Secret;

/// The `_meta` key of a call's credential reference.
pub const CREDENTIAL_META: &str = "codemode-host/credential";

/// The JSON-RPC error code of the answer made up for a request whose
/// credential the upstream refused (HTTP 401 or 403).
pub const REFUSED_CODE: i32 = -32_092;

/// The tokens lent by the calls under way, by reference.
#[derive(Default)]
pub struct Credentials {
    lent: Mutex<HashMap<String, Secret>>,
}

/// A token lent for one call: taken back when dropped (the call ended or was
/// abandoned).
pub struct Lent {
    credentials: Arc<Credentials>,
    /// What the call's `_meta` names.
    pub reference: String,
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.credentials.map().remove(&self.reference);
    }
}

impl Credentials {
    /// Lends `token` until the returned guard is dropped.
    pub fn lend(self: &Arc<Self>, token: Secret) -> Lent {
        let mut random = [0u8; 16];
        // Without randomness the reference is still unique: the map is checked.
        let _ = getrandom::fill(&mut random);
        let mut reference: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut map = self.map();
        while map.contains_key(&reference) {
            reference.push('0');
        }
        map.insert(reference.clone(), token);
        Lent {
            credentials: self.clone(),
            reference,
        }
    }

    /// Takes the credential reference out of `message` (a tool call's `_meta`);
    /// the token it names, if that call still runs. `None` for a message that
    /// names none.
    pub fn take(&self, message: &mut ClientJsonRpcMessage) -> Option<Option<Secret>> {
        let ClientJsonRpcMessage::Request(request) = message else {
            return None;
        };
        let ClientRequest::CallToolRequest(call) = &mut request.request else {
            return None;
        };
        let meta = call.params.meta.as_mut()?;
        let reference = meta.remove(CREDENTIAL_META)?;
        if meta.is_empty() {
            call.params.meta = None;
        }
        let token = reference
            .as_str()
            .and_then(|reference| self.map().get(reference).cloned());
        Some(token)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Secret>> {
        // A panic while holding it leaves at worst a token lent a little longer.
        self.lent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rmcp::model::{CallToolRequestParams, Request, RequestId, RequestMetaObject};

    fn call(meta: Option<RequestMetaObject>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("echo");
        params.meta = meta;
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(Request::new(params)),
            RequestId::Number(1),
        )
    }

    fn meta_of(message: &ClientJsonRpcMessage) -> Option<serde_json::Value> {
        let value = serde_json::to_value(message).ok()?;
        value["params"].get("_meta").cloned()
    }

    #[test]
    fn a_lent_token_is_taken_by_its_reference_which_never_goes_out() {
        let credentials = Arc::new(Credentials::default());
        let lent = credentials.lend(Secret::new("the-token"));
        let mut meta = RequestMetaObject::new();
        meta.set_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        meta.insert(CREDENTIAL_META.to_owned(), lent.reference.clone().into());
        let mut message = call(Some(meta));
        assert_eq!(
            credentials.take(&mut message),
            Some(Some(Secret::new("the-token")))
        );
        assert_eq!(
            meta_of(&message),
            Some(serde_json::json!({
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            }))
        );
        // A `_meta` holding only the reference goes out without `_meta`.
        let mut meta = RequestMetaObject::new();
        meta.insert(CREDENTIAL_META.to_owned(), lent.reference.clone().into());
        let mut message = call(Some(meta));
        assert!(credentials.take(&mut message).is_some());
        assert_eq!(meta_of(&message), None);
        // Once the call ended, its reference names nothing.
        let reference = lent.reference.clone();
        drop(lent);
        let mut meta = RequestMetaObject::new();
        meta.insert(CREDENTIAL_META.to_owned(), reference.into());
        assert_eq!(credentials.take(&mut call(Some(meta))), Some(None));
        // A call without a reference, and other messages, name none.
        assert_eq!(credentials.take(&mut call(None)), None);
        let mut ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(Default::default()),
            RequestId::Number(2),
        );
        assert_eq!(credentials.take(&mut ping), None);
    }

    #[test]
    fn references_are_distinct_and_tokens_are_taken_back() {
        let credentials = Arc::new(Credentials::default());
        let first = credentials.lend(Secret::new("a"));
        let second = credentials.lend(Secret::new("b"));
        assert_ne!(first.reference, second.reference);
        assert_eq!(first.reference.len(), 32);
        drop(first);
        drop(second);
        assert!(credentials.map().is_empty());
    }
}
