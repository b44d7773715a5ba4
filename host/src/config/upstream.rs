//! `[[upstream]]` tables: the upstream MCP servers of the config file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_server::units::{MAX_DURATION, MAX_DURATION_TEXT, parse_duration};
use codemode_server::{
    Secret, UpstreamAuth, UpstreamConfig, UpstreamTransport, check_upstream_name,
};
use serde::Deserialize;

/// The key of the tables that configure upstream MCP servers (`[[upstream]]`).
pub(super) const UPSTREAM_KEY: &str = "upstream";

/// `auth = "forward"`: an HTTP upstream's calls carry the caller's access token.
pub(super) const AUTH_FORWARD: &str = "forward";

/// `auth = "token-exchange"`: an HTTP upstream's calls carry a token the issuer
/// made for its `audience` in exchange for the caller's (RFC 8693).
pub(super) const AUTH_EXCHANGE: &str = "token-exchange";

/// The file's `[[upstream]]` tables.
#[derive(Debug, Deserialize)]
struct Upstreams {
    #[serde(default)]
    upstream: Vec<toml::Spanned<UpstreamTable>>,
}

/// One `[[upstream]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct UpstreamTable {
    name: String,
    command: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    bearer_token_env: Option<String>,
    auth: Option<String>,
    audience: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    timeout: Option<String>,
    tools: Option<Vec<String>>,
}

impl UpstreamTable {
    /// How to reach it: `command` (with `env`, `cwd`) or `url` (with
    /// `bearer-token-env` or `auth`, `headers`), never both. A relative program
    /// path with a `/`, and a relative `cwd`, are relative to `base`.
    fn transport(&self, base: &Path) -> Result<UpstreamTransport, String> {
        let http_only = self.bearer_token_env.is_some()
            || self.headers.is_some()
            || self.auth.is_some()
            || self.audience.is_some();
        let command_only = self.env.is_some() || self.cwd.is_some();
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err("give `command` or `url`, not both".to_owned()),
            (None, None) => {
                Err("needs `command` (a child on stdio) or `url` (Streamable HTTP)".to_owned())
            }
            (Some(_), None) if http_only => Err(
                "`bearer-token-env`, `auth`, `audience` and `headers` go with `url`, not `command`"
                    .to_owned(),
            ),
            (None, Some(_)) if command_only => {
                Err("`env` and `cwd` go with `command`, not `url`".to_owned())
            }
            (Some(command), None) => {
                let Some(program) = command.first() else {
                    return Err("`command` needs at least the program".to_owned());
                };
                let mut command = command.clone();
                if program.contains('/') && Path::new(program).is_relative() {
                    command[0] = base.join(program).display().to_string();
                }
                Ok(UpstreamTransport::Command {
                    command,
                    env: self.env.clone().unwrap_or_default(),
                    cwd: self.cwd.as_ref().map(|cwd| base.join(cwd)),
                })
            }
            (None, Some(url)) => {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(format!(
                        "`url` must start with https:// or http://, not `{url}`"
                    ));
                }
                let token = match &self.bearer_token_env {
                    Some(variable) => match std::env::var(variable) {
                        Ok(token) if !token.is_empty() => Some(Secret::new(token)),
                        Ok(_) | Err(_) => {
                            return Err(format!(
                                "bearer-token-env: the variable {variable} is not set"
                            ));
                        }
                    },
                    None => None,
                };
                let auth = match (self.auth.as_deref(), token, &self.audience) {
                    (Some(AUTH_EXCHANGE), session, Some(audience))
                        if !audience.trim().is_empty() =>
                    {
                        UpstreamAuth::TokenExchange {
                            audience: audience.clone(),
                            session,
                        }
                    }
                    (Some(AUTH_EXCHANGE), _, _) => {
                        return Err(format!(
                            "`auth = \"{AUTH_EXCHANGE}\"` needs `audience`: the upstream's resource identifier, which the exchanged token names"
                        ));
                    }
                    (_, _, Some(_)) => {
                        return Err(format!("`audience` goes with `auth = \"{AUTH_EXCHANGE}\"`"));
                    }
                    (Some(AUTH_FORWARD), token, None) => UpstreamAuth::Forward(token),
                    (Some(other), _, None) => {
                        return Err(format!(
                            "`auth` must be \"{AUTH_FORWARD}\" (each call carries its caller's access token) or \"{AUTH_EXCHANGE}\" (one the issuer exchanges it for), not \"{other}\""
                        ));
                    }
                    (None, Some(token), None) => UpstreamAuth::Bearer(token),
                    (None, None, None) => UpstreamAuth::None,
                };
                if matches!(
                    auth,
                    UpstreamAuth::Forward(_) | UpstreamAuth::TokenExchange { .. }
                ) {
                    // Users' tokens cross the network only encrypted.
                    codemode_server::authz::oauth::check_url("url", url)
                        .map_err(|error| format!("{error}; `auth` sends users' tokens to it"))?;
                    // Nothing of the operator's rides along with a caller's token.
                    if let Some(name) =
                        self.headers
                            .iter()
                            .flatten()
                            .map(|(name, _)| name)
                            .find(|name| {
                                name.eq_ignore_ascii_case("authorization")
                                    || name.eq_ignore_ascii_case("proxy-authorization")
                                    || name.eq_ignore_ascii_case("cookie")
                            })
                    {
                        return Err(format!(
                            "`headers` may not set `{name}` with `auth`: each call carries its caller's credential"
                        ));
                    }
                }
                Ok(UpstreamTransport::Http {
                    url: url.clone(),
                    auth,
                    headers: self.headers.clone().unwrap_or_default(),
                })
            }
        }
    }
}

