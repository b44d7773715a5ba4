//! Plugins from OCI registries: one plugin's settings (its reference, file name,
//! pin, verification policy, keys and registry credentials) read into what
//! `codemode-oci` takes, and one pull of it into the plugins folder under a time
//! and byte bound. The key, token and Docker config files are read as the other
//! secrets files are (`files::read_text`: regular files only, capped).

use std::path::{Path, PathBuf};
use std::sync::Arc;
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

/// Why a pull failed: the message names the reference; `refused` is the digest
/// a signature check refused, when that was the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullFailure {
    /// What went wrong, for the operator.
    pub message: String,
    /// The digest refused under `verify = require`.
    pub refused: Option<String>,
}

impl std::fmt::Display for PullFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Pulls `source` into `dir` (made when missing), within `limits`.
///
/// # Errors
///
/// A key or credentials file that cannot be read, the registry's failure or
/// refusal, a signature check that fails under `require`, the time bound; each
/// names the reference.
pub async fn pull(
    source: &PluginSource,
    dir: &Path,
    limits: PullLimits,
) -> Result<Pulled, PullFailure> {
    let reference = &source.reference;
    let fail = |reason: String| PullFailure {
        message: format!("cannot pull {reference}: {reason}"),
        refused: None,
    };
    let verifier = read_keys(&source.keys).map_err(fail)?;
    let client = client_for(reference, &source.auth, source.insecure, limits).map_err(fail)?;
    // An image build pulls into a folder that is not there yet.
    std::fs::create_dir_all(dir).map_err(|e| {
        fail(format!(
            "cannot make the plugins folder {}: {e}",
            dir.display()
        ))
    })?;
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
        Ok(Err(error)) => {
            let refused = match &error {
                codemode_oci::PullError::Refused { digest, .. } => Some(digest.clone()),
                _ => None,
            };
            Err(PullFailure {
                refused,
                ..fail(error.to_string())
            })
        }
        Err(_) => Err(fail(format!(
            "it took longer than {} (--pull-timeout)",
            humantime::format_duration(limits.timeout)
        ))),
    }
}

/// Where an artifact is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The repository and tag (or digest).
    pub reference: Reference,
    /// The registry's credentials.
    pub auth: RegistryAuth,
    /// Plain HTTP to a registry that is not on this machine.
    pub insecure: bool,
}

/// What a push or a signature made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The artifact's manifest digest.
    pub digest: codemode_oci::Digest,
    /// The ID of the key it was signed with, when it was.
    pub key_id: Option<String>,
}

/// Pushes the component `file` to `destination` as a CNCF Wasm artifact, then
/// signs it with the private key in `key`, when one is given.
///
/// # Errors
///
/// The file or the key cannot be read, the file is not a component, the
/// registry refuses; each names the reference.
pub async fn push(
    file: &Path,
    destination: &Destination,
    key: Option<&Path>,
    limits: PullLimits,
) -> Result<Published, String> {
    let reference = &destination.reference;
    let fail = |reason: String| format!("cannot push {} to {reference}: {reason}", file.display());
    let key = key.map(read_private_key).transpose().map_err(fail)?;
    let bytes = files::read_regular(file, limits.max_bytes, "--max-pull-bytes")
        .map_err(|e| fail(e.to_string()))?;
    let client =
        client_for(reference, &destination.auth, destination.insecure, limits).map_err(fail)?;
    let name = file.file_name().map_or_else(
        || format!("{}.wasm", reference.name()),
        |n| n.to_string_lossy().into_owned(),
    );
    let work = async {
        let digest = codemode_oci::push(&client, reference, &name, bytes.into())
            .await
            .map_err(|e| e.to_string())?;
        if let Some(key) = &key {
            codemode_oci::sign(&client, reference, &digest, key)
                .await
                .map_err(|e| format!("pushed as {digest}, but not signed: {e}"))?;
        }
        Ok::<_, String>(digest)
    };
    let digest = within(limits.timeout, work).await.map_err(fail)?;
    Ok(Published {
        digest,
        key_id: key.map(|key| key.public().id().to_owned()),
    })
}

