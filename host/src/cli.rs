//! Command-line flags: one definition each, whose doc comment is the help text.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;

use codemode_host::audit::AuditLog;
use codemode_host::authz::exchange::{ClientCredentials, Exchanger, TokenExchange};
use codemode_host::authz::oauth::{
    DEFAULT_KEYS_REFRESH, DEFAULT_LEEWAY, DEFAULT_SUBJECT_CLAIM, MAX_LEEWAY, MIN_KEYS_REFRESH,
    OAuthConfig, UrlError, Verifier, check_url, is_scope_token,
};
use codemode_host::authz::{
    AllowAll, Authorizer, DEFAULT_DECISION, RegoAuthorizer, RegoError, Replaceable, Subject,
    Tokens, TokensError,
};
use codemode_host::files::{FileError, read_text};
use codemode_host::mcp::DEFAULT_APPROVAL_TIMEOUT;
use codemode_host::mcp::http::{Authentication, ConnectionLimits, HttpConfig, LOOPBACK_HOSTS};
use codemode_host::tasks::TaskLimits;
use codemode_host::units::{
    MAX_DURATION, MAX_DURATION_TEXT, MAX_SIZE, parse_bytes, parse_duration,
};
use codemode_host::{
    Compiler, DEFAULT_COMPILE_MEMORY, LOCAL_SUBJECT, Limits, LoadLimits, Secret, UpstreamAuth,
    UpstreamTransport,
};

/// MCP server for code mode: capabilities from WebAssembly components
///
/// Agents get three tools: search_api, describe_api and execute (one Starlark
/// program calling many capabilities).
/// Drop plugin components (`*.wasm`) in a folder and point --plugins at it. The
/// server speaks MCP over stdio, or Streamable HTTP with --listen; logs go to
/// stderr.
///
/// Every flag can also be set by its environment variable (CODEMODE_ and the
/// flag's name, shown with each flag) or by a key in the --config file.
#[derive(Debug, Parser)]
#[command(name = "codemode-host", version, max_term_width = 79)]
pub struct Cli {
    /// What to do instead of serving
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read settings from FILE (TOML); its keys are the long flag names
    ///
    /// For example `max-execution-time = "10s"`, `policy = ["authz.rego"]`,
    /// `allow-all = true`. Its tables add capability sources: `[[upstream]]`
    /// (MCP servers), `[[openapi]]` (services described by OpenAPI) and
    /// `[[plugin]]` (plugins pulled from OCI registries); the README shows each.
    /// A flag on the command line wins over its environment variable, which wins
    /// over the file, which wins over the default. Relative paths in the file are
    /// relative to the file's folder. An unknown key or a bad value stops
    /// startup, naming the key's line. Read again when it changes and on SIGHUP:
    /// the tables (every OpenAPI spec read again) and the budgets of one
    /// execution change while serving; other settings are logged as needing a
    /// restart.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// Folder of plugin components (*.wasm)
    ///
    /// Every `*.wasm` file directly in DIR (not in subfolders) is loaded as a plugin,
    /// in file-name order, with the grants of its sidecar `<plugin>.toml` if there
    /// is one (outbound hosts, env, config, dirs, per-plugin limits; see the
    /// README). A file that fails to load is logged with the reason and skipped; the
    /// others are served. The folder is watched: adding, replacing or removing a
    /// plugin or sidecar reloads the catalog while serving. Defaults to `./plugins`,
    /// which may then be missing when --config names upstream MCP servers or
    /// OpenAPI services.
    #[arg(long, value_name = "DIR", default_value = "plugins", global = true)]
    pub plugins: PathBuf,

    /// Do not watch the plugins folder
    ///
    /// Without it, changes to the folder are picked up while serving: a changed
    /// plugin that fails to load is logged and its last good version keeps serving.
    #[arg(long)]
    pub no_watch: bool,

    /// Refuse to serve unless every plugin file loads
    ///
    /// A plugin that fails to load, or is refused because another plugin claims
    /// its names, stops startup with every reason. Later, while such a file is in
    /// the folder, /readyz answers 503 naming it (the last good catalog keeps
    /// serving). Without this switch /readyz answers 200 and lists the files left
    /// out.
    #[arg(long)]
    pub require_all_plugins: bool,

    /// Remove a capability by its stable ID (repeatable)
    ///
    /// The capability disappears from search_api, describe_api and execute. An ID
    /// that names no loaded capability stops startup with an error (fail closed), so
    /// a typo cannot leave a capability enabled. An upstream tool's ID
    /// (mcp:<upstream>/<tool>) needs its upstream configured, not up: a tool it
    /// does not list is a WARN when it first lists its tools.
    #[arg(long = "disable", value_name = "ID")]
    pub disable: Vec<String>,

    /// Authorize native calls with a Rego policy module (repeatable)
    ///
    /// Modules are parsed at start, in file-name order (Rego v1). Each native
    /// call is decided by --policy-decision with the input {"subject":{"id",
    /// "claims","scopes"},"capability":{"id","name","annotations"},
    /// "arguments":{...}} (claims and scopes: the subject's access token's,
    /// see --oauth-issuer; annotations: the readOnlyHint, destructiveHint,
    /// idempotentHint and openWorldHint an upstream tool or a plugin
    /// declares): `true` allows; `false` is
    /// `permission denied`; {"ask": "<question>"} asks the client's user first
    /// (see --approval-timeout); undefined, another value or an error is
    /// `authorization policy failure`. Builtins that read the clock,
    /// randomness or the network, and print, are refused at start. The modules are
    /// read again when one changes and on SIGHUP; a version that does not compile
    /// is logged and the policy in force keeps deciding.
    #[arg(long = "policy", value_name = "FILE", conflicts_with = "allow_all")]
    pub policy: Vec<PathBuf>,

    /// How long a user may take to approve a call, e.g. 2m [default: 10m]
    ///
    /// When a policy decides {"ask": "<question>"}, a client before 2026-07-28
    /// that declared form elicitation, over stdio or over HTTP with
    /// --http-sessions, is asked with the question,
    /// the capability and its arguments; the call runs once approved (or every
    /// call of that capability in the execution, when the user says so); a
    /// 2026-07-28 client, over stdio or HTTP, gets an input_required result and
    /// retries with the answer (see --approval-key), its requestState valid
    /// this long. Declined, unanswered within this time, or a client that
    /// cannot be asked (an older one over HTTP without --http-sessions, a task,
    /// no form elicitation):
    /// the call is `permission denied`. The wait does not count against
    /// --max-execution-time.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub approval_timeout: Option<Duration>,

