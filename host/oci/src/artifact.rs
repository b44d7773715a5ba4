//! Manifests as a registry serves them, and the CNCF Wasm OCI artifact layout a
//! plugin is published in: a config of media type [`WASM_CONFIG`] and exactly one
//! layer of media type [`WASM_LAYER`] (what `wkg oci push`, `oras push` with those
//! media types and `codemode-host push` write).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::reference::Digest;

/// The config media type of a Wasm artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer: the component's bytes.
pub const WASM_LAYER: &str = "application/wasm";
/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (a list of manifests).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's image manifest, schema 2 (what cosign's signature manifests are on
/// some registries).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// A descriptor: what a manifest says about a blob or another manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the content is.
    pub media_type: String,
    /// `sha256:<hex>`, checked when the content is read.
    pub digest: String,
    /// Its length in bytes, checked before and while it is read.
    pub size: u64,
    /// The artifact type of a manifest a referrers list names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Free-form annotations (cosign keeps its signature in one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image manifest (OCI or Docker schema 2: the same fields).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type, when it says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// What kind of artifact this is (OCI 1.1), when it says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers, in order.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// The manifest this one refers to (OCI 1.1 referrers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image index: what the referrers API answers, or a multi-platform image.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// The manifests it lists.
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

/// Why a manifest is not a Wasm plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not JSON of a manifest's shape.
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotManifest(String),
    /// An index (several platforms): the plugin is one of its manifests.
    #[error(
        "the reference names an image index, not a Wasm artifact: name one of its manifests by digest"
    )]
    Index,
    /// The config is not the Wasm one.
    #[error("the config's media type is `{0}`, not {WASM_CONFIG}: not a Wasm artifact")]
    Config(String),
    /// Not exactly one layer.
    #[error("a Wasm artifact has exactly one layer; this manifest has {0}")]
    Layers(usize),
    /// The layer is not `application/wasm`.
    #[error("the layer's media type is `{0}`, not {WASM_LAYER}")]
    Layer(String),
    /// A digest that is not `sha256:<hex>`.
    #[error("the manifest names the blob digest `{0}`, which is not sha256:<64 hex digits>")]
    Digest(String),
}

/// Reads `bytes` (served with `media_type`) as a Wasm artifact's manifest and
/// returns its one layer and that layer's digest.
///
/// # Errors
///
/// See [`LayoutError`].
pub fn wasm_layer(media_type: &str, bytes: &[u8]) -> Result<(Descriptor, Digest), LayoutError> {
    if media_type == OCI_INDEX || media_type == DOCKER_LIST {
        return Err(LayoutError::Index);
    }
    let manifest: Manifest =
        serde_json::from_slice(bytes).map_err(|e| LayoutError::NotManifest(e.to_string()))?;
    if manifest.media_type.as_deref() == Some(OCI_INDEX) {
        return Err(LayoutError::Index);
    }
    if manifest.config.media_type != WASM_CONFIG {
        return Err(LayoutError::Config(printable(&manifest.config.media_type)));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(LayoutError::Layers(manifest.layers.len()));
    };
    if layer.media_type != WASM_LAYER {
        return Err(LayoutError::Layer(printable(&layer.media_type)));
    }
    let digest =
        Digest::parse(&layer.digest).map_err(|_| LayoutError::Digest(printable(&layer.digest)))?;
    Ok((layer.clone(), digest))
}

/// `text` cut to 100 characters with control characters escaped: a registry's
/// strings go into log lines and error messages.
pub(crate) fn printable(text: &str) -> String {
    printable_within(text, 100)
}

/// `text` cut to `max` characters with control characters escaped.
pub(crate) fn printable_within(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .flat_map(char::escape_default)
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[&str]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|media_type| {
                serde_json::json!({
                    "mediaType": media_type,
                    "digest": format!("sha256:{}", "a".repeat(64)),
                    "size": 3,
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "b".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap_or_default()
    }

    #[test]
    fn the_wasm_layout_is_one_wasm_layer_under_the_wasm_config() -> Result<(), LayoutError> {
        let good = manifest(WASM_CONFIG, &[WASM_LAYER]);
        let (layer, digest) = wasm_layer(OCI_MANIFEST, &good)?;
        assert_eq!(layer.size, 3);
        assert_eq!(digest.hex(), "a".repeat(64));

        let refused = |media_type: &str, bytes: &[u8]| {
            wasm_layer(media_type, bytes).err().map(|e| e.to_string())
        };
        assert_eq!(
            refused(OCI_MANIFEST, &manifest("application/vnd.oci.image.config.v1+json", &[WASM_LAYER])),
            Some("the config's media type is `application/vnd.oci.image.config.v1+json`, not application/vnd.wasm.config.v0+json: not a Wasm artifact".to_owned())
        );
        assert_eq!(
            refused(OCI_MANIFEST, &manifest(WASM_CONFIG, &[WASM_LAYER; 3])),
            Some("a Wasm artifact has exactly one layer; this manifest has 3".to_owned())
        );
        assert_eq!(
            refused(OCI_MANIFEST, &manifest(WASM_CONFIG, &[])),
            Some("a Wasm artifact has exactly one layer; this manifest has 0".to_owned())
        );
        assert_eq!(
            refused(OCI_MANIFEST, &manifest(WASM_CONFIG, &["application/x-\n"])),
            Some("the layer's media type is `application/x-\\n`, not application/wasm".to_owned())
        );
        assert_eq!(
            refused(OCI_INDEX, b"{}"),
            Some(LayoutError::Index.to_string())
        );
        assert!(matches!(
            wasm_layer(OCI_MANIFEST, b"[1]"),
            Err(LayoutError::NotManifest(_))
        ));
        Ok(())
    }
}
