//! [`Subject`]: who a request acts for, with what its access token says.

use std::sync::Arc;

use crate::secret::Secret;

/// Who a request acts for: a stable, non-secret identifier. An empty one is
/// unauthenticated: nothing runs for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The identifier.
    pub id: String,
    /// What its access token says (its claims and scopes), shared by clones;
    /// `None` for a subject of a tokens file or the fixed one.
    token: Option<Arc<TokenClaims>>,
}

/// The claims of a subject's access token, and its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TokenClaims {
    claims: serde_json::Map<String, serde_json::Value>,
    scopes: Vec<String>,
    /// SHA-256 of the claims (as JSON) and the scopes: [`Subject::digest`].
    digest: [u8; 32],
    /// The access token itself, for an upstream that acts for the subject
    /// (`auth = "forward"`, `"token-exchange"`); never logged.
    access_token: Option<Secret>,
}

/// No claims: what a subject without an access token has.
static NO_CLAIMS: std::sync::LazyLock<serde_json::Map<String, serde_json::Value>> =
    std::sync::LazyLock::new(serde_json::Map::new);

impl Subject {
    /// The subject `id`.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            token: None,
        }
    }

    /// The subject `id` of an access token with `claims` and `scopes`.
    pub fn with_claims(
        id: impl Into<String>,
        claims: serde_json::Map<String, serde_json::Value>,
        scopes: Vec<String>,
    ) -> Self {
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        // Serializing a map of JSON values cannot fail.
        hasher.update(serde_json::to_vec(&claims).unwrap_or_default());
        for scope in &scopes {
            // A scope has no spaces (RFC 6749): one separates them unambiguously.
            hasher.update(b" ");
            hasher.update(scope.as_bytes());
        }
        let digest = hasher.finalize().into();
        Self {
            id: id.into(),
            token: Some(Arc::new(TokenClaims {
                claims,
                scopes,
                digest,
                access_token: None,
            })),
        }
    }

    /// This subject of an access token, carrying `token` itself, so that an
    /// upstream can act for it. A subject without claims stays without a token.
    pub fn with_access_token(mut self, token: Secret) -> Self {
        if let Some(claims) = self.token.as_mut() {
            Arc::make_mut(claims).access_token = Some(token);
        }
        self
    }

    /// Whom what it keeps belongs to (the state capabilities' values): its ID,
    /// after its token's issuer (`iss`) and a space when the token names one,
    /// so that one name given by two issuers is two owners.
    pub fn owner(&self) -> String {
        match self.issuer() {
            Some(issuer) => format!("{issuer} {}", self.id),
            None => self.id.clone(),
        }
    }

    /// Its token's issuer (`iss`), when it came with a token that names one.
    pub fn issuer(&self) -> Option<&str> {
        self.token
            .as_ref()
            .and_then(|token| token.claims.get("iss"))
            .and_then(serde_json::Value::as_str)
    }

    /// The access token it came with, when it came with one.
    pub fn access_token(&self) -> Option<&Secret> {
        self.token
            .as_ref()
            .and_then(|token| token.access_token.as_ref())
    }

    /// What tells apart two subjects of the same ID: a digest of the claims and
    /// scopes of its access token (`None` without one). A decision reads only
    /// the ID, the claims and the scopes, so subjects equal in both are decided
    /// alike.
    pub fn digest(&self) -> Option<[u8; 32]> {
        self.token.as_ref().map(|token| token.digest)
    }

    /// Its access token's claims (empty without one).
    pub fn claims(&self) -> &serde_json::Map<String, serde_json::Value> {
        self.token
            .as_ref()
            .map_or(&NO_CLAIMS, |token| &token.claims)
    }

    /// Its access token's scopes (none without one).
    pub fn scopes(&self) -> &[String] {
        self.token.as_ref().map_or(&[], |token| &token.scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issuer_keeps_its_subjects_apart_from_another_s() {
        let claims = |issuer: &str| {
            let mut claims = serde_json::Map::new();
            claims.insert("iss".to_owned(), issuer.into());
            claims.insert("sub".to_owned(), "admin".into());
            claims
        };
        let one = Subject::with_claims("admin", claims("https://one.example"), Vec::new());
        let two = Subject::with_claims("admin", claims("https://two.example"), Vec::new());
        assert_eq!(one.owner(), "https://one.example admin");
        assert_eq!(two.owner(), "https://two.example admin");
        assert_eq!(Subject::new("admin").owner(), "admin");
        assert_eq!(
            Subject::with_claims("admin", serde_json::Map::new(), Vec::new()).owner(),
            "admin"
        );
    }
}
