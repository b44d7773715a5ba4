//! Tests.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use codemode_server::mcp::http::{Authentication, HttpConfig};
use codemode_server::{Compiler, Limits, LoadLimits, UpstreamAuth, UpstreamTransport};

use super::budgets::compiler_program;
use crate::cli::Cli;

#[test]
fn precompile_and_check_wait_longer_for_a_compile_unless_told() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["codemode-host", "precompile"])?;
    assert_eq!(cli.loading().load_timeout, Duration::from_secs(30));
    assert_eq!(
        cli.offline_loading(),
        LoadLimits {
            max_plugin_bytes: 256 << 20,
            load_timeout: Duration::from_secs(600),
            compiler: Compiler::Child {
                program: compiler_program()?,
                max_memory: 4 << 30,
            },
        }
    );
    let cli = Cli::try_parse_from([
        "codemode-host",
        "precompile",
        "--max-compile-memory",
        "512MiB",
    ])?;
    assert_eq!(
        cli.loading().compiler,
        Compiler::Child {
            program: compiler_program()?,
            max_memory: 512 << 20,
        }
    );
    assert!(Cli::try_parse_from(["codemode-host", "--max-compile-memory", "0"]).is_err());
    assert!(Cli::try_parse_from(["codemode-host", "--max-compile-memory", "2048GiB"]).is_err());
    let cli = Cli::try_parse_from(["codemode-host", "check", "p.wasm"])?;
    assert_eq!(cli.offline_loading().load_timeout, Duration::from_secs(600));
    let cli = Cli::try_parse_from(["codemode-host", "precompile", "--load-timeout", "2s"])?;
    assert_eq!(cli.offline_loading().load_timeout, Duration::from_secs(2));
    Ok(())
}

#[test]
fn limit_flags_override_defaults() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["codemode-host"])?;
    assert_eq!(cli.limits(), Limits::default());
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--max-execution-time",
        "250ms",
        "--max-value-bytes",
        "64KiB",
        "--max-native-calls",
        "3",
        "--max-memory",
        "64MiB",
    ])?;
    let limits = cli.limits();
    assert_eq!(limits.max_execution_time, Duration::from_millis(250));
    assert_eq!(limits.max_value_bytes, 65_536);
    assert_eq!(limits.max_native_calls, 3);
    assert_eq!(limits.max_memory_bytes, 64 << 20);
    assert_eq!(limits.max_execution_steps, 1_000_000);
    // A per-sandbox cap above the machine's default total raises the total.
    let cli = Cli::try_parse_from(["codemode-host", "--max-memory", "4GiB"])?;
    let limits = cli.limits();
    assert_eq!(
        limits.max_total_memory_bytes,
        codemode_server::memory::default_total().max(4 << 30)
    );
    assert_eq!(limits.validate(), Ok(()));
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--max-memory",
        "512MiB",
        "--max-total-memory",
        "256MiB",
    ])?;
    assert_eq!(
        cli.limits().validate().map_err(|e| e.to_string()),
        Err("--max-total-memory must be at least --max-memory".to_owned())
    );
    let error = Cli::try_parse_from(["codemode-host", "--max-execution-time", "5"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`5` needs a unit: ms, s, m or h (e.g. 5s)"),
        "{error}"
    );
    Ok(())
}

fn write_policy(name: &str, source: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("codemode-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, source)?;
    Ok(path)
}

#[test]
fn authorization_is_never_silent_over_http() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["codemode-host"])?;
    assert_eq!(
        cli.authorization(true)
            .err()
            .map(|e| e.to_string())
            .as_deref(),
        Some(
            "the HTTP listener needs an authorization decision: pass --policy FILE.rego (repeatable) or --allow-all"
        )
    );
    assert_eq!(
        cli.authorization(false)?.summary,
        r#"no --policy given: every native call is allowed for the single stdio subject "local""#
    );
    let cli = Cli::try_parse_from(["codemode-host", "--allow-all"])?;
    assert_eq!(
        cli.authorization(true)?.summary,
        "every native call is allowed (--allow-all)"
    );
    Ok(())
}

