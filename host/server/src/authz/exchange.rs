//! Token exchange (RFC 8693): a caller's access token traded at the issuer
//! for one meant for another audience, so that an upstream (`auth =
//! "token-exchange"`) sees the caller, and accepts a token made for it alone.
//!
//! [`TokenExchange`] is the port an upstream calls; [`Exchanger`] the adapter
//! that asks the `--oauth-issuer`'s token endpoint with this server's own client
//! credentials (`--oauth-client-id`, `--oauth-client-secret-file`, HTTP Basic).
//! Each exchanged token is remembered per caller token and audience until
//! [`EXPIRY_MARGIN`] before it expires, so a program calling an upstream many
//! times exchanges once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::Digest as _;

use super::oauth::{FETCH_TIMEOUT, Verifier, read_body};
use crate::secret::Secret;

/// `grant_type` of a token exchange.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// `subject_token_type` (and the `requested_token_type`): an access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// How long before its expiry an exchanged token is exchanged anew: a call must
/// not reach the upstream with a token that expires on the way.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// How long an exchanged token without `expires_in` is used.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);

/// The longest an exchanged token is used, whatever its `expires_in` says.
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Most exchanged tokens remembered; past it, the expired ones go, then the
/// one that expires first.
pub const MAX_REMEMBERED: usize = 4096;

pub use codemode_core::exchange::{Exchanged, TokenExchange};

/// The host's own client at the issuer, for token exchange.
#[derive(Clone)]
pub struct ClientCredentials {
    /// `--oauth-client-id`.
    pub id: String,
    /// The contents of `--oauth-client-secret-file`.
    pub secret: Secret,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Exchanged tokens by (SHA-256 of the caller's token, audience), with when
/// they stop being used.
type Remembered = HashMap<([u8; 32], String), (Secret, Instant)>;

/// Exchanges tokens at the issuer `verifier` trusts.
pub struct Exchanger {
    verifier: Arc<Verifier>,
    client: ClientCredentials,
    /// Exchanged tokens by (SHA-256 of the caller's token, audience), with
    /// when they stop being used.
    remembered: Mutex<Remembered>,
}

impl Exchanger {
    /// Exchanges at `verifier`'s issuer as `client`.
    ///
    /// It reaches the issuer with `verifier`'s own HTTP client.
    pub fn new(verifier: Arc<Verifier>, client: ClientCredentials) -> Self {
        Self {
            verifier,
            client,
            remembered: Mutex::new(HashMap::new()),
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // A panic while holding it leaves at worst a token exchanged again.
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the token endpoint; the token and how long it may be used.
    async fn ask(&self, token: &Secret, audience: &str) -> Result<(Secret, Duration), String> {
        let endpoint = self.verifier.token_endpoint().await?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", GRANT_TYPE)
            .append_pair("subject_token", token.expose())
            .append_pair("subject_token_type", ACCESS_TOKEN_TYPE)
            .append_pair("requested_token_type", ACCESS_TOKEN_TYPE)
            .append_pair("audience", audience)
            .finish();
        // RFC 6749 §2.3.1: the ID and secret are form-encoded before Basic.
        let encode = |value: &str| {
            url::form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>()
        };
        let work = async {
            let response = self
                .verifier
                .http()
                .post(&endpoint)
                .basic_auth(
                    encode(&self.client.id),
                    Some(encode(self.client.secret.expose())),
                )
                .header("content-type", "application/x-www-form-urlencoded")
                .header("accept", "application/json")
                .body(body)
                .send()
                .await
                .map_err(|error| format!("{endpoint}: {}", error.without_url()))?;
            let status = response.status();
            let read = read_body(response, &endpoint).await?;
            let answer: Value = serde_json::from_slice(&read).unwrap_or(Value::Null);
            if !status.is_success() {
                // Only the error code: a description is the issuer's text.
                let code = answer
                    .get("error")
                    .and_then(Value::as_str)
                    .filter(|code| code.bytes().all(|b| b.is_ascii_graphic()) && code.len() <= 64)
                    .unwrap_or("no error code");
                return Err(format!("{endpoint}: HTTP {}: {code}", status.as_u16()));
            }
            parse(&answer).map_err(|reason| format!("{endpoint}: {reason}"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "{endpoint}: no answer within {} s",
                    FETCH_TIMEOUT.as_secs()
                ))
            })
    }
}

/// A token exchange's successful answer: the token and how long it lives.
fn parse(answer: &Value) -> Result<(Secret, Duration), String> {
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .ok_or("the answer has no access_token")?;
    match answer.get("token_type").and_then(Value::as_str) {
        Some(kind) if kind.eq_ignore_ascii_case("bearer") => {}
        _ => return Err("the answer's token_type is not Bearer".to_owned()),
    }
    let lifetime = answer
        .get("expires_in")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_LIFETIME, |seconds| {
            Duration::from_secs(seconds.min(MAX_LIFETIME.as_secs()))
        });
    Ok((Secret::new(token), lifetime))
}

impl TokenExchange for Exchanger {
    fn exchange<'a>(&'a self, token: &'a Secret, audience: &'a str) -> Exchanged<'a> {
        Box::pin(async move {
            let key = (
                sha2::Sha256::digest(token.expose().as_bytes()).into(),
                audience.to_owned(),
            );
            let now = Instant::now();
            if let Some((exchanged, until)) = self.remembered().get(&key)
                && *until > now
            {
                return Ok(exchanged.clone());
            }
            let (exchanged, lifetime) = self.ask(token, audience).await?;
            let until = Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN);
            let mut remembered = self.remembered();
            if remembered.len() >= MAX_REMEMBERED {
                let now = Instant::now();
                remembered.retain(|_, (_, until)| *until > now);
            }
            if remembered.len() >= MAX_REMEMBERED
                && let Some(first) = remembered
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(key, _)| key.clone())
            {
                remembered.remove(&first);
            }
            remembered.insert(key, (exchanged.clone(), until));
            Ok(exchanged)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_needs_a_bearer_access_token() {
        let parsed = |answer: Value| parse(&answer);
        assert_eq!(
            parsed(
                serde_json::json!({"access_token": "t", "token_type": "Bearer", "expires_in": 300})
            ),
            Ok((Secret::new("t"), Duration::from_secs(300)))
        );
        assert_eq!(
            parsed(serde_json::json!({"access_token": "t", "token_type": "bearer"})),
            Ok((Secret::new("t"), DEFAULT_LIFETIME))
        );
        assert_eq!(
            parsed(
                serde_json::json!({"access_token": "t", "token_type": "Bearer", "expires_in": u64::MAX})
            ),
            Ok((Secret::new("t"), MAX_LIFETIME))
        );
        assert_eq!(
            parsed(serde_json::json!({"token_type": "Bearer"})),
            Err("the answer has no access_token".to_owned())
        );
        assert_eq!(
            parsed(serde_json::json!({"access_token": "t", "token_type": "DPoP"})),
            Err("the answer's token_type is not Bearer".to_owned())
        );
    }
}
