//! Plugins from OCI registries: one plugin's settings (its reference, file name,
//! pin, verification policy, keys and registry credentials) read into what
//! `codemode-oci` takes, and one pull of it into the plugins folder under a time
//! and byte bound. The key, token and Docker config files are read as the other
//! secrets files are (`files::read_text`: regular files only, capped).

use std::path::{Path, PathBuf};
use std::time::Duration;

use codemode_oci::{
    Client, Credentials, KeyVerifier, Limits, Policy, PublicKey, Pulled, Reference,
};

use crate::files;

/// The default bound of one pull's bytes (the component's).
pub const DEFAULT_MAX_PULL_BYTES: u64 = 256 * 1024 * 1024;
/// The default bound of one pull's time, signatures included.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest a registry may leave a connection silent.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest key, token or Docker config file read.
const MAX_SECRET_FILE: u64 = 1024 * 1024;

/// Where a registry's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RegistryAuth {
    /// The Docker `config.json` at `$DOCKER_CONFIG/config.json` or
    /// `~/.docker/config.json`, when there is one; else anonymous.
    #[default]
    DockerDefault,
    /// The Docker `config.json` at this path.
    DockerConfig(PathBuf),
    /// A file holding one registry token.
    TokenFile(PathBuf),
}

/// One plugin to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSource {
    /// Where it is.
    pub reference: Reference,
    /// Its file stem in the plugins folder.
    pub name: String,
    /// The only digest accepted, when pinned.
    pub pinned: Option<codemode_oci::Digest>,
    /// What its signatures must be.
    pub policy: Policy,
    /// The public keys (PEM files) a signature may be made with.
    pub keys: Vec<PathBuf>,
    /// The registry's credentials.
    pub auth: RegistryAuth,
    /// Plain HTTP to a registry that is not on this machine.
    pub insecure: bool,
}

/// Bounds of one pull.
#[derive(Debug, Clone, Copy)]
pub struct PullLimits {
    /// The largest component pulled.
    pub max_bytes: u64,
    /// The longest one pull may take.
    pub timeout: Duration,
}

impl Default for PullLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_PULL_BYTES,
            timeout: DEFAULT_PULL_TIMEOUT,
        }
    }
}

/// Pulls `source` into `dir`, within `limits`.
///
/// # Errors
///
/// A key or credentials file that cannot be read, the registry's failure or
/// refusal, a signature check that fails under `require`, the time bound; each
/// names the reference.
pub async fn pull(source: &PluginSource, dir: &Path, limits: PullLimits) -> Result<Pulled, String> {
    let reference = &source.reference;
    let fail = |reason: String| format!("cannot pull {reference}: {reason}");
    let verifier = read_keys(&source.keys).map_err(fail)?;
    let credentials = credentials(&source.auth, &reference.registry).map_err(fail)?;
    let plain = reference.is_loopback() || source.insecure;
    let client = Client::new(
        &reference.registry,
        plain,
        credentials,
        Limits {
            max_blob_bytes: limits.max_bytes,
            read_timeout: READ_TIMEOUT.min(limits.timeout),
        },
    )
    .map_err(|e| fail(e.to_string()))?;
    let request = codemode_oci::Request {
        reference,
        name: &source.name,
        pinned: source.pinned.as_ref(),
        policy: source.policy,
        verifier: verifier
            .as_ref()
            .map(|verifier| verifier as &dyn codemode_oci::Verifier),
    };
    match tokio::time::timeout(limits.timeout, codemode_oci::pull(&client, request, dir)).await {
        Ok(Ok(pulled)) => Ok(pulled),
        Ok(Err(error)) => Err(fail(error.to_string())),
        Err(_) => Err(fail(format!(
            "it took longer than {} (--pull-timeout)",
            humantime::format_duration(limits.timeout)
        ))),
    }
}

/// The verifier trusting the keys in `paths`; none without keys.
fn read_keys(paths: &[PathBuf]) -> Result<Option<KeyVerifier>, String> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(paths.len());
    for path in paths {
        let text = files::read_text(path, MAX_SECRET_FILE, "a key file's size")
            .map_err(|e| format!("key {}: {e}", path.display()))?;
        let key = PublicKey::from_pem(&text).map_err(|e| format!("key {}: {e}", path.display()))?;
        keys.push(key);
    }
    Ok(Some(KeyVerifier::new(keys)))
}

/// The credentials `auth` gives for `registry`.
fn credentials(auth: &RegistryAuth, registry: &str) -> Result<Option<Credentials>, String> {
    let docker = |path: &Path| -> Result<Option<Credentials>, String> {
        let text = files::read_text(path, MAX_SECRET_FILE, "a Docker config's size")
            .map_err(|e| format!("Docker config {}: {e}", path.display()))?;
        codemode_oci::auth::from_docker_config(&text, registry)
            .map_err(|e| format!("Docker config {}: {e}", path.display()))
    };
    match auth {
        RegistryAuth::DockerDefault => match default_docker_config() {
            Some(path) if path.is_file() => docker(&path),
            _ => Ok(None),
        },
        RegistryAuth::DockerConfig(path) => docker(path),
        RegistryAuth::TokenFile(path) => {
            let text = files::read_text(path, MAX_SECRET_FILE, "a token file's size")
                .map_err(|e| format!("token file {}: {e}", path.display()))?;
            codemode_oci::auth::from_token_file(&text)
                .map(Some)
                .map_err(|e| format!("token file {}: {e}", path.display()))
        }
    }
}

/// Where docker keeps its config: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
fn default_docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".docker").join("config.json"))
}
