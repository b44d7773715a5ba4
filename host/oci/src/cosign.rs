//! cosign's key signatures: where a registry keeps them and what makes one valid.
//!
//! `cosign sign --key` stores, for an artifact of digest `sha256:<hex>`, a
//! manifest under the tag `sha256-<hex>.sig` (or, with OCI 1.1 referrers, a
//! manifest whose `subject` is the artifact) whose layers are "simple signing"
//! payloads: JSON naming the signed manifest's digest under
//! `critical.image.docker-manifest-digest`, with the signature of those exact
//! bytes, base64, in the layer's annotation [`SIGNATURE_ANNOTATION`]. A signature
//! is valid when a trusted key verifies it over the payload's bytes and the payload
//! names the digest that was pulled (a signature of another artifact replayed
//! under this one's tag names that other digest).
//!
//! The check is behind [`Verifier`], so that a keyless verifier (Fulcio
//! certificates, Rekor bundles) can be added beside [`KeyVerifier`].

use std::fmt;

use serde::Deserialize;

use crate::keys::PublicKey;
use crate::reference::Digest;

/// The media type of a signature layer.
pub const SIGNATURE_LAYER: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The artifact type of a signature manifest found through the referrers API.
pub const SIGNATURE_ARTIFACT: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";
/// The `critical.type` of a simple signing payload.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The tag cosign keeps the signatures of `digest` under.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

/// Where a signature was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Under cosign's `sha256-<hex>.sig` tag.
    Tag,
    /// Through the OCI 1.1 referrers API.
    Referrers,
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tag => "cosign tag",
            Self::Referrers => "referrers",
        })
    }
}

/// A signature as a registry holds it: a payload's bytes and the signature of
/// them (decoded from base64).
#[derive(Debug, Clone)]
pub struct Found {
    /// The simple signing payload, exactly as stored.
    pub payload: Vec<u8>,
    /// The signature of `payload`.
    pub signature: Vec<u8>,
    /// Where it was.
    pub via: Via,
}

/// A digest that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The ID of the key whose signature verified ([`PublicKey::id`]).
    pub key_id: String,
    /// Where that signature was found.
    pub via: Via,
}

/// Why a digest did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// No signature in either place.
    #[error("it is not signed: no signature under the tag {tag} nor through the referrers API")]
    Unsigned {
        /// The tag looked under.
        tag: String,
    },
    /// No key to check with (`warn` without keys).
    #[error("no keys are configured to check its signatures with")]
    NoKeys,
    /// Signatures, but none by a trusted key.
    #[error("none of its {count} signature(s) is by a trusted key ({keys})")]
    UnknownKey {
        /// How many signatures were found.
        count: usize,
        /// The trusted keys' IDs, comma-separated.
        keys: String,
    },
    /// A trusted key signed, but a payload naming another digest.
    #[error("its signature by key {key_id} is of another artifact ({signed}), not of {pulled}")]
    OtherDigest {
        /// The key that signed.
        key_id: String,
        /// What the payload names.
        signed: String,
        /// What was pulled.
        pulled: String,
    },
}

/// Decides whether signatures found for a digest make it trusted.
pub trait Verifier: Send + Sync + fmt::Debug {
    /// The first signature in `found` that makes `digest` trusted, else why none
    /// does.
    ///
    /// # Errors
    ///
    /// See [`Unverified`].
    fn verify(&self, digest: &Digest, found: &[Found]) -> Result<Verified, Unverified>;
}

/// Trusts signatures made by any of a set of keys (several during a rotation).
#[derive(Debug, Clone)]
pub struct KeyVerifier {
    keys: Vec<PublicKey>,
}

impl KeyVerifier {
    /// A verifier trusting `keys`.
    pub fn new(keys: Vec<PublicKey>) -> Self {
        Self { keys }
    }