    /// The key that encrypts and signs approvals' requestState (2026-07-28)
    ///
    /// A 2026-07-28 client is asked with an input_required result and comes
    /// back with the answer in a new request, which any replica may take: the
    /// state it carries (the calls made before the question) is encrypted and
    /// signed with this key (at least 32 bytes, e.g. `openssl rand -hex 32`),
    /// so replicas behind one load balancer share the file. Without it,
    /// approval.key in the cache folder is used, made there when absent; where
    /// that cannot be (no cache folder, a read-only one), a key of this process
    /// is drawn (a WARN says so), whose states no other replica, and not this
    /// one after a restart, can open.
    #[arg(long, value_name = "FILE")]
    pub approval_key: Option<PathBuf>,

    /// The rule --policy decides with [default: data.codemode.authz.allow]
    ///
    /// A ground reference under `data`, e.g. data.acme.mcp.allow.
    #[arg(long, value_name = "REF", default_value = DEFAULT_DECISION, hide_default_value = true)]
    pub policy_decision: String,

    /// The rule --policy decides with what each subject can find
    ///
    /// A ground reference under `data`, e.g. data.codemode.authz.visible,
    /// evaluated for each subject and capability with the input of
    /// --policy-decision without "arguments". Only `true` shows the
    /// capability; to a subject it is not shown to, search_api, describe_api
    /// and execute answer as for a disabled one (not found, never suggested).
    /// `false` hides it, and so do undefined, another value or an error (a WARN
    /// names the first). Decided once per subject (its ID and its token's
    /// claims: a new token anew) and capability, and again after a policy
    /// reload or a change of the capabilities. Without it every subject finds
    /// every capability.
    #[arg(long, value_name = "REF", requires = "policy")]
    pub visibility_decision: Option<String>,

    /// Allow every native call, without a policy
    ///
    /// Required by the HTTP listener when no --policy is given. Over stdio, every
    /// call is allowed for the single local subject when neither is given.
    #[arg(long)]
    pub allow_all: bool,

    /// The subject of every call over stdio, or HTTP without --tokens
    ///
    /// What a policy sees as input.subject.id [default: local]. An empty subject
    /// is unauthenticated: every tool call answers `unauthenticated`.
    #[arg(long, value_name = "ID", default_value = LOCAL_SUBJECT, hide_default_value = true)]
    pub subject: String,

    /// Append the audit log to FILE
    ///
    /// One JSON line per native call: time, execution, subject, capability_id,
    /// capability, decision, outcome, fuel, duration_us. Never argument values or
    /// results. Default: stdout with --listen (the log is on stderr), else stderr.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,

    /// Export traces over OTLP (http/protobuf) to the receiver at URL
    ///
    /// One span per execute (subject, outcome, cost, the limit that fired) with a
    /// child span per native call (capability, ID, outcome, fuel, bytes; never
    /// arguments or results), a child of the client's span when the request
    /// carried W3C trace context (`traceparent` in `_meta` or, over HTTP, the
    /// header). URL is the receiver's base (`/v1/traces` is added), e.g.
    /// http://127.0.0.1:4318. The standard OTEL_EXPORTER_OTLP_ENDPOINT (and
    /// _TRACES_ENDPOINT, OTEL_SERVICE_NAME, OTEL_BSP_*) work too. Without either,
    /// nothing is exported and a request's trace context is passed on to
    /// upstreams as it came.
    #[arg(long, value_name = "URL", value_parser = otlp_endpoint)]
    pub otlp_endpoint: Option<String>,

    /// Serve Streamable HTTP on ADDR instead of stdio, e.g. 127.0.0.1:8080
    ///
    /// A port alone, or localhost:PORT, means 127.0.0.1 (this machine only).
    /// MCP is at /mcp (stateless: replicas need no session affinity); /healthz,
    /// /readyz (200 once plugins are loaded) and /metrics (Prometheus) beside it.
    /// Needs --policy or --allow-all. A non-loopback address needs --tokens or
    /// --oauth-issuer, or --insecure. SIGTERM stops accepting and lets executions in flight finish.
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    pub listen: Option<SocketAddr>,

    /// Bearer tokens for HTTP: one `subject-id sha256-hex-of-token` per line
    ///
    /// A request's `Authorization: Bearer TOKEN` is hashed and looked up; its
    /// subject is what the policy sees. No token or an unknown one is a 401.
    /// Without --tokens every HTTP request acts for --subject. The file is read
    /// again when it changes and on SIGHUP; a version that does not parse is
    /// logged and the tokens in force stay.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub tokens: Option<PathBuf>,

    /// Allow --listen on a non-loopback address without --tokens
    #[arg(long, requires = "listen")]
    pub insecure: bool,

    /// Accept access tokens of this OAuth 2.1 authorization server (its issuer URL)
    ///
    /// Its metadata is discovered (/.well-known/oauth-authorization-server,
    /// else /.well-known/openid-configuration) and its JWKS fetched when the
    /// first token comes, and again for a key it does not hold, at most once
    /// per --oauth-keys-refresh. A bearer token is accepted when it is a JWT
    /// signed by one of those keys (RS256, ES256 or EdDSA), its iss is this URL,
    /// its aud contains --resource-url, exp and nbf hold (within --oauth-leeway)
    /// and it carries
    /// every --required-scope; its subject is --subject-claim. Served beside:
    /// /.well-known/oauth-protected-resource (RFC 9728), and a 401 names it in
    /// WWW-Authenticate. --tokens may be given too: its tokens are looked up
    /// first. https only, except on a loopback host.
    #[arg(long, value_name = "URL", requires = "listen")]
    pub oauth_issuer: Option<String>,

    /// This server's canonical URL (e.g. https://mcp.example.com/mcp)
    ///
    /// What an access token's audience must contain, and the resource named in
    /// the protected resource metadata. Needed with --oauth-issuer.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub resource_url: Option<String>,

