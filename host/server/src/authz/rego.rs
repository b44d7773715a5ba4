//! The Rego adapter of the [`Authorizer`] port, evaluated with `regorus`.
//!
//! Modules are parsed once at start, in file-name order, with Rego v1 syntax; the
//! decision must be a ground reference under `data` (default
//! [`DEFAULT_DECISION`]). Each native call clones the prepared engine (cheap: its
//! state is shared), sets the input document and evaluates the decision. Only the
//! boolean `true` allows; `false` denies; anything else (undefined, another type, an
//! evaluation error) is a policy failure whose reason goes to the log only.
//!
//! Decisions must be deterministic: the builtins that read the clock, randomness,
//! the network or the runtime are either not compiled in (regorus features) or
//! refused when a module names them, and so is `print`.
//!
//! Decisions must not take the process down: builtins that an agent's arguments
//! could make allocate without bound are replaced by bounded ones
//! (`authz::bounded`), and `sprintf` takes its format from the policy only.

use std::num::NonZeroU32;
use std::time::Duration;

use codemode_value::Value;
use regorus::unstable::{Lexer, TokenKind};
use regorus::utils::limits::ExecutionTimerConfig;

use super::bounded;
use super::port::{AuthorizationInput, Authorizer, AuthzError, MAX_QUESTION_BYTES, Verdict};
use super::subject::Subject;

/// The decision evaluated when `--policy-decision` is not given.
pub const DEFAULT_DECISION: &str = "data.codemode.authz.allow";

/// Longest a single decision may run before it is a policy failure: a policy is a
/// handful of comparisons, so this only stops a runaway comprehension.
pub const DECISION_TIME_LIMIT: Duration = Duration::from_millis(500);

/// Builtins a module may not name: their results change between calls (clock,
/// randomness, network, runtime), so a decision would not be reproducible. Most are
/// not compiled in at all; naming them here gives a clear error at start instead of
/// an "unknown function" at the first call.
const NONDETERMINISTIC_BUILTINS: &[&str] = &[
    "http.send",
    "net.lookup_ip_addr",
    "opa.runtime",
    "rand.intn",
    "time.now_ns",
    "uuid.rfc4122",
    "uuid.parse",
    "io.jwt.decode_verify",
    "io.jwt.encode_sign",
    "io.jwt.encode_sign_raw",
    "trace",
    "print",
];

/// Why a policy could not be prepared. Shown to the operator at start, never to a
/// model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegoError {
    /// No module was given.
    #[error("rego: at least one module is required")]
    NoModules,
    /// A module's file name is blank.
    #[error("rego: module filename must not be blank")]
    BlankFilename,
    /// The decision is not of the form `data.a.b`.
    #[error("rego: decision {0:?} must be a ground data reference")]
    Decision(String),
    /// A module does not parse.
    #[error("rego: module {file}: {reason}")]
    Module {
        /// The module's file name.
        file: String,
        /// The parser's message.
        reason: String,
    },
    /// A module names a nondeterministic builtin or `print`.
    #[error(
        "rego: module {file}:{line}:{col}: `{builtin}` is not available: decisions must be deterministic and silent"
    )]
    Builtin {
        /// The module's file name.
        file: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        col: u32,
        /// The builtin named.
        builtin: String,
    },
    /// A module calls `sprintf` with a format that is not a string literal: a format
    /// from the input could ask for padding of any width.
    #[error(
        "rego: module {file}:{line}:{col}: the format of `sprintf` must be a string literal: a format from the input could pad to any width"
    )]
    Format {
        /// The module's file name.
        file: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        col: u32,
    },
    /// No module defines the decision's rule.
    #[error(
        "rego: no rule defines the decision `{decision}` (the modules' packages: {}); define it, or name the rule that decides with {flag}",
        packages.join(", ")
    )]
    Undefined {
        /// The decision asked for.
        decision: String,
        /// The flag that names it (`--policy-decision`, `--visibility-decision`).
        flag: &'static str,
        /// The packages the modules declare (`data.a.b`), in file-name order.
        packages: Vec<String>,
    },
    /// The decision cannot be compiled against the modules.
    #[error("rego: prepare decision: {0}")]
    Prepare(String),
}

/// Decides native calls with a Rego policy, and, when it is given a visibility
/// decision, which capabilities each subject can find.
#[derive(Clone)]
pub struct RegoAuthorizer {
    engine: regorus::Engine,
    decision: String,
    /// The visibility decision's engine and reference (`--visibility-decision`).
    visibility: Option<(regorus::Engine, String)>,
    /// The quota decision's engine and reference (`--quota-decision`).
    quota: Option<(regorus::Engine, String)>,
}

impl std::fmt::Debug for RegoAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegoAuthorizer")
            .field("decision", &self.decision)
            .field(
                "visibility",
                &self.visibility.as_ref().map(|(_, decision)| decision),
            )
            .field("quota", &self.quota.as_ref().map(|(_, decision)| decision))
            .finish_non_exhaustive()
    }
}

