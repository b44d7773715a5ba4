//! One OpenAPI service as a [`CapabilitySource`]: a call's bound arguments made
//! into its operation's request at the base URL (path segments and query
//! values percent-encoded, headers checked), sent with the service's
//! credential and the execution's trace context, and its answer read (at most
//! [`MAX_RESPONSE_BYTES`], within the service's timeout and the execution's
//! deadline) into the result.
//!
//! Requests go to the base URL's origin alone: the URL is built from it, and a
//! redirect is followed only within it (at most [`MAX_REDIRECTS`]:
//! [`same_origin_client`]).

use std::sync::Arc;
use std::time::Duration;

use codemode_value::Value;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value as Json};

use super::config::OpenApiAuth;
use super::operations::{BodyKind, Location, Operation, Output, RESULT_FIELD, Style};
#[cfg(doc)]
use super::spec::MAX_REDIRECTS;
use super::spec::same_origin_client;
use crate::budget::{Budget, Nodes, OutOfNodes};
use crate::catalog::Capability;
use crate::error::{
    source_no_credentials_detail, source_refused_credentials_detail, source_unavailable_detail,
    timed_out_detail,
};
use crate::json::values as json;
use crate::secret::Secret;
use crate::source::{Arguments, CallBudget, CallFailure, CallOutcome, Caller, sanitize_message};

/// Largest answer read, in bytes: as an upstream MCP server's largest message.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Most bytes of a failed answer's body quoted in its failure message (the
/// message is cut at 256 bytes anyway).
const QUOTED_BODY_BYTES: usize = 200;

/// Most answer headers in an `{status, headers, text}` result.
const MAX_RESULT_HEADERS: usize = 64;

/// One loaded spec, served.
pub struct OpenApi {
    /// Its configured name (the root of its capabilities).
    name: String,
    /// `openapi <name>`.
    label: String,
    /// Where its requests go.
    base: url::Url,
    client: reqwest::Client,
    timeout: Option<Duration>,
    auth: OpenApiAuth,
    /// The configured headers, checked.
    headers: HeaderMap,
    operations: Vec<Operation>,
    /// The capability of each operation, in the same order.
    capabilities: Vec<Arc<Capability>>,
}

