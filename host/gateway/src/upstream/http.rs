//! The Streamable HTTP transport of an upstream: rmcp's reqwest client, with an
//! answer of our own for a result over the limit.
//!
//! rmcp refuses a JSON body over `max_json_response_size` and an SSE event over
//! `max_sse_event_size` without reading the rest, but as a transport error: the
//! call learns only that the upstream is unavailable. Here each refusal of a
//! request's answer becomes a made-up JSON-RPC error answering that request
//! ([`OVERSIZED_CODE`], as [`super::lines`] makes for stdio), so the one call fails
//! at once saying why and the session serves on. Both limits are
//! [`MAX_MESSAGE_BYTES`], the same as a stdio upstream's.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::FixedInterval;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::bounds::{MAX_MESSAGE_BYTES, MAX_MESSAGE_TEXT, OVERSIZED_CODE, made_up_error};
use super::credentials::{Credentials, REFUSED_CODE};
use crate::secret::Secret;

/// How rmcp's error for an SSE event over its limit begins (its error type is
/// private, so the text is all there is to tell it by, until rmcp takes the
/// change in docs/rmcp-patches.md; the end-to-end test of an oversized SSE answer
/// fails if a new rmcp words it otherwise).
const EVENT_TOO_LARGE: &str = "SSE event exceeded the maximum size";

/// rmcp's reqwest client, answering for an oversized result (see the module's
/// documentation), and sending each call's own credential when it has one
/// ([`Credentials`]).
#[derive(Clone)]
pub struct Bounded {
    client: reqwest::Client,
    credentials: Option<Arc<Credentials>>,
}

/// A Streamable HTTP transport to `url`: TLS through rustls with the WebPKI roots,
/// `bearer_token` and `headers` on every request (a call's credential lent to
/// `credentials` in place of `bearer_token`), answers bounded as a stdio
/// upstream's are.
///
/// # Errors
///
/// A header that is not a valid HTTP header, or a client that cannot be built.
pub fn transport(
    url: &str,
    bearer_token: Option<&Secret>,
    headers: &BTreeMap<String, String>,
    credentials: Option<Arc<Credentials>>,
) -> Result<StreamableHttpClientTransport<Bounded>, String> {
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(crate::tls::client_config()?)
        .build()
        .map_err(|error| format!("HTTP client: {error}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    config.auth_header = bearer_token.map(|token| token.expose().to_owned());
    if credentials.is_some() {
        // rmcp resumes a dropped answer stream with a GET carrying the
        // session's credential, which must not fetch a caller's result: an
        // upstream acting for its callers gets no resumption (the call fails
        // as unavailable instead).
        let mut never = FixedInterval::default();
        never.max_times = Some(0);
        config.retry_config = Arc::new(never);
    }
    config.max_json_response_size = MAX_MESSAGE_BYTES;
    config.max_sse_event_size = MAX_MESSAGE_BYTES;
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header `{name}` is not a valid header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("header `{name}` has a value that cannot be sent"))?;
        config.custom_headers.insert(header, value);
    }
    Ok(StreamableHttpClientTransport::with_client(
        Bounded {
            client,
            credentials,
        },
        config,
    ))
}

/// rmcp's transport calls `post_message_with_response_limits` and
/// `get_stream_with_max_sse_event_size` (whose default comes to `get_stream`);
/// the other methods are the trait's required ones, kept on the same path.
impl StreamableHttpClient for Bounded {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            ClientJsonRpcMessage::Notification(_)
            | ClientJsonRpcMessage::Response(_)
            | ClientJsonRpcMessage::Error(_) => None,
        };
        let mut message = message;
        let mut custom_headers = custom_headers;
        trace_headers(&message, &mut custom_headers);
        // A call acting for its caller carries the caller's credential, or none
        // (its call ended meanwhile): never the session's.
        let credential = self
            .credentials
            .as_ref()
            .and_then(|credentials| credentials.take(&mut message));
        let acts_for_caller = credential.is_some();
        let auth_header = match credential {
            Some(token) => token.map(|token| token.expose().to_owned()),
            None => auth_header,
        };
        async move {
            let answer = self
                .client
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await;
            let Some(id) = request else {
                return answer;
            };
            match answer {
                Err(error) if acts_for_caller && refused(&error) => {
                    match made_up(
                        &id,
                        REFUSED_CODE,
                        "the upstream refused the caller's credentials",
                    ) {
                        Some(made_up) => Ok(StreamableHttpPostResponse::Json(made_up, None)),
                        None => Err(error),
                    }
                }
                Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                    match oversized(&id) {
                        Some(made_up) => Ok(StreamableHttpPostResponse::Json(made_up, None)),
                        None => Err(StreamableHttpError::ResponseBodyTooLarge { max_size }),
                    }
                }
                Ok(StreamableHttpPostResponse::Sse(events, session)) => Ok(
                    StreamableHttpPostResponse::Sse(bounded_events(events, id), session),
                ),
                other => other,
            }
        }
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<Self::Error>>> + Send + '_ {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
    + '_ {
        // The trait's `get_stream_with_max_sse_event_size`, which the transport
        // calls, comes here: the limit is ours, the one the transport's
        // config names too.
        self.client.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            MAX_MESSAGE_BYTES,
        )
    }
}

