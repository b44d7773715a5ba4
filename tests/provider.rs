//! A capability source of the library user's own, through the public port
//! (`codemode_server::source`): its capabilities are searched, described, bound,
//! authorized and called as a plugin's, and the service stops its provider.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use codemode_server::authz::{AuthorizationInput, Authorizer, AuthzError, Subject, Verdict};
use codemode_server::source::{
    Arguments, CallBudget, CallFailure, CallFuture, Capability, CapabilitySource, CapabilitySpec,
    Field, Offer, Provider, Publisher, Session, Shape, Value, validate_spec,
};
use codemode_server::{LOCAL_SUBJECT, Service, ServiceConfig, ToolError};

use crate::support::{cache_dir, execute_in as execute};

/// `notes.get(key)` answers a note; `notes.fail()` fails with a message no model
/// should see raw.
struct Notes {
    capabilities: Vec<Arc<Capability>>,
}

impl CapabilitySource for Notes {
    fn label(&self) -> &str {
        "notes"
    }

    fn capabilities(&self) -> &[Arc<Capability>] {
        &self.capabilities
    }

    fn session(self: Arc<Self>, _execution: u64) -> Box<dyn Session> {
        Box::new(NotesSession)
    }
}

struct NotesSession;

impl Session for NotesSession {
    fn call(&mut self, index: usize, arguments: Arguments, _budget: CallBudget) -> CallFuture<'_> {
        // The default binding: one value per parameter.
        let arguments = arguments.take::<Vec<Value>>().unwrap_or_default();
        let outcome = match (index, arguments.as_slice()) {
            (0, [Value::Str(key)]) => Ok(Value::Dict(vec![(
                "text".to_owned(),
                Value::Str(format!("the note {key}")),
            )])),
            (1, []) => Err(CallFailure::Failed(Some("no\tnotes\u{1b}[2J".to_owned()))),
            _ => Err(CallFailure::Internal),
        };
        Box::pin(std::future::ready(outcome))
    }
}

/// Offers [`Notes`] at start; counts its stops.
#[derive(Default)]
struct NotesProvider {
    stops: AtomicUsize,
}

fn capability(name: &str, summary: &str, params: Vec<Field>) -> Arc<Capability> {
    let spec = CapabilitySpec {
        name: name.to_owned(),
        id: None,
        summary: summary.to_owned(),
        description: None,
        search_terms: vec!["memo".to_owned()],
        params,
        output: vec![Field::new("text", Shape::Str)],
    };
    Arc::new(validate_spec(&spec).expect("a valid spec"))
}

impl Provider for NotesProvider {
    fn name(&self) -> &str {
        "notes"
    }

    fn start(self: Arc<Self>, publisher: Publisher) {
        let notes = Notes {
            capabilities: vec![
                capability(
                    "notes.get",
                    "Read one note.",
                    vec![Field::new("key", Shape::Str)],
                ),
                capability("notes.fail", "Fail on purpose.", Vec::new()),
            ],
        };
        publisher
            .offer(Offer {
                sources: vec![Arc::new(notes)],
                failures: Vec::new(),
                starting: false,
            })
            .expect("the first offer is taken");
    }

    fn stop(&self, _deadline: Instant) {
        self.stops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Allows every call but those of `notes.fail`'s ID.
#[derive(Debug)]
struct NoFailing;

impl Authorizer for NoFailing {
    fn authorize(&self, input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
        match input.capability_id {
            "notes.fail" => Err(AuthzError::Denied),
            _ => Ok(Verdict::Allow),
        }
    }
}

#[test]
fn a_source_of_the_library_users_own_serves_as_a_plugin_does() {
    let dir = std::env::temp_dir().join(format!("codemode-provider-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("an empty plugins folder");
    let provider = Arc::new(NotesProvider::default());
    let service = Service::load(&ServiceConfig {
        cache_dir: Some(cache_dir().into()),
        providers: vec![provider.clone()],
        ..ServiceConfig::new(&dir, Arc::new(codemode_server::authz::AllowAll))
    })
    .expect("the service starts");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let subject = Subject::new(LOCAL_SUBJECT);
    let found: Vec<String> = runtime
        .block_on(service.search(&subject, "memo"))
        .expect("a search")
        .results
        .into_iter()
        .map(|result| result.signature)
        .collect();
    assert_eq!(found, ["notes.fail()", "notes.get(*, key: str)"]);
    let described = runtime
        .block_on(service.describe(&subject, "notes.get"))
        .expect("described");
    assert_eq!(
        (described.signature.as_str(), described.summary.as_str()),
        ("notes.get(*, key: str)", "Read one note.")
    );
    assert_eq!(
        execute(&service, "def main():\n    return notes.get(key=\"a\")"),
        Ok(serde_json::json!({"text": "the note a"}))
    );
    assert_eq!(
        execute(&service, "def main():\n    return notes.get(key=1)"),
        Err(ToolError::InvalidArguments(Some(
            "argument \"key\" must be a string".to_owned()
        )))
    );
    assert_eq!(
        execute(&service, "def main():\n    return notes.fail()"),
        Err(ToolError::CapabilityFailed(Some("no notes [2J".to_owned()))),
        "its message is sanitized as a plugin's is"
    );
    assert_eq!(provider.stops.load(Ordering::Relaxed), 0);
    drop(service);
    assert!(provider.stops.load(Ordering::Relaxed) > 0);

    // The authorizer decides on its calls as on a plugin's.
    let service = Service::load(&ServiceConfig {
        cache_dir: Some(cache_dir().into()),
        providers: vec![Arc::new(NotesProvider::default())],
        ..ServiceConfig::new(&dir, Arc::new(NoFailing))
    })
    .expect("the service starts");
    assert_eq!(
        execute(&service, "def main():\n    return notes.fail()"),
        Err(ToolError::PermissionDenied)
    );
    assert_eq!(
        execute(&service, "def main():\n    return notes.get(key=\"b\")"),
        Ok(serde_json::json!({"text": "the note b"}))
    );
    let _ = std::fs::remove_dir_all(&dir);
}
