//! One pull of a plugin into a plugins folder: resolve the reference, check the
//! artifact's layout and its signatures under the policy, then write the component
//! beside the folder's other plugins atomically (a temporary file in the folder,
//! synced, renamed over `<name>.wasm`), with `<name>.oci.json` saying where it
//! came from. Nothing is written unless every check passed; a failed pull leaves
//! the folder as it was, so the running version keeps serving.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::artifact::{LayoutError, Manifest, wasm_layer};
use crate::client::{Client, RegistryError};
use crate::cosign::{
    Found, SIGNATURE_ANNOTATION, SIGNATURE_ARTIFACT, SIGNATURE_LAYER, Unverified, Verified,
    Verifier, Via, signature_tag,
};
use crate::reference::{Digest, Reference, Target};

/// The most signature layers (or referrers) looked at in one place.
const MAX_SIGNATURES: usize = 16;
/// The largest signature payload read.
const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;
/// The provenance file's extension (`<name>.oci.json`).
pub const PROVENANCE_EXTENSION: &str = "oci.json";

/// What a pull requires of signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Unsigned or badly signed is refused.
    #[default]
    Require,
    /// Unsigned or badly signed is pulled, with a warning saying why.
    Warn,
    /// Signatures are not looked for.
    Off,
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "require" => Ok(Self::Require),
            "warn" => Ok(Self::Warn),
            "off" => Ok(Self::Off),
            _ => Err(format!(
                "`{text}` is not a verification policy: require, warn or off"
            )),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Require => "require",
            Self::Warn => "warn",
            Self::Off => "off",
        })
    }
}

/// What became of the signature check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// A trusted key signed this digest.
    Verified(Verified),
    /// Not verified, pulled anyway under `warn`.
    Unverified(Unverified),
    /// Not looked at (`off`).
    Off,
}

impl fmt::Display for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Verified(verified) => write!(
                f,
                "signature verified by key {} ({})",
                verified.key_id, verified.via
            ),
            Self::Unverified(reason) => write!(f, "NOT verified: {reason}"),
            Self::Off => f.write_str("signatures not checked (verify = off)"),
        }
    }
}

/// One plugin to pull.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Where it is.
    pub reference: &'a Reference,
    /// The file stem in the plugins folder (`<name>.wasm`).
    pub name: &'a str,
    /// The digest the operator pinned: any other is refused.
    pub pinned: Option<&'a Digest>,
    /// What signatures must be.
    pub policy: Policy,
    /// Who decides whether signatures are good (none: nothing can verify).
    pub verifier: Option<&'a dyn Verifier>,
}

/// A pull that succeeded.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The plugin file.
    pub file: PathBuf,
    /// The manifest's digest (what a signature signs).
    pub digest: Digest,
    /// The component's digest (the layer's; the SHA-256 of the file).
    pub layer: Digest,
    /// What the signature check found.
    pub verification: Verification,
    /// Whether the file was written (false: it held this digest already).
    pub changed: bool,
}

/// Why a pull failed; the folder is as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// The registry failed or refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Not a Wasm artifact.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// Not the pinned digest.
    #[error("the registry has {found}, not the pinned {pinned}: refused")]
    Pinned {
        /// The pin.
        pinned: String,
        /// What the reference resolved to.
        found: String,
    },
    /// The signature check failed under `require`.
    #[error("{digest} is refused (verify = require): {reason}")]
    Refused {
        /// What was pulled.
        digest: String,
        /// Why it did not verify.
        reason: Unverified,
    },
    /// `require` without a key to verify with.
    #[error(
        "verify = require (the default) needs a public key to check signatures with (--verify-key, or keys in a [[plugin]] entry); verify = warn or off pulls unsigned plugins"
    )]
    NoKeys,
    /// The tag named another digest after the pull than before.
    #[error("the tag moved while it was pulled ({before}, then {after}): nothing was written")]
    Moved {
        /// The digest pulled.
        before: String,
        /// What the tag names now.
        after: String,
    },
    /// The file stem cannot be a plugin's.
    #[error(
        "`{0}` cannot name a plugin file: lowercase letters, digits, `_` and `-`, starting with a letter, at most 64"
    )]
    Name(String),
    /// The plugins folder could not be written.
    #[error("cannot write into the plugins folder: {0}")]
    Write(String),
}

/// Where a pulled plugin came from, kept beside it as `<name>.oci.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The reference as configured.
    pub reference: String,
    /// The manifest's digest.
    pub digest: String,
    /// The component's digest (the SHA-256 of the plugin file).
    pub layer: String,
    /// The ID of the key whose signature verified, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// Whether `name` can be a plugin file's stem.
///
/// # Errors
///
/// [`PullError::Name`].
pub fn check_name(name: &str) -> Result<(), PullError> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(PullError::Name(name.to_owned()))
    }
}