/// Signs the artifact `destination` names (a tag is resolved to its digest
/// first) with the private key in `key`, as `cosign sign --key` does.
///
/// # Errors
///
/// The key cannot be read, the registry fails or refuses; each names the
/// reference.
pub async fn sign(
    destination: &Destination,
    key: &Path,
    limits: PullLimits,
) -> Result<Published, String> {
    let reference = &destination.reference;
    let fail = |reason: String| format!("cannot sign {reference}: {reason}");
    let key = read_private_key(key).map_err(fail)?;
    let client =
        client_for(reference, &destination.auth, destination.insecure, limits).map_err(fail)?;
    let work = async {
        let digest = match &reference.target {
            codemode_oci::Target::Digest(digest) => digest.clone(),
            codemode_oci::Target::Tag(tag) => client
                .resolve(&reference.repository, tag)
                .await
                .map_err(|e| e.to_string())?,
        };
        codemode_oci::sign(&client, reference, &digest, &key)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(digest)
    };
    let digest = within(limits.timeout, work).await.map_err(fail)?;
    Ok(Published {
        digest,
        key_id: Some(key.public().id().to_owned()),
    })
}

/// `work`, bounded by `timeout` (`--pull-timeout`).
async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "it took longer than {} (--pull-timeout)",
            humantime::format_duration(timeout)
        )),
    }
}

/// A private key file.
fn read_private_key(path: &Path) -> Result<codemode_oci::PrivateKey, String> {
    let text = files::read_text(path, MAX_SECRET_FILE, "a key file's size")
        .map_err(|e| format!("key {}: {e}", path.display()))?;
    codemode_oci::PrivateKey::from_pem(&text).map_err(|e| format!("key {}: {e}", path.display()))
}

/// A client of `reference`'s registry.
fn client_for(
    reference: &Reference,
    auth: &RegistryAuth,
    insecure: bool,
    limits: PullLimits,
) -> Result<Client, String> {
    let credentials = credentials(auth, &reference.registry)?;
    let transport = if insecure {
        codemode_oci::Transport::Http
    } else if reference.is_loopback() {
        codemode_oci::Transport::HttpsOrHttp
    } else {
        codemode_oci::Transport::Https
    };
    Client::new(
        &reference.registry,
        transport,
        credentials,
        Limits {
            max_blob_bytes: limits.max_bytes,
            read_timeout: READ_TIMEOUT.min(limits.timeout),
        },
    )
    .map_err(|e| e.to_string())
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

/// Where the plugin file at `path` was pulled from, when `<name>.oci.json`
/// beside it says so and names the file's own digest (`bytes`, or the file read
/// again): a provenance left by an older version, or written by hand for
/// another file, says nothing.
pub fn provenance_of(path: &Path, bytes: Option<&[u8]>) -> Option<codemode_oci::Provenance> {
    let sidecar = path.with_extension(codemode_oci::PROVENANCE_EXTENSION);
    let text = files::read_text(&sidecar, MAX_PROVENANCE_BYTES, "64 KiB").ok()?;
    let provenance: codemode_oci::Provenance = serde_json::from_str(&text).ok()?;
    let digest = match bytes {
        Some(bytes) => codemode_oci::Digest::of(bytes),
        None => codemode_oci::file_digest(path)?,
    };
    (provenance.layer == digest.as_str()).then_some(provenance)
}

/// The largest provenance file read.
const MAX_PROVENANCE_BYTES: u64 = 64 * 1024;

/// The default time between two polls of a tag.
pub const DEFAULT_PULL_INTERVAL: Duration = Duration::from_secs(300);
/// The first wait after a failed pull; it doubles up to the entry's interval.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// One `[[plugin]]` entry: what to pull, and how often to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullEntry {
    /// What to pull.
    pub source: PluginSource,
    /// How often its tag is looked at again (a digest is pulled once).
    pub interval: Duration,
}

