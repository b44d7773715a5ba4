//! The public keys signatures are checked with: ECDSA P-256 (cosign's default,
//! signatures in DER over the payload's SHA-256) and Ed25519, each read from a
//! PEM `PUBLIC KEY` (SubjectPublicKeyInfo, what `cosign generate-key-pair` and
//! `openssl pkey -pubout` write).

use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
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
    /// Not a PEM private key of a supported kind.
    #[error(
        "not a PEM private key of ECDSA P-256 or Ed25519 (-----BEGIN PRIVATE KEY----- or -----BEGIN EC PRIVATE KEY-----, as openssl genpkey writes them)"
    )]
    UnsupportedPrivate,
    /// A password-protected key (cosign's own format among them).
    #[error(
        "the private key is encrypted (cosign's own key format is): sign with an unencrypted PEM key, e.g. from `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`"
    )]
    Encrypted,
}

/// A key signatures are made with (`codemode-host sign`, `push --key`).
pub struct PrivateKey {
    key: Signing,
    public: PublicKey,
}

enum Signing {
    P256(p256::ecdsa::SigningKey),
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PrivateKey({}, {})",
            self.public.algorithm(),
            self.public.id()
        )
    }
}

impl PrivateKey {
    /// Reads a PEM private key: PKCS#8 (`PRIVATE KEY`) of ECDSA P-256 or Ed25519,
    /// or SEC1 (`EC PRIVATE KEY`) of P-256.
    ///
    /// # Errors
    ///
    /// An encrypted key, or one of another kind.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.contains("ENCRYPTED") {
            return Err(KeyError::Encrypted);
        }
        let p256 = p256::ecdsa::SigningKey::from_pkcs8_pem(text)
            .ok()
            .or_else(|| {
                p256::SecretKey::from_sec1_pem(text)
                    .ok()
                    .map(p256::ecdsa::SigningKey::from)
            });
        if let Some(key) = p256 {
            let verifying = *key.verifying_key();
            let der = verifying
                .to_public_key_der()
                .map_err(|_| KeyError::UnsupportedPrivate)?;
            return Ok(Self {
                key: Signing::P256(key),
                public: PublicKey {
                    id: key_id(der.as_bytes()),
                    key: Key::P256(verifying),
                },
            });
        }
        if let Ok(key) = ed25519_dalek::SigningKey::from_pkcs8_pem(text) {
            let verifying = key.verifying_key();
            let der = verifying
                .to_public_key_der()
                .map_err(|_| KeyError::UnsupportedPrivate)?;
            return Ok(Self {
                key: Signing::Ed25519(Box::new(key)),
                public: PublicKey {
                    id: key_id(der.as_bytes()),
                    key: Key::Ed25519(verifying),
                },
            });
        }
        Err(KeyError::UnsupportedPrivate)
    }

    /// The signature of `payload`: ECDSA P-256 over its SHA-256 in DER
    /// (deterministic, RFC 6979), or Ed25519.
    pub fn sign(&self, payload: &[u8]) -> Vec<u8> {
        match &self.key {
            Signing::P256(key) => {
                let signature: p256::ecdsa::Signature = key.sign(payload);
                signature.to_der().as_bytes().to_vec()
            }
            Signing::Ed25519(key) => key.sign(payload).to_bytes().to_vec(),
        }
    }

    /// Its public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
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
    /// Test keys, made by openssl for these tests only.
    const P256_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg0US8NioEbegk6iZv
Kb5OMcWLx2PFuSURoyUsTekvCxGhRANCAAS0UUvT/QhAyaw4HZJslSwiK61InZuu
aGQMVx5/+qfbdFgetAICVDfBCqj9cSXTnhxFcHJxl7GTk4y6oOLSi1u0
-----END PRIVATE KEY-----";
    const ED25519_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIK5pkyDbbycfHSuF4dRvhVsR9MrJ9eOXXz/Mnie92brA
-----END PRIVATE KEY-----";
    const P256_SEC1: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIIywsxdpkauLhD1h+xnye/pN/pr9+LaTPJ16YW1J7Qy/oAoGCCqGSM49
AwEHoUQDQgAEeQkDWhkZW5cA6bOjE1ly0vwouUSnFp6QTI8YXmKk4+MN6l8M3O4R
KuoXjm7CKWAbsgE779d/xFvZ59jj7pou6g==
-----END EC PRIVATE KEY-----";
    const ED25519_SIGNATURE: &str =
        "t/yarM7OYP61KsefwLEDzNWFAdzgI7jaZB6Jqgq+uJa4QXovU4QLt9YMeLY32g6/9COYy4XKgAqtHnEg/rdGBQ==";

    #[test]
    fn private_keys_sign_what_their_public_halves_verify() -> Result<(), KeyError> {
        // `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` and
        // `-algorithm ed25519`; an `openssl ecparam -genkey` SEC1 key.
        for pem in [P256_PKCS8, ED25519_PKCS8, P256_SEC1] {
            let key = PrivateKey::from_pem(pem)?;
            let signature = key.sign(b"payload");
            assert!(key.public().verifies(b"payload", &signature));
            assert!(!key.public().verifies(b"other", &signature));
        }
        assert_eq!(
            PrivateKey::from_pem("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nx\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----").err(),
            Some(KeyError::Encrypted)
        );
        assert_eq!(
            PrivateKey::from_pem(ED25519_PUBLIC).err(),
            Some(KeyError::UnsupportedPrivate)
        );
        Ok(())
    }

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