impl OpenApi {
    /// The service `name` at `base`, serving `operations`.
    ///
    /// # Errors
    ///
    /// A header that cannot be sent, or no HTTP client.
    pub fn new(
        name: &str,
        base: url::Url,
        timeout: Option<Duration>,
        auth: OpenApiAuth,
        headers: &std::collections::BTreeMap<String, String>,
        operations: Vec<Operation>,
    ) -> Result<Self, String> {
        let mut checked = HeaderMap::new();
        for (header, value) in headers {
            let header = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| format!("header `{header}` is not a valid header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("header `{header}` has a value that cannot be sent"))?;
            checked.insert(header, value);
        }
        let client = same_origin_client(base.origin())?;
        Ok(Self {
            label: format!("openapi {name}"),
            name: name.to_owned(),
            base,
            client,
            timeout,
            auth,
            headers: checked,
            capabilities: operations.iter().map(|o| o.capability.clone()).collect(),
            operations,
        })
    }

    /// Where its requests go.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    /// How many operations it serves.
    pub fn operation_count(&self) -> usize {
        self.operations.len()
    }

    /// Calls operation `index` with `arguments` (bound by [`json::ToolArguments`]).
    async fn call(&self, index: usize, arguments: Arguments, budget: CallBudget) -> CallOutcome {
        let Some(operation) = self.operations.get(index) else {
            tracing::error!(openapi = %self.name, index, "a call names an operation that is not there");
            return Err(CallFailure::Internal);
        };
        let Some(arguments) = arguments.take::<Map<String, Json>>() else {
            tracing::error!(openapi = %self.name, "the arguments were not bound by the OpenAPI source");
            return Err(CallFailure::Internal);
        };
        let capability = operation.capability.name.as_str();
        let exchange = async {
            let credential = self.credential(&budget).await?;
            let request = self
                .request(operation, arguments, credential.as_ref(), &budget)
                .map_err(|detail| CallFailure::Failed(Some(detail)))?;
            let response = request.send().await.map_err(|error| {
                let reason = super::spec::causes(&error);
                tracing::warn!(openapi = %self.name, capability, %reason, "request failed");
                CallFailure::Failed(Some(source_unavailable_detail(&self.label)))
            })?;
            self.answer(operation, response, credential.is_some(), &budget)
                .await
        };
        match self.timeout {
            Some(timeout) => match tokio::time::timeout(timeout, exchange).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tracing::info!(openapi = %self.name, capability, "call abandoned at the service's timeout");
                    Err(CallFailure::Failed(Some(timed_out_detail(capability))))
                }
            },
            None => exchange.await,
        }
    }

    /// The credential a call sends when it acts for its caller (`forward`,
    /// `token-exchange`); `None` when it sends the operator's, or none.
    async fn credential(&self, budget: &CallBudget) -> Result<Option<Secret>, CallFailure> {
        let audience = match &self.auth {
            OpenApiAuth::None | OpenApiAuth::Bearer(_) | OpenApiAuth::ApiKey { .. } => {
                return Ok(None);
            }
            OpenApiAuth::Forward => None,
            OpenApiAuth::TokenExchange { audience } => Some(audience),
        };
        let Some(Caller { token, exchange }) = &budget.caller else {
            return Err(CallFailure::Failed(Some(source_no_credentials_detail(
                &self.label,
            ))));
        };
        let Some(audience) = audience else {
            return Ok(Some(token.clone()));
        };
        let refused = || CallFailure::Failed(Some(source_refused_credentials_detail(&self.label)));
        let Some(exchange) = exchange else {
            tracing::error!(openapi = %self.name, "auth = \"token-exchange\" without --oauth-client-id: nothing to exchange the caller's token with");
            return Err(refused());
        };
        exchange
            .exchange(token, audience)
            .await
            .map(Some)
            .map_err(|reason| {
                tracing::warn!(openapi = %self.name, %reason, "token exchange failed");
                refused()
            })
    }

    /// The request of one call.
    ///
    /// # Errors
    ///
    /// An argument that cannot be sent where it goes (a header value with a
    /// line break).
    fn request(
        &self,
        operation: &Operation,
        mut arguments: Map<String, Json>,
        credential: Option<&Secret>,
        budget: &CallBudget,
    ) -> Result<reqwest::RequestBuilder, String> {
        let mut url = path_url(&self.base, operation, &arguments)?;
        let mut headers = HeaderMap::new();
        {
            let mut query = url.query_pairs_mut();
            for param in &operation.params {
                let Some(value) = arguments.get(&param.argument) else {
                    continue;
                };
                match (param.location, value) {
                    (Location::Path, _) | (_, Json::Null) => {}
                    (Location::Query, value) => {
                        for (name, value) in query_pairs(param, value) {
                            query.append_pair(&name, &value);
                        }
                    }
                    (Location::Header, value) => {
                        let name = HeaderName::from_bytes(param.name.as_bytes()).map_err(|_| {
                            format!("header parameter `{}` cannot be sent", param.name)
                        })?;
                        let value = HeaderValue::from_str(&simple(value, param.explode)).map_err(|_| {
                            format!(
                                "the value of `{}` cannot be sent in a header (a line break or a control character)",
                                param.argument
                            )
                        })?;
                        headers.insert(name, value);
                    }
                }
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let mut request = self.client.request(operation.method.clone(), url);
        match &operation.body {
            None => {}
            Some(body) => {
                let payload = match &body.kind {
                    BodyKind::Properties(pairs) => {
                        let object: Map<String, Json> = pairs
                            .iter()
                            .filter_map(|(argument, property)| {
                                let value = arguments.remove(argument)?;
                                (!value.is_null()).then(|| (property.clone(), value))
                            })
                            .collect();
                        (!object.is_empty() || body.required)
                            .then(|| serde_json::to_vec(&Json::Object(object)).ok())
                            .flatten()
                    }
                    BodyKind::Json => arguments
                        .remove(super::operations::BODY_ARGUMENT)
                        .and_then(|value| serde_json::to_vec(&value).ok()),
                    BodyKind::Text => match arguments.remove(super::operations::BODY_ARGUMENT) {
                        Some(Json::String(text)) => Some(text.into_bytes()),
                        _ => None,
                    },
                };
                if let Some(payload) = payload {
                    request = request
                        .header(reqwest::header::CONTENT_TYPE, body.media_type.as_str())
                        .body(payload);
                }
            }
        }
        // The operator's headers over any parameter of the same name.
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers
            .entry(reqwest::header::ACCEPT)
            .or_insert(HeaderValue::from_static("application/json, */*;q=0.5"));
        match (&self.auth, credential) {
            (_, Some(token)) | (OpenApiAuth::Bearer(token), None) => {
                let value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| "the credential cannot be sent in a header".to_owned())?;
                headers.insert(reqwest::header::AUTHORIZATION, sensitive(value));
            }
            (OpenApiAuth::ApiKey { header, key }, None) => {
                let name = HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| format!("api-key-header `{header}` is not a header name"))?;
                let value = HeaderValue::from_str(key.expose())
                    .map_err(|_| "the API key cannot be sent in a header".to_owned())?;
                headers.insert(name, sensitive(value));
            }
            (
                OpenApiAuth::None | OpenApiAuth::Forward | OpenApiAuth::TokenExchange { .. },
                None,
            ) => {}
        }
        // The service's work joins the execution's trace (W3C Trace Context).
        if let Some(trace) = &budget.trace {
            if let Ok(value) = HeaderValue::from_str(&trace.traceparent) {
                headers.insert("traceparent", value);
            }
            if let Some(state) = &trace.tracestate
                && let Ok(value) = HeaderValue::from_str(state)
            {
                headers.insert("tracestate", value);
            }
        }
        Ok(request.headers(headers))
    }

    /// The answer of one call as its result, or its failure.
    async fn answer(
        &self,
        operation: &Operation,
        mut response: reqwest::Response,
        acting: bool,
        budget: &CallBudget,
    ) -> CallOutcome {
        let status = response.status();
        let too_large = || {
            CallFailure::Failed(Some(format!(
                "{} sent an answer over {} MiB",
                self.label,
                MAX_RESPONSE_BYTES >> 20
            )))
        };
        if response
            .content_length()
            .is_some_and(|len| len > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let headers = response.headers().clone();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(openapi = %self.name, reason = %error, "reading an answer failed");
                    return Err(CallFailure::Failed(Some(source_unavailable_detail(
                        &self.label,
                    ))));
                }
            }
        }
        if !status.is_success() {
            if acting && matches!(status.as_u16(), 401 | 403) {
                return Err(CallFailure::Failed(Some(
                    source_refused_credentials_detail(&self.label),
                )));
            }
            let quoted = quote(&body);
            let detail = if quoted.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {quoted}")
            };
            return Err(CallFailure::Failed(sanitize_message(&detail)));
        }
        let media = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let exhausted = CallFailure::Exhausted;
        match &operation.output {
            Output::Text => {
                text_result(status.as_u16(), &headers, &body, budget).map_err(exhausted)
            }
            Output::Record(_) | Output::Wrapped => {
                let json: Json = if body.iter().all(u8::is_ascii_whitespace) {
                    Json::Null
                } else {
                    // Counted before it is built: a 16 MiB `[[],[],...]` is
                    // 5 million values, several hundred MB parsed.
                    match count(&body, budget.max_nodes, budget.max_depth) {
                        Ok(()) => {}
                        Err(Some(exhausted)) => return Err(CallFailure::Exhausted(exhausted)),
                        // Not JSON: said below, by the parse.
                        Err(None) => {}
                    }
                    serde_json::from_slice(&body).map_err(|_| {
                        let shown = if media.is_empty() {
                            "no media type"
                        } else {
                            media
                        };
                        CallFailure::Failed(sanitize_message(&format!(
                            "HTTP {status} answered {shown}, not JSON: {}",
                            quote(&body)
                        )))
                    })?
                };
                match (&operation.output, json) {
                    (Output::Record(fields), Json::Object(members)) => {
                        json::result(fields, members, budget.max_depth, budget.max_nodes)
                            .map_err(exhausted)
                    }
                    (Output::Record(fields), Json::Null) => {
                        json::result(fields, Map::new(), budget.max_depth, budget.max_nodes)
                            .map_err(exhausted)
                    }
                    (Output::Record(_), other) => Err(CallFailure::Failed(Some(format!(
                        "HTTP {status} answered a JSON {} where its description says an object",
                        kind(&other)
                    )))),
                    (_, json) => {
                        let mut nodes = Nodes::new(budget.max_nodes);
                        nodes
                            .charge(1)
                            .map_err(|OutOfNodes| Budget::ValueBytes)
                            .map_err(exhausted)?;
                        let value = json::from_json(json, budget.max_depth, 2, &mut nodes)
                            .map_err(exhausted)?;
                        Ok(Value::Dict(vec![(RESULT_FIELD.to_owned(), value)]))
                    }
                }
            }
        }
    }
}