    /// A scope every access token must carry (repeatable)
    ///
    /// A token without one gets 403 insufficient_scope, its WWW-Authenticate
    /// naming the scopes to ask for.
    #[arg(
        long = "required-scope",
        value_name = "SCOPE",
        requires = "oauth_issuer"
    )]
    pub required_scopes: Vec<String>,

    /// The access token claim that names the subject [default: sub]
    ///
    /// Choose a claim users cannot change (sub, oid), not a name or an email:
    /// the subject is what policies, tasks and approvals are bound to. A
    /// subject of --tokens with the same ID is the same subject.
    #[arg(long, value_name = "CLAIM", requires = "oauth_issuer")]
    pub subject_claim: Option<String>,

    /// The shortest time between two fetches of the issuer's keys [default: 1m]
    ///
    /// A token naming a key the server does not hold makes it fetch the keys
    /// again, at most this often (at least 1s): an issuer that rotated its key is
    /// followed within it, and tokens naming made-up keys cannot make the server
    /// fetch on every request.
    #[arg(long, value_name = "DURATION", requires = "oauth_issuer", value_parser = keys_refresh)]
    pub oauth_keys_refresh: Option<Duration>,

    /// The clock skew allowed to a token's exp and nbf [default: 60s]
    ///
    /// Whole seconds, at most 10m: an access token is taken until this long
    /// after it expired, and from this long before it becomes valid.
    #[arg(long, value_name = "DURATION", requires = "oauth_issuer", value_parser = leeway)]
    pub oauth_leeway: Option<Duration>,

    /// This server's client ID at --oauth-issuer, for token exchange
    ///
    /// An upstream with auth = "token-exchange" gets, for each caller, a token
    /// the issuer makes for the upstream's audience in exchange for the
    /// caller's (RFC 8693), asked for with this client ID and the secret of
    /// --oauth-client-secret-file (HTTP Basic).
    #[arg(
        long,
        value_name = "ID",
        requires = "oauth_issuer",
        requires = "oauth_client_secret_file"
    )]
    pub oauth_client_id: Option<String>,

    /// The file holding --oauth-client-id's secret (read at start)
    #[arg(long, value_name = "FILE", requires = "oauth_client_id")]
    pub oauth_client_secret_file: Option<PathBuf>,

    /// Also accept this Host header over HTTP (repeatable)
    ///
    /// Requests naming any other host are refused (DNS-rebinding protection);
    /// localhost, 127.0.0.1 and ::1 are always accepted.
    #[arg(long = "allowed-host", value_name = "HOST", requires = "listen")]
    pub allowed_hosts: Vec<String>,

    /// HTTP connections open at once [default: 1024]
    ///
    /// More wait in the kernel's backlog without using a file descriptor. A
    /// client must send a request's headers within 10 s (also the idle time
    /// of a keep-alive connection) and its body within 30 s.
    #[arg(long, value_name = "N", requires = "listen")]
    pub max_connections: Option<std::num::NonZeroUsize>,

    /// Serve /healthz, /readyz, /metrics on ADDR too, with no Host check
    ///
    /// On --listen every path checks the Host header (DNS-rebinding
    /// protection), so probes that name the pod's address as the host (as
    /// Kubernetes' do) fail there: point them at this address instead.
    #[arg(long, value_name = "ADDR", requires = "listen", value_parser = listen_address)]
    pub metrics_listen: Option<SocketAddr>,

    /// Give HTTP clients before 2026-07-28 sessions, so they can be asked
    ///
    /// Without it /mcp is stateless: a client before 2026-07-28 cannot be
    /// asked to approve a call over HTTP (its answer would be a new request,
    /// which could reach another replica), so such a call is denied. With it,
    /// such a client's initialize opens a session (the Mcp-Session-Id header),
    /// the question rides its tools/call's SSE response and the answer comes
    /// back to the call waiting for it. Replicas then need affinity on
    /// Mcp-Session-Id. A session belongs to the subject that opened it; at
    /// most 64 per subject and 4096 in all are open, and one ends when idle
    /// longer than an execution and an approval (at least 5 minutes).
    /// 2026-07-28 clients are always served statelessly.
    #[arg(long, requires = "listen")]
    pub http_sessions: bool,

    /// Log filter, e.g. `debug`
    ///
    /// Uses the tracing `EnvFilter` syntax; the RUST_LOG environment variable wins
    /// when set. Logs always go to stderr (stdout carries the MCP protocol). The
    /// MCP library's per-session lines (over HTTP, three per request) show only
    /// when the filter names it, e.g. `info,rmcp=info`.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log: String,

    /// How log lines are written: `text`, or `json` for log shippers
    ///
    /// json: one object per line with `timestamp`, `level`, `target`, `message`
    /// and the line's fields (e.g. `plugin`, `reason`). Audit lines are JSON in
    /// either format and never have a `level`, which tells them apart where they
    /// share stderr (over stdio without --audit-log).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Folder for compiled components: the interpreter and the plugins
    ///
    /// The interpreter is compiled and pre-initialized once (seconds), each plugin
    /// compiled once, and cached here, so later starts take milliseconds. Entries
    /// are signed with a key kept in the folder: only what this host wrote is
    /// loaded. Defaults to $XDG_CACHE_HOME/codemode-host or
    /// ~/.cache/codemode-host.
    #[arg(long, value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,

    /// Largest program, in bytes [default: 64KiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_source_bytes: Option<usize>,

    /// Starlark steps per execution [default: 1000000]
    ///
    /// A step is one function call or one loop iteration.
    #[arg(long, value_name = "N")]
    pub max_execution_steps: Option<u64>,

    /// Wall time per execution, e.g. 5s or 500ms [default: 5s]
    ///
    /// Waiting for a free execution slot counts.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub max_execution_time: Option<Duration>,

    /// How long a request waits for a source still starting [default: 30s]
    ///
    /// An execute waits for the plugins to load (over stdio) and for the
    /// upstreams its program names to connect the first time; search_api waits
    /// for every upstream still connecting, describe_api for the name's. The
    /// wait is not part of --max-execution-time. A program naming an upstream
    /// that is still connecting after it fails with `capability failed:
    /// upstream NAME is still starting`; a program naming none runs at once.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub startup_wait: Option<Duration>,

    /// Native calls a program may attempt [default: 100]
    #[arg(long, value_name = "N")]
    pub max_native_calls: Option<u64>,

    /// Wall time of an execute run as a task, e.g. 5m [default: 5m]
    ///
    /// A 2026-07-28 client that declares the Tasks extension gets a task handle
    /// for its execute at once and asks for the result later; the execution then
    /// has this time budget instead of --max-execution-time.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub max_task_time: Option<Duration>,

    /// How long a finished task and its result are kept, e.g. 10m [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub task_ttl: Option<Duration>,

    /// Tasks kept at once; the oldest ended ones go first, a running one never
    /// [default: 1000]
    ///
    /// With --task-store, the number kept in Redis for all replicas together.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_tasks: Option<u64>,

    /// Keep tasks in Redis, shared by replicas: redis://[:PASSWORD@]HOST:PORT/N
    ///
    /// Without it tasks live in this server's memory. With it, any replica
    /// behind a load balancer answers status, result and cancel for a task
    /// another runs (a cancel reaches the running replica through Redis
    /// pub/sub); each task still runs on the replica that created it. While
    /// Redis does not answer (at start too), direct calls are served and
    /// requests about tasks fail with "Task store unavailable" (and answers to
    /// approvals, whose single use Redis records, with `permission denied`);
    /// finished results are written when it is back (within --task-ttl). TLS (rediss://)
    /// is not supported. Pass it as CODEMODE_TASK_STORE to keep the password
    /// off the command line.
    #[arg(long, value_name = "URL")]
    pub task_store: Option<String>,

    /// Nesting depth of any value crossing the sandbox [default: 32]
    ///
    /// A scalar is depth 1; each list or dict around it adds one.
    #[arg(long, value_name = "N")]
    pub max_value_depth: Option<usize>,

    /// Encoded size of any crossing value [default: 1MiB]
    ///
    /// Applies to each call's arguments, each result, and main's value.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_value_bytes: Option<usize>,

    /// Sum of the results of one execution's calls [default: 8MiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_intermediate_value_bytes: Option<usize>,

    /// Executions running at once; more wait in line [default: 8]
    #[arg(long, value_name = "N")]
    pub max_concurrent_executions: Option<usize>,

    /// WebAssembly fuel per execution [default: 8000000000]
    ///
    /// One budget for the interpreter and every plugin it calls (about one unit
    /// per instruction).
    #[arg(long, value_name = "N")]
    pub max_fuel: Option<u64>,

    /// Memory of the interpreter, and of each plugin [default: 256MiB]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub max_memory: Option<usize>,

    /// Memory of all sandboxes together [default: half of this machine's]
    ///
    /// The interpreters and plugin instances of every running execution, and the
    /// spare instances kept ready, share it. A sandbox whose memory would grow
    /// past it fails, and its execution ends with `resource limit exceeded`
    /// (limit --max-total-memory), instead of the server being killed for memory
    /// when many executions run at once. The default is half of the machine's
    /// memory, or of its cgroup's memory.max where that is lower (at least 1GiB,
    /// and never below --max-memory). At least --max-memory, at most 1TiB.
    #[arg(long, value_name = "SIZE", value_parser = total_memory)]
    pub max_total_memory: Option<usize>,

    /// Largest plugin file loaded [default: 256MiB]
    ///
    /// Checked from the file's size before it is read; a larger one is skipped
    /// with the reason.
    #[arg(long, value_name = "SIZE", value_parser = size, global = true)]
    pub max_plugin_bytes: Option<usize>,

    /// Memory one plugin's compilation may use [default: 4GiB]
    ///
    /// Each plugin is compiled in a child process of its own, its heap capped at
    /// this and killed at --load-timeout; a plugin past either is skipped with
    /// the reason. At most 1TiB.
    #[arg(long, value_name = "SIZE", value_parser = compile_memory, global = true)]
    pub max_compile_memory: Option<u64>,

    /// Time to compile one plugin, and to describe it [default: 30s]
    ///
    /// A plugin past it is skipped with the reason; startup and reloading go on
    /// with the others. `precompile` and `check` allow 10m unless this is
    /// given: they run ahead of serving, where a slow compile costs no request.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, global = true)]
    pub load_timeout: Option<Duration>,

    /// What signatures of plugins pulled from registries must be: require
    /// (unsigned or badly signed is refused), warn (pulled, with a warning
    /// saying why) or off (not looked for)
    ///
    /// The policy of `pull` and of every [[plugin]] entry of the config file
    /// without a `verify` of its own. Signatures are cosign's, by key: found
    /// under the tag sha256-<digest>.sig or through the referrers API, and
    /// trusted when a --verify-key verifies one whose payload names the pulled
    /// digest.
    #[arg(long, value_name = "POLICY", default_value = "require", value_parser = verify_policy, global = true)]
    pub verify: codemode_oci::Policy,

    /// A public key (PEM: ECDSA P-256 or Ed25519, as `cosign generate-key-pair`
    /// writes cosign.pub) that plugins pulled from registries may be signed
    /// with; repeat it for several (a key rotation)
    ///
    /// The keys of `pull` and of every [[plugin]] entry without `keys` of its
    /// own.
    #[arg(long = "verify-key", value_name = "FILE", global = true)]
    pub verify_keys: Vec<PathBuf>,

    /// How often the tag of each [[plugin]] entry is looked at again [default:
    /// 5m]
    ///
    /// A moved tag is pulled, verified and swapped in; a failed look keeps the
    /// running version and is tried again after 1s, doubling up to this.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, global = true)]
    pub pull_interval: Option<Duration>,

    /// The longest one pull of a plugin may take, signatures included
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = positive_duration, global = true)]
    pub pull_timeout: Duration,

    /// The largest plugin pulled from a registry
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = pull_bytes, global = true)]
    pub max_pull_bytes: u64,

    /// The upstream MCP servers of the config file's `[[upstream]]` tables (no flag
    /// sets them).
    #[arg(skip)]
    pub upstreams: Vec<codemode_host::UpstreamConfig>,

    /// The services of the config file's `[[openapi]]` tables (no flag sets
    /// them).
    #[arg(skip)]
    pub openapi: Vec<codemode_host::OpenApiConfig>,

    /// The plugins of the config file's `[[plugin]]` tables, pulled from
    /// registries (no flag sets them).
    #[arg(skip)]
    pub plugin_entries: Vec<codemode_host::oci::PullEntry>,

    /// The `--key=value` arguments the config file gave (what a reload of it
    /// compares).
    #[arg(skip)]
    pub file_args: Vec<std::ffi::OsString>,

    /// Whether --plugins was given (flag, variable or file) rather than defaulted:
    /// a gateway of upstreams only needs no `./plugins`.
    #[arg(skip)]
    pub plugins_given: bool,
}

