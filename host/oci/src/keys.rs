//! The public keys signatures are checked with: ECDSA P-256 (cosign's default,
//! signatures in DER over the payload's SHA-256) and Ed25519, each read from a
//! PEM `PUBLIC KEY` (SubjectPublicKeyInfo, what `cosign generate-key-pair` and
//! `openssl pkey -pubout` write).

use ed25519_dalek::pkcs8::{DecodePublicKey as _, EncodePublicKey as _};
use p256::ecdsa::signature::Verifier as _;
use sha2::{Digest as _, Sha256};

/// How many hex digits of the key's SHA-256 make its ID.
const KEY_ID_DIGITS: usize = 16;

/// A key a signature may be made with.
#[derive(Debug, Clone)]
pub struct PublicKey {
    id: String,
    key: Key,
}

#[derive(Debug, Clone)]
enum Key {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// Why a key file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not a PEM public key of a supported kind.
    #[error(
        "not a PEM public key of ECDSA P-256 or Ed25519 (-----BEGIN PUBLIC KEY-----, as cosign and openssl write them)"
    )]
    Unsupported,
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY`.
    ///
    /// # Errors
    ///
    /// Neither an ECDSA P-256 nor an Ed25519 key.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if let Ok(key) = p256::ecdsa::VerifyingKey::from_public_key_pem(text) {
            let der = key.to_public_key_der().map_err(|_| KeyError::Unsupported)?;
            return Ok(Self {
                id: key_id(der.as_bytes()),
                key: Key::P256(key),
            });
        }
        if let Ok(key) = ed25519_dalek::VerifyingKey::from_public_key_pem(text) {
            let der = key.to_public_key_der().map_err(|_| KeyError::Unsupported)?;
            return Ok(Self {
                id: key_id(der.as_bytes()),
                key: Key::Ed25519(key),
            });
        }
        Err(KeyError::Unsupported)
    }

    /// The key's ID: the first 16 hex digits of the SHA-256 of its DER
    /// SubjectPublicKeyInfo (`openssl pkey -pubin -outform der | sha256sum`),
    /// named in load log lines, the audit and `check`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The algorithm, for messages.
    pub fn algorithm(&self) -> &'static str {
        match self.key {
            Key::P256(_) => "ECDSA P-256",
            Key::Ed25519(_) => "Ed25519",
        }
    }

    /// Whether `signature` (DER for ECDSA, 64 bytes for Ed25519) is this key's
    /// signature of `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        match &self.key {
            Key::P256(key) => p256::ecdsa::DerSignature::from_bytes(signature)
                .is_ok_and(|signature| key.verify(payload, &signature).is_ok()),
            Key::Ed25519(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| key.verify_strict(payload, &signature).is_ok()),
        }
    }
}

fn key_id(der: &[u8]) -> String {
    let mut id = hex::encode(Sha256::digest(der));
    id.truncate(KEY_ID_DIGITS);
    id
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    /// An Ed25519 key and its signature of `payload`, made with `openssl genpkey
    /// -algorithm ed25519` and `openssl pkeyutl -sign -rawin`; its ID is what
    /// `openssl pkey -pubin -outform der | sha256sum` begins with.
    const ED25519_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAIEXDNUQp7AlbLbKhHpnvjr2xJJAG7nzyxEzxcEgJUEA=
-----END PUBLIC KEY-----";
    const ED25519_SIGNATURE: &str =
        "t/yarM7OYP61KsefwLEDzNWFAdzgI7jaZB6Jqgq+uJa4QXovU4QLt9YMeLY32g6/9COYy4XKgAqtHnEg/rdGBQ==";

    #[test]
    fn keys_of_other_kinds_are_refused() {
        assert_eq!(
            PublicKey::from_pem("junk").err(),
            Some(KeyError::Unsupported)
        );
        let rsa = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCiD9vNOk25KiLEb7hEB79aRNOM
/8LL2r6y2RS9ne8UaSdHrD5k8NeFnq2dWlSnnnyuzmh//3qEpv3iLrOqLzMCAqZG
5EokI7ZFemBfbCzOxT5LWL4hSodv1K8MBzmeMFMhnm8bB1u/LIM2wa4qOWzbaZl8
n1JG0T2JX6pDcnF0XwIDAQAB
-----END PUBLIC KEY-----";
        assert_eq!(PublicKey::from_pem(rsa).err(), Some(KeyError::Unsupported));
    }

    #[test]
    fn an_ed25519_signature_made_by_openssl_verifies() -> Result<(), Box<dyn std::error::Error>> {
        let key = PublicKey::from_pem(ED25519_PUBLIC)?;
        assert_eq!(key.algorithm(), "Ed25519");
        assert_eq!(key.id(), "a0ddf537030df3e3");
        let signature = base64::engine::general_purpose::STANDARD.decode(ED25519_SIGNATURE)?;
        assert!(key.verifies(b"payload", &signature));
        assert!(!key.verifies(b"payloaD", &signature));
        assert!(!key.verifies(b"payload", &signature[1..]));
        Ok(())
    }
}