/// The URL of one call of `operation`: `base` with the operation's path, each
/// `{name}` filled with its argument and each segment percent-encoded; a value
/// that would leave its segment (empty, `.`, `..`, a control character) is
/// refused, and so is any URL not under `base`.
///
/// # Errors
///
/// The argument that cannot be a path segment.
fn path_url(
    base: &url::Url,
    operation: &Operation,
    arguments: &Map<String, Json>,
) -> Result<url::Url, String> {
    let mut url = base.clone();
    {
        let Ok(mut segments) = url.path_segments_mut() else {
            return Err(format!("the base URL {} cannot have a path", base));
        };
        segments.pop_if_empty();
        let template = operation.path.strip_prefix('/').unwrap_or(&operation.path);
        for template in template.split('/') {
            let mut segment = template.to_owned();
            for param in operation
                .params
                .iter()
                .filter(|p| p.location == Location::Path)
            {
                let placeholder = format!("{{{}}}", param.name);
                if segment.contains(&placeholder) {
                    let value = arguments
                        .get(&param.argument)
                        .map_or(String::new(), |value| simple(value, param.explode));
                    // A value stays inside its segment: never empty, a
                    // dot segment, or a control character (which the
                    // URL parser drops, making `..` of `.\t.`).
                    if value.is_empty()
                        || value == "."
                        || value == ".."
                        || value.chars().any(char::is_control)
                    {
                        return Err(format!(
                            "the value of `{}` cannot be a path segment (empty, `.`, `..` or a control character)",
                            param.argument
                        ));
                    }
                    segment = segment.replace(&placeholder, &value);
                }
            }
            if segment == "." || segment == ".." {
                return Err(format!(
                    "the path of {} cannot be made of its arguments",
                    operation.capability.name.as_str()
                ));
            }
            segments.push(&segment);
        }
    }
    // Whatever the arguments, the request stays under the base URL.
    if url.origin() != base.origin() || !url.path().starts_with(base.path().trim_end_matches('/')) {
        return Err(format!(
            "the arguments of {} lead outside the service's base URL",
            operation.capability.name.as_str()
        ));
    }
    Ok(url)
}

