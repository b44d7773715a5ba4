//! `[[plugin]]` tables: the plugins the config file pulls from OCI registries.

use std::path::{Path, PathBuf};

use codemode_server::units::{MAX_DURATION, MAX_DURATION_TEXT, parse_duration};
use serde::Deserialize;

use crate::cli::Cli;

/// The key of the tables that name plugins pulled from registries (`[[plugin]]`).
pub(super) const PLUGIN_KEY: &str = "plugin";

/// The file's `[[plugin]]` tables.
#[derive(Debug, Deserialize)]
struct Plugins {
    #[serde(default)]
    plugin: Vec<toml::Spanned<PluginTable>>,
}

/// One `[[plugin]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PluginTable {
    /// The OCI reference.
    r#ref: String,
    name: Option<String>,
    digest: Option<String>,
    verify: Option<String>,
    keys: Option<Vec<PathBuf>>,
    registry_auth: Option<PathBuf>,
    registry_token: Option<PathBuf>,
    insecure: Option<bool>,
    poll: Option<String>,
}

/// One `[[plugin]]` table, checked; `None` where the flags decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PluginSettings {
    /// The table's line in the file.
    pub(super) line: usize,
    pub(super) source: codemode_server::oci::PluginSource,
    verify: Option<codemode_oci::Policy>,
    keys: Option<Vec<PathBuf>>,
    poll: Option<std::time::Duration>,
}

impl PluginSettings {
    /// The entry, `--verify`, `--verify-key` and `--pull-interval` filling in
    /// what the table left out.
    pub(super) fn entry(self, cli: &Cli) -> codemode_server::oci::PullEntry {
        let mut source = self.source;
        source.policy = self.verify.unwrap_or(cli.pull.verify);
        source.keys = self.keys.unwrap_or_else(|| cli.pull.verify_keys.clone());
        codemode_server::oci::PullEntry {
            source,
            interval: self
                .poll
                .or(cli.pull.pull_interval)
                .unwrap_or(codemode_server::oci::DEFAULT_PULL_INTERVAL),
        }
    }
}