/// A duration that must be positive and at most a day: zero, with a unit or
/// without, says so at once (rather than "needs a unit" and then "must be
/// positive").
fn positive_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let zero = !trimmed.is_empty() && trimmed.chars().all(|c| c == '0' || c == '.');
    let duration = if zero {
        Duration::ZERO
    } else {
        parse_duration(text)?
    };
    if duration.is_zero() {
        return Err("must be positive (e.g. 5s, 500ms)".to_owned());
    }
    if duration > MAX_DURATION {
        return Err(MAX_DURATION_TEXT.to_owned());
    }
    Ok(duration)
}

/// `--oauth-keys-refresh`: a duration of at least [`MIN_KEYS_REFRESH`].
fn keys_refresh(text: &str) -> Result<Duration, String> {
    let duration = positive_duration(text)?;
    if duration < MIN_KEYS_REFRESH {
        return Err("must be at least 1s".to_owned());
    }
    Ok(duration)
}

/// `--oauth-leeway`: whole seconds, from 0s to [`MAX_LEEWAY`].
fn leeway(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let zero = !trimmed.is_empty() && trimmed.chars().all(|c| c == '0' || c == '.');
    let duration = if zero {
        Duration::ZERO
    } else {
        parse_duration(text)?
    };
    if duration.subsec_nanos() != 0 {
        return Err("must be whole seconds (e.g. 30s, 2m)".to_owned());
    }
    if duration > MAX_LEEWAY {
        return Err("at most 10m".to_owned());
    }
    Ok(duration)
}

/// A size of at most [`MAX_SIZE`].
fn size(text: &str) -> Result<usize, String> {
    let size = parse_bytes(text)?;
    if size > MAX_SIZE {
        return Err("at most 4GiB".to_owned());
    }
    Ok(size)
}