/// Pulls `request` into `dir`.
///
/// # Errors
///
/// See [`PullError`].
pub async fn pull(client: &Client, request: Request<'_>, dir: &Path) -> Result<Pulled, PullError> {
    check_name(request.name)?;
    if request.policy == Policy::Require && request.verifier.is_none() {
        return Err(PullError::NoKeys);
    }
    let reference = request.reference;
    let manifest = client
        .manifest(&reference.repository, reference.target_str())
        .await?;
    if let Some(pinned) = request.pinned
        && *pinned != manifest.digest
    {
        return Err(PullError::Pinned {
            pinned: pinned.to_string(),
            found: manifest.digest.to_string(),
        });
    }
    let (layer, layer_digest) = wasm_layer(&manifest.media_type, &manifest.bytes)?;
    let verification = match (request.policy, request.verifier) {
        (Policy::Off, _) => Verification::Off,
        (_, None) => Verification::Unverified(Unverified::NoKeys),
        (policy, Some(verifier)) => {
            let found = signatures(client, &reference.repository, &manifest.digest).await?;
            match verifier.verify(&manifest.digest, &found) {
                Ok(verified) => Verification::Verified(verified),
                Err(reason) if policy == Policy::Warn => Verification::Unverified(reason),
                Err(reason) => {
                    return Err(PullError::Refused {
                        digest: manifest.digest.to_string(),
                        reason,
                    });
                }
            }
        }
    };
    let file = dir.join(format!("{}.wasm", request.name));
    let provenance = Provenance {
        reference: reference.to_string(),
        digest: manifest.digest.to_string(),
        layer: layer_digest.to_string(),
        key_id: match &verification {
            Verification::Verified(verified) => Some(verified.key_id.clone()),
            _ => None,
        },
    };
    let provenance_file = dir.join(format!("{}.{PROVENANCE_EXTENSION}", request.name));
    // The same artifact in place already: nothing to write (the provenance is
    // rewritten below when what verified it changed).
    let unchanged = read_provenance(&provenance_file)
        .is_some_and(|kept| kept.digest == provenance.digest && kept.layer == provenance.layer)
        && file_digest(&file).is_some_and(|digest| digest == layer_digest);
    if !unchanged {
        let temporary = tempfile::Builder::new()
            .prefix(&format!(".{}.", request.name))
            .suffix(".pulling")
            .tempfile_in(dir)
            .map_err(|e| PullError::Write(format!("{}: {e}", dir.display())))?;
        let handle = temporary
            .reopen()
            .map_err(|e| PullError::Write(e.to_string()))?;
        let mut handle = tokio::fs::File::from_std(handle);
        client
            .blob_to_file(&reference.repository, &layer, &mut handle)
            .await?;
        handle
            .sync_all()
            .await
            .map_err(|e| PullError::Write(e.to_string()))?;
        drop(handle);
        if let Target::Tag(tag) = &reference.target {
            let now = client.resolve(&reference.repository, tag).await?;
            if now != manifest.digest {
                return Err(PullError::Moved {
                    before: manifest.digest.to_string(),
                    after: now.to_string(),
                });
            }
        }
        set_readable(temporary.path())?;
        // The provenance first: a reload the new file's rename starts finds the
        // provenance naming it (the old file with the new provenance names
        // nothing, for the moment between the two renames).
        write_provenance(dir, &provenance_file, &provenance)?;
        temporary
            .persist(&file)
            .map_err(|e| PullError::Write(format!("{}: {}", file.display(), e.error)))?;
    } else if read_provenance(&provenance_file).as_ref() != Some(&provenance) {
        write_provenance(dir, &provenance_file, &provenance)?;
    }
    Ok(Pulled {
        file,
        digest: manifest.digest,
        layer: layer_digest,
        verification,
        changed: !unchanged,
    })
}

/// The signatures of `digest`: under cosign's tag, then through the referrers
/// API. Signature manifests that cannot be read as such are left out (they
/// verify nothing); a registry that fails is an error (the pull is tried again
/// later, rather than found unsigned).
async fn signatures(
    client: &Client,
    repository: &str,
    digest: &Digest,
) -> Result<Vec<Found>, RegistryError> {
    let mut found = Vec::new();
    match client.manifest(repository, &signature_tag(digest)).await {
        Ok(fetched) => {
            read_signatures(client, repository, &fetched.bytes, Via::Tag, &mut found).await?
        }
        Err(RegistryError::NotFound { .. }) => {}
        Err(error) => return Err(error),
    }
    // Registries without OCI 1.1 answer the referrers route in many ways (404,
    // 400, 405, a proxy's 502): any refusal is "not offered"; only a registry
    // that does not answer at all fails the pull.
    let referrers = match client
        .referrers(repository, digest, SIGNATURE_ARTIFACT)
        .await
    {
        Ok(referrers) => referrers,
        Err(error @ RegistryError::Unreachable { .. }) => return Err(error),
        Err(_) => None,
    };
    if let Some(referrers) = referrers {
        for referrer in referrers.iter().take(MAX_SIGNATURES) {
            let fetched = match client.manifest(repository, &referrer.digest).await {
                Ok(fetched) => fetched,
                Err(RegistryError::NotFound { .. }) => continue,
                Err(error) => return Err(error),
            };
            read_signatures(
                client,
                repository,
                &fetched.bytes,
                Via::Referrers,
                &mut found,
            )
            .await?;
        }
    }
    Ok(found)
}

