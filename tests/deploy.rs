//! The Kubernetes manifests in deploy/kubernetes and the Dockerfile: they parse,
//! and what they say agrees with the binary (flags, probe paths, ports, mounts, the
//! policy and the tokens format), with each other (paths, user) and with the layout
//! `cargo xtask dist` builds (which the test command builds from the debug build
//! into target/dist-debug before the tests run).

use std::path::Path;
use std::process::Command;

use codemode_server::Limits;
use codemode_server::authz::{
    AuthorizationInput, Authorizer, DEFAULT_DECISION, RegoAuthorizer, Subject, Tokens,
};
use codemode_server::mcp::http::{HEALTHZ_PATH, READYZ_PATH};
use codemode_server::units::parse_duration;
use codemode_value::Value as Arg;
use serde_json::Value;

use crate::support::{host_bin, python, root};

/// The values given to each flag of an argument list (`--flag value` or
/// `--flag=value`), in order.
fn flag_values<'a>(argv: &'a [String], flag: &str) -> Vec<&'a str> {
    let mut values = Vec::new();
    let mut args = argv.iter();
    while let Some(arg) = args.next() {
        if arg == flag {
            if let Some(value) = args.next() {
                values.push(value.as_str());
            }
        } else if let Some(value) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            values.push(value);
        }
    }
    values
}

/// The one value of `flag`, if given.
fn flag_value<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    let values = flag_values(argv, flag);
    assert!(values.len() <= 1, "{flag} given {} times", values.len());
    values.first().copied()
}

/// Every document of every manifest, as JSON, keyed by file name.
fn manifests() -> Vec<(String, Value)> {
    let dir = root().join("deploy/kubernetes");
    let script = "import json, sys, yaml\nprint(json.dumps([list(yaml.safe_load_all(open(p))) for p in sys.argv[1:]]))";
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("list deploy/kubernetes")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    let out = Command::new(python())
        .args(["-c", script])
        .args(files.iter().map(|f| dir.join(f)))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "a manifest does not parse:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Vec<Vec<Value>> = serde_json::from_slice(&out.stdout).expect("JSON");
    files
        .into_iter()
        .zip(parsed)
        .flat_map(|(file, docs)| docs.into_iter().map(move |d| (file.clone(), d)))
        .collect()
}

/// What one stage of the Dockerfile says.
#[derive(Debug, PartialEq, Eq)]
struct Image {
    /// `ENTRYPOINT`, the binary's path.
    entrypoint: String,
    /// `CMD`, the default arguments.
    cmd: Vec<String>,
    /// `USER uid:gid`, both the same.
    user: u64,
    /// Each `COPY --from=build SOURCE DEST` of the stage.
    copied: Vec<(String, String)>,
    /// The owner given to each copied destination with `--chown`, if any.
    owners: Vec<(String, String)>,
}

/// One stage of the Dockerfile: `FROM <base> [AS <name>]` and its instructions,
/// continued lines joined.
struct Stage {
    base: String,
    name: Option<String>,
    lines: Vec<String>,
}

/// The Dockerfile's stages, in order.
fn stages() -> Vec<Stage> {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("read the Dockerfile");
    let joined = text.replace("\\\n", " ");
    let mut stages: Vec<Stage> = Vec::new();
    for line in joined
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        if let Some(from) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            let (base, name) = match words.as_slice() {
                [base] => (*base, None),
                [base, "AS", name] => (*base, Some((*name).to_owned())),
                _ => panic!("{line}"),
            };
            stages.push(Stage {
                base: base.to_owned(),
                name,
                lines: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage
                .lines
                .push(line.split_whitespace().collect::<Vec<_>>().join(" "));
        } else {
            panic!("{line}: before the first FROM");
        }
    }
    stages
}

