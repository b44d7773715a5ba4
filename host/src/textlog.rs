//! The text log format's fields, escaped: a value that comes from outside (an
//! upstream's error message, a Rego error, a plugin's file name) cannot start a
//! line of its own or send terminal escapes.
//!
//! The default formatter writes a `%value` field with its `Display` text as is, so
//! an upstream error message `x\n2026-12-05T00:00:00Z ERROR forged` became two log
//! lines. Here every field is written as the default formatter would
//! (`message key=value key="text"`), with each control character of its text
//! written as its escape (`\n`, `\u{1b}`). The JSON format escapes by itself.

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// The field formatter of the text format.
pub(crate) fn escaped_fields() -> impl for<'writer> FormatFields<'writer> + 'static {
    debug_fn(|writer: &mut Writer<'_>, field, value| {
        let text = escape_controls(&format!("{value:?}"));
        match field.name() {
            "message" => writer.write_str(&text),
            name => write!(writer, "{name}={text}"),
        }
    })
    .delimited(" ")
}

/// `text` with every control character written as its Rust escape.
fn escape_controls(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_debug());
        } else {
            escaped.push(c);
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn control_characters_in_any_field_are_escaped_and_the_rest_reads_as_before() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(escaped_fields())
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .finish();
        let forged = "no\n2026-12-05T00:00:00Z ERROR forged\u{1b}[2J";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(upstream = %"h", reason = %forged, code = -32000, quoted = ?"a\tb", cause = "SIGHUP", "upstream call failed");
            tracing::info!("plain {}", "message\r");
        });
        let text = String::from_utf8_lossy(
            &buffer
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned();
        assert_eq!(
            text,
            " WARN upstream call failed upstream=h reason=no\\n2026-12-05T00:00:00Z ERROR forged\\u{1b}[2J code=-32000 quoted=\"a\\tb\" cause=\"SIGHUP\"\n \
             INFO plain message\\r\n"
        );
    }
}