async fn read_signatures(
    client: &Client,
    repository: &str,
    manifest: &[u8],
    via: Via,
    found: &mut Vec<Found>,
) -> Result<(), RegistryError> {
    use base64::Engine as _;
    let Ok(manifest) = serde_json::from_slice::<Manifest>(manifest) else {
        return Ok(());
    };
    let layers = manifest
        .layers
        .iter()
        .filter(|layer| layer.media_type == SIGNATURE_LAYER)
        .take(MAX_SIGNATURES);
    for layer in layers {
        let Some(signature) = layer
            .annotations
            .get(SIGNATURE_ANNOTATION)
            .and_then(|text| {
                base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .ok()
            })
        else {
            continue;
        };
        let payload = match client.blob(repository, layer, MAX_PAYLOAD_BYTES).await {
            Ok(payload) => payload,
            // A registry that does not answer fails the pull (tried again);
            // a payload missing, too large, refused or not its digest signs
            // nothing, and another signature may still verify.
            Err(error @ RegistryError::Unreachable { .. }) => return Err(error),
            Err(_) => continue,
        };
        found.push(Found {
            payload: payload.to_vec(),
            signature,
            via,
        });
    }
    Ok(())
}

/// The largest provenance file read.
const MAX_PROVENANCE_BYTES: u64 = 64 * 1024;

/// Opens `path` for reading if it is a regular file: without blocking (a FIFO
/// put in its place would hold the pulls' thread forever), checked on the open
/// handle.
fn open_regular(path: &Path) -> Option<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta.len()))
}

/// The provenance kept beside a plugin, if it is a regular file of at most
/// 64 KiB that reads.
pub fn read_provenance(path: &Path) -> Option<Provenance> {
    use std::io::Read as _;
    let (file, len) = open_regular(path)?;
    if len > MAX_PROVENANCE_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_PROVENANCE_BYTES)
        .read_to_end(&mut text)
        .ok()?;
    serde_json::from_slice(&text).ok()
}

fn write_provenance(dir: &Path, path: &Path, provenance: &Provenance) -> Result<(), PullError> {
    let text =
        serde_json::to_vec_pretty(provenance).map_err(|e| PullError::Write(e.to_string()))?;
    let mut temporary = tempfile::Builder::new()
        .prefix(".provenance.")
        .suffix(".pulling")
        .tempfile_in(dir)
        .map_err(|e| PullError::Write(format!("{}: {e}", dir.display())))?;
    std::io::Write::write_all(&mut temporary, &text)
        .map_err(|e| PullError::Write(e.to_string()))?;
    temporary
        .as_file()
        .sync_all()
        .map_err(|e| PullError::Write(e.to_string()))?;
    set_readable(temporary.path())?;
    temporary
        .persist(path)
        .map_err(|e| PullError::Write(format!("{}: {}", path.display(), e.error)))?;
    Ok(())
}

/// The SHA-256 of a regular file, if it can be read.
pub fn file_digest(path: &Path) -> Option<Digest> {
    let (mut file, _) = open_regular(path)?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash).ok()?;
    Some(Digest::from_hash(hash.finalize().as_slice()))
}

/// A temporary file is created readable by its owner only; a plugin file is
/// readable like the folder's others.
fn set_readable(path: &Path) -> Result<(), PullError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| PullError::Write(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_are_file_stems() {
        assert!(check_name("stats").is_ok());
        assert!(check_name("my-plugin_2").is_ok());
        for bad in ["", "Stats", "../x", ".hidden", "2x", &"x".repeat(65)] {
            assert!(matches!(check_name(bad), Err(PullError::Name(_))), "{bad}");
        }
    }

    #[test]
    fn policies_read_by_name() {
        assert_eq!("require".parse(), Ok(Policy::Require));
        assert_eq!("warn".parse(), Ok(Policy::Warn));
        assert_eq!("off".parse(), Ok(Policy::Off));
        assert_eq!(
            "strict".parse::<Policy>(),
            Err("`strict` is not a verification policy: require, warn or off".to_owned())
        );
    }
}