/// The plugins a server keeps pulled: one task per entry on a thread of its own
/// (`codemode-pulls`), each pulling at once, then polling its tag. A pull that
/// fails keeps the folder's version and is logged once per new reason (one WARN
/// naming the reference), retried after 1 s, doubling up to the interval; a new
/// digest is written only once verified, and the folder's watcher reloads it
/// as any plugin file. Dropping the handle stops the thread.
#[derive(Debug)]
pub struct Pulls {
    /// The entries not pulled yet whose plugin file is missing from the folder:
    /// file stem → reference.
    pending: Pending,
    stop: tokio_util::sync::CancellationToken,
    /// Told when the thread ends.
    ended: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

/// The entries not pulled yet, by file stem.
type Pending = Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>;

/// How long dropping [`Pulls`] waits for its thread (a pull is abandoned at its
/// next wait; a rename in progress finishes).
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Pulls {
    /// Starts pulling `entries` into `dir` (made when missing); `None` without
    /// entries.
    ///
    /// # Errors
    ///
    /// The folder cannot be made, or the thread or its runtime cannot be started.
    pub fn start_all(
        entries: &[PullEntry],
        dir: &Path,
        limits: PullLimits,
    ) -> Result<Option<Arc<Self>>, String> {
        if entries.is_empty() {
            return Ok(None);
        }
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot make the plugins folder `{}` for the [[plugin]] entries: {e}",
                    dir.display()
                )
            })?;
            tracing::info!(folder = %dir.display(), "made the plugins folder for the [[plugin]] entries");
        }
        let pulls = Self::start(entries.to_vec(), dir.to_owned(), limits)?;
        tracing::info!(
            plugins = entries.len(),
            "pulling the config file's plugins from their registries"
        );
        Ok(Some(Arc::new(pulls)))
    }

    /// Starts pulling `entries` into `dir`.
    ///
    /// # Errors
    ///
    /// The thread or its runtime cannot be started.
    pub fn start(
        entries: Vec<PullEntry>,
        dir: PathBuf,
        limits: PullLimits,
    ) -> Result<Self, String> {
        remove_leftovers(&dir);
        let pending: std::collections::BTreeMap<String, String> = entries
            .iter()
            .filter(|entry| !dir.join(format!("{}.wasm", entry.source.name)).exists())
            .map(|entry| {
                (
                    entry.source.name.clone(),
                    entry.source.reference.to_string(),
                )
            })
            .collect();
        let pending = Arc::new(std::sync::Mutex::new(pending));
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the pulls' runtime: {e}"))?;
        let (thread_pending, thread_stop) = (pending.clone(), stop.clone());
        std::thread::Builder::new()
            .name("codemode-pulls".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for entry in entries {
                        let (dir, pending) = (dir.clone(), thread_pending.clone());
                        tasks.spawn(keep_pulled(entry, dir, limits, pending));
                    }
                    tokio::select! {
                        () = thread_stop.cancelled() => tasks.abort_all(),
                        _ = async { while tasks.join_next().await.is_some() {} } => {}
                    }
                    // The aborted tasks end at their next wait.
                    while tasks.join_next().await.is_some() {}
                });
                let _ = ended_tx.send(());
            })
            .map_err(|e| format!("cannot start the pulls' thread: {e}"))?;
        Ok(Self {
            pending,
            stop,
            ended: std::sync::Mutex::new(ended),
        })
    }

    /// The references not pulled yet whose plugin is not in the folder either
    /// (`/readyz` names them).
    pub fn pending(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|pending| pending.values().cloned().collect())
            .unwrap_or_default()
    }
}

impl Drop for Pulls {
    /// Stops the pulls and waits (a few seconds at most) until none writes any
    /// more: the pulls a config reload starts next write the same files.
    fn drop(&mut self) {
        self.stop.cancel();
        if let Ok(ended) = self.ended.lock() {
            let _ = ended.recv_timeout(STOP_WAIT);
        }
    }
}

