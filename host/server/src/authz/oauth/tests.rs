//! Token checks with keys made for the tests (no issuer is reached: the keys
//! are put in place as a fetch would).

use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;

use super::*;

/// A P-256 key made for these tests only, and its public half as a JWK.
const EC_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJUBii5zDaa5AsX57
i7fJmitoEYfC4nZzWtfUg/1L9EahRANCAATQrqiwFIB35CDdsb6a0MCUN/LZFJtc
um8za4lV3vQrZUqRi3KcZXDGW3PfpXa1osQnwYDB0w/SGbrVyCa0P0hm
-----END PRIVATE KEY-----
";
/// An Ed25519 key made for these tests only.
const ED_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIE0VGIVc/OLFxcPingQe+3ltitW/6EpaTlc0kBun+lAr
-----END PRIVATE KEY-----
";

const ISSUER: &str = "https://login.example.com";
const RESOURCE: &str = "https://mcp.example.com/mcp";

fn jwks() -> Vec<Jwk> {
    parse_jwks(&json!({"keys": [
        {"kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig", "alg": "ES256",
         "x": "0K6osBSAd-Qg3bG-mtDAlDfy2RSbXLpvM2uJVd70K2U",
         "y": "SpGLcpxlcMZbc9-ldrWixCfBgMHTD9IZutXIJrQ_SGY"},
        {"kty": "OKP", "crv": "Ed25519", "kid": "ed-1",
         "x": "TrkZ5d-wS2sSOLretKBvodbrKOTq1o4b0Z9Y8MoOlQU"},
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        {"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc",
         "x": "0K6osBSAd-Qg3bG-mtDAlDfy2RSbXLpvM2uJVd70K2U",
         "y": "SpGLcpxlcMZbc9-ldrWixCfBgMHTD9IZutXIJrQ_SGY"}
    ]}))
    .expect("a JWKS")
}

/// Issue 49, F11: a JWKS of tens of thousands of junk entries is not held;
/// only the first MAX_KEYS entries are looked at.
#[test]
fn a_huge_jwks_is_looked_at_only_as_far_as_its_first_keys() {
    let good = json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed-1",
        "x": "TrkZ5d-wS2sSOLretKBvodbrKOTq1o4b0Z9Y8MoOlQU"});
    let mut keys = vec![good.clone(); MAX_KEYS];
    keys.extend(std::iter::repeat_n(
        json!({"kty": "OKP", "crv": "Ed25519", "x": "AA"}),
        60_000,
    ));
    assert_eq!(
        parse_jwks(&json!({ "keys": keys })).map(|k| k.len()),
        Ok(MAX_KEYS)
    );
    // Past the first MAX_KEYS entries, even a good key is not looked at.
    let mut late = vec![json!("not a key"); MAX_KEYS];
    late.push(good);
    assert_eq!(parse_jwks(&json!({ "keys": late })).map(|k| k.len()), Ok(0));
}

fn verifier(required_scopes: &[&str]) -> Verifier {
    let verifier = Verifier::new(OAuthConfig {
        issuer: ISSUER.to_owned(),
        resource: RESOURCE.to_owned(),
        required_scopes: required_scopes.iter().map(|s| (*s).to_owned()).collect(),
        subject_claim: DEFAULT_SUBJECT_CLAIM.to_owned(),
        keys_refresh: DEFAULT_KEYS_REFRESH,
        leeway: DEFAULT_LEEWAY,
    })
    .expect("a verifier");
    verifier.preload(jwks());
    verifier
}

fn now() -> i64 {
    i64::try_from(jsonwebtoken::get_current_timestamp()).unwrap_or(i64::MAX)
}

fn claims() -> Value {
    json!({
        "iss": ISSUER, "aud": [RESOURCE, "other"], "sub": "ada",
        "exp": now() + 300, "iat": now(), "scope": "mcp:execute profile",
        "groups": ["admins"],
    })
}

