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

#[test]
fn tokens_and_policy_reload_on_change_and_on_sighup_and_a_bad_version_changes_nothing() {
    let dir = root().join("target/e2e-secrets");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the folder");
    let tokens = dir.join("tokens");
    let rego = dir.join("authz.rego");
    let tokens_for = |token: &str| format!("analyst {}\n", codemode_host::authz::token_hash(token));
    std::fs::write(&tokens, tokens_for(FIRST_TOKEN)).expect("write the tokens");
    std::fs::write(&rego, policy(&["records.lookup"])).expect("write the policy");
    let plugins = plugin_folder("secrets", &[example_plugins().join("records.wasm")]);
    let server = HttpServer::start(&[
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--tokens",
        tokens.to_str().expect("utf-8 path"),
        "--policy",
        rego.to_str().expect("utf-8 path"),
    ]);
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
}