/// This binary, for its compiler processes: `/proc/self/exe` where there is one
/// (the running binary even after it was replaced or deleted on disk), else its
/// path.
fn compiler_program() -> std::io::Result<PathBuf> {
    let own = Path::new("/proc/self/exe");
    if own.exists() {
        return Ok(own.to_owned());
    }
    std::env::current_exe()
}

/// A compile memory cap: positive, at most 1 TiB.
fn compile_memory(text: &str) -> Result<u64, String> {
    let size = parse_bytes(text)? as u64;
    if size == 0 {
        return Err("must be positive (e.g. 4GiB)".to_owned());
    }
    if size > 1 << 40 {
        return Err("at most 1TiB".to_owned());
    }
    Ok(size)
}

/// A `--max-total-memory`: any size up to 1TiB (the execution limits check it
/// against --max-memory).
fn total_memory(text: &str) -> Result<usize, String> {
    let size = parse_bytes(text)?;
    if size == 0 {
        return Err("must be positive (e.g. 8GiB)".to_owned());
    }
    if size > 1 << 40 {
        return Err("at most 1TiB".to_owned());
    }
    Ok(size)
}

/// An OTLP receiver's base URL: `http` or `https`, a host, no query (the traces
/// path is added after it).
fn otlp_endpoint(value: &str) -> Result<String, String> {
    let uri: http::Uri = value
        .parse()
        .map_err(|e| format!("not a URL ({e}); e.g. http://127.0.0.1:4318"))?;
    match (uri.scheme_str(), uri.host(), uri.query()) {
        (Some("http" | "https"), Some(_), None) => Ok(value.to_owned()),
        (_, _, Some(_)) => Err("must have no query: /v1/traces is added after it".to_owned()),
        _ => Err(
            "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318".to_owned(),
        ),
    }
}

/// A listening address: `IP:PORT`, `localhost:PORT` or a port alone (both meaning
/// 127.0.0.1, this machine only).
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let port = text.strip_prefix("localhost:").unwrap_or(text);
    match port.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => Err(format!(
            "`{text}` is not an address: give IP:PORT, e.g. 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface), or a port alone for 127.0.0.1"
        )),
    }
}

/// An OCI reference, as `pull` takes it.
fn oci_reference(text: &str) -> Result<codemode_oci::Reference, String> {
    codemode_oci::Reference::parse(text).map_err(|e| e.to_string())
}

/// A digest, as `--digest` takes it.
fn oci_digest(text: &str) -> Result<codemode_oci::Digest, String> {
    codemode_oci::Digest::parse(text).map_err(|e| e.to_string())
}

/// A verification policy: require, warn or off.
fn verify_policy(text: &str) -> Result<codemode_oci::Policy, String> {
    text.parse()
}

/// A pull's byte bound: positive.
fn pull_bytes(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err("must be positive (e.g. 256MiB)".to_owned()),
        size => Ok(size as u64),
    }
}

