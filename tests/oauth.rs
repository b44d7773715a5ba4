//! The OAuth 2.1 resource server (issue 38) against a real authorization
//! server: npm `oidc-provider` (`tests/clients/oidc_provider.mjs`) on a
//! loopback port, issuing JWT access tokens by the client credentials grant.
//! Each test checks the exact status, challenge and answer.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::support::{
    HttpServer, execute_as, node_tools, plugin_folder, raw_request, root, test_plugin, tool_as,
};

/// The canonical URL the tests' server is known by (its tokens' audience).
const RESOURCE: &str = "http://localhost/mcp";
/// Where its protected resource metadata is.
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// A program every subject the policy allows may run.
const NAP: &str = "def main():\n    return sleepy.nap(ms=1)";
/// Admins run anything; everyone else nothing.
const POLICY: &str = "package codemode.authz\n\ndefault allow := false\n\nallow if \"admins\" in input.subject.claims.groups\n";

/// An oidc-provider process; ends when dropped.
struct Issuer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Its issuer URL.
    url: String,
}

impl Issuer {
    fn start() -> Self {
        Self::start_for(RESOURCE)
    }

    /// An issuer whose tokens name `resource` by default.
    fn start_for(resource: &str) -> Self {
        Self::start_exchanging(resource, &[])
    }

    /// [`Issuer::start_for`], also exchanging tokens for `audiences`.
    fn start_exchanging(resource: &str, audiences: &[&str]) -> Self {
        let tools = node_tools();
        let config =
            json!({"modules": tools.modules, "resource": resource, "audiences": audiences});
        let mut child = Command::new(&tools.node)
            .arg(root().join("tests/clients/oidc_provider.mjs"))
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run oidc-provider");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let url = read_line(&mut stdout)["issuer"]
            .as_str()
            .expect("the issuer URL")
            .to_owned();
        Self {
            child,
            stdin,
            stdout,
            url,
        }
    }

    fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .expect("a port")
    }

    /// An access token for `client` with `scope`, for `resource`.
    fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        let body = format!(
            "grant_type=client_credentials&client_id={client}&client_secret={client}-secret&scope={}&resource={}",
            scope.replace(':', "%3A").replace(' ', "+"),
            resource.replace(':', "%3A").replace('/', "%2F"),
        );
        let response = raw_request(
            self.port(),
            "POST",
            "/token",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            &body,
        );
        let answer: Value = serde_json::from_str(&response.body).expect("a JSON answer");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {answer}"))
            .to_owned()
    }

    /// How many token exchanges it made.
    fn exchanges(&mut self) -> u64 {
        self.ask("exchanges")["exchanges"]
            .as_u64()
            .expect("a count")
    }

    /// How many times its keys (the JWKS) were fetched so far: counted as it
    /// serves them, so a fetch a server finished is counted.
    fn jwks_fetches(&mut self) -> u64 {
        self.ask("jwks")["jwks"].as_u64().expect("a count")
    }

    /// The issuer's answer to `command`, one line on its stdin.
    fn ask(&mut self, command: &str) -> Value {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .expect("ask the issuer");
        stdin.flush().expect("flush");
        read_line(&mut self.stdout)
    }

    /// Signs with a new key from now on (the old one stays published); its ID.
    fn rotate(&mut self) -> String {
        self.ask("rotate")["rotated"]
            .as_str()
            .expect("the new key's ID")
            .to_owned()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        // Closing stdin ends it; kill in case it does not.
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The decoded header of the JWT `token`.
fn header_of(token: &str) -> Value {
    use base64::Engine as _;
    let header = token.split('.').next().expect("a header");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The next JSON line `oidc-provider`'s script writes (its own notices are
/// other lines).
fn read_line(stdout: &mut BufReader<ChildStdout>) -> Value {
    loop {
        let mut line = String::new();
        let read = stdout
            .read_line(&mut line)
            .expect("a line from oidc-provider");
        assert!(read > 0, "oidc-provider ended");
        if let Ok(value) = serde_json::from_str(&line) {
            return value;
        }
    }
}

/// The tests' server: the sleepy plugin, the group policy, `issuer`'s tokens
/// with the scope `mcp:execute` required.
fn server(label: &str, issuer: &Issuer) -> HttpServer {
    server_at(label, issuer, RESOURCE, "127.0.0.1:0")
}

/// [`server`] known as `resource`, listening on `listen`.
fn server_at(label: &str, issuer: &Issuer, resource: &str, listen: &str) -> HttpServer {
    let plugins = plugin_folder(label, &[test_plugin("sleepy")]);
    let policy = plugins.join("groups.rego.txt");
    std::fs::write(&policy, POLICY).expect("write the policy");
    start(listen, issuer, resource, &plugins, &policy, &[])
}

/// A server of `issuer`'s tokens known as `resource`, on `listen`, serving
/// `plugins` under `policy`, with `more` flags.
fn start(
    listen: &str,
    issuer: &Issuer,
    resource: &str,
    plugins: &std::path::Path,
    policy: &std::path::Path,
    more: &[&str],
) -> HttpServer {
    let mut args = vec![
        "--plugins",
        plugins.to_str().expect("utf-8 path"),
        "--policy",
        policy.to_str().expect("utf-8 path"),
        "--oauth-issuer",
        &issuer.url,
        "--resource-url",
        resource,
        "--required-scope",
        "mcp:execute",
    ];
    args.extend(more);
    HttpServer::start_listening(listen, &args, &[])
}

/// A `tools/list` POST with `token`: status, `WWW-Authenticate`, body.
fn list(port: u16, token: Option<&str>) -> (u16, Option<String>, String) {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let response = raw_request(
        port,
        "POST",
        "/mcp",
        &headers,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
    );
    (
        response.status,
        response.header("www-authenticate").map(str::to_owned),
        response.body,
    )
}

fn challenge(error: Option<&str>) -> Option<String> {
    let error = error.map_or(String::new(), |e| format!(", error=\"{e}\""));
    Some(format!(
        "Bearer resource_metadata=\"http://localhost{METADATA_PATH}\"{error}, scope=\"mcp:execute\""
    ))
}

#[test]
fn the_issuers_access_tokens_name_subjects_whose_claims_reach_the_policy() {
    let issuer = Issuer::start();
    let server = server("oauth", &issuer);
    // The client learns where to log in: the 401 points at the metadata.
    let (status, header, _) = list(server.port, None);
    assert_eq!((status, header), (401, challenge(None)));
    let metadata = raw_request(server.port, "GET", METADATA_PATH, &[], "");
    assert_eq!(metadata.status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&metadata.body).expect("JSON"),
        json!({
            "resource": RESOURCE,
            "authorization_servers": [issuer.url],
            "scopes_supported": ["mcp:execute"],
            "bearer_methods_supported": ["header"],
        })
    );
    // Alice is an admin, Bob is not: the policy reads the groups claim.
    let alice = issuer.token("alice", "mcp:execute", RESOURCE);
    let bob = issuer.token("bob", "mcp:execute", RESOURCE);
    assert_eq!(execute_as(server.port, &alice, NAP), Ok(json!({"ms": 1})));
    assert_eq!(
        execute_as(server.port, &bob, NAP),
        Err("permission denied".to_owned())
    );
    let subjects: Vec<String> = server
        .audit()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .map(|line| {
            format!(
                "{} {}",
                line["subject"].as_str().unwrap_or_default(),
                line["decision"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(subjects, ["alice allow", "bob deny"]);
    // A token without the required scope: 403, and the scope to ask for.
    let admin_only = issuer.token("alice", "mcp:admin", RESOURCE);
    let (status, header, body) = list(server.port, Some(&admin_only));
    assert_eq!(
        (status, header, body.as_str()),
        (
            403,
            challenge(Some("insufficient_scope")),
            "forbidden: the access token lacks a required scope (see WWW-Authenticate)\n"
        )
    );
    // Another server's token, an unsigned one, another issuer's: 401.
    let elsewhere = issuer.token("alice", "mcp:execute", "http://localhost/other");
    let unsigned = {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = alice.split('.').nth(1).expect("a payload");
        format!(
            "{}.{payload}.",
            engine.encode(br#"{"alg":"none","typ":"at+jwt"}"#)
        )
    };
    let other_issuer = Issuer::start();
    let foreign = other_issuer.token("alice", "mcp:execute", RESOURCE);
    for token in [&elsewhere, &unsigned, &foreign, &"not-a-token".to_owned()] {
        let (status, header, _) = list(server.port, Some(token));
        assert_eq!((status, header), (401, challenge(Some("invalid_token"))));
    }
    // Clients reach the server by the resource URL's name: that Host passes.
    let by_name = raw_request(
        server.port,
        "GET",
        METADATA_PATH,
        &[("Host", "localhost")],
        "",
    );
    assert_eq!(by_name.status, 200);
    // What was accepted still is: the refusals changed nothing.
    assert_eq!(list(server.port, Some(&alice)).0, 200);
    // Neither a token nor its claims reach the log.
    let log = server.log();
    for secret in [&alice, &bob, &admin_only, &elsewhere, &foreign] {
        assert!(!log.contains(secret.as_str()), "{log}");
    }
    assert!(!log.contains("admins"), "{log}");
}

/// How often the rotation test lets the server fetch the issuer's keys
/// (`--oauth-keys-refresh`; a minute by default).
const KEYS_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// The issuer rotates its signing key: a token signed with the new key is
/// refused until the server fetches the keys again, at most once per
/// `--oauth-keys-refresh` (a made-up key ID cannot make it fetch on every
/// request), then accepted.
#[test]
fn a_rotated_signing_key_is_picked_up() {
    let mut issuer = Issuer::start();
    let plugins = plugin_folder("oauth-rotation", &[test_plugin("sleepy")]);
    let policy = plugins.join("groups.rego.txt");
    std::fs::write(&policy, POLICY).expect("write the policy");
    let refresh = format!("{}s", KEYS_REFRESH.as_secs());
    let server = start(
        "127.0.0.1:0",
        &issuer,
        RESOURCE,
        &plugins,
        &policy,
        &["--oauth-keys-refresh", &refresh],
    );
    let before = issuer.token("alice", "mcp:execute", RESOURCE);
    assert_eq!(list(server.port, Some(&before)).0, 200);
    let kid = issuer.rotate();
    let after = issuer.token("alice", "mcp:execute", RESOURCE);
    assert_eq!(
        header_of(&after)["kid"],
        json!(kid),
        "signed with the new key"
    );
    crate::support::wait_until(
        "the new key to be picked up",
        || {
            let (status, _, _) = list(server.port, Some(&after));
            assert!(status == 200 || status == 401, "{status}");
            status == 200
        },
        || server.log(),
    );
    // The fetch that found the new key ended just before this.
    let picked_up = std::time::Instant::now();
    // The old key is still published: its tokens still pass.
    assert_eq!(list(server.port, Some(&before)).0, 200);
    // Fetched twice: at start, and once for the new key, however many
    // requests named it meanwhile.
    assert_eq!(issuer.jwks_fetches(), 2, "{}", server.log());
    // Tokens naming a key nobody published, right after that fetch: refused,
    // and none makes the server fetch again within the interval (checked when
    // they were sent well within it, with room for the poll that found the key).
    let made_up = with_kid(&after, "made-up");
    for _ in 0..5 {
        assert_eq!(list(server.port, Some(&made_up)).0, 401);
    }
    if picked_up.elapsed() < KEYS_REFRESH / 2 {
        assert_eq!(issuer.jwks_fetches(), 2, "{}", server.log());
    }
}

/// `token` with its header's `kid` replaced (its signature no longer matters:
/// the key is looked up first).
fn with_kid(token: &str, kid: &str) -> String {
    use base64::Engine as _;
    let mut header = header_of(token);
    header["kid"] = json!(kid);
    let encoded =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(header.to_string().as_bytes());
    let rest = token.split_once('.').expect("a JWT").1;
    format!("{encoded}.{rest}")
}

/// A token of the issuer that expired is refused once its `exp` is more than
/// `--oauth-leeway` of clock skew behind, not before.
#[test]
fn an_expired_token_is_refused_after_the_leeway() {
    const SHORT: &str = "http://localhost/short";
    const LEEWAY: u64 = 2;
    let issuer = Issuer::start_for(SHORT);
    let plugins = plugin_folder("oauth-expiry", &[test_plugin("sleepy")]);
    let policy = plugins.join("groups.rego.txt");
    std::fs::write(&policy, POLICY).expect("write the policy");
    let leeway = format!("{LEEWAY}s");
    let server = start(
        "127.0.0.1:0",
        &issuer,
        SHORT,
        &plugins,
        &policy,
        &["--oauth-leeway", &leeway],
    );
    let token = issuer.token("alice", "mcp:execute", SHORT);
    let claims = {
        use base64::Engine as _;
        let payload = token.split('.').nth(1).expect("a payload");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64url");
        serde_json::from_slice::<Value>(&bytes).expect("JSON")
    };
    let exp = claims["exp"].as_u64().expect("exp");
    assert_eq!(exp - claims["iat"].as_u64().expect("iat"), 1, "{claims}");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    };
    // Asked before the leeway ran out (a second of slack for rounding): accepted.
    let asked = now();
    let (status, _, _) = list(server.port, Some(&token));
    if asked + 1 < exp + LEEWAY {
        assert_eq!(status, 200, "accepted within the leeway");
    }
    crate::support::wait_until(
        "the expired token to be refused",
        || {
            let asked = now();
            let (status, header, _) = list(server.port, Some(&token));
            if status == 200 {
                return false;
            }
            assert_eq!(
                (status, header.as_deref()),
                (
                    401,
                    Some(
                        "Bearer resource_metadata=\"http://localhost/.well-known/oauth-protected-resource/short\", error=\"invalid_token\", scope=\"mcp:execute\""
                    )
                )
            );
            // Refused only past the leeway (a second of slack for rounding).
            assert!(
                asked + 1 >= exp + LEEWAY,
                "refused at {asked} for exp {exp}"
            );
            true
        },
        || server.log(),
    );
}

/// An issuer that does not answer: requests get 503 with `Retry-After` (the
/// token is not the problem, so no `invalid_token` that would make the client
/// log in again), and the log says why once per attempt.
#[test]
fn an_issuer_that_cannot_be_reached_is_a_503_not_a_bad_token() {
    let issuer = Issuer::start();
    let token = issuer.token("alice", "mcp:execute", RESOURCE);
    // Nothing listens on port 9 of the loopback address.
    let plugins = plugin_folder("oauth-down", &[test_plugin("sleepy")]);
    let server = HttpServer::allowing(
        &plugins,
        &[
            "--oauth-issuer",
            "http://127.0.0.1:9",
            "--resource-url",
            RESOURCE,
        ],
    );
    crate::support::wait_for_log(&server, "OAuth issuer keys could not be fetched", 1);
    let response = raw_request(
        server.port,
        "POST",
        "/mcp",
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
    );
    assert_eq!(
        (
            response.status,
            response.header("retry-after"),
            response.body.as_str()
        ),
        (
            503,
            Some("5"),
            "Service Unavailable: the authorization server's keys could not be fetched; try again shortly\n"
        )
    );
}

/// The official Python SDK as an MCP client does it: its first request gets the
/// 401, it reads the protected resource metadata, finds oidc-provider, registers
/// itself (RFC 7591), sends its user through the login and consent pages (PKCE,
/// the resource indicator naming this server), and calls `execute` with the
/// token. The user's groups decide what runs.
#[test]
fn the_python_sdk_logs_in_through_the_issuer_and_calls_execute() {
    let port = crate::support::free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = Issuer::start_for(&resource);
    let server = server_at(
        "oauth-sdk",
        &issuer,
        &resource,
        &format!("127.0.0.1:{port}"),
    );
    let run = |login: &str| {
        crate::support::run_driver(&json!({
            "url": resource,
            "mode": "legacy",
            "oauth": {
                "login": login,
                "redirect_uri": "http://127.0.0.1:1/callback",
                "scope": "mcp:execute",
            },
            "steps": [{"op": "call", "tool": "execute", "arguments": {"source": NAP}}],
        }))
    };
    let alice = run("alice");
    assert_eq!(
        alice["authorization"],
        json!({"resource": resource, "scope": "mcp:execute"}),
        "{alice}"
    );
    assert_eq!(
        alice["results"][0]["structured"],
        json!({"result": {"ms": 1}}),
        "{alice}"
    );
    let bob = run("bob");
    assert_eq!(
        bob["results"][0]["text"],
        json!(["permission denied"]),
        "{bob}"
    );
    assert_eq!(audited(&server), ["alice", "bob"]);
}

/// Every call allowed; a user (not an admin) has one native call a day.
const QUOTA_POLICY: &str = r#"package codemode.authz

default allow := true

quota := {"native-calls-per-day": 1} if "users" in input.subject.claims.groups
"#;

#[test]
fn a_policy_sets_each_subjects_quotas_from_its_token_claims() {
    crate::quota::early_in_a_minute_and_day(std::time::Duration::ZERO);
    let issuer = Issuer::start();
    let plugins = plugin_folder("oauth-quota", &[test_plugin("sleepy")]);
    let policy = plugins.join("quota.rego.txt");
    std::fs::write(&policy, QUOTA_POLICY).expect("write the policy");
    // The tables: three calls a day, which the decision overrides for users.
    let config = plugins.join("quota.toml");
    std::fs::write(&config, "[[quota]]\nnative-calls-per-day = 3\n").expect("write the config");
    let server = start(
        "127.0.0.1:0",
        &issuer,
        RESOURCE,
        &plugins,
        &policy,
        &[
            "--quota-decision",
            "data.codemode.authz.quota",
            "--store",
            "memory",
            "--config",
            config.to_str().expect("utf-8 path"),
        ],
    );
    let execute = |token: &str| {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "execute", "arguments": {"source": NAP}}});
        crate::support::rpc(server.port, token, &request)["result"].clone()
    };
    // bob is in `users`: one call today, then refused by the quota.
    let bob = issuer.token("bob", "mcp:execute", RESOURCE);
    assert_eq!(
        execute(&bob)["structuredContent"],
        json!({"result": {"ms": 1}})
    );
    let refused = execute(&bob);
    assert_eq!(
        refused["content"][0]["text"], "resource limit exceeded",
        "{refused}"
    );
    assert_eq!(
        refused["_meta"]["codemode/stats"]["quota"]["name"], "native-calls-per-day",
        "{refused}"
    );
    // alice is an admin: the decision is undefined, and the tables' three
    // calls bind her.
    let alice = issuer.token("alice", "mcp:execute", RESOURCE);
    for _ in 0..3 {
        assert_eq!(
            execute(&alice)["structuredContent"],
            json!({"result": {"ms": 1}})
        );
    }
    let refused = execute(&alice);
    assert_eq!(
        refused["_meta"]["codemode/stats"]["quota"]["name"], "native-calls-per-day",
        "{refused}"
    );
}

/// Admins see and call everything; everyone else only `sleepy.*` and what is
/// read-only (`granted.read`).
const VISIBILITY_POLICY: &str = r#"package codemode.authz

default allow := false

allow if visible

default visible := false

visible if "admins" in input.subject.claims.groups

visible if startswith(input.capability.name, "sleepy.")

visible if input.capability.annotations.readOnlyHint
"#;

/// The names `search_api` finds for `query` as the holder of `token`.
fn found(port: u16, token: &str, query: &str) -> Vec<String> {
    let answer = tool_as(port, token, "search_api", json!({"query": query})).expect("a search");
    answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| result["name"].as_str().expect("a name").to_owned())
        .collect()
}

/// `--visibility-decision`: a capability a subject may not see is, for it,
/// as if disabled: search, describe and execute agree, and no suggestion
/// names it. The admin sees everything. A reloaded policy decides anew.
#[test]
fn a_subject_cannot_find_what_its_catalog_hides() {
    let issuer = Issuer::start();
    let plugins = plugin_folder(
        "oauth-visibility",
        &[test_plugin("sleepy"), test_plugin("granted")],
    );
    let policy = plugins.join("visible.rego.txt");
    std::fs::write(&policy, VISIBILITY_POLICY).expect("write the policy");
    let server = start(
        "127.0.0.1:0",
        &issuer,
        RESOURCE,
        &plugins,
        &policy,
        &["--visibility-decision", "data.codemode.authz.visible"],
    );
    let port = server.port;
    let alice = issuer.token("alice", "mcp:execute", RESOURCE);
    let bob = issuer.token("bob", "mcp:execute", RESOURCE);

    // Search.
    assert_eq!(
        found(port, &alice, "file"),
        ["granted.read", "granted.write"]
    );
    assert_eq!(found(port, &bob, "file"), ["granted.read"]);
    assert_eq!(found(port, &bob, "write"), Vec::<String>::new());
    assert_eq!(found(port, &bob, "sleep"), ["sleepy.nap"]);
    assert_eq!(found(port, &alice, "sleep"), ["sleepy.nap"]);
    // Describe.
    let described = |token: &str, name: &str| {
        tool_as(port, token, "describe_api", json!({"name": name}))
            .map(|description| description["signature"].clone())
    };
    assert_eq!(
        described(&alice, "granted.read"),
        Ok(json!("granted.read(*, path: str)"))
    );
    assert_eq!(
        described(&bob, "granted.write"),
        Err("capability not found".to_owned())
    );
    assert_eq!(
        described(&bob, "granted.read"),
        Ok(json!("granted.read(*, path: str)"))
    );
    assert_eq!(
        described(&bob, "sleepy.nap"),
        Ok(json!("sleepy.nap(*, ms: int)"))
    );
    // Execute: for Bob `granted.write` is unknown, and nothing suggests it.
    let write = "def main():\n    return granted.write(path=\"x\", value=\"y\")";
    assert_eq!(
        execute_as(port, &bob, write),
        Err("invalid program: runtime error at <codemode>:2:12: unknown capability `granted.write` (find names with search_api)".to_owned())
    );
    let misspelled = "def main():\n    return granted.wrote(path=\"x\", value=\"y\")";
    assert_eq!(
        execute_as(port, &bob, misspelled),
        Err("invalid program: runtime error at <codemode>:2:12: unknown capability `granted.wrote` (find names with search_api)".to_owned())
    );
    assert_eq!(
        execute_as(port, &alice, misspelled),
        Err("invalid program: runtime error at <codemode>:2:12: unknown capability `granted.wrote`; did you mean granted.write? (find names with search_api)".to_owned())
    );
    assert_eq!(execute_as(port, &bob, NAP), Ok(json!({"ms": 1})));
    // The hidden capability never ran for Bob: only Bob's nap is audited. The
    // server writes an execution's lines before it answers, so once the nap's
    // line has come through the pipe, every earlier one has too.
    crate::support::wait_for_audit(&server, "\"capability\":\"sleepy.nap\"", 1);
    assert_eq!(server.audit().lines().count(), 1, "{}", server.audit());
    // The metrics name every capability: with per-subject catalogs they are
    // not served to subjects (issue 49, F10), only at --metrics-listen.
    let bearer = format!("Bearer {bob}");
    let metrics = raw_request(port, "GET", "/metrics", &[("Authorization", &bearer)], "");
    assert_eq!(
        (metrics.status, metrics.body.as_str()),
        (404, codemode_server::mcp::http::METRICS_ELSEWHERE)
    );

    // A reloaded policy shows everything to everyone: the views are decided anew.
    std::fs::write(
        &policy,
        VISIBILITY_POLICY.replace("default visible := false", "default visible := true"),
    )
    .expect("rewrite the policy");
    crate::support::wait_for_log(&server, "policy reloaded", 1);
    assert_eq!(found(port, &bob, "write"), ["granted.write"]);
    // Neither the token nor its claims reach the log.
    let log = server.log();
    assert!(!log.contains(&bob) && !log.contains("admins"), "{log}");
}

/// A gateway and its upstream, both trusting one issuer.
struct Gateway {
    /// The upstream: another codemode-host with the sleepy plugin, its
    /// session token `gateway-secret` (subject `gateway`).
    inner: HttpServer,
    /// The gateway: no plugins, `--allow-all`, tokens of the issuer known as
    /// [`RESOURCE`], and `carol-secret` (subject `carol`) from a tokens file.
    outer: HttpServer,
}

/// A tokens file in `dir` named `name` with one `subject` holding `token`.
fn tokens_file(dir: &std::path::Path, name: &str, subject: &str, token: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("{subject} {}\n", codemode_server::authz::token_hash(token)),
    )
    .expect("write a tokens file");
    path.display().to_string()
}