/// The made-up answer to request `id` whose result was over the limit.
fn oversized(id: &RequestId) -> Option<ServerJsonRpcMessage> {
    made_up(
        id,
        OVERSIZED_CODE,
        &format!("the result is over {MAX_MESSAGE_TEXT}"),
    )
}

/// A made-up error answering request `id` with `code` and `detail`.
fn made_up(id: &RequestId, code: i32, detail: &str) -> Option<ServerJsonRpcMessage> {
    let id = serde_json::to_string(id).ok()?;
    made_up_error(&id, code, detail)
}

/// Whether `error` is the upstream refusing a request's credential: HTTP 401
/// or 403, with a challenge or without (rmcp's text is then all there is, until
/// it takes the change in docs/rmcp-patches.md; a unit test pins the text).
fn refused<E: std::error::Error + Send + Sync + 'static>(error: &StreamableHttpError<E>) -> bool {
    match error {
        StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_) => true,
        StreamableHttpError::HttpStatus(status) => matches!(status.status, 401 | 403),
        StreamableHttpError::UnexpectedServerResponse(text) => {
            text.starts_with("HTTP 401") || text.starts_with("HTTP 403")
        }
        _ => false,
    }
}

/// `message` as an SSE event, its data the JSON-RPC message.
fn event_of(message: &ServerJsonRpcMessage) -> Option<Sse> {
    Some(Sse {
        event: None,
        data: Some(serde_json::to_string(message).ok()?),
        id: None,
        retry: None,
    })
}