/// Checks that the JSON `text` holds at most `max_nodes` values (each scalar
/// and each container, as the result's node budget charges them; object keys
/// are not values) nested at most `max_depth` deep, without building it.
///
/// # Errors
///
/// The budget it would exceed; `None` when it is not JSON.
fn count(text: &[u8], max_nodes: usize, max_depth: usize) -> Result<(), Option<Budget>> {
    use serde::de::DeserializeSeed;
    let exceeded = std::cell::Cell::new(None);
    let nodes = std::cell::Cell::new(0usize);
    let seed = Count {
        nodes: &nodes,
        exceeded: &exceeded,
        max_nodes,
        depth: 1,
        max_depth,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let counted = seed
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end());
    match (counted, exceeded.get()) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(budget)) => Err(Some(budget)),
        // serde_json's own nesting limit (128) is past any depth we count to
        // below it.
        (Err(error), None) if error.to_string().contains("recursion limit") => {
            Err(Some(Budget::ValueDepth))
        }
        (Err(_), None) => Err(None),
    }
}

/// One value of [`count`]'s walk, at `depth`.
#[derive(Clone, Copy)]
struct Count<'c> {
    nodes: &'c std::cell::Cell<usize>,
    exceeded: &'c std::cell::Cell<Option<Budget>>,
    max_nodes: usize,
    depth: usize,
    max_depth: usize,
}

