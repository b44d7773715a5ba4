//! The tokens file and the policy reloaded while serving: when their files change
//! and on SIGHUP. A new version that does not parse or compile leaves the set in
//! force, with the reason in the log.

use std::path::Path;

use serde_json::json;

use crate::support::{
    HttpServer, example_plugins, execute_as, plugin_folder, raw_request, root, wait_for_log,
    wait_until,
};

const FIRST_TOKEN: &str = "first-token-0123456789";
const SECOND_TOKEN: &str = "second-token-0123456789";

const LOOKUP: &str = "def main():\n    return records.lookup(key=\"bk-0001\")[\"title\"]";
const QUERY: &str = "def main():\n    return len(records.query(filter={\"genre\": \"fantasy\"}, tags=[])[\"items\"]) > 0";

/// A policy allowing `names` to anyone.
fn policy(names: &[&str]) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    format!(
        "package codemode.authz\n\ndefault allow := false\n\nallow if {{ input.capability.name in {{{}}} }}\n",
        names.join(", ")
    )
}

/// Replaces `path` with `text` the way secret managers do: a new file renamed over it.
fn replace(path: &Path, text: &str) {
    let temp = path.with_extension("new");
    std::fs::write(&temp, text).expect("write the new version");
    std::fs::rename(&temp, path).expect("rename it in place");
}

/// The HTTP status of an `initialize` with `token`.
fn status_with(port: u16, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    raw_request(
        port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &auth),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    )
    .status
}

/// A server on the records example for the subjects of `tokens` under the
/// policy `rego`; its plugins folder is `label`'s.
fn records_server(label: &str, tokens: &std::path::Path, rego: &std::path::Path) -> HttpServer {
    let plugins = plugin_folder(label, &[example_plugins().join("records.wasm")]);
    HttpServer::start(&[
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--policy",
        rego.to_str().expect("utf-8 path"),
    ])
}

#[test]
fn tokens_and_policy_reload_on_change_and_on_sighup_and_a_bad_version_changes_nothing() {
    let dir = root().join("target/e2e-secrets");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let tokens = dir.join("tokens");
    let rego = dir.join("authz.rego");
    let tokens_for =
        |token: &str| format!("analyst {}\n", codemode_server::authz::token_hash(token));
    std::fs::write(&tokens, tokens_for(FIRST_TOKEN)).expect("write the tokens");
    std::fs::write(&rego, policy(&["records.lookup"])).expect("write the policy");
    let server = records_server("secrets", &tokens, &rego);
    let port = server.port;
    assert_eq!(
        execute_as(port, FIRST_TOKEN, LOOKUP),
        Ok(json!("The Burning Tide"))
    );
    assert_eq!(
        execute_as(port, FIRST_TOKEN, QUERY),
        Err("permission denied".to_owned())
    );

    // A new tokens file: the new token works, the old one no longer does.
    replace(&tokens, &tokens_for(SECOND_TOKEN));
    wait_until(
        "the second token to be accepted",
        || status_with(port, SECOND_TOKEN) == 200,
        || server.log(),
    );
    assert_eq!(status_with(port, FIRST_TOKEN), 401);
    wait_for_log(&server, "tokens reloaded file=", 1);

    // A tokens file that does not parse: the tokens in force stay.
    replace(&tokens, "analyst not-a-hash\n");
    wait_for_log(&server, "tokens reload failed; the tokens in force stay", 1);
    assert_eq!(status_with(port, SECOND_TOKEN), 200);

    // A new policy decides the next call.
    replace(&rego, &policy(&["records.lookup", "records.query"]));
    wait_until(
        "the new policy to allow records.query",
        || execute_as(port, SECOND_TOKEN, QUERY) == Ok(json!(true)),
        || server.log(),
    );
    wait_for_log(
        &server,
        "policy reloaded modules=1 decision=data.codemode.authz.allow",
        1,
    );

    // A policy that does not compile: the policy in force keeps deciding.
    replace(&rego, "package codemode.authz\n\nallow if {\n");
    wait_for_log(
        &server,
        "policy reload failed; the policy in force keeps deciding",
        1,
    );
    assert_eq!(execute_as(port, SECOND_TOKEN, QUERY), Ok(json!(true)));

    // SIGHUP reads both again (no longer the end of the server): the tokens file
    // still does not parse, the policy still does not compile.
    server.signal("HUP");
    wait_for_log(&server, "cause=\"SIGHUP\"", 2);
    let log = server.log();
    assert!(
        log.contains(&format!(
            "ERROR codemode_host::secrets: tokens reload failed; the tokens in force stay reason=tokens file `{}`: line 1: ",
            tokens.display()
        )),
        "{log}"
    );
    assert_eq!(status_with(port, SECOND_TOKEN), 200);
    assert_eq!(
        execute_as(port, SECOND_TOKEN, LOOKUP),
        Ok(json!("The Burning Tide"))
    );
    let health = raw_request(port, "GET", "/healthz", &[], "");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    // /metrics counts each reload of each file as the log tells it.
    let counted = |file: &str, outcome: &str| {
        let metrics = raw_request(
            port,
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {SECOND_TOKEN}"))],
            "",
        );
        let line =
            format!("codemode_config_reloads_total{{file=\"{file}\",outcome=\"{outcome}\"}} ");
        metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no {line} in\n{}", metrics.body))
    };
    let logged = |needle: &str| server.log().matches(needle).count();
    wait_until(
        "the reload counts to agree with the log",
        || {
            counted("tokens", "ok") == logged("tokens reloaded file=")
                && counted("tokens", "error") == logged("tokens reload failed")
                && counted("policy", "ok") == logged("policy reloaded modules=")
                && counted("policy", "error") == logged("policy reload failed")
        },
        || server.log(),
    );
    assert!(counted("tokens", "error") >= 2 && counted("policy", "error") >= 2);
    assert_eq!(counted("config", "ok") + counted("config", "error"), 0);
}