/// The plugins of the config file `text`; relative paths (keys, credentials)
/// are relative to `base`.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
pub(super) fn plugins(
    text: &str,
    base: &Path,
) -> Result<Vec<(usize, PluginSettings)>, (usize, String)> {
    use codemode_server::oci::{PluginSource, RegistryAuth};
    let parsed: Plugins = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        (offset, format!("[[{PLUGIN_KEY}]]: {}", error.message()))
    })?;
    let mut out: Vec<(usize, PluginSettings)> = Vec::with_capacity(parsed.plugin.len());
    for table in parsed.plugin {
        let offset = table.span().start;
        let table = table.into_inner();
        let at = |message: String| (offset, format!("plugin `{}`: {message}", table.r#ref));
        let reference =
            codemode_oci::Reference::parse(&table.r#ref).map_err(|e| at(e.to_string()))?;
        let name = table
            .name
            .clone()
            .unwrap_or_else(|| reference.name().to_owned());
        codemode_oci::check_name(&name).map_err(|e| at(e.to_string()))?;
        if let Some((_, other)) = out.iter().find(|(_, p)| p.source.name == name) {
            return Err(at(format!(
                "`{other}` writes {name}.wasm too: give one of them another `name`",
                other = other.source.reference
            )));
        }
        let pinned = table
            .digest
            .as_deref()
            .map(codemode_oci::Digest::parse)
            .transpose()
            .map_err(|e| at(format!("digest: {e}")))?;
        let verify = table
            .verify
            .as_deref()
            .map(str::parse::<codemode_oci::Policy>)
            .transpose()
            .map_err(|e| at(format!("verify: {e}")))?;
        let auth = match (&table.registry_auth, &table.registry_token) {
            (Some(_), Some(_)) => {
                return Err(at(
                    "give `registry-auth` (a Docker config.json) or `registry-token` (a token file), not both".to_owned(),
                ));
            }
            (Some(config), None) => RegistryAuth::DockerConfig(base.join(config)),
            (None, Some(token)) => RegistryAuth::TokenFile(base.join(token)),
            (None, None) => RegistryAuth::DockerDefault,
        };
        let poll = table
            .poll
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|message| at(format!("poll: {message}")))?;
        if poll.is_some_and(|p| p.is_zero() || p > MAX_DURATION) {
            return Err(at(format!("poll must be positive and {MAX_DURATION_TEXT}")));
        }
        out.push((
            offset,
            PluginSettings {
                line: 0,
                source: PluginSource {
                    reference,
                    name,
                    pinned,
                    policy: codemode_oci::Policy::default(),
                    keys: Vec::new(),
                    auth,
                    insecure: table.insecure.unwrap_or(false),
                },
                verify,
                keys: table
                    .keys
                    .as_ref()
                    .map(|keys| keys.iter().map(|key| base.join(key)).collect()),
                poll,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{args, assert_file_errors, config_file};

    use crate::config::parse;

    #[test]
    fn plugin_tables_become_pull_entries_the_flags_filling_in() -> anyhow::Result<()> {
        use codemode_server::oci::{PluginSource, PullEntry, RegistryAuth};
        let (dir, path) = config_file(
            "plugins",
            r#"
verify = "warn"
verify-key = ["keys/team.pub"]
pull-interval = "10m"

[[plugin]]
ref = "registry.example/team/stats:1.2"

[[plugin]]
ref = "127.0.0.1:5000/team/text@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
name = "words"
verify = "require"
keys = ["a.pub", "b.pub"]
registry-token = "secrets/token"
insecure = true
poll = "30s"
"#,
        )?;
        let cli = parse(args(&["--config", &path.display().to_string()]))?;
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            cli.plugin_entries,
            vec![
                PullEntry {
                    source: PluginSource {
                        reference: codemode_oci::Reference::parse(
                            "registry.example/team/stats:1.2"
                        )?,
                        name: "stats".into(),
                        pinned: None,
                        policy: codemode_oci::Policy::Warn,
                        keys: vec![dir.join("keys/team.pub")],
                        auth: RegistryAuth::DockerDefault,
                        insecure: false,
                    },
                    interval: Duration::from_secs(600),
                },
                PullEntry {
                    source: PluginSource {
                        reference: codemode_oci::Reference::parse(&format!(
                            "127.0.0.1:5000/team/text@{digest}"
                        ))?,
                        name: "words".into(),
                        pinned: None,
                        policy: codemode_oci::Policy::Require,
                        keys: vec![dir.join("a.pub"), dir.join("b.pub")],
                        auth: RegistryAuth::TokenFile(dir.join("secrets/token")),
                        insecure: true,
                    },
                    interval: Duration::from_secs(30),
                },
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_plugin_tables_are_refused_naming_their_line() -> anyhow::Result<()> {
        let cases = [
            (
                "pl-unknown",
                "[[plugin]]\nref = \"r.example/a:1\"\nsigned = true\n",
                "line 3: [[plugin]]: unknown field `signed`, expected one of `ref`, `name`, `digest`, `verify`, `keys`, `registry-auth`, `registry-token`, `insecure`, `poll`",
            ),
            (
                "pl-ref",
                "[[plugin]]\nref = \"team/a:1\"\n",
                "line 1: plugin `team/a:1`: `team/a:1` names no registry: write its host first, as in registry.example/team/a:1 (there is no default registry)",
            ),
            (
                "pl-twice",
                "[[plugin]]\nref = \"r.example/a:1\"\n\n[[plugin]]\nref = \"s.example/b/a:2\"\n",
                "line 4: plugin `s.example/b/a:2`: `r.example/a:1` writes a.wasm too: give one of them another `name`",
            ),
            (
                "pl-name",
                "[[plugin]]\nref = \"r.example/a:1\"\nname = \"../x\"\n",
                "line 1: plugin `r.example/a:1`: `../x` cannot name a plugin file: lowercase letters, digits, `_` and `-`, starting with a letter, at most 64",
            ),
            (
                "pl-verify",
                "[[plugin]]\nref = \"r.example/a:1\"\nverify = \"strict\"\n",
                "line 1: plugin `r.example/a:1`: verify: `strict` is not a verification policy: require, warn or off",
            ),
            (
                "pl-digest",
                "[[plugin]]\nref = \"r.example/a:1\"\ndigest = \"md5:00\"\n",
                "line 1: plugin `r.example/a:1`: digest: digests by `md5` are not supported: only sha256",
            ),
            (
                "pl-auth",
                "[[plugin]]\nref = \"r.example/a:1\"\nregistry-auth = \"c.json\"\nregistry-token = \"t\"\n",
                "line 1: plugin `r.example/a:1`: give `registry-auth` (a Docker config.json) or `registry-token` (a token file), not both",
            ),
            (
                "pl-no-keys",
                "[[plugin]]\nref = \"r.example/a:1\"\n",
                "line 1: plugin `r.example/a:1`: verify = \"require\" needs a public key: give `keys` in the table or `verify-key` (or verify = \"warn\" or \"off\" to pull unsigned plugins)",
            ),
            (
                "pl-poll",
                "[[plugin]]\nref = \"r.example/a:1\"\npoll = \"0s\"\n",
                "line 1: plugin `r.example/a:1`: poll must be positive and at most 1 day (24h)",
            ),
        ];
        assert_file_errors(&cases)
    }
}