impl RegoAuthorizer {
    /// Parses `modules` (file name, source) in file-name order and prepares
    /// `decision`.
    ///
    /// # Errors
    ///
    /// [`RegoError`] for no modules, a blank file name, a decision that is not a
    /// ground `data.` reference, a module that does not parse or names a
    /// nondeterministic builtin, or a decision that names no rule.
    pub fn new(decision: &str, modules: &[(String, String)]) -> Result<Self, RegoError> {
        Ok(Self {
            engine: prepare(decision, modules, "--policy-decision")?,
            decision: decision.to_owned(),
            visibility: None,
            quota: None,
        })
    }

    /// This authorizer, also deciding each subject's quotas with `decision`
    /// over the same `modules`: an object of quota names and limits
    /// (`{"executions-per-minute": 10}`) sets those, undefined leaves the
    /// config file's.
    ///
    /// # Errors
    ///
    /// [`RegoError`] as for [`RegoAuthorizer::new`].
    pub fn with_quota(
        mut self,
        decision: &str,
        modules: &[(String, String)],
    ) -> Result<Self, RegoError> {
        self.quota = Some((
            prepare(decision, modules, "--quota-decision")?,
            decision.to_owned(),
        ));
        Ok(self)
    }

    /// This authorizer, also deciding which capabilities a subject can find with
    /// `decision` over the same `modules` (which must be the ones it was made
    /// with): `true` shows a capability, `false` hides it.
    ///
    /// # Errors
    ///
    /// [`RegoError`] as for [`RegoAuthorizer::new`].
    pub fn with_visibility(
        mut self,
        decision: &str,
        modules: &[(String, String)],
    ) -> Result<Self, RegoError> {
        self.visibility = Some((
            prepare(decision, modules, "--visibility-decision")?,
            decision.to_owned(),
        ));
        Ok(self)
    }

    /// The decision this authorizer evaluates.
    pub fn decision(&self) -> &str {
        &self.decision
    }

    /// Evaluates the decision for `input`: `true` allows, `false` denies,
    /// `{"ask": "<question>"}` asks a human.
    fn evaluate(&self, input: regorus::Value) -> Result<Verdict, AuthzError> {
        let mut engine = self.engine.clone();
        engine.set_input(input);
        match engine.eval_rule(self.decision.clone()) {
            Ok(regorus::Value::Bool(true)) => Ok(Verdict::Allow),
            Ok(regorus::Value::Bool(false)) => Err(AuthzError::Denied),
            Ok(regorus::Value::Undefined) => Err(AuthzError::Failure(
                "rego: decision is undefined".to_owned(),
            )),
            Ok(value) => ask(&value).map(Verdict::Ask),
            Err(error) => Err(AuthzError::Failure(format!(
                "rego: evaluate decision: {error:#}"
            ))),
        }
    }
}

/// An engine with `modules` (parsed in file-name order) analyzed for `decision`
/// (named by `flag`): every clone evaluates it without redoing that.
fn prepare(
    decision: &str,
    modules: &[(String, String)],
    flag: &'static str,
) -> Result<regorus::Engine, RegoError> {
    if modules.is_empty() {
        return Err(RegoError::NoModules);
    }
    if !is_ground_data_reference(decision) {
        return Err(RegoError::Decision(decision.to_owned()));
    }
    let mut sorted: Vec<&(String, String)> = modules.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(false);
    engine.set_strict_builtin_errors(true);
    // Never to stderr: `print` is refused below, this is the second line.
    engine.set_gather_prints(true);
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit: DECISION_TIME_LIMIT,
        check_interval: NonZeroU32::MIN,
    });
    bounded::install(&mut engine).map_err(|error| RegoError::Prepare(format!("{error:#}")))?;
    for (file, source) in sorted {
        if file.trim().is_empty() {
            return Err(RegoError::BlankFilename);
        }
        refuse_builtins(file, source)?;
        engine
            .add_policy(file.clone(), source.clone())
            .map_err(|error| RegoError::Module {
                file: file.clone(),
                reason: format!("{error:#}"),
            })?;
    }
    // Compiling against the entry point checks that the decision names a rule,
    // and leaves the engine analyzed: every clone evaluates without redoing it.
    if let Err(error) = engine.compile_with_entrypoint(&regorus::Rc::<str>::from(decision)) {
        let reason = format!("{error:#}");
        // regorus's words for a path that names no rule.
        if reason.contains("not a valid rule path") {
            return Err(RegoError::Undefined {
                decision: decision.to_owned(),
                flag,
                packages: engine.get_packages().unwrap_or_default(),
            });
        }
        return Err(RegoError::Prepare(reason));
    }
    Ok(engine)
}

/// What a decision that is neither `true`, `false` nor undefined says: the
/// question of `{"ask": "<question>"}` (one key, a printable string of at most
/// [`MAX_QUESTION_BYTES`] that is not blank), else why it is a failure.
fn ask(value: &regorus::Value) -> Result<String, AuthzError> {
    let failure = |reason: &str| AuthzError::Failure(format!("rego: {reason}"));
    let regorus::Value::Object(fields) = value else {
        return Err(failure(DECISION_SHAPE));
    };
    let question = match (fields.len(), fields.get(&regorus::Value::from("ask"))) {
        (1, Some(regorus::Value::String(question))) => question,
        (1, Some(_)) => return Err(failure("the question of {\"ask\": ...} must be a string")),
        _ => return Err(failure(DECISION_SHAPE)),
    };
    if question.trim().is_empty() {
        return Err(failure("the question of {\"ask\": ...} is blank"));
    }
    if question.len() > MAX_QUESTION_BYTES {
        return Err(failure(&format!(
            "the question of {{\"ask\": ...}} is over {MAX_QUESTION_BYTES} bytes"
        )));
    }
    // Shown to a human: no control characters but line breaks and tabs.
    Ok(question
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => ' ',
            c => c,
        })
        .collect())
}

