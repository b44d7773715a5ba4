//! The config file (`--config FILE`) and the environment (`CODEMODE_<FLAG>`): two
//! more sources of every flag's value, below the command line.
//!
//! Order: a flag on the command line, then its environment variable, then its key in
//! the config file, then its default. The file's keys are the long flag names. It is
//! applied by turning each key that neither the command line nor the environment set
//! into a `--key=value` argument ahead of the real ones, so every value goes through
//! the flag's own parser and checks, and the flag list in `cli/` stays the one
//! definition of what can be set.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::builder::BoolishValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches, ValueHint};
use codemode_host::files::{FileError, read_text};
use codemode_host::units::{MAX_DURATION, MAX_DURATION_TEXT, parse_duration};
use codemode_host::{
    OpenApiAuth, OpenApiConfig, Secret, SpecLocation, UpstreamAuth, UpstreamConfig,
    UpstreamTransport, check_upstream_name,
};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use crate::cli::Cli;

/// What every flag's environment variable starts with: `CODEMODE_` and then the long
/// flag in upper case, `-` as `_` (`--max-execution-time`:
/// `CODEMODE_MAX_EXECUTION_TIME`).
pub const ENV_PREFIX: &str = "CODEMODE_";

/// The flag naming the config file, which is therefore not a key of it.
const CONFIG_FLAG: &str = "config";

/// The key of the tables that configure upstream MCP servers (`[[upstream]]`).
const UPSTREAM_KEY: &str = "upstream";

/// The key of the tables that name plugins pulled from registries (`[[plugin]]`).
const PLUGIN_KEY: &str = "plugin";

/// The key of the tables that configure services described by OpenAPI
/// (`[[openapi]]`).
const OPENAPI_KEY: &str = "openapi";

/// Largest secrets file an `[[openapi]]` table names (`bearer-token-file`,
/// `api-key-file`): a token is a few hundred bytes.
const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// `auth = "forward"`: an HTTP upstream's calls carry the caller's access token.
const AUTH_FORWARD: &str = "forward";

/// `auth = "token-exchange"`: an HTTP upstream's calls carry a token the issuer
/// made for its `audience` in exchange for the caller's (RFC 8693).
const AUTH_EXCHANGE: &str = "token-exchange";

/// Largest config file read: settings are a few lines; this only stops a huge file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How close (Jaro similarity) an unknown key must be to a flag to be suggested.
const SUGGEST_SIMILARITY: f64 = 0.8;

/// The environment variable of the flag `--long`.
pub fn env_name(long: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        long.to_ascii_uppercase().replace('-', "_")
    )
}

/// The command line definition: the flags of [`Cli`], each also read from its
/// environment variable (shown in `--help`, its value never: a variable may be set
/// for another reason). A switch's variable takes `true`/`false`, `1`/`0`,
/// `yes`/`no` or `on`/`off`.
pub fn command() -> Command {
    Cli::command().mut_args(|arg| {
        let Some(variable) = arg.get_long().map(env_name) else {
            return arg;
        };
        let arg = arg.env(variable).hide_env_values(true);
        match arg.get_action() {
            ArgAction::SetTrue => arg.value_parser(BoolishValueParser::new()),
            _ => arg,
        }
    })
}

