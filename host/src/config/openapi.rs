//! `[[openapi]]` tables: the services described by OpenAPI of the config file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_server::files::read_text;
use codemode_server::units::{MAX_DURATION, MAX_DURATION_TEXT, parse_duration};
use codemode_server::{
    OpenApiAuth, OpenApiConfig, Secret, SpecLocation, UpstreamConfig, check_upstream_name,
};
use serde::Deserialize;

use super::upstream::{AUTH_EXCHANGE, AUTH_FORWARD};

/// The key of the tables that configure services described by OpenAPI
/// (`[[openapi]]`).
pub(super) const OPENAPI_KEY: &str = "openapi";

/// Largest secrets file an `[[openapi]]` table names (`bearer-token-file`,
/// `api-key-file`): a token is a few hundred bytes.
const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// The file's `[[openapi]]` tables.
#[derive(Debug, Deserialize)]
struct OpenApis {
    #[serde(default)]
    openapi: Vec<toml::Spanned<OpenApiTable>>,
}

/// One `[[openapi]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct OpenApiTable {
    name: String,
    spec: String,
    base_url: Option<String>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    timeout: Option<String>,
    bearer_token_env: Option<String>,
    bearer_token_file: Option<PathBuf>,
    api_key_header: Option<String>,
    api_key_env: Option<String>,
    api_key_file: Option<PathBuf>,
    auth: Option<String>,
    audience: Option<String>,
    headers: Option<BTreeMap<String, String>>,
}

impl OpenApiTable {
    /// Where its spec is: an `https://` (or `http://`) URL, else a file
    /// relative to `base`.
    fn spec(&self, base: &Path) -> SpecLocation {
        if self.spec.starts_with("https://") || self.spec.starts_with("http://") {
            SpecLocation::Url(self.spec.clone())
        } else {
            SpecLocation::File(base.join(&self.spec))
        }
    }

    /// Whose credential its requests carry: the operator's bearer token or API
    /// key (from a variable or a file, relative to `base`), or the caller's.
    fn auth(&self, base: &Path) -> Result<OpenApiAuth, String> {
        let secret =
            |key: &str, variable: &Option<String>, file: &Option<PathBuf>| match (variable, file) {
                (Some(_), Some(_)) => Err(format!("give `{key}-env` or `{key}-file`, not both")),
                (Some(variable), None) => match std::env::var(variable) {
                    Ok(value) if !value.trim().is_empty() => Ok(Some(Secret::new(value.trim()))),
                    Ok(_) | Err(_) => Err(format!("{key}-env: the variable {variable} is not set")),
                },
                (None, Some(file)) => {
                    let path = base.join(file);
                    let text = read_text(
                        &path,
                        MAX_SECRET_FILE_BYTES,
                        "the largest secrets file, 64 KiB",
                    )
                    .map_err(|error| format!("{key}-file `{}`: {error}", path.display()))?;
                    match text.trim() {
                        "" => Err(format!(
                            "{key}-file `{}`: the file is blank",
                            path.display()
                        )),
                        value => Ok(Some(Secret::new(value))),
                    }
                }
                (None, None) => Ok(None),
            };
        let bearer = secret(
            "bearer-token",
            &self.bearer_token_env,
            &self.bearer_token_file,
        )?;
        let key = secret("api-key", &self.api_key_env, &self.api_key_file)?;
        let operator = match (bearer, key, &self.api_key_header) {
            (Some(_), Some(_), _) => {
                return Err("give a bearer token or an API key, not both".to_owned());
            }
            (Some(token), None, None) => Some(OpenApiAuth::Bearer(token)),
            (Some(_), None, Some(_)) => {
                return Err("`api-key-header` goes with `api-key-env` or `api-key-file`".to_owned());
            }
            (None, Some(key), Some(header)) => {
                if header.trim().is_empty() {
                    return Err("`api-key-header` is blank".to_owned());
                }
                Some(OpenApiAuth::ApiKey {
                    header: header.clone(),
                    key,
                })
            }
            (None, Some(_), None) => {
                return Err("an API key needs `api-key-header`: the header it goes in".to_owned());
            }
            (None, None, Some(_)) => {
                return Err("`api-key-header` needs `api-key-env` or `api-key-file`".to_owned());
            }
            (None, None, None) => None,
        };
        match (self.auth.as_deref(), operator, &self.audience) {
            (Some(_), Some(_), _) => Err(
                "`auth` sends the caller's token: give no bearer token or API key with it"
                    .to_owned(),
            ),
            (Some(AUTH_EXCHANGE), None, Some(audience)) if !audience.trim().is_empty() => {
                Ok(OpenApiAuth::TokenExchange {
                    audience: audience.clone(),
                })
            }
            (Some(AUTH_EXCHANGE), None, _) => Err(format!(
                "`auth = \"{AUTH_EXCHANGE}\"` needs `audience`: the service's resource identifier, which the exchanged token names"
            )),
            (_, _, Some(_)) => Err(format!("`audience` goes with `auth = \"{AUTH_EXCHANGE}\"`")),
            (Some(AUTH_FORWARD), None, None) => Ok(OpenApiAuth::Forward),
            (Some(other), None, None) => Err(format!(
                "`auth` must be \"{AUTH_FORWARD}\" (each call carries its caller's access token) or \"{AUTH_EXCHANGE}\" (one the issuer exchanges it for), not \"{other}\""
            )),
            (None, Some(operator), None) => Ok(operator),
            (None, None, None) => Ok(OpenApiAuth::None),
        }
    }
}