/// What a decision must be.
const DECISION_SHAPE: &str = "decision must be true, false or {\"ask\": \"<question>\"}";

impl Authorizer for RegoAuthorizer {
    fn authorize(&self, input: &AuthorizationInput<'_>) -> Result<Verdict, AuthzError> {
        self.evaluate(input_document(input))
    }

    /// Only the boolean `true` shows; `false` hides; anything else is a failure
    /// (and the caller hides the capability).
    fn visible(&self, input: &AuthorizationInput<'_>) -> Result<bool, AuthzError> {
        let Some((engine, decision)) = &self.visibility else {
            return Ok(true);
        };
        let mut engine = engine.clone();
        engine.set_input(visibility_document(input));
        match engine.eval_rule(decision.clone()) {
            Ok(regorus::Value::Bool(visible)) => Ok(visible),
            Ok(regorus::Value::Undefined) => Err(AuthzError::Failure(
                "rego: visibility decision is undefined".to_owned(),
            )),
            Ok(_) => Err(AuthzError::Failure(
                "rego: visibility decision must be true or false".to_owned(),
            )),
            Err(error) => Err(AuthzError::Failure(format!(
                "rego: evaluate visibility decision: {error:#}"
            ))),
        }
    }

    fn decides_visibility(&self) -> bool {
        self.visibility.is_some()
    }

    fn decides_quotas(&self) -> bool {
        self.quota.is_some()
    }

    /// An object sets quotas; undefined sets none; anything else is a failure.
    fn quota(
        &self,
        subject: &Subject,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, AuthzError> {
        let Some((engine, decision)) = &self.quota else {
            return Ok(None);
        };
        let mut engine = engine.clone();
        engine.set_input(object([("subject", subject_document(subject))]));
        match engine.eval_rule(decision.clone()) {
            Ok(regorus::Value::Undefined) => Ok(None),
            Ok(value @ regorus::Value::Object(_)) => match serde_json::to_value(&value) {
                Ok(serde_json::Value::Object(quotas)) => Ok(Some(quotas)),
                Ok(_) | Err(_) => Err(AuthzError::Failure(QUOTA_SHAPE.to_owned())),
            },
            Ok(_) => Err(AuthzError::Failure(QUOTA_SHAPE.to_owned())),
            Err(error) => Err(AuthzError::Failure(format!(
                "rego: evaluate quota decision: {error:#}"
            ))),
        }
    }
}

/// What a quota decision must be.
const QUOTA_SHAPE: &str =
    "rego: quota decision must be an object of quotas, e.g. {\"executions-per-minute\": 10}";

/// The input document, exactly:
/// `{"subject":{"id","claims","scopes"},"capability":{"id","name","annotations"},"arguments":{...}}`,
/// `claims` and `scopes` from the subject's access token (`{}` and `[]`
/// without one),
/// `annotations` holding the hints the capability's source declared, by their
/// MCP names (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
/// `openWorldHint`).
pub fn input_document(input: &AuthorizationInput<'_>) -> regorus::Value {
    object([
        ("subject", subject_document(input.subject)),
        ("capability", capability_document(input)),
        ("arguments", to_rego(input.arguments)),
    ])
}

/// The input document of the visibility decision: [`input_document`] without
/// `arguments` (whether a subject can find a capability does not depend on a
/// call).
pub fn visibility_document(input: &AuthorizationInput<'_>) -> regorus::Value {
    object([
        ("subject", subject_document(input.subject)),
        ("capability", capability_document(input)),
    ])
}

/// `{"id","claims","scopes"}` of `subject`.
fn subject_document(subject: &Subject) -> regorus::Value {
    object([
        ("id", subject.id.as_str().into()),
        (
            "claims",
            regorus::Value::from(serde_json::Value::Object(subject.claims().clone())),
        ),
        (
            "scopes",
            regorus::Value::from(
                subject
                    .scopes()
                    .iter()
                    .map(|scope| regorus::Value::from(scope.as_str()))
                    .collect::<Vec<_>>(),
            ),
        ),
    ])
}

/// `{"id","name","annotations"}` of the input's capability.
fn capability_document(input: &AuthorizationInput<'_>) -> regorus::Value {
    let annotations: std::collections::BTreeMap<regorus::Value, regorus::Value> = input
        .annotations
        .declared()
        .map(|(name, hint)| (regorus::Value::from(name), regorus::Value::from(hint)))
        .collect();
    object([
        ("id", input.capability_id.into()),
        ("name", input.capability_name.into()),
        ("annotations", regorus::Value::from(annotations)),
    ])
}

fn object<const N: usize>(entries: [(&str, regorus::Value); N]) -> regorus::Value {
    let map: std::collections::BTreeMap<regorus::Value, regorus::Value> = entries
        .into_iter()
        .map(|(k, v)| (regorus::Value::from(k), v))
        .collect();
    regorus::Value::from(map)
}

/// A canonical argument as a Rego value. Binding has already refused what JSON
/// cannot carry (non-finite floats, ints past 64 bits, non-string keys), so those
/// arms only keep the conversion total.
fn to_rego(value: &Value) -> regorus::Value {
    match value {
        Value::None => regorus::Value::Null,
        Value::Bool(b) => regorus::Value::from(*b),
        Value::Int(i) => regorus::Value::from(*i),
        Value::Float(f) => regorus::Value::from(*f),
        Value::Str(s) => regorus::Value::from(s.as_str()),
        Value::List(items) => regorus::Value::from(items.iter().map(to_rego).collect::<Vec<_>>()),
        Value::Dict(entries) => regorus::Value::from(
            entries
                .iter()
                .map(|(k, v)| (regorus::Value::from(k.as_str()), to_rego(v)))
                .collect::<std::collections::BTreeMap<_, _>>(),
        ),
        Value::BigInt { .. } | Value::NonStringKeys | Value::Unsupported(_) => regorus::Value::Null,
    }
}

/// `data` followed by one or more `.name` or `["key"]` segments: no variables, no
/// other root.
fn is_ground_data_reference(decision: &str) -> bool {
    let Some(mut rest) = decision.strip_prefix("data") else {
        return false;
    };
    let mut segments = 0;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = &after[..end];
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                return false;
            }
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("[\"") {
            let Some(end) = after.find("\"]") else {
                return false;
            };
            if end == 0 || after[..end].contains(['"', '\\']) {
                return false;
            }
            rest = &after[end + 2..];
        } else {
            return false;
        }
        segments += 1;
    }
    segments > 0
}

