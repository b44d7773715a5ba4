//! Reloading the config file (`--config`) while serving: on SIGHUP and when the
//! file changes, beside the tokens and the policy (`secrets.rs` reads them all on
//! one thread and applies each).
//!
//! A reload parses the command line, the environment and the file again, exactly
//! as at start, and compares the result with the last file read. Upstreams added,
//! removed or changed are started, stopped or restarted
//! ([`Service::set_upstreams`]); the budgets of one execution take effect for the
//! executions that start after it ([`Service::retune`]); the disabled IDs are
//! applied before the upstreams (a new upstream's disabled tool never serves);
//! changed `[[plugin]]` entries or pull settings (`--verify-key`, ...) start the
//! pulls again ([`Service::set_pulls`]); changed `[[quota]]` tables apply to
//! the executions admitted after it ([`Service::set_quotas`]);
//! any other setting that changed (the listen address, the cache folder,
//! `--max-memory`, ...) keeps its value and is logged as needing a restart. A file that does not parse changes
//! nothing: one ERROR line names the file, the line and the reason.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use codemode_server::{ConfigFile, Limits, Service, UpstreamConfig};

use crate::cli::Cli;

/// The config file's key of the disabled capability IDs: applied while serving.
const DISABLE_KEY: &str = "disable";

/// The config file's keys of the pulls from registries: applied while serving,
/// by starting the pulls again (a key rotation needs no restart).
const PULL_KEYS: [&str; 5] = [
    "verify",
    "verify-key",
    "pull-interval",
    "pull-timeout",
    "max-pull-bytes",
];

/// The config file's keys that set the budgets of one execution: applied while
/// serving, as far as [`Limits::retune`] allows.
const LIMIT_KEYS: [&str; 11] = [
    "max-source-bytes",
    "max-execution-steps",
    "max-execution-time",
    "max-native-calls",
    "max-value-depth",
    "max-value-bytes",
    "max-intermediate-value-bytes",
    "max-fuel",
    "max-concurrent-executions",
    "max-memory",
    "max-total-memory",
];

/// What a reload compares: what the config file set.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    /// Each key the file set (and neither the command line nor the environment),
    /// with its values as the file gave them.
    keys: BTreeMap<String, Vec<OsString>>,
    upstreams: Vec<UpstreamConfig>,
    openapi: Vec<codemode_server::OpenApiConfig>,
    quotas: codemode_server::quota::Quotas,
    limits: Limits,
    disabled: Vec<String>,
    plugins: Vec<codemode_server::oci::PullEntry>,
    pull_limits: (u64, std::time::Duration),
    /// The digest of each key file the entries name: a key replaced in place
    /// (same path) starts the pulls again too.
    key_contents: Vec<Option<codemode_oci::Digest>>,
}

impl Settings {
    fn of(cli: &Cli) -> Self {
        let mut keys: BTreeMap<String, Vec<OsString>> = BTreeMap::new();
        for arg in &cli.file_args {
            let text = arg.to_string_lossy();
            let text = text.trim_start_matches("--");
            // `--key=value`, or a switch's bare `--key`.
            let key = text.split_once('=').map_or(text, |(key, _)| key);
            keys.entry(key.to_owned()).or_default().push(arg.clone());
        }
        Self {
            keys,
            upstreams: cli.upstreams.clone(),
            openapi: cli.openapi.clone(),
            quotas: cli.quotas.clone(),
            limits: cli.limits(),
            disabled: cli.disable.clone(),
            plugins: cli.plugin_entries.clone(),
            pull_limits: (cli.pull.max_pull_bytes, cli.pull.pull_timeout),
            key_contents: cli
                .plugin_entries
                .iter()
                .flat_map(|entry| &entry.source.keys)
                .map(|key| codemode_oci::file_digest(key))
                .collect(),
        }
    }

