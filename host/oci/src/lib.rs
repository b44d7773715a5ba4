//! codemode-oci: plugins from OCI registries.
//!
//! What it owns: reading OCI references ([`Reference`], [`Digest`]); a client of a
//! registry's HTTP API that treats the registry as untrusted input ([`Client`]:
//! capped bodies, checked digests, same-origin redirects, bounded waits); the CNCF
//! Wasm OCI artifact layout a plugin is published in ([`artifact`]); cosign's key
//! signatures and the [`Verifier`] port that checks them ([`cosign`], [`keys`]);
//! and one pull of a plugin into a plugins folder, atomic and verified before a
//! byte of it is in place ([`pull()`]); publishing, a component pushed and a digest
//! signed as cosign signs ([`push()`], [`sign()`]); registry credentials read from
//! the text of a Docker `config.json` or a token file ([`auth`]).
//!
//! What it may import: no crate of this workspace. The host runs it (the `pull`
//! command and the `[[plugin]]` entries of the config file) and reads the files it
//! writes as it reads any plugin file.

pub mod artifact;
pub mod auth;
mod client;
pub mod cosign;
pub mod keys;
mod publish;
mod pull;
mod reference;

pub use client::{
    Client, Credentials, Fetched, Limits, MAX_MANIFEST_BYTES, RegistryError, Transport,
};
pub use cosign::{KeyVerifier, Verified, Verifier};
pub use keys::{PrivateKey, PublicKey};
pub use publish::{PublishError, push, sign};
pub use pull::{
    PROVENANCE_EXTENSION, Policy, Provenance, PullError, Pulled, Request, Verification, check_name,
    file_digest, pull, read_provenance,
};
pub use reference::{DEFAULT_TAG, Digest, Reference, ReferenceError, Target};
