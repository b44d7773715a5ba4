//! The config file's keys that are flags: each checked by its flag's own parser
//! and turned into the flag's value.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, ValueHint};
use codemode_server::store::MEMORY_STORE;
use toml::de::{DeTable, DeValue};

use super::openapi::OPENAPI_KEY;
use super::plugin::PLUGIN_KEY;
use super::quota::QUOTA_KEY;
use super::upstream::UPSTREAM_KEY;

/// The flag naming the config file, which is therefore not a key of it.
pub(super) const CONFIG_FLAG: &str = "config";

/// How close (Jaro similarity) an unknown key must be to a flag to be suggested.
const SUGGEST_SIMILARITY: f64 = 0.8;

/// The `--key=value` arguments of the config file `text`: one per value of each key
/// that the command line and the environment left unset, in the file's order.
///
/// # Errors
///
/// The byte offset of the fault and what it is.
pub(super) fn file_args(
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
        if [UPSTREAM_KEY, PLUGIN_KEY, OPENAPI_KEY, QUOTA_KEY].contains(&name) {
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
        action @ (ArgAction::Append | ArgAction::Set) => match value {
            DeValue::Array(items) if matches!(action, ArgAction::Append) => items
                .iter()
                .map(|item| one(arg, name, item.get_ref(), base))
                .collect(),
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
    // An empty value is the flag's parser's to refuse, not the file's folder.
    let relative = !text.is_empty() && Path::new(&text).is_relative();
    let value = match arg.get_value_hint() {
        ValueHint::AnyPath if relative => base.join(&text).into_os_string(),
        // A file, a word or a URL (`--store`: `memory`, `redis://`).
        ValueHint::FilePath if relative && text != MEMORY_STORE && !text.contains("://") => {
            base.join(&text).into_os_string()
        }
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
    match rejection(arg, value) {
        None => Ok(()),
        Some(reason) => Err(format!("`{name}`: {reason}")),
    }
}

/// Why the flag `arg`'s own parser refuses `value` (its reason as the parser
/// words it), or `None` when it takes it.
pub(super) fn rejection(arg: &Arg, value: &OsStr) -> Option<String> {
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
        Ok(_) => None,
        Err(error) => Some(match std::error::Error::source(&error) {
            Some(reason) => reason.to_string(),
            None => format!("invalid value {:?}", value.to_string_lossy()),
        }),
    }
}

/// A TOML type name with its article: "an array", "a string".
fn an(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        Some(_) | None => format!("a {type_name}"),
    }
}
