//! Command-line flags: one definition each, whose doc comment is the help text.

use std::path::PathBuf;

use clap::Parser;

/// MCP server for code mode: capabilities from WebAssembly components
///
/// Agents get three tools: search_api, describe_api and execute (one Starlark
/// program calling many capabilities).
/// Drop plugin components (`*.wasm`) in a folder and point --plugins at it. The
/// server speaks MCP over stdio; logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "codemode-host", version)]
pub struct Cli {
    /// Folder of plugin components (*.wasm)
    ///
    /// Every `*.wasm` file directly in DIR (not in subfolders) is loaded as a plugin,
    /// in file-name order. A file that fails to load is logged with the reason and
    /// skipped; the others are served. Defaults to `./plugins`.
    #[arg(long, value_name = "DIR", default_value = "plugins")]
    pub plugins: PathBuf,

    /// Remove a capability by its stable ID (repeatable)
    ///
    /// The capability disappears from search_api, describe_api and execute. An ID
    /// that names no loaded capability stops startup with an error (fail closed), so
    /// a typo cannot leave a capability enabled.
    #[arg(long = "disable", value_name = "ID")]
    pub disable: Vec<String>,

    /// Log filter, e.g. `debug`
    ///
    /// Uses the tracing `EnvFilter` syntax; the RUST_LOG environment variable wins
    /// when set. Logs always go to stderr (stdout carries the MCP protocol).
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn plugins_defaults_to_plugins_folder() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from(["codemode-host"])?;
        assert_eq!(cli.plugins, PathBuf::from("plugins"));
        assert!(cli.disable.is_empty());
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
    fn readme_flag_table_lists_every_flag() {
        let readme = include_str!("../../README.md");
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            let row = format!("| `--{long}{value}` |");
            assert!(readme.contains(&row), "README flag table lacks {row}");
        }
    }

    #[test]
    fn short_help_lines_fit_79_columns() {
        let help = Cli::command().render_help().to_string();
        for line in help.lines() {
            assert!(line.chars().count() <= 79, "too long: {line:?}");
        }
    }
}