/// A tool call's trace context (the `_meta` the upstream source put in) as the
/// W3C headers too, for servers and proxies that read traces from headers.
#[allow(clippy::mutable_key_type)] // header names are not mutated
fn trace_headers(message: &ClientJsonRpcMessage, headers: &mut HashMap<HeaderName, HeaderValue>) {
    let ClientJsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return;
    };
    let Some(meta) = &call.params.meta else {
        return;
    };
    for (name, value) in [
        (crate::source::TRACEPARENT, meta.get_traceparent()),
        (crate::source::TRACESTATE, meta.get_tracestate()),
    ] {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

/// `events` (the SSE answer to request `id`) with rmcp's refusal of an event over
/// the limit replaced by the made-up answer to `id`, after which the stream ends.
fn bounded_events(
    events: BoxStream<'static, Result<Sse, SseError>>,
    id: RequestId,
) -> BoxStream<'static, Result<Sse, SseError>> {
    events
        .scan(false, move |ended, event| {
            if *ended {
                return std::future::ready(None);
            }
            let event = match event {
                Err(SseError::Body(error)) if error.to_string().starts_with(EVENT_TOO_LARGE) => {
                    *ended = true;
                    match oversized(&id).as_ref().and_then(event_of) {
                        Some(made_up) => Ok(made_up),
                        None => Err(SseError::Body(error)),
                    }
                }
                other => other,
            };
            std::future::ready(Some(event))
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures::stream;

    /// An SSE event with `data`.
    fn event(data: &str) -> Sse {
        Sse {
            event: None,
            data: Some(data.to_owned()),
            id: None,
            retry: None,
        }
    }

    /// The data of each item of `events`, or its error's text.
    fn drain(events: BoxStream<'static, Result<Sse, SseError>>) -> Vec<String> {
        let items: Vec<_> = futures::executor::block_on(events.collect());
        items
            .into_iter()
            .map(|item| match item {
                Ok(sse) => sse.data.unwrap_or_default(),
                Err(error) => format!("error: {error}"),
            })
            .collect()
    }

    #[test]
    #[allow(clippy::mutable_key_type)] // header names are not mutated
    fn a_tool_call_s_trace_context_goes_into_its_headers() {
        use rmcp::model::{CallToolRequestParams, Request, RequestMetaObject};
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let call = |meta: Option<RequestMetaObject>| {
            let mut params = CallToolRequestParams::new("echo");
            params.meta = meta;
            ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(Request::new(params)),
                RequestId::Number(1),
            )
        };
        let mut meta = RequestMetaObject::new();
        meta.set_traceparent(parent);
        meta.set_tracestate("vendor=x1");
        // An operator's header of the same name is the call's own now.
        let mut headers = HashMap::new();
        headers.insert(
            HeaderName::from_static("traceparent"),
            HeaderValue::from_static("configured"),
        );
        trace_headers(&call(Some(meta)), &mut headers);
        assert_eq!(headers.len(), 2);
        assert_eq!(headers[&HeaderName::from_static("traceparent")], parent);
        assert_eq!(headers[&HeaderName::from_static("tracestate")], "vendor=x1");
        // No context, no headers.
        let mut headers = HashMap::new();
        trace_headers(&call(None), &mut headers);
        assert!(headers.is_empty());
    }

    #[test]
    fn an_event_over_the_limit_becomes_the_made_up_answer_and_ends_the_stream() {
        let too_large: Box<dyn std::error::Error + Send + Sync> =
            format!("{EVENT_TOO_LARGE} of 16777216 bytes").into();
        let events = stream::iter(vec![
            Ok(event("before")),
            Err(SseError::Body(too_large)),
            Ok(event("after")),
        ])
        .boxed();
        let got = drain(bounded_events(events, RequestId::Number(7)));
        assert_eq!(
            got,
            vec![
                "before".to_owned(),
                format!(
                    r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":-32090,"message":"the result is over 16 MiB","data":"{}"}}}}"#,
                    super::super::bounds::made_up_marker()
                ),
            ]
        );
    }

    /// What rmcp's reqwest client makes of a POST answered with `response` by a
    /// loopback server.
    async fn post_answered_with(
        response: &'static str,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let (mut connection, _) = listener.accept().await?;
            let mut request = vec![0u8; 64 * 1024];
            let _ = connection.read(&mut request).await?;
            connection.write_all(response.as_bytes()).await?;
            connection.shutdown().await
        });
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::client_config().expect("TLS"))
            .build()
            .expect("client");
        let ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(rmcp::model::PingRequest::default()),
            RequestId::Number(1),
        );
        let answer = client
            .post_message_with_response_limits(
                url.into(),
                ping,
                None,
                None,
                HashMap::new(),
                StreamableHttpResponseLimits::default(),
            )
            .await;
        let _ = server.await;
        answer
    }

    /// rmcp gives a refusal without a challenge only as text: this pins the text
    /// (see docs/rmcp-patches.md).
    #[tokio::test]
    async fn a_refusal_is_told_with_a_challenge_or_without() {
        for (response, is_refused) in [
            (
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope",
                true,
            ),
            (
                "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                true,
            ),
            (
                "HTTP/1.1 403 Forbidden\r\nwww-authenticate: Bearer error=\"insufficient_scope\", scope=\"a\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                true,
            ),
            (
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                false,
            ),
            (
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                false,
            ),
        ] {
            let answer = post_answered_with(response).await;
            let error = match answer {
                Err(error) => error,
                Ok(_) => panic!("{response}: answered"),
            };
            assert_eq!(refused(&error), is_refused, "{response}: {error:?}");
        }
    }

    #[test]
    fn other_stream_errors_pass_as_they_are() {
        let other: Box<dyn std::error::Error + Send + Sync> = "connection reset".into();
        let events = stream::iter(vec![Err(SseError::Body(other)), Ok(event("next"))]).boxed();
        let got = drain(bounded_events(events, RequestId::Number(7)));
        assert_eq!(
            got,
            vec![
                "error: body error: connection reset".to_owned(),
                "next".to_owned()
            ]
        );
    }
}