/// The OpenAPI services of the config file `text`; relative spec and secrets
/// file paths are relative to `base`. A name may not be an upstream's.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
pub(super) fn openapi(
    text: &str,
    base: &Path,
    upstreams: &[UpstreamConfig],
) -> Result<Vec<OpenApiConfig>, (usize, String)> {
    let parsed: OpenApis = toml::from_str(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        (offset, format!("[[{OPENAPI_KEY}]]: {}", error.message()))
    })?;
    let mut out: Vec<OpenApiConfig> = Vec::with_capacity(parsed.openapi.len());
    for table in parsed.openapi {
        let offset = table.span().start;
        let table = table.into_inner();
        let at = |message: String| (offset, format!("openapi `{}`: {message}", table.name));
        check_upstream_name(&table.name).map_err(|reason| (offset, reason))?;
        if out.iter().any(|o| o.name == table.name) {
            return Err(at("the name is given twice".to_owned()));
        }
        if upstreams.iter().any(|u| u.name == table.name) {
            return Err(at(
                "the name is an [[upstream]]'s too: each root of capability names has one source"
                    .to_owned(),
            ));
        }
        if table.spec.trim().is_empty() {
            return Err(at(
                "`spec` is blank: give a file path or an https:// URL".to_owned()
            ));
        }
        let auth = table.auth(base).map_err(at)?;
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
        if let Some(url) = &table.base_url {
            let parsed = url::Url::parse(url)
                .map_err(|_| at(format!("base-url `{url}` is not an absolute URL")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(at(format!(
                    "base-url `{url}` must start with https:// or http://"
                )));
            }
        }
        if !matches!(auth, OpenApiAuth::None) {
            // Credentials cross the network only encrypted. Without `base-url`
            // the spec's server is checked when it is loaded (https, and the
            // spec's own origin).
            if let Some(url) = &table.base_url {
                codemode_server::authz::oauth::check_url("base-url", url)
                    .map_err(|error| at(format!("{error}; it would carry a credential")))?;
            }
            if let Some(name) = table.headers.iter().flatten().map(|(n, _)| n).find(|name| {
                name.eq_ignore_ascii_case("authorization")
                    || name.eq_ignore_ascii_case("proxy-authorization")
                    || name.eq_ignore_ascii_case("cookie")
            }) {
                return Err(at(format!(
                    "`headers` may not set `{name}` beside a credential"
                )));
            }
        }
        out.push(OpenApiConfig {
            name: table.name.clone(),
            spec: table.spec(base),
            base_url: table.base_url.clone(),
            include: table.include.clone(),
            exclude: table.exclude.clone(),
            timeout,
            auth,
            headers: table.headers.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{args, assert_file_errors, config_file, parse_error};
    use super::*;
    use crate::config::parse;

    #[test]
    fn openapi_tables_become_openapi_services() -> anyhow::Result<()> {
        let (dir, path) = config_file(
            "openapi",
            r#"
plugins = "p"

[[openapi]]
name = "github"
spec = "specs/github.json"
base-url = "https://api.github.com"
include = ["repos", "issues/list"]
exclude = ["repos/delete"]
timeout = "20s"
bearer-token-file = "github.token"
headers = { "X-GitHub-Api-Version" = "2022-11-28" }

[[openapi]]
name = "crm"
spec = "https://crm.example.com/openapi.yaml"
auth = "token-exchange"
audience = "https://crm.example.com"
"#,
        )?;
        std::fs::write(dir.join("github.token"), "  gh-secret\n")?;
        let cli = parse(args(&["--config", path.to_str().expect("utf-8")]))?;
        assert_eq!(
            cli.openapi,
            vec![
                OpenApiConfig {
                    name: "github".to_owned(),
                    spec: SpecLocation::File(dir.join("specs/github.json")),
                    base_url: Some("https://api.github.com".to_owned()),
                    include: vec!["repos".to_owned(), "issues/list".to_owned()],
                    exclude: vec!["repos/delete".to_owned()],
                    timeout: Some(std::time::Duration::from_secs(20)),
                    auth: OpenApiAuth::Bearer(Secret::new("gh-secret")),
                    headers: BTreeMap::from([(
                        "X-GitHub-Api-Version".to_owned(),
                        "2022-11-28".to_owned()
                    )]),
                },
                OpenApiConfig {
                    name: "crm".to_owned(),
                    spec: SpecLocation::Url("https://crm.example.com/openapi.yaml".to_owned()),
                    base_url: None,
                    include: Vec::new(),
                    exclude: Vec::new(),
                    timeout: None,
                    auth: OpenApiAuth::TokenExchange {
                        audience: "https://crm.example.com".to_owned()
                    },
                    headers: BTreeMap::new(),
                },
            ]
        );
        let cases = [
            (
                "oa-unknown",
                "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\nservers = 3\n",
                "line 4: [[openapi]]: unknown field `servers`, expected one of `name`, `spec`, `base-url`, `include`, `exclude`, `timeout`, `bearer-token-env`, `bearer-token-file`, `api-key-header`, `api-key-env`, `api-key-file`, `auth`, `audience`, `headers`",
            ),
            (
                "oa-upstream",
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[openapi]]\nname = \"a\"\nspec = \"a.json\"\n",
                "line 5: openapi `a`: the name is an [[upstream]]'s too: each root of capability names has one source",
            ),
            (
                "oa-key-no-header",
                "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\napi-key-file = \"codemode.toml\"\n",
                "line 1: openapi `a`: an API key needs `api-key-header`: the header it goes in",
            ),
            (
                "oa-both-secrets",
                "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\nbearer-token-file = \"codemode.toml\"\napi-key-header = \"K\"\napi-key-file = \"codemode.toml\"\n",
                "line 1: openapi `a`: give a bearer token or an API key, not both",
            ),
            (
                "oa-plain-http",
                "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\nbase-url = \"http://crm.example.com\"\nauth = \"forward\"\n",
                "line 1: openapi `a`: base-url http://crm.example.com: must be https (http only on a loopback host); it would carry a credential",
            ),
            (
                "oa-forward-and-token",
                "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\nauth = \"forward\"\nbearer-token-file = \"codemode.toml\"\n",
                "line 1: openapi `a`: `auth` sends the caller's token: give no bearer token or API key with it",
            ),
        ];
        assert_file_errors(&cases)?;
        let (dir, path) = config_file(
            "oa-missing-file",
            "[[openapi]]\nname = \"a\"\nspec = \"a.json\"\nbearer-token-file = \"none.token\"\n",
        )?;
        let config = path.display().to_string();
        assert_eq!(
            parse_error(&["--config", &config]),
            format!(
                "error: config file `{config}`, line 1: openapi `a`: bearer-token-file `{}`: cannot read it: No such file or directory (os error 2)\n",
                dir.join("none.token").display()
            )
        );
        Ok(())
    }
}