/// Subcommands; without one the server runs.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Command {
    /// Compile the interpreter and the plugins into the cache
    ///
    /// The next start then loads compiled code instead of compiling. Each plugin
    /// is loaded in full, so one that would be skipped is reported; the exit code
    /// is 1 when any plugin failed.
    Precompile,

    /// Load plugin files as the server would and print what they offer
    ///
    /// For each file: its capabilities (signature and result, stable ID,
    /// summary), or every reason the server would skip it. Its sidecar is read
    /// as when serving; compiled code goes to the cache (--cache-dir). The exit
    /// code is 1 when any file cannot load.
    Check {
        /// The plugin files (*.wasm)
        #[arg(value_name = "PLUGIN.wasm", required = true)]
        files: Vec<PathBuf>,
    },

    /// Keep a plugin's WIT doc comments in its component file
    ///
    /// Component toolchains drop the WIT's doc comments; this writes them into
    /// the component as its `codemode-docs` section, which the server reads to
    /// show what each parameter means: a line `name: what it means` of a
    /// function's doc comment documents its parameter `name`, `///` on a record's
    /// fields document them. Run it after componentize-py or componentize-js
    /// (the build scripts new-plugin writes do); Rust plugins built with
    /// codemode_sdk::generate! have the section already.
    WitDocs {
        /// The plugin's WIT: its folder (with deps/) or one file
        #[arg(long, value_name = "DIR", default_value = "wit")]
        wit: PathBuf,
        /// The component file to write the docs into (replaced whole)
        #[arg(value_name = "PLUGIN.wasm")]
        file: PathBuf,
    },

    /// Pull a plugin from an OCI registry into the plugins folder, verified
    ///
    /// REFERENCE is registry/namespace/name:tag or ...@sha256:<digest> (the CNCF
    /// Wasm artifact layout: `oras push`, `wkg oci push` and `codemode-host push`
    /// write it). The component is checked (layout, digests, signatures) before
    /// a byte of it is in the folder, then written as --plugins/NAME.wasm in one
    /// rename, with NAME.oci.json saying where it came from; the sidecar NAME.toml
    /// stays the operator's. Signatures are cosign's, by key: found under the
    /// tag sha256-<digest>.sig or through the referrers API, and trusted when one
    /// of the --verify-key files verifies one whose payload names the pulled
    /// digest (--verify sets what happens when none does).
    /// For image builds and air-gapped copies; a server pulls the [[plugin]]
    /// entries of its config file itself.
    Pull {
        /// The artifact: registry/namespace/name:tag or registry/namespace/name@sha256:<digest>
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// The plugin's file name in the folder, without .wasm [default: the
        /// repository's last segment]
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Refuse any digest but this one (sha256:<64 hex digits>)
        #[arg(long, value_name = "DIGEST", value_parser = oci_digest)]
        digest: Option<codemode_oci::Digest>,
        /// A Docker config.json with the registry's credentials [default:
        /// $DOCKER_CONFIG/config.json or ~/.docker/config.json, when there is one]
        #[arg(long, value_name = "FILE", conflicts_with = "registry_token")]
        registry_auth: Option<PathBuf>,
        /// A file holding a registry token, sent as a bearer token
        #[arg(long, value_name = "FILE")]
        registry_token: Option<PathBuf>,
        /// Speak plain HTTP to a registry that is not on this machine (one on
        /// this machine is tried over HTTPS first, and spoken to in plain HTTP
        /// only when it does not speak TLS)
        #[arg(long)]
        insecure: bool,
    },

    /// Push a plugin to an OCI registry, signed when a key is given
    ///
    /// The component goes as a CNCF Wasm artifact (config
    /// application/vnd.wasm.config.v0+json, one application/wasm layer), which
    /// `pull`, [[plugin]] entries, `oras pull` and `wkg oci pull` read. With --key
    /// it is then signed as `sign` does. Credentials as for `pull`.
    Push {
        /// The component file
        #[arg(value_name = "PLUGIN.wasm")]
        file: PathBuf,
        /// Where it goes: registry/namespace/name:tag
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// A private key (PEM: ECDSA P-256 or Ed25519, unencrypted) to sign the
        /// pushed artifact with
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// A Docker config.json with the registry's credentials [default:
        /// $DOCKER_CONFIG/config.json or ~/.docker/config.json, when there is one]
        #[arg(long, value_name = "FILE", conflicts_with = "registry_token")]
        registry_auth: Option<PathBuf>,
        /// A file holding a registry token, sent as a bearer token
        #[arg(long, value_name = "FILE")]
        registry_token: Option<PathBuf>,
        /// Speak plain HTTP to a registry that is not on this machine
        #[arg(long)]
        insecure: bool,
    },

    /// Sign an artifact in an OCI registry with a key, as `cosign sign --key`
    ///
    /// The signature of the artifact's digest (a tag is resolved first) goes
    /// where cosign puts it: a simple signing payload under the tag
    /// sha256-<digest>.sig, next to the signatures already there. `cosign
    /// verify --key`, `pull --verify-key` and [[plugin]] entries check it.
    Sign {
        /// The artifact: registry/namespace/name:tag or ...@sha256:<digest>
        #[arg(value_name = "REFERENCE", value_parser = oci_reference)]
        reference: codemode_oci::Reference,
        /// The private key (PEM: ECDSA P-256 or Ed25519, unencrypted, e.g. from
        /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`)
        #[arg(long, value_name = "FILE", required = true)]
        key: PathBuf,
        /// A Docker config.json with the registry's credentials [default:
        /// $DOCKER_CONFIG/config.json or ~/.docker/config.json, when there is one]
        #[arg(long, value_name = "FILE", conflicts_with = "registry_token")]
        registry_auth: Option<PathBuf>,
        /// A file holding a registry token, sent as a bearer token
        #[arg(long, value_name = "FILE")]
        registry_token: Option<PathBuf>,
        /// Speak plain HTTP to a registry that is not on this machine
        #[arg(long)]
        insecure: bool,
    },

    /// Write a new plugin project that builds, with one capability
    ///
    /// NAME is the capability root (`greet` makes `greet.hello`): lowercase
    /// letters, digits and underscores, starting with a letter. The project has
    /// the WIT, the code with its metadata, a build script that puts NAME.wasm
    /// into its plugins/ folder, and a README with the commands to build, check
    /// and try it.
    NewPlugin {
        /// The capability root, and the project's name
        #[arg(value_name = "NAME")]
        name: String,
        /// The plugin's language
        #[arg(long, value_enum)]
        lang: Lang,
        /// Where to write the project [default: ./NAME]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The languages `new-plugin` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with codemode-sdk, built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// How long after the time budget in-flight requests may still finish at shutdown.
const HTTP_DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// How much longer than an execution and an approval an HTTP session may stay
/// idle before it ends (`--http-sessions`).
const SESSION_IDLE_MARGIN: Duration = Duration::from_secs(60);

/// How long `precompile` and `check` let one plugin compile when
/// `--load-timeout` is not given: they run ahead of serving (an image build, a
/// deploy step, a plugin author's build), where a slow compile costs nobody a
/// request.
pub const OFFLINE_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Why the flags cannot make a server. A cause is a `reason` (part of the message),
/// not an error `source`, so that a printer of error chains says it once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A policy file could not be read.
    #[error("policy file `{path}`: {reason}")]
    PolicyFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: FileError,
    },
    /// The policy does not compile.
    #[error(transparent)]
    Policy(#[from] RegoError),
    /// The HTTP listener was asked for without an authorization decision.
    #[error(
        "the HTTP listener needs an authorization decision: pass --policy FILE.rego (repeatable) or --allow-all"
    )]
    NoAuthorization,
    /// The tokens file could not be read.
    #[error("tokens file `{path}`: {reason}")]
    TokensFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: FileError,
    },
    /// The tokens file is malformed.
    #[error("tokens file `{path}`: {reason}")]
    Tokens {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: TokensError,
    },
    /// A non-loopback address without authentication.
    #[error(
        "refusing to serve {0} without authentication: pass --tokens FILE or --oauth-issuer URL, or --insecure if the network is trusted"
    )]
    Exposed(SocketAddr),
    /// An OAuth flag's URL is refused.
    #[error(transparent)]
    OAuthUrl(#[from] UrlError),
    /// `--oauth-issuer` without `--resource-url`.
    #[error(
        "--oauth-issuer needs --resource-url: this server's canonical URL (e.g. https://mcp.example.com/mcp), which tokens must name as their audience"
    )]
    NoResourceUrl,
    /// The OAuth resource server could not be set up.
    #[error("--oauth-issuer: {0}")]
    OAuth(String),
    /// Token exchange cannot be set up.
    #[error("{0}")]
    Exchange(String),
    /// The audit log file could not be opened.
    #[error("audit log `{path}`: {reason}")]
    AuditLog {
        /// The file.
        path: PathBuf,
        /// Why it could not be opened.
        reason: std::io::Error,
    },
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-12-04T02:03:02.123456Z  INFO target: message key=value ...`.
    Text,
    /// One JSON object per line, the fields at the top level.
    Json,
}

/// How native calls are decided, and why (for the startup log).
#[derive(Debug, Clone)]
pub struct Authorization {
    /// The authorizer.
    pub authorizer: Arc<dyn Authorizer>,
    /// One line for the startup log saying what decides.
    pub summary: String,
    /// With --policy: where a reloaded policy goes (the authorizer above is it).
    pub policy: Option<Arc<Replaceable>>,
}

/// Largest tokens file read: a line per subject, so about 200,000 subjects.
const MAX_TOKENS_BYTES: u64 = 16 << 20;
/// What sets [`MAX_TOKENS_BYTES`], for the message.
const TOKENS_CAP: &str = "16 MiB, the most a tokens file may hold";
/// Largest policy module read.
const MAX_POLICY_BYTES: u64 = 16 << 20;
/// What sets [`MAX_POLICY_BYTES`], for the message.
const POLICY_CAP: &str = "16 MiB, the most a policy module may hold";

/// Largest client secret file read.
const MAX_SECRET_BYTES: u64 = 64 << 10;
/// What sets [`MAX_SECRET_BYTES`], for the message.
const SECRET_CAP: &str = "64 KiB, the most a client secret file may hold";

/// Reads and parses the tokens file at `path`: a regular file (a FIFO or a device
/// is refused at once, never waited on) of at most 16 MiB.
///
/// # Errors
///
/// [`ConfigError`] naming the file when it cannot be read or is malformed.
pub fn read_tokens(path: &Path) -> Result<Tokens, ConfigError> {
    let text = read_text(path, MAX_TOKENS_BYTES, TOKENS_CAP).map_err(|source| {
        ConfigError::TokensFile {
            path: path.to_owned(),
            reason: source,
        }
    })?;
    Tokens::parse(&text).map_err(|source| ConfigError::Tokens {
        path: path.to_owned(),
        reason: source,
    })
}