/// Starts a [`Gateway`] in `target/e2e-oauth/<label>`: the upstream known as
/// `inner_resource` with `inner_args`, the gateway with the `[[upstream]]`
/// tables `upstreams` makes of the upstream's URL and `outer_args`.
fn gateway(
    label: &str,
    issuer: &Issuer,
    inner_resource: &str,
    inner_args: &[&str],
    upstreams: impl Fn(&str) -> String,
    outer_args: &[&str],
) -> Gateway {
    let dir = root().join("target/e2e-oauth").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("outer-plugins")).expect("create the folders");
    let inner_plugins = plugin_folder(&format!("oauth-{label}-inner"), &[test_plugin("sleepy")]);
    let inner_tokens = tokens_file(&dir, "inner.tokens", "gateway", "gateway-secret");
    let mut args = vec![
        "--plugins",
        inner_plugins.to_str().expect("utf-8 path"),
        "--allow-all",
        "--tokens",
        &inner_tokens,
        "--oauth-issuer",
        &issuer.url,
        "--resource-url",
        inner_resource,
    ];
    args.extend(inner_args);
    let inner = HttpServer::start(&args);
    let config = dir.join("outer.toml");
    std::fs::write(&config, upstreams(&inner.url())).expect("write the config");
    let outer_tokens = tokens_file(&dir, "outer.tokens", "carol", "carol-secret");
    let outer_plugins = dir.join("outer-plugins");
    let mut args = vec![
        "--config",
        config.to_str().expect("utf-8 path"),
        "--plugins",
        outer_plugins.to_str().expect("utf-8 path"),
        "--allow-all",
        "--tokens",
        &outer_tokens,
        "--oauth-issuer",
        &issuer.url,
        "--resource-url",
        RESOURCE,
    ];
    args.extend(outer_args);
    let outer =
        HttpServer::start_listening("127.0.0.1:0", &args, &[("INNER_TOKEN", "gateway-secret")]);
    Gateway { inner, outer }
}