/// Refuses a module that names a [`NONDETERMINISTIC_BUILTINS`] entry as a call, or
/// calls `sprintf` with a format that is not a string literal: a dotted name that
/// does not continue another reference (so `input.time.now_ns` is fine), followed by
/// `(`. Tokens, not text: comments and strings are skipped.
fn refuse_builtins(file: &str, source: &str) -> Result<(), RegoError> {
    let parse_error = |error: anyhow::Error| RegoError::Module {
        file: file.to_owned(),
        reason: format!("{error:#}"),
    };
    let source =
        regorus::Source::from_contents(file.to_owned(), source.to_owned()).map_err(parse_error)?;
    let mut lexer = Lexer::new(&source);
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token().map_err(parse_error)?;
        if token.0 == TokenKind::Eof {
            break;
        }
        tokens.push(token);
    }
    let is_symbol = |i: usize, s: &str| {
        tokens
            .get(i)
            .is_some_and(|t| t.0 == TokenKind::Symbol && t.1.text() == s)
    };
    let mut i = 0;
    while i < tokens.len() {
        let starts_reference = tokens[i].0 == TokenKind::Ident && !(i > 0 && is_symbol(i - 1, "."));
        if !starts_reference {
            i += 1;
            continue;
        }
        let start = i;
        let mut name = tokens[i].1.text().to_owned();
        while is_symbol(i + 1, ".") && tokens.get(i + 2).is_some_and(|t| t.0 == TokenKind::Ident) {
            name.push('.');
            name.push_str(tokens[i + 2].1.text());
            i += 2;
        }
        let is_literal = |i: usize| {
            tokens
                .get(i)
                .is_some_and(|t| matches!(t.0, TokenKind::String | TokenKind::RawString))
        };
        if name == "sprintf" && is_symbol(i + 1, "(") && !is_literal(i + 2) {
            let span = &tokens[start].1;
            return Err(RegoError::Format {
                file: file.to_owned(),
                line: span.line,
                col: span.col,
            });
        }
        if is_symbol(i + 1, "(") && NONDETERMINISTIC_BUILTINS.contains(&name.as_str()) {
            let span = &tokens[start].1;
            return Err(RegoError::Builtin {
                file: file.to_owned(),
                line: span.line,
                col: span.col,
                builtin: name,
            });
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::Subject;
    use crate::catalog::Annotations;

    const POLICY: &str = r#"package codemode.authz

default allow := false

allow if {
    input.subject.id == "analyst"
    input.capability.name == "records.lookup"
}

allow if {
    input.subject.id == "admin"
}

allow if {
    input.capability.name == "stats.summary"
    count(input.arguments.values) <= 3
}
"#;

    fn modules(source: &str) -> Vec<(String, String)> {
        vec![("policy.rego".to_owned(), source.to_owned())]
    }

    fn decide(
        authorizer: &RegoAuthorizer,
        subject: &str,
        name: &str,
        arguments: Value,
    ) -> Result<(), AuthzError> {
        let subject = Subject::new(subject);
        authorizer
            .authorize(&AuthorizationInput {
                subject: &subject,
                capability_id: "id-1",
                capability_name: name,
                arguments: &arguments,
                annotations: &Annotations::default(),
            })
            .map(|verdict| assert_eq!(verdict, Verdict::Allow))
    }

    fn no_arguments() -> Value {
        Value::Dict(Vec::new())
    }

    #[test]
    fn true_allows_false_denies() -> anyhow::Result<()> {
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(POLICY))?;
        assert_eq!(
            decide(&authorizer, "analyst", "records.lookup", no_arguments()),
            Ok(())
        );
        assert_eq!(
            decide(&authorizer, "guest", "records.lookup", no_arguments()),
            Err(AuthzError::Denied)
        );
        assert_eq!(
            decide(&authorizer, "analyst", "records.query", no_arguments()),
            Err(AuthzError::Denied)
        );
        assert_eq!(
            decide(&authorizer, "admin", "records.query", no_arguments()),
            Ok(())
        );
        Ok(())
    }

    #[test]
    fn arguments_are_visible_to_the_policy() -> anyhow::Result<()> {
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(POLICY))?;
        let values = |n: i64| {
            Value::Dict(vec![(
                "values".into(),
                Value::List((0..n).map(Value::Int).collect()),
            )])
        };
        assert_eq!(
            decide(&authorizer, "guest", "stats.summary", values(3)),
            Ok(())
        );
        assert_eq!(
            decide(&authorizer, "guest", "stats.summary", values(4)),
            Err(AuthzError::Denied)
        );
        Ok(())
    }

    #[test]
    fn the_input_document_has_exactly_the_documented_shape() -> anyhow::Result<()> {
        let subject = Subject::new("s");
        let arguments = Value::Dict(vec![
            ("n".into(), Value::Int(i64::MAX)),
            ("x".into(), Value::Float(1.0)),
            ("tags".into(), Value::List(vec![Value::Str("a".into())])),
            ("z".into(), Value::None),
        ]);
        let document = input_document(&AuthorizationInput {
            subject: &subject,
            capability_id: "cap-id",
            capability_name: "records.lookup",
            arguments: &arguments,
            annotations: &Annotations {
                read_only: Some(false),
                destructive: Some(true),
                idempotent: None,
                open_world: None,
            },
        });
        // Rego has one number type: the float 1.0 and the int 1 are the same value.
        let document: serde_json::Value = serde_json::from_str(&document.to_json_str()?)?;
        assert_eq!(
            document,
            serde_json::json!({
                "subject": {"id": "s", "claims": {}, "scopes": []},
                "capability": {
                    "id": "cap-id",
                    "name": "records.lookup",
                    "annotations": {"readOnlyHint": false, "destructiveHint": true}
                },
                "arguments": {"n": 9223372036854775807_i64, "tags": ["a"], "x": 1, "z": null}
            })
        );
        Ok(())
    }

    const VISIBILITY: &str = r#"package codemode.authz