/// Reads the policy modules at `paths` (each a regular file of at most 16 MiB) and
/// compiles them for `decision` and, when given, the `visibility` decision.
///
/// # Errors
///
/// [`ConfigError`] naming the file that cannot be read, or why the modules do not
/// compile.
pub fn compile_policy(
    paths: &[PathBuf],
    decision: &str,
    visibility: Option<&str>,
) -> Result<RegoAuthorizer, ConfigError> {
    let mut modules = Vec::with_capacity(paths.len());
    for path in paths {
        let source = read_text(path, MAX_POLICY_BYTES, POLICY_CAP).map_err(|source| {
            ConfigError::PolicyFile {
                path: path.clone(),
                reason: source,
            }
        })?;
        modules.push((path.display().to_string(), source));
    }
    let authorizer = RegoAuthorizer::new(decision, &modules)?;
    Ok(match visibility {
        Some(visibility) => authorizer.with_visibility(visibility, &modules)?,
        None => authorizer,
    })
}

impl Cli {
    /// The authorizer the flags ask for. Over HTTP (`http` true) one of --policy
    /// and --allow-all is required; over stdio, neither means allow-all for the
    /// single local subject (and the summary says so).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when a policy file cannot be read or compiled, or HTTP has no
    /// decision.
    pub fn authorization(&self, http: bool) -> Result<Authorization, ConfigError> {
        if !self.policy.is_empty() {
            let authorizer = compile_policy(
                &self.policy,
                &self.policy_decision,
                self.visibility_decision.as_deref(),
            )?;
            let policy = Arc::new(Replaceable::new(Box::new(authorizer)));
            let visibility = match &self.visibility_decision {
                Some(decision) => format!("; what each subject can find by {decision}"),
                None => String::new(),
            };
            return Ok(Authorization {
                authorizer: policy.clone(),
                summary: format!(
                    "native calls are decided by {} with {} policy module(s){visibility}",
                    self.policy_decision,
                    self.policy.len()
                ),
                policy: Some(policy),
            });
        }
        if self.allow_all {
            return Ok(Authorization {
                authorizer: Arc::new(AllowAll),
                summary: "every native call is allowed (--allow-all)".to_owned(),
                policy: None,
            });
        }
        if http {
            return Err(ConfigError::NoAuthorization);
        }
        Ok(Authorization {
            authorizer: Arc::new(AllowAll),
            summary: format!(
                "no --policy given: every native call is allowed for the single stdio subject {:?}",
                self.subject
            ),
            policy: None,
        })
    }

    /// What trades callers' tokens for upstreams' (`--oauth-client-id`), at
    /// the issuer of `http`'s authentication; `None` without the flag.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Exchange`] when the secret file cannot be read or is
    /// blank, or an upstream with `auth = "token-exchange"` has nothing to
    /// exchange with.
    pub fn token_exchange(
        &self,
        http: Option<&HttpConfig>,
    ) -> Result<Option<Arc<dyn TokenExchange>>, ConfigError> {
        let verifier = http.and_then(|http| match &http.authentication {
            Authentication::Bearer {
                oauth: Some(verifier),
                ..
            } => Some(verifier.clone()),
            Authentication::Bearer { oauth: None, .. } | Authentication::Fixed(_) => None,
        });
        let exchanger = match (
            &self.oauth_client_id,
            &self.oauth_client_secret_file,
            verifier,
        ) {
            (Some(id), Some(path), Some(verifier)) => {
                let secret = read_text(path, MAX_SECRET_BYTES, SECRET_CAP).map_err(|error| {
                    ConfigError::Exchange(format!(
                        "--oauth-client-secret-file {}: {error}",
                        path.display()
                    ))
                })?;
                let secret = secret.trim();
                if secret.is_empty() {
                    return Err(ConfigError::Exchange(format!(
                        "--oauth-client-secret-file {}: the file is blank",
                        path.display()
                    )));
                }
                let client = ClientCredentials {
                    id: id.clone(),
                    secret: Secret::new(secret),
                };
                let exchanger: Arc<dyn TokenExchange> = Arc::new(Exchanger::new(verifier, client));
                Some(exchanger)
            }
            _ => None,
        };
        if exchanger.is_none()
            && let Some(upstream) = self.upstreams.iter().find(|upstream| {
                matches!(
                    upstream.transport,
                    UpstreamTransport::Http {
                        auth: UpstreamAuth::TokenExchange { .. },
                        ..
                    }
                )
            })
        {
            return Err(ConfigError::Exchange(format!(
                "upstream `{}`: auth = \"token-exchange\" needs --oauth-issuer, --oauth-client-id and --oauth-client-secret-file",
                upstream.name
            )));
        }
        if exchanger.is_none()
            && let Some(service) = self.openapi.iter().find(|service| {
                matches!(
                    service.auth,
                    codemode_host::OpenApiAuth::TokenExchange { .. }
                )
            })
        {
            return Err(ConfigError::Exchange(format!(
                "openapi `{}`: auth = \"token-exchange\" needs --oauth-issuer, --oauth-client-id and --oauth-client-secret-file",
                service.name
            )));
        }
        Ok(exchanger)
    }