    /// The keys whose values differ between `self` and `new` (set, changed or
    /// removed), in name order.
    fn changed_keys<'a>(&'a self, new: &'a Settings) -> Vec<&'a str> {
        let mut keys: Vec<&str> = self
            .keys
            .keys()
            .chain(new.keys.keys())
            .map(String::as_str)
            .filter(|key| self.keys.get(*key) != new.keys.get(*key))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// The config file of a server, and where its changes go.
pub(crate) struct ConfigReload {
    path: PathBuf,
    /// The command line as given: parsed again with the file as it is now.
    args: Vec<OsString>,
    /// What the last file read set.
    last: Mutex<Settings>,
    /// The service, once loaded.
    service: Arc<OnceLock<Arc<Service>>>,
}

impl ConfigReload {
    /// The reload of the config file at `path` of a server started with `args`,
    /// which set `cli`; applied to the service once `service` holds it.
    pub(crate) fn new(
        path: PathBuf,
        args: Vec<OsString>,
        cli: &Cli,
        service: Arc<OnceLock<Arc<Service>>>,
    ) -> Self {
        Self {
            path,
            args,
            last: Mutex::new(Settings::of(cli)),
            service,
        }
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What the command line, the environment and the file set now, or why they
    /// do not parse, on one line (it names the file and the line).
    pub(crate) fn read(args: Vec<OsString>) -> Result<Cli, String> {
        crate::config::parse(args).map_err(|error| {
            let text = error.to_string();
            let text = text.trim().trim_start_matches("error: ");
            text.split('\n')
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The command line to parse again.
    pub(crate) fn args(&self) -> Vec<OsString> {
        self.args.clone()
    }

    /// Applies what [`ConfigReload::read`] got; logs every outcome.
    pub(crate) fn apply(&self, read: Result<Cli, String>, cause: &str) {
        let file = self.path.display();
        let cli = match read {
            Ok(cli) => cli,
            Err(reason) => {
                tracing::error!(file = %file, reason = %reason, cause, "config reload failed; the settings in force stay");
                if let Some(service) = self.service.get() {
                    service.config_reloaded(ConfigFile::Config, false);
                }
                return;
            }
        };
        let Some(service) = self.service.get() else {
            tracing::warn!(file = %file, cause, "config file not reloaded: the service is still loading (reload it again once ready)");
            return;
        };
        let new = Settings::of(&cli);
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed: Vec<String> = last
            .changed_keys(&new)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut need_restart: Vec<&str> = changed
            .iter()
            .map(String::as_str)
            .filter(|key| {
                !LIMIT_KEYS.contains(key) && !PULL_KEYS.contains(key) && *key != DISABLE_KEY
            })
            .collect();
        let mut limits_changed = false;
        if new.limits != last.limits {
            match service.retune(&new.limits) {
                Ok(retuned) => {
                    limits_changed = true;
                    // Only what the file changed: a default derived from it
                    // (`--max-total-memory` from `--max-memory`) is no news.
                    need_restart.extend(
                        retuned
                            .need_restart
                            .iter()
                            .map(|flag| flag.trim_start_matches("--"))
                            .filter(|key| changed.iter().any(|c| c == key)),
                    );
                }
                Err(error) => {
                    tracing::error!(file = %file, reason = %error, cause, "config reload failed; the settings in force stay");
                    service.config_reloaded(ConfigFile::Config, false);
                    return;
                }
            }
        }
        need_restart.sort_unstable();
        let mut new = new;
        if new.disabled != last.disabled
            && let Err(error) = service.set_disabled(new.disabled.clone())
        {
            tracing::error!(file = %file, reason = %error, cause, "the disabled IDs could not be applied; the ones in force stay");
            // Tried again by the next reload, even of the same file.
            new.disabled = last.disabled.clone();
        }
        for key in &need_restart {
            tracing::warn!(file = %file, key = %key, cause, "a config file setting changed that needs a restart; it keeps its value until then");
        }
        let pulls = if new.plugins == last.plugins
            && new.pull_limits == last.pull_limits
            && new.key_contents == last.key_contents
        {
            "unchanged"
        } else {
            // The old pulls stop (and are waited for) before the new start.
            service.set_pulls(None);
            match codemode_server::oci::Pulls::start_all(
                &cli.plugin_entries,
                &cli.plugins,
                cli.pull_limits(),
            ) {
                Ok(pulls) => {
                    service.set_pulls(pulls);
                    "restarted"
                }
                Err(error) => {
                    tracing::error!(file = %file, reason = %error, cause, "the [[plugin]] entries could not be applied; no plugin is pulled until a reload that can");
                    "stopped"
                }
            }
        };
        let upstreams = if new.upstreams == last.upstreams {
            Default::default()
        } else {
            service.set_upstreams(&new.upstreams)
        };
        let quotas = if new.quotas == last.quotas {
            "unchanged"
        } else {
            service.set_quotas(new.quotas.clone());
            "changed"
        };
        // Always: a kept service reads its spec again, which may have changed.
        let openapi = service.set_openapi(&new.openapi);
        tracing::info!(
            file = %file,
            cause,
            limits = if limits_changed { "changed" } else { "unchanged" },
            disabled = new.disabled.len(),
            upstreams_added = %upstreams.added.join(","),
            upstreams_removed = %upstreams.removed.join(","),
            upstreams_restarted = %upstreams.restarted.join(","),
            openapi_added = %openapi.added.join(","),
            openapi_removed = %openapi.removed.join(","),
            openapi_restarted = %openapi.restarted.join(","),
            plugin_pulls = pulls,
            quotas,
            "config reloaded"
        );
        service.config_reloaded(ConfigFile::Config, true);
        *last = new;
    }
}