/// The settings from the command line `args` (the program name first), the
/// environment and the config file `--config` names, if any.
///
/// # Errors
///
/// A [`clap::Error`] (its `exit` prints it and ends with status 2) for a bad flag or
/// variable, and for a config file that cannot be read, is not TOML, has an unknown
/// key or a value of the wrong type: those name the file and the key's line.
pub fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let mut command = command();
    // A first pass learns the file and which flags the command line or the
    // environment set. It checks nothing between flags, because the file may
    // complete a pair (`--tokens` on the command line, `listen` in the file).
    let first = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&args)?;
    let Some(path) = first.get_one::<PathBuf>(CONFIG_FLAG) else {
        return finish(&mut command, args);
    };
    // The file's own errors name the file and line: the usage would not help.
    let file = read_file(path, &command, &first)
        .map_err(|message| clap::Error::raw(ErrorKind::InvalidValue, format!("{message}\n")))?;
    let mut all = Vec::with_capacity(args.len() + file.args.len());
    let mut given = args.into_iter();
    all.extend(given.next());
    all.extend(file.args.iter().cloned());
    all.extend(given);
    let mut cli = finish(&mut command, all)?;
    cli.upstreams = file.upstreams;
    cli.openapi = file.openapi;
    let mut entries = Vec::with_capacity(file.plugins.len());
    for plugin in file.plugins {
        let (line, reference) = (plugin.line, plugin.source.reference.to_string());
        let entry = plugin.entry(&cli);
        // Checked here, where the flags are known: without a key nothing can
        // verify, and the pulls would only repeat that.
        if entry.source.policy == codemode_oci::Policy::Require && entry.source.keys.is_empty() {
            return Err(clap::Error::raw(
                ErrorKind::InvalidValue,
                format!(
                    "config file `{}`, line {line}: plugin `{reference}`: verify = \"require\" needs a public key: give `keys` in the table or `verify-key` (or verify = \"warn\" or \"off\" to pull unsigned plugins)\n",
                    path.display()
                ),
            ));
        }
        entries.push(entry);
    }
    cli.plugin_entries = entries;
    cli.file_args = file.args;
    Ok(cli)
}

/// What a config file adds to the command line.
struct FileSettings {
    /// `--key=value` arguments for the flags it sets.
    args: Vec<OsString>,
    /// Its `[[upstream]]` tables.
    upstreams: Vec<UpstreamConfig>,
    /// Its `[[openapi]]` tables.
    openapi: Vec<OpenApiConfig>,
    /// Its `[[plugin]]` tables, checked; the flags fill in what they leave out.
    plugins: Vec<PluginSettings>,
}

/// Reads the config file at `path`: its flag keys and its upstreams.
fn read_file(path: &Path, command: &Command, given: &ArgMatches) -> Result<FileSettings, String> {
    let label = path.display();
    let text = read(path).map_err(|error| format!("config file `{label}`: {error}"))?;
    let base = path.parent().unwrap_or(Path::new(""));
    let at = |offset: usize, message: &str| {
        let line = line_of(&text, offset);
        format!("config file `{label}`, line {line}: {message}")
    };
    let args = file_args(&text, base, command, given).map_err(|(offset, m)| at(offset, &m))?;
    let upstreams = upstreams(&text, base).map_err(|(offset, m)| at(offset, &m))?;
    let openapi = openapi(&text, base, &upstreams).map_err(|(offset, m)| at(offset, &m))?;
    let plugins = plugins(&text, base)
        .map_err(|(offset, m)| at(offset, &m))?
        .into_iter()
        .map(|(offset, mut plugin)| {
            plugin.line = line_of(&text, offset);
            plugin
        })
        .collect();
    Ok(FileSettings {
        args,
        upstreams,
        openapi,
        plugins,
    })
}

/// Parses `args` in full, with every check.
fn finish(command: &mut Command, args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let matches = match command.try_get_matches_from_mut(&args) {
        Ok(matches) => matches,
        Err(error) => return Err(name_variable(error, &args)),
    };
    let mut cli = Cli::from_arg_matches(&matches).map_err(|error| error.format(command))?;
    // The file's keys are command-line arguments by now.
    cli.plugins_given = !matches!(
        matches.value_source("plugins"),
        None | Some(ValueSource::DefaultValue)
    );
    Ok(cli)
}