/// The stage named `name`.
fn stage(stages: &[Stage], name: &str) -> usize {
    stages
        .iter()
        .position(|s| s.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no stage {name}"))
}

/// What a runtime stage ships and runs.
fn image(stage: &Stage) -> Image {
    let json_list = |line: &str| -> Vec<String> {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let mut image = Image {
        entrypoint: String::new(),
        cmd: Vec::new(),
        user: 0,
        copied: Vec::new(),
        owners: Vec::new(),
    };
    for line in &stage.lines {
        if let Some(list) = line.strip_prefix("ENTRYPOINT ") {
            let list = json_list(list);
            assert_eq!(list.len(), 1, "{line}");
            image.entrypoint = list[0].clone();
        } else if let Some(list) = line.strip_prefix("CMD ") {
            image.cmd = json_list(list);
        } else if let Some(user) = line.strip_prefix("USER ") {
            let (uid, gid) = user.split_once(':').expect("USER uid:gid");
            assert_eq!(uid, gid, "{line}");
            image.user = uid.parse().expect("a numeric uid");
        } else if let Some(rest) = line.strip_prefix("COPY --from=build ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (owner, paths) = match words.split_first() {
                Some((first, paths)) if first.starts_with("--chown=") => {
                    (first.strip_prefix("--chown="), paths)
                }
                _ => (None, &words[..]),
            };
            let [from, to] = paths else {
                panic!("{line}: one source and one destination")
            };
            image.copied.push(((*from).to_owned(), (*to).to_owned()));
            if let Some(owner) = owner {
                image.owners.push(((*to).to_owned(), owner.to_owned()));
            }
        }
    }
    image
}

/// The Dockerfile's last stage: the image `docker build` makes by default.
fn dockerfile() -> Image {
    let stages = stages();
    let last = stages.last().expect("a stage");
    assert_eq!(last.name, None, "the default image is the last stage");
    image(last)
}

/// The Debian packages a stage's `apt-get install` lines install.
fn installed(stage: &Stage) -> Vec<&str> {
    stage
        .lines
        .iter()
        .filter_map(|line| line.split_once("apt-get install ").map(|(_, rest)| rest))
        .flat_map(|rest| {
            rest.split("&&")
                .next()
                .unwrap_or_default()
                .split_whitespace()
        })
        .filter(|word| !word.starts_with('-'))
        .collect()
}

#[test]
fn the_image_builds_every_example_and_a_gateway_target_runs_stdio_upstreams() {
    let stages = stages();
    let build = &stages[stage(&stages, "build")];
    // Node.js comes from its official image (componentize-js needs 20 or later).
    let node = &stages[stage(&stages, "node")];
    assert_eq!(node.base, "node:22-bookworm-slim");
    let has_node = |stage: &Stage| {
        stage
            .lines
            .iter()
            .any(|l| l == "COPY --from=node /usr/local/bin/node /usr/local/bin/node")
            && stage.lines.iter().any(|l| {
                l.starts_with(
                    "RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm ",
                )
            })
    };
    // The build stage has what the JavaScript and Python examples need, and fails
    // rather than ship fewer of them.
    assert!(has_node(build), "the build stage has no Node.js");
    let packages = installed(build);
    assert!(packages.contains(&"python3-venv"), "{packages:?}");
    let require = build
        .lines
        .iter()
        .position(|l| l == "ENV CODEMODE_REQUIRE_FOREIGN_PLUGINS=1")
        .expect("the build requires the foreign plugins");
    let dist = build
        .lines
        .iter()
        .position(|l| l == "RUN cargo xtask dist")
        .expect("the build runs cargo xtask dist");
    assert!(require < dist, "the variable is set before the dist build");
    // All six examples are in the layout the image copies (CI requires them too).
    let mut shipped: Vec<String> = std::fs::read_dir(root().join("target/dist-debug/plugins"))
        .expect("the dist layout's plugins")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".wasm"))
        .collect();
    shipped.sort();
    assert_eq!(
        shipped,
        [
            "fetch.wasm",
            "js_strings.wasm",
            "python_geo.wasm",
            "records.wasm",
            "stats.wasm",
            "text.wasm"
        ]
    );
    // The gateway target: the default image's layout and command on Debian with
    // the runtimes stdio upstreams use; the default image stays last.
    let gateway = &stages[stage(&stages, "gateway")];
    assert!(gateway.base.starts_with("debian:"), "{}", gateway.base);
    assert!(has_node(gateway), "the gateway has no Node.js");
    let packages = installed(gateway);
    assert!(packages.contains(&"python3"), "{packages:?}");
    assert_eq!(image(gateway), dockerfile());
    let readme = std::fs::read_to_string(root().join("README.md")).expect("read the README");
    assert!(
        readme.contains("docker build --target gateway -t codemode-host:0.1.0-gateway ."),
        "the README says how to pick the gateway image"
    );
}

