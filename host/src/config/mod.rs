//! The config file (`--config FILE`) and the environment (`CODEMODE_<FLAG>`): two
//! more sources of every flag's value, below the command line.
//!
//! Order: a flag on the command line, then its environment variable, then its key in
//! the config file, then its default. The file's keys are the long flag names. It is
//! applied by turning each key that neither the command line nor the environment set
//! into a `--key=value` argument ahead of the real ones, so every value goes through
//! the flag's own parser and checks, and the flag list in `cli/` stays the one
//! definition of what can be set.

mod keys;
mod openapi;
mod plugin;
mod quota;
#[cfg(test)]
mod tests;
mod upstream;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::builder::BoolishValueParser;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};
use codemode_server::files::{FileError, read_text};
use codemode_server::{OpenApiConfig, UpstreamConfig};

use crate::cli::Cli;
use keys::{CONFIG_FLAG, file_args, rejection};
use openapi::openapi;
use plugin::{PluginSettings, plugins};
use quota::quotas;
use upstream::upstreams;

/// What every flag's environment variable starts with: `CODEMODE_` and then the long
/// flag in upper case, `-` as `_` (`--max-execution-time`:
/// `CODEMODE_MAX_EXECUTION_TIME`).
pub const ENV_PREFIX: &str = "CODEMODE_";

/// Largest config file read: settings are a few lines; this only stops a huge file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

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
    check_variables(&command, &first)?;
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
    cli.quotas = file.quotas;
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
    /// Its `[[quota]]` tables.
    quotas: codemode_server::quota::Quotas,
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
    let quotas = quotas(&text).map_err(|(offset, m)| at(offset, &m))?;
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
        quotas,
    })
}

/// Parses `args` in full, with every check.
fn finish(command: &mut Command, args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let matches = command.try_get_matches_from_mut(&args)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|error| error.format(command))?;
    // The file's keys are command-line arguments by now.
    cli.plugins_given = !matches!(
        matches.value_source("plugins"),
        None | Some(ValueSource::DefaultValue)
    );
    Ok(cli)
}

/// Each flag's variable that is set while the command line leaves the flag out,
/// checked by the flag's own parser before clap reads it: a bad value is refused
/// naming the variable (the operator never typed the flag), in this server's
/// words rather than clap's message about an argument.
///
/// # Errors
///
/// The first bad variable, its value and why.
fn check_variables(command: &Command, given: &ArgMatches) -> Result<(), clap::Error> {
    for arg in command.get_arguments() {
        let (Some(long), Some(variable)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let Some(value) = std::env::var_os(variable) else {
            continue;
        };
        if given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        if let Some(reason) = rejection(arg, &value) {
            return Err(clap::Error::raw(
                ErrorKind::InvalidValue,
                format!(
                    "invalid value '{}' for {} (the variable of --{long}): {reason}\n",
                    value.to_string_lossy(),
                    variable.to_string_lossy()
                ),
            ));
        }
    }
    Ok(())
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
