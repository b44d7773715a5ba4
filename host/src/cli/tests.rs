//! Tests.

use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;
use codemode_server::authz::DEFAULT_DECISION;
use codemode_server::authz::oauth::{MAX_LEEWAY, MIN_KEYS_REFRESH};

use super::values::{keys_refresh, leeway};
use super::*;

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn oauth_key_refresh_and_leeway_take_durations_within_their_bounds() {
    assert_eq!(keys_refresh("1s"), Ok(MIN_KEYS_REFRESH));
    assert_eq!(keys_refresh("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(keys_refresh("500ms"), Err("must be at least 1s".to_owned()));
    assert!(keys_refresh("0").is_err());
    assert_eq!(leeway("0"), Ok(Duration::ZERO));
    assert_eq!(leeway("0s"), Ok(Duration::ZERO));
    assert_eq!(leeway("2s"), Ok(Duration::from_secs(2)));
    assert_eq!(leeway("10m"), Ok(MAX_LEEWAY));
    assert_eq!(leeway("11m"), Err("at most 10m".to_owned()));
    assert_eq!(
        leeway("1500ms"),
        Err("must be whole seconds (e.g. 30s, 2m)".to_owned())
    );
    // Both need --oauth-issuer.
    for flag in ["--oauth-keys-refresh=5s", "--oauth-leeway=5s"] {
        assert!(
            Cli::try_parse_from(["codemode-host", flag]).is_err(),
            "{flag}"
        );
    }
}

#[test]
fn plugins_defaults_to_plugins_folder() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["codemode-host"])?;
    assert_eq!(cli.plugins, PathBuf::from("plugins"));
    assert!(cli.disable.is_empty());
    assert!(!cli.no_watch);
    assert_eq!(cli.log, "info");
    Ok(())
}

#[test]
fn disable_repeats_and_keeps_order() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--disable",
        "b.x",
        "--disable",
        "a.y",
        "--plugins",
        "p",
    ])?;
    assert_eq!(cli.disable, vec!["b.x".to_string(), "a.y".to_string()]);
    assert_eq!(cli.plugins, PathBuf::from("p"));
    Ok(())
}

#[test]
fn zero_durations_and_short_addresses_get_one_clear_answer() -> anyhow::Result<()> {
    for zero in ["0", "0s", "0ms", "0.0"] {
        let error = Cli::try_parse_from(["codemode-host", "--max-execution-time", zero])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
                error.starts_with(&format!(
                    "error: invalid value '{zero}' for '--max-execution-time <DURATION>': must be positive (e.g. 5s, 500ms)\n"
                )),
                "{error}"
            );
    }
    assert!(Cli::try_parse_from(["codemode-host", "--load-timeout", "0"]).is_err());
    // Past a day: `9223372036854775807s` used to pass, and every execute then
    // panicked adding it to the clock.
    for (flag, long) in [
        ("--max-execution-time", "9223372036854775807s"),
        ("--load-timeout", "25h"),
    ] {
        let error = Cli::try_parse_from(["codemode-host", flag, long])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with(&format!(
                "error: invalid value '{long}' for '{flag} <DURATION>': at most 1 day (24h)\n"
            )),
            "{error}"
        );
    }
    assert!(Cli::try_parse_from(["codemode-host", "--max-execution-time", "24h"]).is_ok());
    for flag in [
        "--max-source-bytes",
        "--max-value-bytes",
        "--max-intermediate-value-bytes",
        "--max-memory",
        "--max-plugin-bytes",
    ] {
        let error = Cli::try_parse_from(["codemode-host", flag, "5GiB"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with(&format!(
                "error: invalid value '5GiB' for '{flag} <SIZE>': at most 4GiB\n"
            )),
            "{error}"
        );
    }
    for (given, wanted) in [
        ("8080", "127.0.0.1:8080"),
        ("localhost:8080", "127.0.0.1:8080"),
        ("0.0.0.0:9000", "0.0.0.0:9000"),
        ("[::1]:80", "[::1]:80"),
    ] {
        let cli = Cli::try_parse_from(["codemode-host", "--listen", given])?;
        assert_eq!(
            cli.net.listen.map(|a| a.to_string()).as_deref(),
            Some(wanted)
        );
    }
    let error = Cli::try_parse_from(["codemode-host", "--listen", "example.com:80"])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
            error.contains(
                "`example.com:80` is not an address: give IP:PORT, e.g. 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface), or a port alone for 127.0.0.1"
            ),
            "{error}"
        );
    Ok(())
}

#[test]
fn readme_flag_table_lists_every_flag() {
    let readme = include_str!("../../../README.md");
    for arg in Cli::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let value = arg
            .get_action()
            .takes_values()
            .then(|| arg.get_value_names())
            .flatten()
            .and_then(|v| v.first())
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        let row = format!("| `--{long}{value}` |");
        assert!(readme.contains(&row), "README flag table lacks {row}");
    }
}

#[test]
fn the_policy_decision_default_shown_is_the_real_one() {
    let help = Cli::command().render_help().to_string();
    assert!(
        help.contains(&format!("[default: {DEFAULT_DECISION}]")),
        "{help}"
    );
}

#[test]
fn precompile_takes_the_folders_after_the_subcommand() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from([
        "codemode-host",
        "precompile",
        "--plugins",
        "p",
        "--cache-dir",
        "c",
    ])?;
    assert_eq!(cli.command, Some(Command::Precompile));
    assert_eq!(cli.plugins, PathBuf::from("p"));
    assert_eq!(cli.cache_dir, Some(PathBuf::from("c")));
    assert_eq!(Cli::try_parse_from(["codemode-host"])?.command, None);
    Ok(())
}

#[test]
fn short_help_lines_fit_79_columns() {
    let help = Cli::command().render_help().to_string();
    for line in help.lines() {
        assert!(line.chars().count() <= 79, "too long: {line:?}");
    }
}