/// The upstreams of the config file `text`; relative paths (`cwd`, a program path
/// with a `/`) are relative to `base`.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
pub(super) fn upstreams(text: &str, base: &Path) -> Result<Vec<UpstreamConfig>, (usize, String)> {
    let parsed: Upstreams = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        (offset, format!("[[{UPSTREAM_KEY}]]: {}", error.message()))
    })?;
    let mut out: Vec<UpstreamConfig> = Vec::with_capacity(parsed.upstream.len());
    for table in parsed.upstream {
        let offset = table.span().start;
        let table = table.into_inner();
        let at = |message: String| (offset, format!("upstream `{}`: {message}", table.name));
        check_upstream_name(&table.name).map_err(|reason| (offset, reason))?;
        if out.iter().any(|u| u.name == table.name) {
            return Err(at("the name is given twice".to_owned()));
        }
        let transport = table.transport(base).map_err(at)?;
        let timeout = table
            .timeout
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|message| at(format!("timeout: {message}")))?;
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(at("timeout must be positive".to_owned()));
        }
        if timeout.is_some_and(|t| t > MAX_DURATION) {
            return Err(at(format!("timeout must be {MAX_DURATION_TEXT}")));
        }
        out.push(UpstreamConfig {
            name: table.name.clone(),
            transport,
            timeout,
            tools: table.tools.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{args, assert_file_errors, config_file};
    use super::*;
    use crate::config::parse;

    #[test]
    fn upstream_tables_become_upstreams() -> anyhow::Result<()> {
        let (dir, path) = config_file(
            "upstreams",
            r#"
plugins = "p"

[[upstream]]
name = "git"
command = ["mcp-server-git", "--repository", "/srv/repo"]
env = { GIT_AUTHOR_NAME = "agent" }
cwd = "work"
timeout = "30s"
tools = ["git_status", "git_log"]

[[upstream]]
name = "local"
command = ["./servers/local.py"]

[[upstream]]
name = "docs"
url = "https://mcp.example.com/mcp"
headers = { "X-Org" = "acme" }

[[upstream]]
name = "crm"
url = "https://crm.example.com/mcp"
auth = "forward"
bearer-token-env = "PATH"

[[upstream]]
name = "billing"
url = "https://billing.example.com/mcp"
auth = "token-exchange"
audience = "https://billing.example.com"
"#,
        )?;
        let cli = parse(args(&["--config", &path.display().to_string()]))?;
        assert_eq!(
            cli.upstreams,
            vec![
                UpstreamConfig {
                    name: "git".into(),
                    transport: UpstreamTransport::Command {
                        command: vec![
                            "mcp-server-git".into(),
                            "--repository".into(),
                            "/srv/repo".into()
                        ],
                        env: BTreeMap::from([("GIT_AUTHOR_NAME".into(), "agent".into())]),
                        cwd: Some(dir.join("work")),
                    },
                    timeout: Some(Duration::from_secs(30)),
                    tools: Some(vec!["git_status".into(), "git_log".into()]),
                },
                UpstreamConfig {
                    name: "local".into(),
                    transport: UpstreamTransport::Command {
                        command: vec![dir.join("./servers/local.py").display().to_string()],
                        env: BTreeMap::new(),
                        cwd: None,
                    },
                    timeout: None,
                    tools: None,
                },
                UpstreamConfig {
                    name: "docs".into(),
                    transport: UpstreamTransport::Http {
                        url: "https://mcp.example.com/mcp".into(),
                        auth: UpstreamAuth::None,
                        headers: BTreeMap::from([("X-Org".into(), "acme".into())]),
                    },
                    timeout: None,
                    tools: None,
                },
                UpstreamConfig {
                    name: "crm".into(),
                    transport: UpstreamTransport::Http {
                        url: "https://crm.example.com/mcp".into(),
                        auth: UpstreamAuth::Forward(Some(Secret::new(
                            std::env::var("PATH").unwrap_or_default()
                        ))),
                        headers: BTreeMap::new(),
                    },
                    timeout: None,
                    tools: None,
                },
                UpstreamConfig {
                    name: "billing".into(),
                    transport: UpstreamTransport::Http {
                        url: "https://billing.example.com/mcp".into(),
                        auth: UpstreamAuth::TokenExchange {
                            audience: "https://billing.example.com".into(),
                            session: None,
                        },
                        headers: BTreeMap::new(),
                    },
                    timeout: None,
                    tools: None,
                },
            ]
        );
        let cases = [
            (
                "up-unknown",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nretries = 3\n",
                "line 4: [[upstream]]: unknown field `retries`, expected one of `name`, `command`, `env`, `cwd`, `url`, `bearer-token-env`, `auth`, `audience`, `headers`, `timeout`, `tools`",
            ),
            (
                "up-twice",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[upstream]]\nname = \"a\"\ncommand = [\"y\"]\n",
                "line 5: upstream `a`: the name is given twice",
            ),
            (
                "up-timeout",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = \"30\"\n",
                "line 1: upstream `a`: timeout: `30` needs a unit: ms, s, m or h (e.g. 5s)",
            ),
            (
                "up-name",
                "[[upstream]]\nname = \"my-server\"\ncommand = [\"x\"]\n",
                "line 1: `my-server` cannot be the root of capability names: it must be an identifier (letters, digits, `_`), not a Starlark keyword or builtin",
            ),
            (
                "up-builtin",
                "[[upstream]]\nname = \"json\"\ncommand = [\"x\"]\n",
                "line 1: `json` cannot be the root of capability names: it must be an identifier (letters, digits, `_`), not a Starlark keyword or builtin",
            ),
            (
                "up-both",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nurl = \"https://a/mcp\"\n",
                "line 1: upstream `a`: give `command` or `url`, not both",
            ),
            (
                "up-neither",
                "[[upstream]]\nname = \"a\"\n",
                "line 1: upstream `a`: needs `command` (a child on stdio) or `url` (Streamable HTTP)",
            ),
            (
                "up-mixed",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\ncwd = \"/srv\"\n",
                "line 1: upstream `a`: `env` and `cwd` go with `command`, not `url`",
            ),
            (
                "up-scheme",
                "[[upstream]]\nname = \"a\"\nurl = \"ftp://a/mcp\"\n",
                "line 1: upstream `a`: `url` must start with https:// or http://, not `ftp://a/mcp`",
            ),
            (
                "up-token",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nbearer-token-env = \"CODEMODE_TEST_UNSET_TOKEN\"\n",
                "line 1: upstream `a`: bearer-token-env: the variable CODEMODE_TEST_UNSET_TOKEN is not set",
            ),
            (
                "up-auth-command",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nauth = \"forward\"\n",
                "line 1: upstream `a`: `bearer-token-env`, `auth`, `audience` and `headers` go with `url`, not `command`",
            ),
            (
                "up-exchange-no-audience",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nauth = \"token-exchange\"\n",
                "line 1: upstream `a`: `auth = \"token-exchange\"` needs `audience`: the upstream's resource identifier, which the exchanged token names",
            ),
            (
                "up-auth-plain-http",
                "[[upstream]]\nname = \"a\"\nurl = \"http://crm.example.com/mcp\"\nauth = \"forward\"\n",
                "line 1: upstream `a`: url http://crm.example.com/mcp: must be https (http only on a loopback host); `auth` sends users' tokens to it",
            ),
            (
                "up-auth-header",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nauth = \"forward\"\nheaders = { Authorization = \"Bearer x\" }\n",
                "line 1: upstream `a`: `headers` may not set `Authorization` with `auth`: each call carries its caller's credential",
            ),
            (
                "up-auth-proxy-header",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nauth = \"token-exchange\"\naudience = \"x\"\nheaders = { Proxy-Authorization = \"Basic x\" }\n",
                "line 1: upstream `a`: `headers` may not set `Proxy-Authorization` with `auth`: each call carries its caller's credential",
            ),
            (
                "up-audience-alone",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nauth = \"forward\"\naudience = \"x\"\n",
                "line 1: upstream `a`: `audience` goes with `auth = \"token-exchange\"`",
            ),
            (
                "up-auth-unknown",
                "[[upstream]]\nname = \"a\"\nurl = \"https://a/mcp\"\nauth = \"pass\"\n",
                "line 1: upstream `a`: `auth` must be \"forward\" (each call carries its caller's access token) or \"token-exchange\" (one the issuer exchanges it for), not \"pass\"",
            ),
            (
                "up-empty",
                "[[upstream]]\nname = \"a\"\ncommand = []\n",
                "line 1: upstream `a`: `command` needs at least the program",
            ),
        ];
        assert_file_errors(&cases)?;
        Ok(())
    }
}