default allow := true

default visible := false

visible if "admins" in input.subject.claims.groups

visible if startswith(input.capability.name, "public.")

visible if {
    input.capability.name == "odd.one"
    input.arguments.x == 1
}

visible := "yes" if input.capability.name == "strange.one"

visible := 1 / 0 if input.capability.name == "broken.one"
"#;

    fn visibility(subject: &Subject, name: &str) -> anyhow::Result<Result<bool, AuthzError>> {
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(VISIBILITY))?
            .with_visibility("data.codemode.authz.visible", &modules(VISIBILITY))?;
        assert!(authorizer.decides_visibility());
        let arguments = Value::Dict(vec![("x".into(), Value::Int(1))]);
        Ok(authorizer.visible(&AuthorizationInput {
            subject,
            capability_id: "id",
            capability_name: name,
            arguments: &arguments,
            annotations: &Annotations::default(),
        }))
    }

    #[test]
    fn the_visibility_decision_shows_on_true_only_and_never_reads_arguments() -> anyhow::Result<()>
    {
        let mut claims = serde_json::Map::new();
        claims.insert("groups".into(), serde_json::json!(["admins"]));
        let admin = Subject::with_claims("ada", claims, Vec::new());
        let user = Subject::new("bob");
        assert_eq!(visibility(&admin, "secret.thing")?, Ok(true));
        assert_eq!(visibility(&user, "secret.thing")?, Ok(false));
        assert_eq!(visibility(&user, "public.thing")?, Ok(true));
        // The document has no arguments: the rule reading them is undefined.
        assert_eq!(visibility(&user, "odd.one")?, Ok(false));
        assert_eq!(
            visibility(&user, "strange.one")?,
            Err(AuthzError::Failure(
                "rego: visibility decision must be true or false".to_owned()
            ))
        );
        assert!(matches!(
            visibility(&user, "broken.one")?,
            Err(AuthzError::Failure(reason)) if reason.starts_with("rego: evaluate visibility decision: ")
        ));
        let plain = RegoAuthorizer::new(DEFAULT_DECISION, &modules(VISIBILITY))?;
        assert!(!plain.decides_visibility());
        Ok(())
    }

    #[test]
    fn an_undefined_or_unknown_visibility_decision_is_named() -> anyhow::Result<()> {
        let policy =
            "package codemode.authz\ndefault allow := true\nvisible if input.subject.id == \"x\"\n";
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(policy))?
            .with_visibility("data.codemode.authz.visible", &modules(policy))?;
        let subject = Subject::new("bob");
        let arguments = Value::None;
        assert_eq!(
            authorizer.visible(&AuthorizationInput {
                subject: &subject,
                capability_id: "id",
                capability_name: "a.b",
                arguments: &arguments,
                annotations: &Annotations::default(),
            }),
            Err(AuthzError::Failure(
                "rego: visibility decision is undefined".to_owned()
            ))
        );
        let missing = RegoAuthorizer::new(DEFAULT_DECISION, &modules(policy))?
            .with_visibility("data.codemode.authz.shown", &modules(policy))
            .err()
            .map(|error| error.to_string());
        assert_eq!(
            missing.as_deref(),
            Some(
                "rego: no rule defines the decision `data.codemode.authz.shown` (the modules' packages: data.codemode.authz); define it, or name the rule that decides with --visibility-decision"
            )
        );
        Ok(())
    }

    #[test]
    fn the_visibility_document_is_the_input_without_arguments() -> anyhow::Result<()> {
        let subject = Subject::new("s");
        let arguments = Value::Dict(vec![("n".into(), Value::Int(1))]);
        let document = visibility_document(&AuthorizationInput {
            subject: &subject,
            capability_id: "cap-id",
            capability_name: "records.lookup",
            arguments: &arguments,
            annotations: &Annotations::default(),
        });
        let document: serde_json::Value = serde_json::from_str(&document.to_json_str()?)?;
        assert_eq!(
            document,
            serde_json::json!({
                "subject": {"id": "s", "claims": {}, "scopes": []},
                "capability": {"id": "cap-id", "name": "records.lookup", "annotations": {}}
            })
        );
        Ok(())
    }

    #[test]
    fn the_quota_decision_is_an_object_or_undefined() -> anyhow::Result<()> {
        let policy = r#"package codemode.authz
default allow := true
quota := {"executions-per-minute": 5} if input.subject.id == "alice"
quota := 7 if input.subject.id == "bob"
"#;
        let authorizer = RegoAuthorizer::new("data.codemode.authz.allow", &modules(policy))?
            .with_quota("data.codemode.authz.quota", &modules(policy))?;
        let decided = |id: &str| authorizer.quota(&Subject::new(id));
        assert_eq!(
            decided("alice"),
            Ok(Some(
                serde_json::json!({"executions-per-minute": 5})
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            ))
        );
        assert_eq!(decided("carol"), Ok(None));
        assert_eq!(
            decided("bob"),
            Err(AuthzError::Failure(QUOTA_SHAPE.to_owned()))
        );
        // Without a quota decision, none.
        let plain = RegoAuthorizer::new("data.codemode.authz.allow", &modules(policy))?;
        assert_eq!(plain.quota(&Subject::new("alice")), Ok(None));
        Ok(())
    }

    #[test]
    fn a_token_subjects_claims_and_scopes_reach_the_policy() -> anyhow::Result<()> {
        let mut claims = serde_json::Map::new();
        claims.insert("groups".into(), serde_json::json!(["admins", "ops"]));
        claims.insert("tenant".into(), serde_json::json!("acme"));
        let subject = Subject::with_claims("ada", claims, vec!["mcp:execute".into()]);
        let authorizer = RegoAuthorizer::new(
            DEFAULT_DECISION,
            &[(
                "p.rego".to_owned(),
                "package codemode.authz\ndefault allow := false\nallow if {\n  \"admins\" in input.subject.claims.groups\n  \"mcp:execute\" in input.subject.scopes\n}\n".to_owned(),
            )],
        )?;
        let arguments = Value::Dict(vec![]);
        let annotations = Annotations::default();
        let input = |subject| AuthorizationInput {
            subject,
            capability_id: "c",
            capability_name: "c.c",
            arguments: &arguments,
            annotations: &annotations,
        };
        assert_eq!(authorizer.authorize(&input(&subject)), Ok(Verdict::Allow));
        let plain = Subject::new("ada");
        assert_eq!(
            authorizer.authorize(&input(&plain)),
            Err(AuthzError::Denied)
        );
        Ok(())
    }

    #[test]
    fn anything_but_a_boolean_is_a_policy_failure() -> anyhow::Result<()> {
        let cases = [
            (
                "package codemode.authz\nallow if { input.subject.id == \"nobody\" }\n",
                "rego: decision is undefined",
            ),
            (
                "package codemode.authz\nallow := \"yes\"\n",
                "rego: decision must be true, false or {\"ask\": \"<question>\"}",
            ),
            (
                "package codemode.authz\nallow := x if { x := {true, false} }\n",
                "rego: decision must be true, false or {\"ask\": \"<question>\"}",
            ),
            (
                "package codemode.authz\nallow := {\"ask\": \"ok?\", \"why\": 1}\n",
                "rego: decision must be true, false or {\"ask\": \"<question>\"}",
            ),
            (
                "package codemode.authz\nallow := {\"ask\": true}\n",
                "rego: the question of {\"ask\": ...} must be a string",
            ),
            (
                "package codemode.authz\nallow := {\"ask\": \"  \"}\n",
                "rego: the question of {\"ask\": ...} is blank",
            ),
            (
                // Lines of at most 1024 columns (regorus's limit).
                &format!(
                    "package codemode.authz\nallow := {{\"ask\": concat(\"\", [\n\"{}\",\n\"{}\",\n\"x\"])}}\n",
                    "x".repeat(MAX_QUESTION_BYTES / 2),
                    "x".repeat(MAX_QUESTION_BYTES / 2),
                ),
                "rego: the question of {\"ask\": ...} is over 1024 bytes",
            ),
        ];
        for (source, reason) in cases {
            let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(source))?;
            assert_eq!(
                decide(&authorizer, "s", "a.b", no_arguments()),
                Err(AuthzError::Failure(reason.to_owned())),
                "{source}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_ask_object_asks_a_human_with_its_question() -> anyhow::Result<()> {
        let source = r#"package codemode.authz

default allow := false

allow if input.capability.annotations.readOnlyHint

allow := {"ask": sprintf("Let %s run %s?\u0007", [input.subject.id, input.capability.name])} if {
    input.capability.annotations.destructiveHint
}
"#;
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(source))?;
        let subject = Subject::new("ada");
        let arguments = no_arguments();
        let decide = |annotations: Annotations| {
            authorizer.authorize(&AuthorizationInput {
                subject: &subject,
                capability_id: "mcp:git/git_commit",
                capability_name: "git.git_commit",
                arguments: &arguments,
                annotations: &annotations,
            })
        };
        let hints = |read_only, destructive| Annotations {
            read_only,
            destructive,
            ..Annotations::default()
        };
        assert_eq!(decide(hints(Some(true), None)), Ok(Verdict::Allow));
        assert_eq!(
            decide(hints(Some(false), Some(true))),
            Ok(Verdict::Ask("Let ada run git.git_commit? ".to_owned()))
        );
        // Undeclared hints are absent: neither rule holds.
        assert_eq!(decide(Annotations::default()), Err(AuthzError::Denied));
        Ok(())
    }

    #[test]
    fn an_evaluation_error_is_a_policy_failure() -> anyhow::Result<()> {
        let source = "package codemode.authz\nallow if { to_number(input.subject.id) > 1 }\n";
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(source))?;
        match decide(&authorizer, "not-a-number", "a.b", no_arguments()) {
            Err(AuthzError::Failure(reason)) => {
                assert!(reason.starts_with("rego: evaluate decision: "), "{reason}");
            }
            other => panic!("expected a policy failure, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn construction_errors_name_the_problem() {
        let good = modules(POLICY);
        type Modules = Vec<(String, String)>;
        let cases: Vec<(&str, Modules, RegoError)> = vec![
            (DEFAULT_DECISION, Vec::new(), RegoError::NoModules),
            (
                DEFAULT_DECISION,
                vec![(" ".into(), POLICY.into())],
                RegoError::BlankFilename,
            ),
            (
                "input.allow",
                good.clone(),
                RegoError::Decision("input.allow".into()),
            ),
            (
                "data.x[y]",
                good.clone(),
                RegoError::Decision("data.x[y]".into()),
            ),
            ("data", good.clone(), RegoError::Decision("data".into())),
        ];
        for (decision, modules, expected) in cases {
            assert_eq!(
                RegoAuthorizer::new(decision, &modules).err(),
                Some(expected)
            );
        }
        assert_eq!(
            RegoError::Decision("input.allow".into()).to_string(),
            r#"rego: decision "input.allow" must be a ground data reference"#
        );
    }

    #[test]
    fn ground_references_may_use_quoted_segments() {
        assert!(is_ground_data_reference("data.codemode.authz.allow"));
        assert!(is_ground_data_reference(r#"data["my-pkg"].allow"#));
        assert!(!is_ground_data_reference("data.1x"));
        assert!(!is_ground_data_reference("data..x"));
        assert!(!is_ground_data_reference(r#"data[""].x"#));
        assert!(!is_ground_data_reference("datax.y"));
    }

    #[test]
    fn a_missing_rule_or_a_syntax_error_fails_at_start() {
        let missing = RegoAuthorizer::new("data.codemode.authz.permit", &modules(POLICY)).err();
        assert_eq!(
            missing.map(|e| e.to_string()).as_deref(),
            Some(
                "rego: no rule defines the decision `data.codemode.authz.permit` (the modules' packages: data.codemode.authz); define it, or name the rule that decides with --policy-decision"
            )
        );
        let other_package = RegoAuthorizer::new(
            DEFAULT_DECISION,
            &modules("package acme.mcp\n\nallow if { true }\n"),
        )
        .err();
        assert_eq!(
            other_package,
            Some(RegoError::Undefined {
                decision: DEFAULT_DECISION.to_owned(),
                flag: "--policy-decision",
                packages: vec!["data.acme.mcp".to_owned()],
            })
        );
        assert!(matches!(
            RegoAuthorizer::new(
                DEFAULT_DECISION,
                &modules("package codemode.authz\nallow if {")
            ),
            Err(RegoError::Module { .. })
        ));
    }

    #[test]
    fn nondeterministic_builtins_and_print_are_refused() {
        let cases = [
            ("allow if { rand.intn(\"x\", 10) == 1 }", "rand.intn", 3, 12),
            ("allow if { time.now_ns() > 0 }", "time.now_ns", 3, 12),
            ("allow if {\n  print(input)\n}", "print", 4, 3),
            ("allow if { http.send({}) }", "http.send", 3, 12),
        ];
        for (rule, builtin, line, col) in cases {
            let source = format!("package codemode.authz\n\n{rule}\n");
            assert_eq!(
                RegoAuthorizer::new(DEFAULT_DECISION, &modules(&source)).err(),
                Some(RegoError::Builtin {
                    file: "policy.rego".into(),
                    line,
                    col,
                    builtin: builtin.into(),
                }),
                "{rule}"
            );
        }
    }

    #[test]
    fn look_alike_references_comments_and_strings_are_not_refused() -> anyhow::Result<()> {
        let source = r#"package codemode.authz

# time.now_ns() would make this flaky
default allow := false

allow if {
    input.time.now_ns == "print(x)"
}
"#;
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(source))?;
        assert_eq!(
            decide(&authorizer, "s", "a.b", no_arguments()),
            Err(AuthzError::Denied)
        );
        Ok(())
    }

    #[test]
    fn modules_load_in_file_name_order() {
        // Both modules are broken; the error names the one first by file name,
        // whatever the order given.
        let modules = vec![
            ("b.rego".to_owned(), "package x\nallow if {".to_owned()),
            (
                "a.rego".to_owned(),
                "package x\nallow if { rand.intn(\"s\", 2) }".to_owned(),
            ),
        ];
        assert!(matches!(
            RegoAuthorizer::new(DEFAULT_DECISION, &modules),
            Err(RegoError::Builtin { file, .. }) if file == "a.rego"
        ));
    }

    #[test]
    fn an_argument_sized_range_is_a_policy_failure_not_an_abort() -> anyhow::Result<()> {
        // Before the bounded builtins: `memory allocation of 48000000000 bytes
        // failed` and SIGABRT, every client losing the server.
        let source = r#"package codemode.authz

allow if {
    count(numbers.range(1, input.arguments.limit)) >= 0
}

allow if {
    count(numbers.range_step(0, input.arguments.step_limit, 2)) == 3
}

allow if {
    replace(input.arguments.text, "", input.arguments.glue) == "-a-"
}
"#;
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(source))?;
        let arguments = |key: &str, value: Value| Value::Dict(vec![(key.into(), value)]);
        assert!(matches!(
            decide(&authorizer, "s", "a.b", arguments("limit", Value::Int(2_000_000_000))),
            Err(AuthzError::Failure(reason)) if reason.contains("numbers.range: 2000000000 elements are more than the 100000 a policy may build")
        ));
        assert_eq!(
            decide(&authorizer, "s", "a.b", arguments("limit", Value::Int(10))),
            Ok(())
        );
        assert!(matches!(
            decide(&authorizer, "s", "a.b", arguments("step_limit", Value::Int(i64::MAX))),
            Err(AuthzError::Failure(reason)) if reason.contains("numbers.range_step: ")
        ));
        assert_eq!(
            decide(
                &authorizer,
                "s",
                "a.b",
                arguments("step_limit", Value::Int(5))
            ),
            Ok(())
        );
        let glue = |text: &str, glue: &str| {
            Value::Dict(vec![
                ("glue".into(), Value::Str(glue.into())),
                ("text".into(), Value::Str(text.into())),
            ])
        };
        assert_eq!(decide(&authorizer, "s", "a.b", glue("a", "-")), Ok(()));
        assert!(matches!(
            decide(&authorizer, "s", "a.b", glue(&"a".repeat(1 << 20), &"-".repeat(1 << 20))),
            Err(AuthzError::Failure(reason)) if reason.contains("replace: a result of")
        ));
        Ok(())
    }

    #[test]
    fn a_sprintf_format_must_be_a_literal() -> anyhow::Result<()> {
        let source =
            "package codemode.authz\n\nallow if {\n  sprintf(input.arguments.f, [1]) == \"1\"\n}\n";
        assert_eq!(
            RegoAuthorizer::new(DEFAULT_DECISION, &modules(source)).err(),
            Some(RegoError::Format {
                file: "policy.rego".into(),
                line: 4,
                col: 3,
            })
        );
        assert_eq!(
            RegoError::Format {
                file: "policy.rego".into(),
                line: 4,
                col: 3,
            }
            .to_string(),
            "rego: module policy.rego:4:3: the format of `sprintf` must be a string literal: a format from the input could pad to any width"
        );
        let literal = "package codemode.authz\n\nallow if {\n  sprintf(\"%d-%s\", [1, input.arguments.s]) == \"1-x\"\n}\n";
        let authorizer = RegoAuthorizer::new(DEFAULT_DECISION, &modules(literal))?;
        let arguments = Value::Dict(vec![("s".into(), Value::Str("x".into()))]);
        assert_eq!(decide(&authorizer, "s", "a.b", arguments), Ok(()));
        Ok(())
    }
}