#[test]
fn the_dockerfile_ships_the_dist_layout_and_runs_as_its_user() {
    let image = dockerfile();
    // The build stage runs `cargo xtask dist`; the last stage copies its layout.
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("read the Dockerfile");
    assert!(text.contains("\nRUN cargo xtask dist\n"), "{text}");
    let layout = root().join("target/dist-debug");
    assert!(
        layout.is_dir(),
        "no {}: the test command builds it (cargo xtask test)",
        layout.display()
    );
    let mut destinations = Vec::new();
    for (from, to) in &image.copied {
        let relative = from
            .strip_prefix("/src/target/dist/")
            .unwrap_or_else(|| panic!("{from} is not from the dist layout"));
        assert!(
            layout.join(relative).exists(),
            "the layout has no {relative}"
        );
        destinations.push((relative, to.as_str()));
    }
    assert_eq!(
        destinations,
        vec![
            ("bin/codemode-host", image.entrypoint.as_str()),
            ("plugins", "/plugins"),
            ("cache", "/cache"),
        ]
    );
    // Not root, and the cache (which must belong to the server's user) is its.
    assert_ne!(image.user, 0);
    assert_eq!(
        image.owners,
        vec![("/cache".to_owned(), format!("{0}:{0}", image.user))]
    );
    // The default arguments parse, and point at the copied folders.
    let help = Command::new(host_bin())
        .args(&image.cmd)
        .arg("--help")
        .output()
        .expect("run the binary");
    assert!(
        help.status.success(),
        "the binary refuses the image's CMD: {}",
        String::from_utf8_lossy(&help.stderr)
    );
    assert_eq!(flag_value(&image.cmd, "--plugins"), Some("/plugins"));
    assert_eq!(flag_value(&image.cmd, "--cache-dir"), Some("/cache"));
}

fn find<'a>(docs: &'a [(String, Value)], kind: &str) -> &'a Value {
    docs.iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
}

/// The manifest of `kind` named `name`.
fn find_named<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes"))
}

fn mount<'a>(container: &'a Value, volume: &str) -> &'a str {
    container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .unwrap_or_else(|| panic!("no mount of volume {volume}"))
}