/// A program napping through the upstream named `upstream`.
fn nap_through(upstream: &str) -> String {
    format!(
        "def main():\n    return {upstream}.execute(source=\"def main():\\n    return sleepy.nap(ms=1)\")[\"result\"]"
    )
}

/// The subjects of `server`'s audit lines, in order.
fn audited(server: &HttpServer) -> Vec<String> {
    server
        .audit()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("JSON"))
        .map(|line| line["subject"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `auth = "forward"`: an HTTP upstream (another codemode-host trusting the
/// same issuer) gets each caller's own access token on its calls, and the
/// operator's token on the session's own requests. It sees who calls (its
/// audit names the caller); a token it refuses (a scope it requires and the
/// caller lacks) is the caller's failure alone; a caller without an access
/// token (a `--tokens` subject) cannot call it.
#[test]
fn an_upstream_acting_for_its_callers_gets_each_callers_token() {
    let issuer = Issuer::start();
    let Gateway { inner, outer } = gateway(
        "forward",
        &issuer,
        RESOURCE,
        &["--required-scope", "mcp:admin"],
        |url| {
            format!(
                "[[upstream]]\nname = \"inner\"\nurl = \"{url}\"\nauth = \"forward\"\nbearer-token-env = \"INNER_TOKEN\"\n"
            )
        },
        &["--required-scope", "mcp:execute"],
    );
    let program = &nap_through("inner");
    // Alice's token carries both scopes: the inner server runs her call as hers.
    let alice = issuer.token("alice", "mcp:execute mcp:admin", RESOURCE);
    assert_eq!(
        execute_as(outer.port, &alice, program),
        Ok(json!({"ms": 1}))
    );
    crate::support::wait_for_audit(&inner, "\"subject\":\"alice\"", 1);
    // Bob's lacks the scope the inner server requires: it refuses him alone.
    let bob = issuer.token("bob", "mcp:execute", RESOURCE);
    assert_eq!(
        execute_as(outer.port, &bob, program),
        Err("capability failed: upstream inner refused the caller's credentials".to_owned())
    );
    // Carol's static token is no access token: nothing to act with.
    assert_eq!(
        execute_as(outer.port, "carol-secret", program),
        Err(
            "capability failed: upstream inner acts for its caller, who has no access token"
                .to_owned()
        )
    );
    // The session serves on: Alice again.
    assert_eq!(
        execute_as(outer.port, &alice, program),
        Ok(json!({"ms": 1}))
    );
    assert_eq!(audited(&inner), ["alice", "alice"]);
    // No token reaches either log.
    for log in [outer.log(), inner.log()] {
        for secret in [&alice, &bob, &"gateway-secret".to_owned()] {
            assert!(!log.contains(secret.as_str()), "{log}");
        }
    }
}

/// The audience the token-exchange test's upstream is known by.
const CRM: &str = "http://localhost/crm";

/// `auth = "token-exchange"`: each call's caller token is exchanged at the
/// issuer (RFC 8693, as this server's own client) for one whose audience is
/// the upstream's, which checks it (another codemode-host whose resource URL is
/// that audience) and sees the caller's subject. One exchange serves the
/// caller's calls until shortly before the token expires; an audience the
/// issuer refuses fails the call with the fixed text.
#[test]
fn an_upstream_gets_a_token_exchanged_for_its_audience() {
    let mut issuer = Issuer::start_exchanging(RESOURCE, &[CRM]);
    let dir = root().join("target/e2e-oauth");
    std::fs::create_dir_all(&dir).expect("create the folder");
    let secret = dir.join("client-secret");
    std::fs::write(&secret, "codemode-secret\n").expect("write the client secret");
    let upstream = |url: &str, name: &str, audience: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\nurl = \"{url}\"\nauth = \"token-exchange\"\naudience = \"{audience}\"\nbearer-token-env = \"INNER_TOKEN\"\n"
        )
    };
    let Gateway { inner, outer } = gateway(
        "exchange",
        &issuer,
        CRM,
        &[],
        |url| {
            format!(
                "{}\n{}",
                upstream(url, "crm", CRM),
                upstream(url, "elsewhere", "http://localhost/elsewhere")
            )
        },
        &[
            "--oauth-client-id",
            "codemode",
            "--oauth-client-secret-file",
            secret.to_str().expect("utf-8 path"),
        ],
    );
    let program = |upstream: &str| nap_through(upstream);
    let alice = issuer.token("alice", "mcp:execute", RESOURCE);
    assert_eq!(
        execute_as(outer.port, &alice, &program("crm")),
        Ok(json!({"ms": 1}))
    );
    assert_eq!(
        execute_as(outer.port, &alice, &program("crm")),
        Ok(json!({"ms": 1}))
    );
    assert_eq!(issuer.exchanges(), 1, "one exchange serves both calls");
    assert_eq!(audited(&inner), ["alice", "alice"]);
    // The issuer refuses this audience: the call fails, the session serves on.
    assert_eq!(
        execute_as(outer.port, &alice, &program("elsewhere")),
        Err("capability failed: upstream elsewhere refused the caller's credentials".to_owned())
    );
    assert_eq!(issuer.exchanges(), 1);
    let bob = issuer.token("bob", "mcp:execute", RESOURCE);
    assert_eq!(
        execute_as(outer.port, &bob, &program("crm")),
        Ok(json!({"ms": 1}))
    );
    assert_eq!(issuer.exchanges(), 2);
    crate::support::wait_for_audit(&inner, "\"subject\":\"bob\"", 1);
    crate::support::wait_for_log(&outer, "token exchange failed", 1);
    // No token, and not the client secret, reaches either log.
    for log in [outer.log(), inner.log()] {
        for secret in [&alice, &bob, &"codemode-secret".to_owned()] {
            assert!(!log.contains(secret.as_str()), "{log}");
        }
    }
}

/// The README's local try-it, as written but for the modules folder and the
/// ports (a test takes free ones): the issuer started in the background with
/// `"stay": true` serves on after its stdin closed, alice gets a token with the
/// README's form, and the README's request runs its program with it.
#[test]
fn the_readme_try_it_runs_with_the_issuer_in_the_background() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("read the README");
    let at = readme
        .find("To try it on one machine with the tests' authorization server")
        .expect("the README's try-it");
    let block = &readme[at..];
    let block = &block[block.find("```sh\n").expect("its commands") + 6..];
    let block = &block[..block.find("```").expect("their end")];
    let quoted = |line: &str| -> String {
        let start = line.find('\'').expect("a quoted argument") + 1;
        let end = line.rfind('\'').expect("its end");
        line[start..end].to_owned()
    };
    // The issuer, its stdin closed at once (`&` in a shell).
    let node = block
        .lines()
        .find(|line| line.starts_with("node tests/clients/oidc_provider.mjs '"))
        .expect("the node command");
    let mut input: Value = serde_json::from_str(&quoted(node)).expect("its JSON");
    assert_eq!(input["stay"], json!(true), "{input}");
    let resource = input["resource"].as_str().expect("a resource").to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    input["modules"] = json!(node_tools().modules);
    input["port"] = json!(port);
    let mut child = Command::new(&node_tools().node)
        .arg(root().join("tests/clients/oidc_provider.mjs"))
        .arg(input.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run oidc-provider");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let issuer = read_line(&mut stdout)["issuer"]
        .as_str()
        .expect("the issuer URL")
        .to_owned();
    assert_eq!(issuer, format!("http://127.0.0.1:{port}"));
    // Its stdin closed long ago: it serves on.
    let discovery = raw_request(port, "GET", "/.well-known/openid-configuration", &[], "");
    assert_eq!(discovery.status, 200, "{discovery:?}");
    // The server with the README's flags (listening on a free port).
    let plugins = crate::support::example_plugins();
    let server = HttpServer::start_listening(
        "127.0.0.1:0",
        &[
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--allow-all",
            "--oauth-issuer",
            &issuer,
            "--resource-url",
            &resource,
            "--required-scope",
            "mcp:execute",
        ],
        &[],
    );
    assert!(
        block.contains(&format!(
            "--resource-url {resource} --required-scope mcp:execute"
        )),
        "{block}"
    );
    // The README's token request, its `-d` pairs as a form.
    let form: Vec<String> = block
        .lines()
        .skip_while(|line| !line.starts_with("TOKEN=$(curl -s $ISSUER/token"))
        .take_while(|line| !line.contains("python3"))
        .flat_map(|line| {
            line.split(" -d ")
                .skip(1)
                .map(|pair| pair.trim_end_matches(" \\").trim().to_owned())
        })
        .collect();
    assert_eq!(form.len(), 5, "{form:?}");
    let granted = raw_request(
        port,
        "POST",
        "/token",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &form.join("&"),
    );
    assert_eq!(granted.status, 200, "{granted:?}");
    let token = serde_json::from_str::<Value>(&granted.body).expect("JSON")["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned();
    // The README's request.
    let request = block
        .lines()
        .find(|line| line.trim_start().starts_with("-d '{\"jsonrpc\""))
        .expect("the request");
    let bearer = format!("Bearer {token}");
    let answer = raw_request(
        server.port,
        "POST",
        "/mcp",
        &[
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &quoted(request),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer: Value = serde_json::from_str(&answer.body).expect("JSON");
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"result": "bk-0042"}),
        "{answer}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// An OpenAPI service acting for its callers: `auth = "forward"` sends each
/// caller's access token, `auth = "token-exchange"` one the issuer made for
/// the service's audience; the FastAPI shop's `/whoami` says whose token came
/// (subject and audience). A `--tokens` caller has no access token to send.
#[test]
fn an_openapi_service_gets_each_callers_token_or_one_exchanged_for_it() {
    let mut issuer = Issuer::start_exchanging(RESOURCE, &[CRM]);
    let shop = crate::openapi::Shop::start();
    let dir = root().join("target/e2e-oauth/openapi");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).expect("create the folders");
    let secret = dir.join("client-secret");
    std::fs::write(&secret, "codemode-secret\n").expect("write the client secret");
    let config = dir.join("codemode.toml");
    std::fs::write(
        &config,
        format!(
            "[[openapi]]\nname = \"me\"\nspec = \"{spec}\"\nauth = \"forward\"\ninclude = [\"whoAmI\"]\n\n[[openapi]]\nname = \"crm\"\nspec = \"{spec}\"\nauth = \"token-exchange\"\naudience = \"{CRM}\"\ninclude = [\"whoAmI\"]\n",
            spec = shop.spec_url()
        ),
    )
    .expect("write the config");
    let tokens = tokens_file(&dir, "outer.tokens", "carol", "carol-secret");
    let server = HttpServer::start_listening(
        "127.0.0.1:0",
        &[
            "--config",
            config.to_str().expect("utf-8 path"),
            "--plugins",
            dir.join("plugins").to_str().expect("utf-8 path"),
            "--allow-all",
            "--tokens",
            &tokens,
            "--oauth-issuer",
            &issuer.url,
            "--resource-url",
            RESOURCE,
            "--oauth-client-id",
            "codemode",
            "--oauth-client-secret-file",
            secret.to_str().expect("utf-8 path"),
        ],
        &[],
    );
    let alice = issuer.token("alice", "mcp:execute", RESOURCE);
    let who = |token: &str, service: &str| {
        execute_as(
            server.port,
            token,
            &format!("def main():\n    return {service}.who_am_i()"),
        )
    };
    assert_eq!(
        who(&alice, "me"),
        Ok(json!({"sub": "alice", "aud": RESOURCE}))
    );
    assert_eq!(who(&alice, "crm"), Ok(json!({"sub": "alice", "aud": CRM})));
    assert_eq!(issuer.exchanges(), 1);
    assert_eq!(
        who("carol-secret", "me"),
        Err(
            "capability failed: openapi me acts for its caller, who has no access token".to_owned()
        )
    );
    // No token, and not the client secret, reaches the log.
    let log = server.log();
    for secret in [&alice, &"codemode-secret".to_owned()] {
        assert!(!log.contains(secret.as_str()), "{log}");
    }
}