/// Pulls `entry` now, then at its interval (a digest once).
async fn keep_pulled(entry: PullEntry, dir: PathBuf, limits: PullLimits, pending: Pending) {
    let reference = entry.source.reference.to_string();
    let name = entry.source.name.clone();
    let mut retry = FIRST_RETRY;
    let mut last_failure: Option<String> = None;
    let mut pulled_digest: Option<codemode_oci::Digest> = None;
    loop {
        // An unchanged tag costs one HEAD: the rest was checked when it was
        // pulled (the keys in force then; a config reload restarts the pulls).
        let unchanged = match &pulled_digest {
            Some(digest) => resolve(&entry.source, limits)
                .await
                .is_ok_and(|now| now == *digest),
            None => false,
        };
        let outcome = if unchanged {
            Ok(None)
        } else {
            pull(&entry.source, &dir, limits).await.map(Some)
        };
        let wait = match outcome {
            Ok(pulled) => {
                if let Some(pulled) = pulled {
                    if pulled.changed {
                        tracing::info!(
                            reference = %reference,
                            digest = %pulled.digest,
                            file = %pulled.file.display(),
                            verification = %pulled.verification,
                            "plugin pulled"
                        );
                    } else if last_failure.is_some() {
                        tracing::info!(reference = %reference, digest = %pulled.digest, "plugin pull works again; the folder has this digest already");
                    }
                    if let codemode_oci::Verification::Unverified(reason) = &pulled.verification
                        && pulled.changed
                    {
                        tracing::warn!(reference = %reference, reason = %reason, "plugin pulled without a verified signature (verify = warn)");
                    }
                    pulled_digest = Some(pulled.digest);
                }
                if let Ok(mut pending) = pending.lock() {
                    pending.remove(&name);
                }
                last_failure = None;
                retry = FIRST_RETRY;
                entry.interval
            }
            Err(failure) => {
                if let Some(refused) = &failure.refused
                    && remove_refused(&dir, &name, refused)
                {
                    // The version in place is the one refused (a policy made
                    // stricter, a key withdrawn): it stops serving.
                    tracing::error!(reference = %reference, digest = %refused, reason = %failure, "plugin removed from the folder: the version in place no longer verifies");
                    pulled_digest = None;
                    if let Ok(mut pending) = pending.lock() {
                        pending.insert(name.clone(), reference.clone());
                    }
                    last_failure = Some(failure.message.clone());
                }
                let reason = failure.message;
                if last_failure.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(reference = %reference, reason = %reason, "plugin pull failed; the folder's version is kept");
                    last_failure = Some(reason);
                }
                let wait = retry.min(entry.interval);
                retry = retry.saturating_mul(2);
                wait
            }
        };
        if matches!(
            entry.source.reference.target,
            codemode_oci::Target::Digest(_)
        ) && pulled_digest.is_some()
        {
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

/// The digest `source`'s tag names now.
async fn resolve(
    source: &PluginSource,
    limits: PullLimits,
) -> Result<codemode_oci::Digest, String> {
    let reference = &source.reference;
    let client = client_for(reference, &source.auth, source.insecure, limits)?;
    let target = reference.target_str().to_owned();
    match tokio::time::timeout(
        limits.timeout,
        client.resolve(&reference.repository, &target),
    )
    .await
    {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}

/// Removes `<name>.wasm` and `<name>.oci.json` from `dir` when the provenance
/// says the file in place is the digest `refused` (and the file is what the
/// provenance says); whether it did.
fn remove_refused(dir: &Path, name: &str, refused: &str) -> bool {
    let file = dir.join(format!("{name}.wasm"));
    let in_place = provenance_of(&file, None).is_some_and(|p| p.digest == refused);
    if !in_place {
        return false;
    }
    let removed = std::fs::remove_file(&file).is_ok();
    let _ = std::fs::remove_file(file.with_extension(codemode_oci::PROVENANCE_EXTENSION));
    removed
}

/// Removes the temporary files of pulls a previous process did not finish
/// (`.<name>.<random>.pulling`).
fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".pulling") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
