//! What an upstream's answer may be, on either transport, and the answer made up
//! for a request whose answer is more: the call fails at once saying why, and the
//! session serves on.

use rmcp::RoleClient;
use rmcp::service::RxJsonRpcMessage;
use serde_json::Value as Json;

/// The largest message an upstream may send: a longer one is answered with an
/// error, not read (rmcp's own default, for both transports).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The limit's text in the error a call gets.
pub const MAX_MESSAGE_TEXT: &str = "16 MiB";

/// The deepest nesting of a message read as is (serde's own limit is 128).
pub const MAX_MESSAGE_DEPTH: usize = 100;

/// The most values (each object, array, string, number, boolean and null) one
/// message may hold: parsed, each costs far more than its text (a 16 MiB line of
/// `{"a":0},` made more than 1 GB of maps).
pub const MAX_MESSAGE_VALUES: usize = 250_000;

/// The JSON-RPC error code of the answer made up for a result over
/// [`MAX_MESSAGE_BYTES`] (in the range JSON-RPC leaves to implementations).
pub const OVERSIZED_CODE: i32 = -32_090;

/// The JSON-RPC error code of the answer made up for a result nested deeper than
/// [`MAX_MESSAGE_DEPTH`] or holding more than [`MAX_MESSAGE_VALUES`] values.
pub const TOO_DEEP_CODE: i32 = -32_091;

/// The `data` of a made-up answer: an upstream's own error may use the same code,
/// but never carries this marker from this process.
pub fn made_up_marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| {
        let mut random = [0u8; 16];
        let _ = getrandom::fill(&mut random);
        format!("codemode-host/{}", blake3::hash(&random).to_hex())
    })
}

/// The made-up error answering the request whose ID is the JSON text `id`, or
/// `None` when `id` is not JSON.
pub fn made_up_answer(id: &str, code: i32, message: &str) -> Option<Json> {
    let id: Json = serde_json::from_str(id).ok()?;
    Some(serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message, "data": made_up_marker()},
    }))
}

/// [`made_up_answer`] as the message rmcp's client receives, or `None` when `id`
/// is not a JSON-RPC request ID.
pub fn made_up_error(id: &str, code: i32, message: &str) -> Option<RxJsonRpcMessage<RoleClient>> {
    serde_json::from_value(made_up_answer(id, code, message)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_errors_answer_the_request() {
        let message = made_up_error("\"q-1\"", OVERSIZED_CODE, "the result is over 16 MiB");
        let text = serde_json::to_string(&message).unwrap_or_default();
        assert_eq!(
            text,
            format!(
                r#"{{"jsonrpc":"2.0","id":"q-1","error":{{"code":-32090,"message":"the result is over 16 MiB","data":"{}"}}}}"#,
                made_up_marker()
            )
        );
        assert!(made_up_marker().starts_with("codemode-host/"));
        assert!(made_up_error("not json", OVERSIZED_CODE, "x").is_none());
        assert!(made_up_error("[1]", OVERSIZED_CODE, "x").is_none());
    }
}