fn signed(alg: Algorithm, kid: &str, claims: &Value) -> String {
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()),
        _ => EncodingKey::from_secret(b"secret"),
    }
    .expect("a key");
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    encode(&header, claims, &key).expect("signed")
}

fn verifier_with(required_scopes: &[&str]) -> Verifier {
    verifier(required_scopes)
}

fn verify(verifier: &Verifier, token: &str) -> Result<Subject, Rejection> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(verifier.verify(token))
}

fn invalid(reason: &str) -> Result<Subject, Rejection> {
    Err(Rejection::Invalid(reason.to_owned()))
}

#[test]
fn a_token_of_the_issuer_for_this_server_names_its_subject() {
    let verifier = verifier(&["mcp:execute"]);
    for (alg, kid) in [(Algorithm::ES256, "ec-1"), (Algorithm::EdDSA, "ed-1")] {
        let subject = verify(&verifier, &signed(alg, kid, &claims())).expect("accepted");
        assert_eq!(subject.id, "ada");
        assert_eq!(subject.scopes(), ["mcp:execute", "profile"]);
        assert_eq!(
            subject.claims().get("groups"),
            Some(&json!(["admins"])),
            "{alg:?}"
        );
    }
}

#[test]
fn every_failed_check_is_refused_with_its_reason() {
    let verifier = verifier(&["mcp:execute"]);
    let with = |key: &str, value: Value| {
        let mut claims = claims();
        claims[key] = value;
        claims
    };
    let es = |claims: &Value| signed(Algorithm::ES256, "ec-1", claims);
    assert_eq!(
        verify(
            &verifier,
            &es(&with("aud", json!("https://elsewhere.example.com/mcp")))
        ),
        invalid("the token's audience is not this server")
    );
    assert_eq!(
        verify(
            &verifier,
            &es(&with("iss", json!("https://other.example.com")))
        ),
        invalid("the token's issuer is not the configured one")
    );
    assert_eq!(
        verify(
            &verifier,
            &es(&with(
                "exp",
                json!(now() - DEFAULT_LEEWAY.as_secs() as i64 - 5)
            ))
        ),
        invalid("the token expired")
    );
    // Within the leeway: accepted.
    assert!(verify(&verifier, &es(&with("exp", json!(now() - 5)))).is_ok());
    assert_eq!(
        verify(
            &verifier,
            &es(&with(
                "nbf",
                json!(now() + DEFAULT_LEEWAY.as_secs() as i64 + 30)
            ))
        ),
        invalid("the token is not valid yet (nbf)")
    );
    let mut no_exp = claims();
    no_exp.as_object_mut().map(|c| c.remove("exp"));
    assert_eq!(
        verify(&verifier, &es(&no_exp)),
        invalid("the token lacks exp, iss or aud")
    );
    assert_eq!(
        verify(&verifier, &es(&with("sub", json!(7)))),
        invalid(
            "the token's claim `sub` is no subject ID (a string of 1 to 256 bytes, no spaces, control or invisible characters)"
        )
    );
    assert_eq!(
        verify(&verifier, &es(&with("sub", json!("ada lovelace")))),
        invalid(
            "the token's claim `sub` is no subject ID (a string of 1 to 256 bytes, no spaces, control or invisible characters)"
        )
    );
    // Issue 49, F9: an ID that would read as another in logs, audit lines and
    // questions (zero-width, bidirectional, tag characters).
    for hidden in [
        "ali\u{200B}ce",
        "\u{202E}ecila",
        "alice\u{E0041}",
        "al\u{FE0F}ice",
    ] {
        assert_eq!(
            verify(&verifier, &es(&with("sub", json!(hidden)))),
            invalid(
                "the token's claim `sub` is no subject ID (a string of 1 to 256 bytes, no spaces, control or invisible characters)"
            ),
            "{hidden:?}"
        );
    }
    assert_eq!(
        verify(&verifier, &es(&with("scope", json!("profile")))),
        Err(Rejection::InsufficientScope)
    );
    // A token signed by one key but naming another: the signature fails.
    let mut forged = signed(Algorithm::EdDSA, "ed-1", &claims());
    forged.push('A');
    assert_eq!(
        verify(&verifier, &forged),
        invalid("the signature does not verify")
    );
}

