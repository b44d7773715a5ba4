//! The authorization hook, driven through the library with test authorizers: what an
//! authorizer sees (the canonical arguments) and how its answers project.

use std::sync::{Arc, Mutex};

use codemode_server::authz::{AuthorizationInput, Authorizer, AuthzError, Verdict};
use codemode_server::{LOCAL_SUBJECT, Service, ServiceConfig, ToolError};
use codemode_value::Value;
use serde_json::json;

use crate::support::{cache_dir, execute_in as execute, plugin_folder, test_plugin};

/// Records every input it sees and answers with `answer`.
#[derive(Debug)]
struct Recording {
    answer: Result<(), AuthzError>,
    seen: Mutex<Vec<(String, String, String, Value)>>,
}

impl Authorizer for Recording {
    fn authorize(&self, input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
        self.seen.lock().expect("lock").push((
            input.subject.id.clone(),
            input.capability_id.to_owned(),
            input.capability_name.to_owned(),
            input.arguments.clone(),
        ));
        self.answer.clone().map(|()| Verdict::Allow)
    }
}

/// A service with the liar plugin (folder named by `label`) and a recording
/// authorizer answering `answer`.
fn service_with(label: &str, answer: Result<(), AuthzError>) -> (Service, Arc<Recording>) {
    let dir = plugin_folder(label, &[test_plugin("liar")]);
    let authorizer = Arc::new(Recording {
        answer,
        seen: Mutex::new(Vec::new()),
    });
    let config = ServiceConfig {
        cache_dir: Some(cache_dir().into()),
        ..ServiceConfig::new(dir, authorizer.clone())
    };
    (
        Service::load(&config).expect("load the service"),
        authorizer,
    )
}

const ECHO: &str = "def main():\n    return liar.echo(name=\"n\", letter=\"a\", small=-3, count=5, ratio=2, flag=True, color=\"red\", perms=[\"read\"], tags=[\"t\"], labels={\"k\": \"v\"}, filter={\"owner\": \"o\", \"min_score\": None}, window=None)";

#[test]
fn the_authorizer_sees_canonical_arguments_once_per_call() {
    let (service, authorizer) = service_with("authz-canonical", Ok(()));
    let value = execute(&service, ECHO).expect("allowed");
    assert_eq!(value["filter"], json!({"min_score": null, "owner": "o"}));
    let seen = authorizer.seen.lock().expect("lock");
    assert_eq!(seen.len(), 1);
    let (subject, id, name, arguments) = &seen[0];
    assert_eq!(subject, LOCAL_SUBJECT);
    assert_eq!(id, "liar.echo");
    assert_eq!(name, "liar.echo");
    let s = |v: &str| Value::Str(v.to_owned());
    // Sorted by name; `window` (None) and `filter.min_score` (None) are absent; the int
    // given for the f32 `ratio` is the float the plugin receives.
    assert_eq!(
        arguments,
        &Value::Dict(vec![
            ("color".into(), s("red")),
            ("count".into(), Value::Int(5)),
            ("filter".into(), Value::Dict(vec![("owner".into(), s("o"))])),
            ("flag".into(), Value::Bool(true)),
            ("labels".into(), Value::Dict(vec![("k".into(), s("v"))])),
            ("letter".into(), s("a")),
            ("name".into(), s("n")),
            ("perms".into(), Value::List(vec![s("read")])),
            ("ratio".into(), Value::Float(2.0)),
            ("small".into(), Value::Int(-3)),
            ("tags".into(), Value::List(vec![s("t")])),
        ])
    );
}

#[test]
fn binding_errors_never_reach_the_authorizer() {
    let (service, authorizer) = service_with("authz-binding", Ok(()));
    let outcome = execute(&service, "def main():\n    return liar.fail(message=1)");
    assert_eq!(
        outcome,
        Err(ToolError::InvalidArguments(Some(
            "argument \"message\" must be a string".into()
        )))
    );
    assert!(authorizer.seen.lock().expect("lock").is_empty());
}

#[test]
fn denials_and_policy_failures_project_to_fixed_texts_and_stop_the_program() {
    let (service, authorizer) = service_with("authz-denied", Err(AuthzError::Denied));
    let outcome = execute(
        &service,
        "def main():\n    liar.fail(message=\"x\")\n    return liar.fail(message=\"y\")",
    );
    assert_eq!(outcome, Err(ToolError::PermissionDenied));
    assert_eq!(
        authorizer.seen.lock().expect("lock").len(),
        1,
        "the program stopped"
    );

    let (service, _) = service_with(
        "authz-failure",
        Err(AuthzError::Failure(
            "rego: decision is undefined (host detail)".into(),
        )),
    );
    let outcome = execute(&service, "def main():\n    return liar.fail(message=\"x\")");
    assert_eq!(outcome, Err(ToolError::PolicyFailure));
    assert_eq!(
        ToolError::PolicyFailure.to_string(),
        "authorization policy failure"
    );
}