#[test]
fn the_kubernetes_manifests_agree_with_the_binary() {
    let docs = manifests();
    // kustomization.yaml names every other manifest.
    let kustomization = find(&docs, "Kustomization");
    let mut listed: Vec<&str> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file"))
        .collect();
    listed.sort();
    let mut files: Vec<&str> = docs
        .iter()
        .map(|(f, _)| f.as_str())
        .filter(|f| *f != "kustomization.yaml")
        .collect();
    files.dedup();
    assert_eq!(listed, files);

    let deployment = find_named(&docs, "Deployment", "codemode-host");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let argv: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg").to_owned())
        .collect();
    // The binary accepts them: `--help` after them exits 0 only when every flag and
    // value before it parsed.
    let help = Command::new(host_bin())
        .args(&argv)
        .arg("--help")
        .output()
        .expect("run the binary");
    assert!(
        help.status.success(),
        "the binary refuses the manifest's args: {}",
        String::from_utf8_lossy(&help.stderr)
    );
    let port_of = |flag: &str| {
        flag_value(&argv, flag).map(|address| {
            let address: std::net::SocketAddr = address.parse().expect("an address");
            u64::from(address.port())
        })
    };

    let port = container["ports"][0]["containerPort"]
        .as_u64()
        .expect("containerPort");
    assert_eq!(container["ports"][0]["name"], "http");
    assert_eq!(port_of("--listen"), Some(port));
    for (probe, path) in [
        ("readinessProbe", READYZ_PATH),
        ("livenessProbe", HEALTHZ_PATH),
        ("startupProbe", HEALTHZ_PATH),
    ] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "probes", "{probe}");
    }
    // Probes name the pod's IP as the Host, which --listen refuses: they go to
    // --metrics-listen, which serves them without the Host check.
    assert_eq!(container["ports"][1]["name"], "probes");
    assert_eq!(
        port_of("--metrics-listen"),
        container["ports"][1]["containerPort"].as_u64()
    );
    let service = find_named(&docs, "Service", "codemode-host");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // The flags point into the mounted volumes.
    let parent = |p: &Path| {
        p.parent()
            .expect("a parent")
            .to_str()
            .expect("utf-8")
            .to_owned()
    };
    // The plugins and their cache come from the image.
    let image = dockerfile();
    assert_eq!(
        container["command"],
        serde_json::json!([image.entrypoint.clone()])
    );
    for flag in ["--plugins", "--cache-dir"] {
        let path = flag_value(&argv, flag).expect("the flag");
        assert!(
            image.copied.iter().any(|(_, to)| to == path),
            "{flag} {path} is not a folder of the image: {:?}",
            image.copied
        );
        assert_eq!(flag_value(&image.cmd, flag), Some(path), "{flag}");
    }
    let security = &pod["securityContext"];
    assert_eq!(security["runAsUser"], serde_json::json!(image.user));
    assert_eq!(security["runAsGroup"], serde_json::json!(image.user));
    let budget = find(&docs, "PodDisruptionBudget");
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert!(deployment["spec"]["replicas"].as_u64() > Some(1));
    let policies = flag_values(&argv, "--policy");
    assert_eq!(policies.len(), 1, "{argv:?}");
    let policy = Path::new(policies[0]);
    assert_eq!(parent(policy), mount(container, "policy"));
    let tokens = Path::new(flag_value(&argv, "--tokens").expect("--tokens"));
    assert_eq!(parent(tokens), mount(container, "tokens"));
    // The approval key comes from its Secret, shared by the replicas.
    let approval = Path::new(flag_value(&argv, "--approval-key").expect("--approval-key"));
    assert_eq!(parent(approval), mount(container, "approval"));
    let approval_volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "approval")
        .expect("the approval volume");
    let approval_secret = find_named(&docs, "Secret", "codemode-approval");
    assert_eq!(
        approval_volume["secret"]["secretName"],
        approval_secret["metadata"]["name"]
    );
    // Its placeholder is no key: an unreplaced one stops the start, naming it.
    let file = approval.file_name().expect("a file").to_string_lossy();
    let placeholder = approval_secret["stringData"][file.as_ref()]
        .as_str()
        .expect("the key in the Secret");
    let dir = root().join("target/e2e-deploy");
    std::fs::create_dir_all(&dir).expect("create the folder");
    let key = dir.join("approval.key");
    std::fs::write(&key, placeholder).expect("write the key");
    let started = Command::new(host_bin())
        .args(["--allow-all", "--approval-key"])
        .arg(&key)
        .args(["--plugins", "/nonexistent-plugins-folder"])
        .output()
        .expect("run the binary");
    assert!(!started.status.success());
    assert!(
        String::from_utf8_lossy(&started.stderr).contains(&format!(
            "the approval key {} is {} bytes; it needs at least 32 (e.g. `openssl rand -hex 32`)",
            key.display(),
            placeholder.len()
        )),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    // The audit log is written to a volume of its own, writable under
    // readOnlyRootFilesystem, and the operator log is JSON.
    let audit = Path::new(flag_value(&argv, "--audit-log").expect("--audit-log"));
    assert_eq!(parent(audit), mount(container, "audit"));
    let audit_volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "audit")
        .expect("the audit volume");
    assert!(
        audit_volume["emptyDir"]["sizeLimit"].is_string(),
        "{audit_volume}"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(flag_value(&argv, "--log-format"), Some("json"));

    // The grace period covers an execution in flight.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    let max_execution_time = flag_value(&argv, "--max-execution-time")
        .map_or(Limits::default().max_execution_time, |text| {
            parse_duration(text).expect("a duration")
        });
    assert!(grace > max_execution_time.as_secs() + 1);

    // The ConfigMap's policy compiles and decides; the Secret's tokens parse.
    let config_map = find(&docs, "ConfigMap");
    let file = policy.file_name().expect("a file").to_string_lossy();
    let source = config_map["data"][file.as_ref()]
        .as_str()
        .expect("the policy in the ConfigMap");
    let authorizer = RegoAuthorizer::new(
        flag_value(&argv, "--policy-decision").unwrap_or(DEFAULT_DECISION),
        &[(file.clone().into_owned(), source.to_owned())],
    )
    .expect("the shipped policy compiles");
    let decide = |subject: &str, name: &str| {
        authorizer.authorize(&AuthorizationInput {
            subject: &Subject::new(subject),
            capability_id: name,
            capability_name: name,
            arguments: &Arg::Dict(Vec::new()),
            annotations: &codemode_server::authz::Annotations::default(),
        })
    };
    assert!(decide("analyst", "records.lookup").is_ok());
    assert!(decide("analyst", "records.query").is_err());
    assert!(decide("guest", "records.lookup").is_err());
    let secret = find_named(&docs, "Secret", "codemode-tokens");
    let key = tokens.file_name().expect("a file").to_string_lossy();
    let text = secret["stringData"][key.as_ref()]
        .as_str()
        .expect("the tokens in the Secret");
    let parsed = Tokens::parse(text).expect("the shipped tokens file parses");
    assert_eq!(parsed.len(), 1);

    // The replicas share the Redis of redis.yaml as their store (tasks
    // included), with the password of its Secret, and only they may reach it.
    let redis = find_named(&docs, "Deployment", "codemode-redis");
    let redis_service = find_named(&docs, "Service", "codemode-redis");
    let redis_container = &redis["spec"]["template"]["spec"]["containers"][0];
    let redis_port = redis_service["spec"]["ports"][0]["port"]
        .as_u64()
        .expect("a port");
    // The URL (and its password) comes as a variable, off the command line.
    assert_eq!(flag_value(&argv, "--task-store"), None);
    assert_eq!(flag_value(&argv, "--store"), None);
    let env = |container: &Value, name: &str| {
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .position(|e| e["name"] == name)
            .map(|at| (at, container["env"][at].clone()))
            .unwrap_or_else(|| panic!("no {name} in {container}"))
    };
    let (password_at, password) = env(container, "REDIS_PASSWORD");
    let (store_at, store) = env(container, "CODEMODE_STORE");
    // Kubernetes expands $(REDIS_PASSWORD) only when it is defined first.
    assert!(password_at < store_at);
    assert_eq!(
        store["value"],
        format!("redis://:$(REDIS_PASSWORD)@codemode-redis:{redis_port}/0")
    );
    let help = Command::new(host_bin())
        .args(&argv)
        .arg("--help")
        .env("CODEMODE_STORE", store["value"].as_str().expect("a URL"))
        .output()
        .expect("run the binary");
    assert!(
        help.status.success(),
        "{}",
        String::from_utf8_lossy(&help.stderr)
    );
    let secret = find_named(&docs, "Secret", "codemode-redis");
    let (_, auth) = env(redis_container, "REDISCLI_AUTH");
    for reference in [&password, &auth] {
        assert_eq!(
            reference["valueFrom"]["secretKeyRef"]["name"],
            secret["metadata"]["name"]
        );
        assert_eq!(reference["valueFrom"]["secretKeyRef"]["key"], "password");
    }
    assert!(secret["stringData"]["password"].is_string());
    assert_eq!(
        redis_service["spec"]["selector"],
        redis["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(redis_container["ports"][0]["containerPort"], redis_port);
    // The password reaches redis-server as config on stdin.
    let command = redis_container["command"].to_string();
    assert!(
        command.contains("requirepass") && command.contains("redis-server -"),
        "{command}"
    );
    let redis_args: Vec<&str> = redis_container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg"))
        .collect();
    for (flag, value) in [
        ("--appendonly", "yes"),
        ("--appendfsync", "always"),
        ("--maxmemory-policy", "noeviction"),
    ] {
        let at = redis_args.iter().position(|a| *a == flag);
        assert_eq!(at.map(|i| redis_args[i + 1]), Some(value), "{flag}");
    }
    let network = find_named(&docs, "NetworkPolicy", "codemode-redis");
    assert_eq!(
        network["spec"]["podSelector"]["matchLabels"],
        redis["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        network["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
}
