//! Tests of the layering and the flag keys; the helpers the tables' tests share.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// A config file with `text` in a fresh folder; the folder is returned too.
pub(super) fn config_file(label: &str, text: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("codemode-config-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("codemode.toml");
    std::fs::write(&path, text)?;
    Ok((dir, path))
}

pub(super) fn args(list: &[&str]) -> Vec<OsString> {
    std::iter::once("codemode-host")
        .chain(list.iter().copied())
        .map(OsString::from)
        .collect()
}

/// Checks that each config file `(label, text, expected)` fails to parse with
/// the error `expected` after the file's name.
pub(super) fn assert_file_errors(cases: &[(&str, &str, &str)]) -> anyhow::Result<()> {
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

pub(super) fn parse_error(list: &[&str]) -> String {
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
    let fifo = std::env::temp_dir().join(format!("codemode-config-{}.fifo", std::process::id()));
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

#[test]
fn a_store_file_is_relative_to_the_config_file_and_memory_stays_a_word() -> anyhow::Result<()> {
    use codemode_server::store::StoreLocation;
    let (dir, path) = config_file(
        "store",
        "store = \"state/store.redb\"\nmax-state-keys = 10\nmax-state-value-bytes = \"4KiB\"\n",
    )?;
    let config = path.display().to_string();
    let cli = parse(args(&["--config", &config]))?;
    assert_eq!(
        cli.state.location(),
        StoreLocation::File(dir.join("state/store.redb"))
    );
    let limits = cli.state.limits();
    assert_eq!(
        (limits.max_keys, limits.max_bytes, limits.max_value_bytes),
        (10, 16 << 20, 4096)
    );
    let (_, path) = config_file("store-memory", "store = \"memory\"\n")?;
    let config = path.display().to_string();
    let cli = parse(args(&["--config", &config]))?;
    assert_eq!(cli.state.location(), StoreLocation::Memory);
    let (_, path) = config_file("store-redis", "store = \"redis://127.0.0.1:6379/0\"\n")?;
    let config = path.display().to_string();
    let cli = parse(args(&["--config", &config]))?;
    assert_eq!(
        cli.state.location(),
        StoreLocation::Redis("redis://127.0.0.1:6379/0".to_owned())
    );
    assert_file_errors(&[(
        "store-empty",
        "store = \"\"\n",
        "line 1: `store`: must be `memory`, a file (e.g. ./state/store.redb) or a redis:// URL",
    )])?;
    Ok(())
}