#[test]
fn token_exchange_needs_the_client_and_its_secret() -> anyhow::Result<()> {
    let mut cli = Cli::try_parse_from(["codemode-host"])?;
    cli.upstreams = vec![codemode_server::UpstreamConfig {
        name: "crm".into(),
        transport: UpstreamTransport::Http {
            url: "https://crm.example.com/mcp".into(),
            auth: UpstreamAuth::TokenExchange {
                audience: "https://crm.example.com".into(),
                session: None,
            },
            headers: std::collections::BTreeMap::new(),
        },
        timeout: None,
        tools: None,
    }];
    assert_eq!(
            cli.token_exchange(None).err().map(|e| e.to_string()),
            Some("upstream `crm`: auth = \"token-exchange\" needs --oauth-issuer, --oauth-client-id and --oauth-client-secret-file".to_owned())
        );
    assert!(
        Cli::try_parse_from(["codemode-host", "--oauth-client-id", "codemode"]).is_err(),
        "the client ID needs the issuer and the secret file"
    );
    let blank = write_policy("blank-secret", " \n")?;
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--listen",
        "127.0.0.1:0",
        "--oauth-issuer",
        "https://login.example.com",
        "--resource-url",
        "https://mcp.example.com/mcp",
        "--oauth-client-id",
        "codemode",
        "--oauth-client-secret-file",
        &blank.display().to_string(),
    ])?;
    let http = cli.http()?;
    assert_eq!(
        cli.token_exchange(http.as_ref().map(|(_, config)| config))
            .err()
            .map(|e| e.to_string()),
        Some(format!(
            "--oauth-client-secret-file {}: the file is blank",
            blank.display()
        ))
    );
    Ok(())
}

#[test]
fn a_visibility_decision_needs_a_policy_and_a_rule() -> anyhow::Result<()> {
    let missing = Cli::try_parse_from([
        "codemode-host",
        "--visibility-decision",
        "data.codemode.authz.visible",
    ])
    .err()
    .map(|error| error.kind());
    assert_eq!(
        missing,
        Some(clap::error::ErrorKind::MissingRequiredArgument)
    );
    let policy = write_policy(
        "visible.rego",
        "package codemode.authz\ndefault allow := false\ndefault visible := false\n",
    )?;
    let policy = policy.display().to_string();
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--policy",
        &policy,
        "--visibility-decision",
        "data.codemode.authz.visible",
    ])?;
    let authorization = cli.authorization(true)?;
    assert_eq!(
        authorization.summary,
        "native calls are decided by data.codemode.authz.allow with 1 policy module(s); what each subject can find by data.codemode.authz.visible"
    );
    assert!(authorization.authorizer.decides_visibility());
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--policy",
        &policy,
        "--visibility-decision",
        "input.visible",
    ])?;
    assert_eq!(
        cli.authorization(true).err().map(|e| e.to_string()),
        Some("rego: decision \"input.visible\" must be a ground data reference".to_owned())
    );
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--policy",
        &policy,
        "--visibility-decision",
        "data.codemode.authz.shown",
    ])?;
    assert_eq!(
            cli.authorization(true).err().map(|e| e.to_string()),
            Some("rego: no rule defines the decision `data.codemode.authz.shown` (the modules' packages: data.codemode.authz); define it, or name the rule that decides with --visibility-decision".to_owned())
        );
    Ok(())
}