    /// The trusted keys.
    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

impl Verifier for KeyVerifier {
    fn verify(&self, digest: &Digest, found: &[Found]) -> Result<Verified, Unverified> {
        if found.is_empty() {
            return Err(Unverified::Unsigned {
                tag: signature_tag(digest),
            });
        }
        let mut other = None;
        for signature in found {
            let Some(key) = self
                .keys
                .iter()
                .find(|key| key.verifies(&signature.payload, &signature.signature))
            else {
                continue;
            };
            // Only a payload a trusted key signed is read at all.
            let signed = serde_json::from_slice::<Payload>(&signature.payload)
                .map(|payload| payload.critical.image.digest)
                .unwrap_or_default();
            if signed == digest.as_str() {
                return Ok(Verified {
                    key_id: key.id().to_owned(),
                    via: signature.via,
                });
            }
            other.get_or_insert(Unverified::OtherDigest {
                key_id: key.id().to_owned(),
                signed: crate::artifact::printable(&signed),
                pulled: digest.to_string(),
            });
        }
        Err(other.unwrap_or_else(|| Unverified::UnknownKey {
            count: found.len(),
            keys: self
                .keys
                .iter()
                .map(PublicKey::id)
                .collect::<Vec<_>>()
                .join(", "),
        }))
    }
}

/// The simple signing payload cosign signs for `digest` of `repository` (as
/// `registry/namespace/name`), byte for byte as cosign writes it.
pub fn payload(repository: &str, digest: &Digest) -> Vec<u8> {
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest.as_str()},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&payload).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    /// A signature cosign made (published with sigstore-rs's tests): the key, the
    /// signature and the payload it signed.
    const COSIGN_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----";
    const COSIGN_SIGNATURE: &str = "MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8=";
    const COSIGN_REPOSITORY: &str = "registry-testing.svc.lan/busybox";
    const COSIGN_DIGEST: &str =
        "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";
    /// Another P-256 key.
    const OTHER_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAETJP9cqpUQsn2ggmJniWGjHdlsHzD
JsB89BPhZYch0U0hKANx5TY+ncrm0s8bfJxxHoenAEFhwhuXeb4PqIrtoQ==
-----END PUBLIC KEY-----";

    fn cosign_found() -> Result<(Digest, Found), Box<dyn std::error::Error>> {
        let digest = Digest::parse(COSIGN_DIGEST)?;
        let found = Found {
            payload: payload(COSIGN_REPOSITORY, &digest),
            signature: base64::engine::general_purpose::STANDARD.decode(COSIGN_SIGNATURE)?,
            via: Via::Tag,
        };
        Ok((digest, found))
    }

    #[test]
    fn a_signature_cosign_made_verifies_over_the_payload_we_write()
    -> Result<(), Box<dyn std::error::Error>> {
        let (digest, found) = cosign_found()?;
        let key = PublicKey::from_pem(COSIGN_KEY)?;
        let verifier = KeyVerifier::new(vec![PublicKey::from_pem(OTHER_KEY)?, key.clone()]);
        assert_eq!(
            verifier.verify(&digest, std::slice::from_ref(&found)),
            Ok(Verified {
                key_id: key.id().to_owned(),
                via: Via::Tag
            })
        );
        Ok(())
    }

    #[test]
    fn other_keys_other_digests_and_no_signature_are_each_refused()
    -> Result<(), Box<dyn std::error::Error>> {
        let (digest, found) = cosign_found()?;
        let other = PublicKey::from_pem(OTHER_KEY)?;
        let refused =
            KeyVerifier::new(vec![other.clone()]).verify(&digest, std::slice::from_ref(&found));
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err(format!(
                "none of its 1 signature(s) is by a trusted key ({})",
                other.id()
            ))
        );

        // The same signed payload presented for another artifact.
        let key = PublicKey::from_pem(COSIGN_KEY)?;
        let pulled = Digest::of(b"another artifact");
        let replayed = KeyVerifier::new(vec![key.clone()]).verify(&pulled, &[found]);
        assert_eq!(
            replayed.map_err(|e| e.to_string()),
            Err(format!(
                "its signature by key {} is of another artifact ({COSIGN_DIGEST}), not of {pulled}",
                key.id()
            ))
        );

        let unsigned = KeyVerifier::new(vec![key]).verify(&digest, &[]);
        assert_eq!(
            unsigned.map_err(|e| e.to_string()),
            Err("it is not signed: no signature under the tag sha256-f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b.sig nor through the referrers API".to_owned())
        );
        Ok(())
    }
}