    /// The HTTP listener's settings, when `--listen` is given.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the tokens file cannot be read or parsed, or a
    /// non-loopback address has neither --tokens nor --insecure.
    pub fn http(&self) -> Result<Option<(SocketAddr, HttpConfig)>, ConfigError> {
        let Some(address) = self.listen else {
            return Ok(None);
        };
        let tokens = match &self.tokens {
            Some(path) => Some(Arc::new(arc_swap::ArcSwap::from_pointee(read_tokens(
                path,
            )?))),
            None => None,
        };
        let mut resource_host = None;
        let oauth = match &self.oauth_issuer {
            Some(issuer) => {
                check_url("--oauth-issuer", issuer)?;
                let resource = self
                    .resource_url
                    .as_ref()
                    .ok_or(ConfigError::NoResourceUrl)?;
                let parsed = check_url("--resource-url", resource)?;
                // Clients reach this server by the resource URL's name.
                resource_host = parsed.host_str().map(str::to_owned);
                if let Some(scope) = self.required_scopes.iter().find(|s| !is_scope_token(s)) {
                    return Err(ConfigError::OAuth(format!(
                        "--required-scope {scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                    )));
                }
                if self.subject_claim.as_deref() == Some("") {
                    return Err(ConfigError::OAuth(
                        "--subject-claim must name a claim".to_owned(),
                    ));
                }
                let verifier = Verifier::new(OAuthConfig {
                    issuer: issuer.clone(),
                    resource: resource.clone(),
                    required_scopes: self.required_scopes.clone(),
                    subject_claim: self
                        .subject_claim
                        .clone()
                        .unwrap_or_else(|| DEFAULT_SUBJECT_CLAIM.to_owned()),
                    keys_refresh: self.oauth_keys_refresh.unwrap_or(DEFAULT_KEYS_REFRESH),
                    leeway: self.oauth_leeway.unwrap_or(DEFAULT_LEEWAY),
                })
                .map_err(ConfigError::OAuth)?;
                Some(Arc::new(verifier))
            }
            None => None,
        };
        let authentication = match (tokens, oauth) {
            (None, None) if address.ip().is_loopback() || self.insecure => {
                Authentication::Fixed(Subject::new(self.subject.clone()))
            }
            (None, None) => return Err(ConfigError::Exposed(address)),
            (tokens, oauth) => Authentication::Bearer { tokens, oauth },
        };
        let mut allowed_hosts: Vec<String> =
            LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        allowed_hosts.extend(self.allowed_hosts.iter().cloned());
        allowed_hosts.extend(resource_host);
        Ok(Some((
            address,
            HttpConfig {
                authentication,
                allowed_hosts,
                drain: self.limits().max_execution_time + HTTP_DRAIN_MARGIN,
                connections: ConnectionLimits {
                    max_connections: self
                        .max_connections
                        .map_or(ConnectionLimits::default().max_connections, |n| n.get()),
                    ..ConnectionLimits::default()
                },
                metrics_listen: self.metrics_listen,
                metrics_for_subjects: self.visibility_decision.is_none(),
                stop: tokio_util::sync::CancellationToken::new(),
                sessions: self.http_sessions.then(|| {
                    self.limits().max_execution_time
                        + self.approval_timeout.unwrap_or(DEFAULT_APPROVAL_TIMEOUT)
                        + SESSION_IDLE_MARGIN
                }),
            },
        )))
    }

    /// The audit log: `--audit-log FILE`; by default stdout when serving HTTP (so
    /// that no other line shares its stream: the operator log is on stderr), and
    /// stderr over stdio, where stdout is the protocol.
    ///
    /// # Errors
    ///
    /// [`ConfigError::AuditLog`] when the file cannot be opened for appending.
    pub fn audit(&self) -> Result<AuditLog, ConfigError> {
        match &self.audit_log {
            Some(path) => AuditLog::file(path).map_err(|source| ConfigError::AuditLog {
                path: path.clone(),
                reason: source,
            }),
            None if self.listen.is_some() => Ok(AuditLog::stdout()),
            None => Ok(AuditLog::stderr()),
        }
    }

    /// What executions run as tasks may take; half of
    /// `--max-concurrent-executions` run at once (direct calls keep the rest).
    pub fn task_limits(&self) -> TaskLimits {
        let d = TaskLimits::default();
        TaskLimits {
            max_running: (self.limits().max_concurrent_executions / 2).max(1),
            max_task_time: self.max_task_time.unwrap_or(d.max_task_time),
            ttl: self.task_ttl.unwrap_or(d.ttl),
            max_tasks: self
                .max_tasks
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(d.max_tasks),
            max_stored_bytes: d.max_stored_bytes,
        }
    }

    /// The execution budgets: the defaults with every flag given applied. Zero is
    /// rejected later, at startup ([`Limits::validate`]).
    pub fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_source_bytes: self.max_source_bytes.unwrap_or(d.max_source_bytes),
            max_execution_steps: self.max_execution_steps.unwrap_or(d.max_execution_steps),
            max_execution_time: self.max_execution_time.unwrap_or(d.max_execution_time),
            max_native_calls: self.max_native_calls.unwrap_or(d.max_native_calls),
            max_value_depth: self.max_value_depth.unwrap_or(d.max_value_depth),
            max_value_bytes: self.max_value_bytes.unwrap_or(d.max_value_bytes),
            max_intermediate_value_bytes: self
                .max_intermediate_value_bytes
                .unwrap_or(d.max_intermediate_value_bytes),
            max_concurrent_executions: self
                .max_concurrent_executions
                .unwrap_or(d.max_concurrent_executions),
            max_fuel: self.max_fuel.unwrap_or(d.max_fuel),
            max_memory_bytes: self.max_memory.unwrap_or(d.max_memory_bytes),
            // Unless given, never below --max-memory: a small machine's default
            // must not refuse the per-sandbox cap its operator chose.
            max_total_memory_bytes: self.max_total_memory.unwrap_or_else(|| {
                d.max_total_memory_bytes
                    .max(self.max_memory.unwrap_or(d.max_memory_bytes))
            }),
        }
    }

    /// The bounds of one pull (`--max-pull-bytes`, `--pull-timeout`).
    pub fn pull_limits(&self) -> codemode_host::oci::PullLimits {
        codemode_host::oci::PullLimits {
            max_bytes: self.max_pull_bytes,
            timeout: self.pull_timeout,
        }
    }

    /// What loading one plugin may cost in `precompile` and `check`: as
    /// [`Cli::loading`], but without `--load-timeout` compiling may take
    /// [`OFFLINE_LOAD_TIMEOUT`].
    pub fn offline_loading(&self) -> LoadLimits {
        LoadLimits {
            load_timeout: self.load_timeout.unwrap_or(OFFLINE_LOAD_TIMEOUT),
            ..self.loading()
        }
    }

    /// What loading one plugin may cost, from the flags and the defaults.
    pub fn loading(&self) -> LoadLimits {
        let d = LoadLimits::default();
        LoadLimits {
            max_plugin_bytes: self
                .max_plugin_bytes
                .map_or(d.max_plugin_bytes, |b| b as u64),
            load_timeout: self.load_timeout.unwrap_or(d.load_timeout),
            compiler: self.compiler(),
        }
    }

    /// Where plugins are compiled: in a child process of this binary, unless its
    /// path cannot be had (then on a thread, with a WARN).
    fn compiler(&self) -> Compiler {
        match compiler_program() {
            Ok(program) => Compiler::Child {
                program,
                max_memory: self.max_compile_memory.unwrap_or(DEFAULT_COMPILE_MEMORY),
            },
            Err(error) => {
                tracing::warn!(reason = %error, "cannot find this binary's path; plugins are compiled in this process, their memory unbounded");
                Compiler::InProcess
            }
        }
    }
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
            codemode_host::memory::default_total().max(4 << 30)
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
        cli.upstreams = vec![codemode_host::UpstreamConfig {
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
        let cli =
            Cli::try_parse_from(["codemode-host", "--policy", &missing.display().to_string()])?;
        let error = cli
            .authorization(false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.starts_with(&format!("policy file `{}`: ", missing.display())),
            "{error}"
        );
        assert!(
            Cli::try_parse_from(["codemode-host", "--policy", "p.rego", "--allow-all"]).is_err()
        );
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
            Err("--oauth-issuer http://login.example.com: must be https (http only on a loopback host)".to_owned())
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
            assert_eq!(cli.listen.map(|a| a.to_string()).as_deref(), Some(wanted));
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
        let readme = include_str!("../../README.md");
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
}