#[test]
fn none_hmac_and_a_key_of_another_type_are_never_accepted() {
    let verifier = verifier(&[]);
    let b64 = |v: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims())
    );
    assert_eq!(
        verify(&verifier, &none),
        invalid("not a JWT with a supported algorithm")
    );
    // HMAC with the JWKS's own `oct` key as the secret: refused by algorithm.
    assert_eq!(
        verify(&verifier, &signed(Algorithm::HS256, "hmac", &claims())),
        invalid("algorithm HS256 is not accepted (RS256, ES256, EdDSA)")
    );
    // An EdDSA token naming the EC key: no key of its type by that ID.
    // (Fetched just now: the unknown key does not make it fetch again.)
    let unknown = invalid("the token names a key the issuer does not publish");
    assert_eq!(
        verify(&verifier, &signed(Algorithm::EdDSA, "ec-1", &claims())),
        unknown
    );
    // The `enc` key is no signing key.
    assert_eq!(
        verify(&verifier, &signed(Algorithm::ES256, "enc", &claims())),
        unknown
    );
    let long = "a".repeat(MAX_TOKEN_BYTES + 1);
    assert_eq!(
        verify(&verifier, &long),
        invalid("the token is longer than 16384 bytes")
    );
}

#[test]
fn urls_and_challenges() {
    assert_eq!(
        resource_metadata_url("https://mcp.example.com/mcp"),
        "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        resource_metadata_url("http://127.0.0.1:8080/"),
        "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        metadata_urls("https://login.example.com/tenant"),
        [
            "https://login.example.com/.well-known/oauth-authorization-server/tenant",
            "https://login.example.com/tenant/.well-known/openid-configuration",
        ]
    );
    let verifier = verifier_with(&["mcp:execute", "mcp:read"]);
    assert_eq!(
        verifier.challenge(Some("invalid_token")),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", error=\"invalid_token\", scope=\"mcp:execute mcp:read\""
    );
    assert_eq!(
        verifier.resource_metadata(),
        json!({
            "resource": RESOURCE,
            "authorization_servers": [ISSUER],
            "scopes_supported": ["mcp:execute", "mcp:read"],
            "bearer_methods_supported": ["header"],
        })
    );
    for (url, reason) in [
        (
            "http://login.example.com",
            "must be https (http only on a loopback host)",
        ),
        ("login.example.com", "not an absolute URL"),
        (
            "https://login.example.com/?a=1",
            "must have no query and no fragment",
        ),
        (
            "https://u:p@login.example.com",
            "must not carry a user name or password",
        ),
        ("ftp://login.example.com", "must be an https URL"),
    ] {
        assert_eq!(
            check_url("--oauth-issuer", url).err().map(|e| e.reason),
            Some(reason),
            "{url}"
        );
    }
    assert!(check_url("--oauth-issuer", "http://127.0.0.1:4000").is_ok());
    assert!(is_scope_token("mcp:execute"));
    assert!(!is_scope_token("mcp execute"));
    assert!(!is_scope_token("say\"hi"));
    assert!(!is_scope_token(""));
    let none_required = verifier_with(&[]);
    assert_eq!(
        none_required.resource_metadata(),
        json!({
            "resource": RESOURCE,
            "authorization_servers": [ISSUER],
            "bearer_methods_supported": ["header"],
        })
    );
    assert_eq!(
        resource_metadata_url("https://mcp.example.com/mcp/"),
        "https://mcp.example.com/.well-known/oauth-protected-resource/mcp/"
    );
    assert!(check_url("--resource-url", "https://mcp.example.com/mcp").is_ok());
}