#[test]
fn policies_compile_at_start() -> anyhow::Result<()> {
    let good = write_policy(
        "good.rego",
        "package codemode.authz\ndefault allow := false\n",
    )?;
    let bad = write_policy(
        "bad.rego",
        "package codemode.authz\nallow if { rand.intn(\"x\", 2) == 1 }\n",
    )?;
    let cli = Cli::try_parse_from(["codemode-host", "--policy", &good.display().to_string()])?;
    assert_eq!(
        cli.authorization(true)?.summary,
        "native calls are decided by data.codemode.authz.allow with 1 policy module(s)"
    );
    let cli = Cli::try_parse_from(["codemode-host", "--policy", &bad.display().to_string()])?;
    let error = cli
        .authorization(true)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        error,
        format!(
            "rego: module {}:2:12: `rand.intn` is not available: decisions must be deterministic and silent",
            bad.display()
        )
    );
    let missing = good.with_file_name("missing.rego");
    let cli = Cli::try_parse_from(["codemode-host", "--policy", &missing.display().to_string()])?;
    let error = cli
        .authorization(false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.starts_with(&format!("policy file `{}`: ", missing.display())),
        "{error}"
    );
    assert!(Cli::try_parse_from(["codemode-host", "--policy", "p.rego", "--allow-all"]).is_err());
    Ok(())
}

#[test]
fn http_refuses_an_exposed_address_without_tokens() -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["codemode-host", "--listen", "0.0.0.0:8080"])?;
    assert_eq!(
        cli.http().err().map(|e| e.to_string()).as_deref(),
        Some(
            "refusing to serve 0.0.0.0:8080 without authentication: pass --tokens FILE or --oauth-issuer URL, or --insecure if the network is trusted"
        )
    );
    // An issuer serves it; one without a resource URL, or over plain HTTP
    // off loopback, does not.
    let oauth = |extra: &[&str]| {
        let mut args = vec!["codemode-host", "--listen", "0.0.0.0:8080"];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args).map(|cli| cli.http().map(|_| ()).map_err(|e| e.to_string()))
    };
    assert_eq!(
        oauth(&[
            "--oauth-issuer",
            "https://login.example.com",
            "--resource-url",
            "https://mcp.example.com/mcp"
        ])?,
        Ok(())
    );
    assert_eq!(
            oauth(&["--oauth-issuer", "https://login.example.com"])?,
            Err("--oauth-issuer needs --resource-url: this server's canonical URL (e.g. https://mcp.example.com/mcp), which tokens must name as their audience".to_owned())
        );
    assert_eq!(
        oauth(&[
            "--oauth-issuer",
            "http://login.example.com",
            "--resource-url",
            "https://mcp.example.com/mcp"
        ])?,
        Err(
            "--oauth-issuer http://login.example.com: must be https (http only on a loopback host)"
                .to_owned()
        )
    );
    let cli = Cli::try_parse_from(["codemode-host", "--listen", "0.0.0.0:8080", "--insecure"])?;
    assert!(matches!(
        cli.http()?,
        Some((
            _,
            HttpConfig {
                authentication: Authentication::Fixed(_),
                ..
            }
        ))
    ));
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--listen",
        "127.0.0.1:0",
        "--allowed-host",
        "mcp.example.com",
    ])?;
    let (address, config) = cli.http()?.ok_or_else(|| anyhow::anyhow!("no http"))?;
    assert!(address.ip().is_loopback());
    assert_eq!(
        config.allowed_hosts,
        vec!["localhost", "127.0.0.1", "::1", "mcp.example.com"]
    );
    assert_eq!(config.drain, Duration::from_secs(6));
    let tokens = write_policy("tokens", "analyst 00\n")?;
    let cli = Cli::try_parse_from([
        "codemode-host",
        "--listen",
        "0.0.0.0:1",
        "--tokens",
        &tokens.display().to_string(),
    ])?;
    assert_eq!(
        cli.http().err().map(|e| e.to_string()),
        Some(format!(
            "tokens file `{}`: line 1: the token hash must be 64 hex digits (the SHA-256 of the token)",
            tokens.display()
        ))
    );
    assert!(Cli::try_parse_from(["codemode-host", "--tokens", "t"]).is_err());
    Ok(())
}