/// `error`, naming the `CODEMODE_<FLAG>` variable when the bad value came from it
/// (the flag is in none of `args`, which hold the config file's keys too): the
/// operator never typed the flag.
fn name_variable(error: clap::Error, args: &[OsString]) -> clap::Error {
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return error;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let flag = arg.split(' ').next().unwrap_or(arg);
    let Some(long) = flag.strip_prefix("--") else {
        return error;
    };
    let typed = args.iter().any(|given| {
        let given = given.to_string_lossy();
        given == flag || given.starts_with(&format!("{flag}="))
    });
    let variable = env_name(long);
    if typed || std::env::var_os(&variable).is_none() {
        return error;
    }
    let rendered = error.render().to_string();
    let message = rendered
        .strip_prefix("error: ")
        .unwrap_or(&rendered)
        .replacen(
            &format!("'{arg}'"),
            &format!("{variable} (the variable of {flag})"),
            1,
        );
    clap::Error::raw(error.kind(), message)
}

/// The `--key=value` arguments of the config file `text`: one per value of each key
/// that the command line and the environment left unset, in the file's order.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
fn file_args(
    text: &str,
    base: &Path,
    command: &Command,
    given: &ArgMatches,
) -> Result<Vec<OsString>, (usize, String)> {
    let table = DeTable::parse(text).map_err(|error| {
        let offset = error.span().map_or(0, |span| span.start);
        (offset, error.message().to_owned())
    })?;
    let mut entries: Vec<_> = table.get_ref().iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    let mut args = Vec::new();
    for (key, value) in entries {
        let name: &str = key.get_ref();
        if name == UPSTREAM_KEY || name == PLUGIN_KEY || name == OPENAPI_KEY {
            continue;
        }
        let at = |message: String| (key.span().start, message);
        let arg = settable(command)
            .find(|arg| arg.get_long() == Some(name))
            .ok_or_else(|| at(unknown_key(command, name)))?;
        if set_outside_the_file(given, arg) {
            continue;
        }
        args.extend(values(arg, name, value.get_ref(), base).map_err(at)?);
    }
    Ok(args)
}

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
                    codemode_host::authz::oauth::check_url("url", url)
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
fn upstreams(text: &str, base: &Path) -> Result<Vec<UpstreamConfig>, (usize, String)> {
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
fn openapi(
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
                codemode_host::authz::oauth::check_url("base-url", url)
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
struct PluginSettings {
    /// The table's line in the file.
    line: usize,
    source: codemode_host::oci::PluginSource,
    verify: Option<codemode_oci::Policy>,
    keys: Option<Vec<PathBuf>>,
    poll: Option<std::time::Duration>,
}

impl PluginSettings {
    /// The entry, `--verify`, `--verify-key` and `--pull-interval` filling in
    /// what the table left out.
    fn entry(self, cli: &Cli) -> codemode_host::oci::PullEntry {
        let mut source = self.source;
        source.policy = self.verify.unwrap_or(cli.pull.verify);
        source.keys = self.keys.unwrap_or_else(|| cli.pull.verify_keys.clone());
        codemode_host::oci::PullEntry {
            source,
            interval: self
                .poll
                .or(cli.pull.pull_interval)
                .unwrap_or(codemode_host::oci::DEFAULT_PULL_INTERVAL),
        }
    }
}

/// The plugins of the config file `text`; relative paths (keys, credentials)
/// are relative to `base`.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
fn plugins(text: &str, base: &Path) -> Result<Vec<(usize, PluginSettings)>, (usize, String)> {
    use codemode_host::oci::{PluginSource, RegistryAuth};
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

/// The file's text: a regular file (a FIFO is refused at once, never waited on) of
/// at most [`MAX_CONFIG_BYTES`].
fn read(path: &Path) -> Result<String, FileError> {
    read_text(
        path,
        MAX_CONFIG_BYTES,
        "1 MiB, the most a config file may hold",
    )
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.get(..offset).unwrap_or(text);
    before.bytes().filter(|b| *b == b'\n').count() + 1
}

/// The flags a config file may set: all but `--config`, `--help` and `--version`.
fn settable(command: &Command) -> impl Iterator<Item = &Arg> {
    command.get_arguments().filter(|arg| {
        arg.get_long()
            .is_some_and(|long| !matches!(long, CONFIG_FLAG | "help" | "version"))
    })
}

/// Why `name` is not a key, with the closest flag if one is close.
fn unknown_key(command: &Command, name: &str) -> String {
    if name == CONFIG_FLAG {
        return format!("`{CONFIG_FLAG}` cannot name another file from inside one");
    }
    let closest = settable(command)
        .filter_map(Arg::get_long)
        .map(|long| (strsim::jaro(name, long), long))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match closest {
        Some((similarity, long)) if similarity >= SUGGEST_SIMILARITY => {
            format!("unknown key `{name}` (did you mean `{long}`?)")
        }
        Some(_) | None => format!(
            "unknown key `{name}`: the keys are the long flag names without `--` (see --help)"
        ),
    }
}

/// Whether the command line or the environment already gave `arg` a value, which
/// then wins over the file.
fn set_outside_the_file(given: &ArgMatches, arg: &Arg) -> bool {
    let id = arg.get_id().as_str();
    let mut matches = std::iter::successors(Some(given), |m| m.subcommand().map(|(_, sub)| sub));
    // A subcommand's matches know only its own and the global flags.
    matches.any(|m| {
        m.ids().any(|known| known == id)
            && matches!(
                m.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
    })
}

/// The arguments the key `name` = `value` stands for.
fn values(arg: &Arg, name: &str, value: &DeValue, base: &Path) -> Result<Vec<OsString>, String> {
    match arg.get_action() {
        ArgAction::SetTrue => match value {
            DeValue::Boolean(true) => Ok(vec![OsString::from(format!("--{name}"))]),
            DeValue::Boolean(false) => Ok(Vec::new()),
            DeValue::String(_)
            | DeValue::Integer(_)
            | DeValue::Float(_)
            | DeValue::Datetime(_)
            | DeValue::Array(_)
            | DeValue::Table(_) => Err(format!(
                "`{name}` must be true or false, not {}",
                an(value.type_str())
            )),
        },
        ArgAction::Append => match value {
            DeValue::Array(items) => items
                .iter()
                .map(|item| one(arg, name, item.get_ref(), base))
                .collect(),
            DeValue::String(_)
            | DeValue::Integer(_)
            | DeValue::Float(_)
            | DeValue::Boolean(_)
            | DeValue::Datetime(_)
            | DeValue::Table(_) => Ok(vec![one(arg, name, value, base)?]),
        },
        ArgAction::Set => match value {
            DeValue::Array(_) => Err(format!("`{name}` takes one value, not an array")),
            DeValue::String(_)
            | DeValue::Integer(_)
            | DeValue::Float(_)
            | DeValue::Boolean(_)
            | DeValue::Datetime(_)
            | DeValue::Table(_) => Ok(vec![one(arg, name, value, base)?]),
        },
        // The flags of `Cli` are switches, single values and repeated values; any
        // other action (counters, help) is not a setting.
        _ => Err(format!("`{name}` cannot be set in a config file")),
    }
}

/// The argument `--name=VALUE` for one value, checked by the flag's own parser so
/// that a bad value is reported at its line. A relative path is made relative to the
/// file's folder.
fn one(arg: &Arg, name: &str, value: &DeValue, base: &Path) -> Result<OsString, String> {
    let text = match value {
        DeValue::String(text) => text.to_string(),
        DeValue::Integer(integer) => i128::from_str_radix(integer.as_str(), integer.radix())
            .map_err(|_| format!("`{name}`: {integer} is out of range"))?
            .to_string(),
        DeValue::Float(_)
        | DeValue::Boolean(_)
        | DeValue::Datetime(_)
        | DeValue::Array(_)
        | DeValue::Table(_) => {
            return Err(format!(
                "`{name}` must be a string or an integer, not {}",
                an(value.type_str())
            ));
        }
    };
    let value = match arg.get_value_hint() {
        ValueHint::AnyPath if Path::new(&text).is_relative() => base.join(&text).into_os_string(),
        _ => OsString::from(text),
    };
    check(arg, name, &value)?;
    let mut argument = OsString::from(format!("--{name}="));
    argument.push(&value);
    Ok(argument)
}

/// Runs `value` through the value parser of `arg` alone, for an error that names the
/// key instead of the flag.
fn check(arg: &Arg, name: &str, value: &OsStr) -> Result<(), String> {
    let probe = Arg::new("value")
        .long("value")
        .action(ArgAction::Set)
        .allow_hyphen_values(true)
        .value_parser(arg.get_value_parser().clone());
    let mut argument = OsString::from("--value=");
    argument.push(value);
    match Command::new(CONFIG_FLAG)
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from([argument])
    {
        Ok(_) => Ok(()),
        Err(error) => match std::error::Error::source(&error) {
            Some(reason) => Err(format!("`{name}`: {reason}")),
            None => Err(format!(
                "`{name}`: invalid value {:?}",
                value.to_string_lossy()
            )),
        },
    }
}

/// A TOML type name with its article: "an array", "a string".
fn an(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        Some(_) | None => format!("a {type_name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A config file with `text` in a fresh folder; the folder is returned too.
    fn config_file(label: &str, text: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let dir =
            std::env::temp_dir().join(format!("codemode-config-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("codemode.toml");
        std::fs::write(&path, text)?;
        Ok((dir, path))
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        std::iter::once("codemode-host")
            .chain(list.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// Checks that each config file `(label, text, expected)` fails to parse with
    /// the error `expected` after the file's name.
    fn assert_file_errors(cases: &[(&str, &str, &str)]) -> anyhow::Result<()> {
        for (label, text, expected) in cases {
            let (_, path) = config_file(label, text)?;
            let config = path.display().to_string();
            assert_eq!(
                parse_error(&["--config", &config]),
                format!("error: config file `{config}`, {expected}\n"),
                "{label}"
            );
        }
        Ok(())
    }

    fn parse_error(list: &[&str]) -> String {
        match parse(args(list)) {
            Ok(cli) => format!("parsed: {cli:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn the_file_sets_flags_and_the_command_line_wins() -> anyhow::Result<()> {
        let (dir, path) = config_file(
            "sets",
            r#"
plugins = "my-plugins"
max-execution-time = "250ms"
max-fuel = 1_000
max-native-calls = 0x10
policy = ["authz.rego", "/etc/codemode/extra.rego"]
no-watch = true
allow-all = false
log = "debug"
"#,
        )?;
        let config = path.display().to_string();
        let cli = parse(args(&["--config", &config, "--max-fuel", "5"]))?;
        assert_eq!(cli.plugins, dir.join("my-plugins"));
        assert_eq!(
            cli.budgets.max_execution_time,
            Some(Duration::from_millis(250))
        );
        assert_eq!(cli.budgets.max_fuel, Some(5));
        assert_eq!(cli.budgets.max_native_calls, Some(16));
        assert_eq!(
            cli.access.policy,
            vec![
                dir.join("authz.rego"),
                PathBuf::from("/etc/codemode/extra.rego")
            ]
        );
        assert!(cli.no_watch);
        assert!(!cli.access.allow_all);
        assert_eq!(cli.log, "debug");
        // A repeatable flag given on the command line replaces the file's list.
        let cli = parse(args(&["--policy", "p.rego", "--config", &config]))?;
        assert_eq!(cli.access.policy, vec![PathBuf::from("p.rego")]);
        Ok(())
    }

    #[test]
    fn the_file_may_complete_a_pair_of_flags() -> anyhow::Result<()> {
        let (_, path) = config_file("pair", "listen = \"127.0.0.1:0\"\n")?;
        let config = path.display().to_string();
        let cli = parse(args(&["--tokens", "tokens.txt", "--config", &config]))?;
        assert_eq!(cli.net.tokens, Some(PathBuf::from("tokens.txt")));
        assert!(cli.net.listen.is_some());
        // The subcommand and its global flags still work with a file.
        let cli = parse(args(&["--config", &config, "precompile", "--plugins", "p"]))?;
        assert_eq!(cli.command, Some(crate::cli::Command::Precompile));
        assert_eq!(cli.plugins, PathBuf::from("p"));
        Ok(())
    }

    #[test]
    fn every_bad_file_names_the_key_and_its_line() -> anyhow::Result<()> {
        let cases = [
            (
                "unknown",
                "plugins = \"p\"\nmax-exec-time = \"5s\"\n",
                "line 2: unknown key `max-exec-time` (did you mean `max-execution-time`?)",
            ),
            (
                "far",
                "\n\ncolour = \"red\"\n",
                "line 3: unknown key `colour`: the keys are the long flag names without `--` (see --help)",
            ),
            (
                "switch",
                "no-watch = \"yes\"\n",
                "line 1: `no-watch` must be true or false, not a string",
            ),
            (
                "float",
                "max-fuel = 1.5\n",
                "line 1: `max-fuel` must be a string or an integer, not a float",
            ),
            (
                "array",
                "plugins = [\"a\", \"b\"]\n",
                "line 1: `plugins` takes one value, not an array",
            ),
            (
                "unit",
                "# budgets\nmax-execution-time = \"5\"\n",
                "line 2: `max-execution-time`: `5` needs a unit: ms, s, m or h (e.g. 5s)",
            ),
            (
                "element",
                "disable = [\"a.b\", 3.0]\n",
                "line 1: `disable` must be a string or an integer, not a float",
            ),
            (
                "itself",
                "config = \"other.toml\"\n",
                "line 1: `config` cannot name another file from inside one",
            ),
            (
                "syntax",
                "plugins = \"p\"\nlisten = \n",
                "line 2: string values must be quoted, expected literal string",
            ),
        ];
        assert_file_errors(&cases)?;
        let missing = std::env::temp_dir().join("codemode-config-missing.toml");
        let error = parse_error(&["--config", &missing.display().to_string()]);
        assert_eq!(
            error,
            format!(
                "error: config file `{}`: cannot read it: No such file or directory (os error 2)\n",
                missing.display()
            )
        );
        // A FIFO put in place of the file: refused at once (startup hung on it).
        let fifo =
            std::env::temp_dir().join(format!("codemode-config-{}.fifo", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
        assert!(made.success());
        let error = parse_error(&["--config", &fifo.display().to_string()]);
        let _ = std::fs::remove_file(&fifo);
        assert_eq!(
            error,
            format!(
                "error: config file `{}`: not a regular file (a FIFO); only regular files are read\n",
                fifo.display()
            )
        );
        Ok(())
    }

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

    #[test]
    fn plugin_tables_become_pull_entries_the_flags_filling_in() -> anyhow::Result<()> {
        use codemode_host::oci::{PluginSource, PullEntry, RegistryAuth};
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

    #[test]
    fn help_names_each_flags_variable_and_fits_79_columns() {
        let help = command().render_long_help().to_string();
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for name in [
            "CODEMODE_CONFIG",
            "CODEMODE_PLUGINS",
            "CODEMODE_MAX_EXECUTION_TIME",
            "CODEMODE_ALLOW_ALL",
        ] {
            assert!(flat.contains(&format!("[env: {name}]")), "{help}");
        }
        for help in [help, command().render_help().to_string()] {
            for line in help.lines() {
                assert!(line.chars().count() <= 79, "too long: {line:?}");
            }
        }
    }

    #[test]
    fn variable_names_follow_the_long_flag() {
        assert_eq!(
            env_name("max-intermediate-value-bytes"),
            "CODEMODE_MAX_INTERMEDIATE_VALUE_BYTES"
        );
        assert_eq!(env_name("plugins"), "CODEMODE_PLUGINS");
    }
}
