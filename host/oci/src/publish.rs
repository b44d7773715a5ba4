//! Publishing for plugin authors: a component pushed as a CNCF Wasm artifact
//! ([`push`]), and a cosign key signature of an artifact's digest stored where
//! cosign stores it ([`sign`]), so that `cosign verify --key`, and this crate's
//! [`crate::pull()`], find it.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::artifact::{Descriptor, Manifest, OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};
use crate::client::{Client, RegistryError};
use crate::cosign::{SIGNATURE_ANNOTATION, SIGNATURE_LAYER, payload, signature_tag};
use crate::keys::PrivateKey;
use crate::reference::{Digest, Reference, Target};

/// The annotation naming a layer's file (what `oras pull` names it by).
const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";
/// The config media type of a signature manifest.
const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The most signatures kept under one signature tag.
const MAX_KEPT_SIGNATURES: usize = 16;

/// Why a push or a signature failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The registry failed or refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The file is not a WebAssembly component.
    #[error("{0}")]
    NotComponent(&'static str),
    /// A reference by digest names something else than what was pushed.
    #[error("the reference names {named}, but the artifact pushed is {pushed}: push to a tag")]
    Digest {
        /// What the reference names.
        named: String,
        /// What was pushed.
        pushed: String,
    },
}

/// Pushes `component` (named `file_name` in its layer's title) as a Wasm
/// artifact at `reference`; the manifest's digest.
///
/// # Errors
///
/// Not a component, the registry's refusal, or a digest reference that does
/// not name what was pushed.
pub async fn push(
    client: &Client,
    reference: &Reference,
    file_name: &str,
    component: Bytes,
) -> Result<Digest, PublishError> {
    if component.get(..4) != Some(b"\0asm".as_slice()) {
        return Err(PublishError::NotComponent(
            "not a WebAssembly file (no \\0asm at its start)",
        ));
    }
    if component.get(6..8) != Some([0x01, 0x00].as_slice()) {
        return Err(PublishError::NotComponent(
            "a core module, not a component: plugins are components (wasm32-wasip2)",
        ));
    }
    let repository = &reference.repository;
    let layer_digest = Digest::of(&component);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest.as_str()],
    }))
    .unwrap_or_default();
    let config = client
        .push_blob(repository, WASM_CONFIG, Bytes::from(config))
        .await?;
    let mut layer = client.push_blob(repository, WASM_LAYER, component).await?;
    layer
        .annotations
        .insert(TITLE_ANNOTATION.to_owned(), file_name.to_owned());
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.to_owned()),
        artifact_type: Some(WASM_CONFIG.to_owned()),
        config,
        layers: vec![layer],
        subject: None,
        annotations: BTreeMap::new(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&manifest).unwrap_or_default());
    let digest = Digest::of(&bytes);
    if let Target::Digest(named) = &reference.target
        && *named != digest
    {
        return Err(PublishError::Digest {
            named: named.to_string(),
            pushed: digest.to_string(),
        });
    }
    client
        .push_manifest(repository, reference.target_str(), OCI_MANIFEST, bytes)
        .await?;
    Ok(digest)
}

/// Signs the artifact `digest` of `reference`'s repository with `key`, as
/// `cosign sign --key` does: the simple signing payload as a layer of the
/// manifest under the tag `sha256-<hex>.sig`, its signature in the layer's
/// annotation; signatures already there are kept (another key's, during a
/// rotation), up to 16.
///
/// # Errors
///
/// The registry's refusal.
pub async fn sign(
    client: &Client,
    reference: &Reference,
    digest: &Digest,
    key: &PrivateKey,
) -> Result<(), PublishError> {
    use base64::Engine as _;
    let repository = &reference.repository;
    let payload = payload(&format!("{}/{repository}", reference.registry), digest);
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(&payload));
    let tag = signature_tag(digest);
    let mut layers: Vec<Descriptor> = match client.manifest(repository, &tag).await {
        Ok(fetched) => serde_json::from_slice::<Manifest>(&fetched.bytes)
            .map(|manifest| manifest.layers)
            .unwrap_or_default(),
        Err(RegistryError::NotFound { .. }) => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    let mut layer = client
        .push_blob(repository, SIGNATURE_LAYER, Bytes::from(payload))
        .await?;
    layer
        .annotations
        .insert(SIGNATURE_ANNOTATION.to_owned(), signature);
    layers.retain(|kept| *kept != layer);
    layers.push(layer);
    let skip = layers.len().saturating_sub(MAX_KEPT_SIGNATURES);
    layers.drain(..skip);
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap_or_default();
    let config = client
        .push_blob(repository, IMAGE_CONFIG, Bytes::from(config))
        .await?;
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.to_owned()),
        artifact_type: None,
        config,
        layers,
        subject: None,
        annotations: BTreeMap::new(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&manifest).unwrap_or_default());
    client
        .push_manifest(repository, &tag, OCI_MANIFEST, bytes)
        .await?;
    Ok(())
}