/// Puts a FIFO at `path` (made beside it, renamed over it): opening it for reading
/// would wait for a writer forever.
fn replace_with_fifo(path: &Path) {
    let temp = path.with_extension("fifo");
    let _ = std::fs::remove_file(&temp);
    let made = std::process::Command::new("mkfifo")
        .arg(&temp)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    std::fs::rename(&temp, path).expect("rename the FIFO in place");
}

#[test]
fn a_fifo_or_a_huge_file_in_place_of_a_secrets_file_keeps_the_set_and_the_next_good_one_applies() {
    let dir = root().join("target/e2e-secrets-hostile");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let tokens = dir.join("tokens");
    let rego = dir.join("authz.rego");
    let hash = codemode_server::authz::token_hash;
    let both = format!(
        "analyst {}\nrevoked {}\n",
        hash(SECOND_TOKEN),
        hash(FIRST_TOKEN)
    );
    std::fs::write(&tokens, &both).expect("write the tokens");
    std::fs::write(&rego, policy(&["records.lookup"])).expect("write the policy");
    let server = records_server("secrets-hostile", &tokens, &rego);
    let port = server.port;
    assert_eq!(status_with(port, FIRST_TOKEN), 200);

    // FIFOs in place of both files: before, opening the tokens FIFO blocked the
    // reload thread for good, and nothing after it was ever applied.
    replace_with_fifo(&tokens);
    replace_with_fifo(&rego);
    let fifo = "not a regular file (a FIFO); only regular files are read";
    wait_for_log(
        &server,
        &format!(
            "tokens reload failed; the tokens in force stay reason=tokens file `{}`: {fifo}",
            tokens.display()
        ),
        1,
    );
    wait_for_log(
        &server,
        &format!(
            "policy reload failed; the policy in force keeps deciding reason=policy file `{}`: {fifo}",
            rego.display()
        ),
        1,
    );
    assert_eq!(
        status_with(port, FIRST_TOKEN),
        200,
        "the tokens in force stay"
    );
    assert_eq!(
        execute_as(port, FIRST_TOKEN, LOOKUP),
        Ok(json!("The Burning Tide"))
    );

    // A sparse 2 GiB file: refused from its size, not read (2.1 GB of memory before).
    let huge = tokens.with_extension("huge");
    std::fs::File::create(&huge)
        .and_then(|file| file.set_len(2 << 30))
        .expect("make a sparse file");
    std::fs::rename(&huge, &tokens).expect("rename it in place");
    wait_for_log(
        &server,
        &format!(
            "reason=tokens file `{}`: 2147483648 bytes, more than the 16777216 allowed (16 MiB, the most a tokens file may hold)",
            tokens.display()
        ),
        1,
    );

    // The next good versions apply: the revoked token is refused, the deny policy
    // decides.
    replace(&tokens, &format!("analyst {}\n", hash(SECOND_TOKEN)));
    wait_until(
        "the revoked token to be refused",
        || status_with(port, FIRST_TOKEN) == 401,
        || server.log(),
    );
    assert_eq!(status_with(port, SECOND_TOKEN), 200);
    replace(&rego, &policy(&[]));
    wait_until(
        "the deny policy to decide",
        || execute_as(port, SECOND_TOKEN, LOOKUP) == Err("permission denied".to_owned()),
        || server.log(),
    );
    // SIGHUP still reloads (the thread is not stuck).
    server.signal("HUP");
    wait_for_log(&server, "subjects=1 cause=\"SIGHUP\"", 1);
}
