//! The Kubernetes manifests in deploy/kubernetes: they parse, and what they say
//! agrees with the binary (flags, probe paths, ports, mounts, the policy and the
//! tokens format).

use std::path::Path;
use std::process::Command;

use codemode_host::Limits;
use codemode_host::authz::{
    AuthorizationInput, Authorizer, DEFAULT_DECISION, RegoAuthorizer, Subject, Tokens,
};
use codemode_host::mcp::http::{HEALTHZ_PATH, READYZ_PATH};
use codemode_host::units::parse_duration;
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

fn find<'a>(docs: &'a [(String, Value)], kind: &str) -> &'a Value {
    docs.iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
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

    let deployment = find(&docs, "Deployment");
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
    let service = find(&docs, "Service");
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
    assert_eq!(
        flag_value(&argv, "--plugins"),
        Some(mount(container, "plugins"))
    );
    assert_eq!(
        flag_value(&argv, "--cache-dir"),
        Some(mount(container, "cache"))
    );
    let policies = flag_values(&argv, "--policy");
    assert_eq!(policies.len(), 1, "{argv:?}");
    let policy = Path::new(policies[0]);
    assert_eq!(parent(policy), mount(container, "policy"));
    let tokens = Path::new(flag_value(&argv, "--tokens").expect("--tokens"));
    assert_eq!(parent(tokens), mount(container, "tokens"));
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
        })
    };
    assert!(decide("analyst", "records.lookup").is_ok());
    assert!(decide("analyst", "records.query").is_err());
    assert!(decide("guest", "records.lookup").is_err());
    let secret = find(&docs, "Secret");
    let key = tokens.file_name().expect("a file").to_string_lossy();
    let text = secret["stringData"][key.as_ref()]
        .as_str()
        .expect("the tokens in the Secret");
    let parsed = Tokens::parse(text).expect("the shipped tokens file parses");
    assert_eq!(parsed.len(), 1);
}