impl Count<'_> {
    /// Charges one value.
    fn charge<E: serde::de::Error>(self) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        self.nodes.set(nodes);
        if nodes > self.max_nodes {
            self.exceeded.set(Some(Budget::ValueBytes));
            return Err(E::custom("too many values"));
        }
        if self.depth > self.max_depth {
            self.exceeded.set(Some(Budget::ValueDepth));
            return Err(E::custom("too deep"));
        }
        Ok(())
    }

    /// The walk one level down.
    fn deeper(self) -> Self {
        Self {
            depth: self.depth + 1,
            ..self
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.charge()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.charge()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.charge()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.charge()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.charge()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.charge()
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        self.charge()?;
        while items.next_element_seed(self.deeper())?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut members: A) -> Result<(), A::Error> {
        self.charge()?;
        while members.next_key::<serde::de::IgnoredAny>()?.is_some() {
            members.next_value_seed(self.deeper())?;
        }
        Ok(())
    }
}

/// An `{status, headers, text}` result.
fn text_result(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    budget: &CallBudget,
) -> Result<Value, Budget> {
    let mut nodes = Nodes::new(budget.max_nodes);
    let mut shown: Vec<(String, Value)> = Vec::new();
    for (name, value) in headers {
        if shown.len() >= MAX_RESULT_HEADERS || name == reqwest::header::SET_COOKIE {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match shown.iter_mut().find(|(n, _)| n == name.as_str()) {
            Some((_, Value::Str(joined))) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => shown.push((name.as_str().to_owned(), Value::Str(value))),
        }
    }
    shown.sort_by(|a, b| a.0.cmp(&b.0));
    nodes
        .charge(4 + shown.len())
        .map_err(|OutOfNodes| Budget::ValueBytes)?;
    if budget.max_depth < 2 && !shown.is_empty() {
        return Err(Budget::ValueDepth);
    }
    Ok(Value::Dict(vec![
        ("headers".to_owned(), Value::Dict(shown)),
        ("status".to_owned(), Value::Int(i64::from(status))),
        (
            "text".to_owned(),
            Value::Str(String::from_utf8_lossy(body).into_owned()),
        ),
    ]))
}

/// The first bytes of a body, made one printable line.
fn quote(body: &[u8]) -> String {
    let end = body.len().min(QUOTED_BODY_BYTES);
    let text = String::from_utf8_lossy(&body[..end]);
    let mut line = crate::catalog::one_line(&text, QUOTED_BODY_BYTES);
    if body.len() > end && !line.ends_with("...") {
        line.push_str("...");
    }
    line
}

/// A JSON value's kind, as a message names it.
fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// A credential's header value, marked so that no log of the client shows it.
fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// The query pairs of one parameter's value, as its style says: `form`
/// (exploded: a list repeated, an object's members as pairs of their own),
/// `spaceDelimited` and `pipeDelimited` lists, `deepObject` objects as
/// `name[key]=value`.
fn query_pairs(param: &super::operations::Param, value: &Json) -> Vec<(String, String)> {
    let one = |text: String| vec![(param.name.clone(), text)];
    match (param.style, value) {
        (Style::DeepObject, Json::Object(members)) => members
            .iter()
            .filter(|(_, member)| !member.is_null())
            .map(|(key, member)| (format!("{}[{key}]", param.name), plain(member)))
            .collect(),
        (_, Json::Array(items)) if param.explode => items
            .iter()
            .map(|item| (param.name.clone(), plain(item)))
            .collect(),
        (Style::SpaceDelimited, Json::Array(items)) => {
            one(items.iter().map(plain).collect::<Vec<_>>().join(" "))
        }
        (Style::PipeDelimited, Json::Array(items)) => {
            one(items.iter().map(plain).collect::<Vec<_>>().join("|"))
        }
        (Style::Form, Json::Object(members)) if param.explode => members
            .iter()
            .filter(|(_, member)| !member.is_null())
            .map(|(key, member)| (key.clone(), plain(member)))
            .collect(),
        (_, value) => one(plain(value)),
    }
}

/// A path or header value in the `simple` style: as [`plain`], but an object
/// exploded is `key=value` pairs joined with commas.
fn simple(value: &Json, explode: bool) -> String {
    match value {
        Json::Object(members) if explode => members
            .iter()
            .filter(|(_, member)| !member.is_null())
            .map(|(key, member)| format!("{key}={}", plain(member)))
            .collect::<Vec<_>>()
            .join(","),
        _ => plain(value),
    }
}

/// A parameter's value as text (the `simple` and `form` styles): a string as it
/// is, a list joined with commas, an object as `key,value` pairs, `null` empty.
fn plain(value: &Json) -> String {
    match value {
        Json::Null => String::new(),
        Json::String(text) => text.clone(),
        Json::Bool(_) | Json::Number(_) => value.to_string(),
        Json::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(","),
        Json::Object(members) => members
            .iter()
            .filter(|(_, member)| !member.is_null())
            .flat_map(|(key, member)| [key.clone(), plain(member)])
            .collect::<Vec<_>>()
            .join(","),
    }
}

json::shared_json_source!(OpenApi, OpenApiSession);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_values_stay_in_their_segment_under_the_base_url() {
        use crate::openapi::operations::operations;
        use crate::openapi::{OpenApiAuth, OpenApiConfig, SpecLocation};
        let serde_json::Value::Object(document) = serde_json::json!({
            "openapi": "3.1.0",
            "paths": {"/{category}/{item}/": {"get": {"operationId": "get", "parameters": [
                {"name": "category", "in": "path", "schema": {"type": "string"}},
                {"name": "item", "in": "path", "schema": {"type": "string"}},
            ], "responses": {}}}},
        }) else {
            unreachable!("an object")
        };
        let config = OpenApiConfig {
            name: "shop".to_owned(),
            spec: SpecLocation::File("unused".into()),
            base_url: None,
            include: Vec::new(),
            exclude: Vec::new(),
            timeout: None,
            auth: OpenApiAuth::None,
            headers: Default::default(),
        };
        let built =
            operations(&config, &document, &crate::json::schema::Stop::default()).expect("built");
        let base = url::Url::parse("https://gw.example.com/shop").expect("a URL");
        let url = |category: &str, item: &str| {
            let arguments = serde_json::json!({"category": category, "item": item});
            let serde_json::Value::Object(arguments) = arguments else {
                unreachable!("an object")
            };
            path_url(&base, &built.operations[0], &arguments).map(|url| url.to_string())
        };
        assert_eq!(
            url("a b/c", "?x#y%2F"),
            Ok("https://gw.example.com/shop/a%20b%2Fc/%3Fx%23y%252F/".to_owned())
        );
        let refused = "the value of `category` cannot be a path segment (empty, `.`, `..` or a control character)";
        for category in ["..", ".", "", "..\t", ".\n.", "\r"] {
            assert_eq!(
                url(category, "admin"),
                Err(refused.to_owned()),
                "{category:?}"
            );
        }
    }

    #[test]
    fn answers_are_counted_as_the_result_budget_charges_them_before_they_are_built() {
        assert_eq!(count(br#"{"a":[],"b":[],"c":[]}"#, 4, 2), Ok(()));
        assert_eq!(
            count(br#"{"a":[],"b":[],"c":[]}"#, 3, 2),
            Err(Some(Budget::ValueBytes))
        );
        assert_eq!(count(br#"[1, 2]"#, 3, 2), Ok(()));
        assert_eq!(count(br#"[[[1]]]"#, 10, 3), Err(Some(Budget::ValueDepth)));
        assert_eq!(count(br#"[[[1]]]"#, 10, 4), Ok(()));
        // 300,000 empty lists: refused at the first past the budget.
        let many = format!("[{}[]]", "[],".repeat(300_000));
        assert_eq!(
            count(many.as_bytes(), 250_000, 32),
            Err(Some(Budget::ValueBytes))
        );
        assert_eq!(count(b"<html>{[,,,]}</html>", 3, 2), Err(None));
        assert_eq!(count(b"[1] trailing", 10, 2), Err(None));
        assert_eq!(
            simple(&serde_json::json!({"a": 1, "b": "x"}), true),
            "a=1,b=x"
        );
        assert_eq!(
            simple(&serde_json::json!({"a": 1, "b": "x"}), false),
            "a,1,b,x"
        );
    }

    #[test]
    fn query_values_are_written_as_their_style_says() {
        use crate::openapi::operations::Param;
        let param = |style, explode| Param {
            argument: "f".to_owned(),
            name: "f".to_owned(),
            location: Location::Query,
            style,
            explode,
        };
        let pairs = |style, explode, value: Json| {
            query_pairs(&param(style, explode), &value)
                .into_iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
        };
        let list = serde_json::json!(["a", 1]);
        let object = serde_json::json!({"state": "open", "skip": null, "n": 2});
        assert_eq!(pairs(Style::Form, true, list.clone()), ["f=a", "f=1"]);
        assert_eq!(pairs(Style::Form, false, list.clone()), ["f=a,1"]);
        assert_eq!(pairs(Style::SpaceDelimited, false, list.clone()), ["f=a 1"]);
        assert_eq!(pairs(Style::PipeDelimited, false, list), ["f=a|1"]);
        assert_eq!(
            pairs(Style::Form, true, object.clone()),
            ["state=open", "n=2"]
        );
        assert_eq!(
            pairs(Style::Form, false, object.clone()),
            ["f=state,open,n,2"]
        );
        assert_eq!(
            pairs(Style::DeepObject, true, object),
            ["f[state]=open", "f[n]=2"]
        );
        assert_eq!(
            pairs(Style::Form, true, serde_json::json!(true)),
            ["f=true"]
        );
    }

    #[test]
    fn values_are_written_in_the_simple_style_and_bodies_quoted_printably() {
        assert_eq!(plain(&serde_json::json!("a b")), "a b");
        assert_eq!(plain(&serde_json::json!([1, true, "x"])), "1,true,x");
        assert_eq!(plain(&serde_json::json!({"k": 1, "l": "v"})), "k,1,l,v");
        assert_eq!(plain(&Json::Null), "");
        assert_eq!(
            quote(b"{\"detail\":\n\"Not\x1b found\"}"),
            "{\"detail\": \"Not found\"}"
        );
        assert_eq!(quote(&[b'x'; 300]).len(), QUOTED_BODY_BYTES + 3);
    }
}
