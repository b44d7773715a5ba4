//! The two readings of a stdio upstream's line that follow only quotes, escapes
//! and brackets, written by hand, and why they are not serde's or a crate's.
//!
//! - [`IdScan`]: the ID of a line too long to keep. A result over
//!   [`MAX_MESSAGE_BYTES`](crate::upstream::bounds::MAX_MESSAGE_BYTES) is not
//!   kept, yet the request it answers should fail at once rather than wait out its
//!   budget, so the line's top-level `"id"` (which TypeScript servers write last)
//!   is picked out of the bytes as they pass. serde needs the whole text or a
//!   blocking reader, and keeps each key and string it reads; the streaming JSON
//!   crates (actson) keep every string value, so a 100 MB text result would be
//!   held whole. Here a key is kept up to 3 bytes and the ID up to 256 (a longer
//!   one is no ID this process sent).
//! - [`one_value`]: whether a line serde refused is still one value (a message
//!   with a raw tab in a string, `NaN`, a bad escape: left out) or not (an
//!   answer glued to a half line: the session ends). serde tells only that the
//!   line is not JSON; this must be lenient where serde is strict.

/// Reads a JSON text as it streams by, keeping only its top-level `"id"` (at
/// most 256 bytes of it).
#[derive(Default)]
pub struct IdScan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Whether the current top-level string is a key (no `:` seen after the last
    /// `,` or `{`).
    in_key: bool,
    /// The current top-level key, up to 3 bytes (enough to tell `id`).
    key: Vec<u8>,
    /// Whether the last top-level key was `id`.
    id_key: bool,
    /// The top-level value being read is the ID's.
    capturing: bool,
    id: Vec<u8>,
    /// The ID being read is longer than [`MAX_ID_BYTES`].
    cut: bool,
    found: Option<Vec<u8>>,
}

/// The most bytes of an ID kept.
const MAX_ID_BYTES: usize = 256;

impl IdScan {
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    fn byte(&mut self, byte: u8) {
        if self.capturing && !(byte.is_ascii_whitespace() && !self.in_string) {
            // Room for the ID and the `,` or `}` that ends it.
            if self.id.len() <= MAX_ID_BYTES {
                self.id.push(byte);
            } else {
                self.cut = true;
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                if self.depth == 1 && self.in_key {
                    self.id_key = self.key == b"id";
                }
            } else if self.depth == 1 && self.in_key && self.key.len() < 3 {
                self.key.push(byte);
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.in_key {
                    self.key.clear();
                }
            }
            b':' if self.depth == 1 => {
                self.in_key = false;
                if self.id_key {
                    self.capturing = true;
                    self.id.clear();
                }
            }
            b',' if self.depth == 1 => {
                self.finish_id();
                self.in_key = true;
                self.id_key = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.in_key = byte == b'{';
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_id();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            _ => {}
        }
    }

    /// The ID value being read ended (at a top-level `,` or `}`).
    fn finish_id(&mut self) {
        if self.capturing {
            self.capturing = false;
            // The `,` or `}` that ended it was pushed too.
            self.id.pop();
            let id = std::mem::take(&mut self.id);
            // An ID too long to keep is none this process sent.
            self.found = (!std::mem::take(&mut self.cut)).then_some(id);
        }
    }

    /// The top-level ID, as JSON text.
    pub fn id(&self) -> Option<String> {
        let id = self.found.as_ref()?;
        (!id.is_empty()).then(|| String::from_utf8_lossy(id).into_owned())
    }
}

/// Whether `line` is one object or array, its brackets balanced outside strings
/// and nothing after it: lenient about everything else (see the module's
/// documentation).
pub fn one_value(line: &[u8]) -> bool {
    let text = line.trim_ascii();
    if !matches!(text.first(), Some(b'{' | b'[')) {
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return at + 1 == text.len();
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(line: &str, piece: usize) -> Option<String> {
        let mut scan = IdScan::default();
        for piece in line.as_bytes().chunks(piece) {
            scan.feed(piece);
        }
        scan.id()
    }

    #[test]
    fn an_id_is_found_in_a_line_read_in_pieces() {
        let line = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"{}"}}]}},"jsonrpc":"2.0","id":42}}"#,
            "x\\\"{".repeat(1000)
        );
        assert_eq!(id_of(&line, 7).as_deref(), Some("42"));
        assert_eq!(id_of(&line, 1).as_deref(), Some("42"));
    }

    #[test]
    fn an_id_longer_than_the_bound_is_not_kept() {
        let id = |length: usize| format!(r#"{{"id":"{}","result":{{}}}}"#, "i".repeat(length));
        let longest = format!("\"{}\"", "i".repeat(MAX_ID_BYTES - 2));
        assert_eq!(id_of(&id(MAX_ID_BYTES - 2), 64), Some(longest));
        assert_eq!(id_of(&id(MAX_ID_BYTES - 1), 64), None);
        assert_eq!(id_of(&id(1000), 64), None);
    }

    #[test]
    fn a_half_line_with_an_answer_glued_to_it_is_told_from_a_bad_message() {
        let glued = br#"{"jsonrpc": "2.0", "id": 4, "res{"jsonrpc":"2.0","id":5,"result":{}}"#;
        assert!(!one_value(glued));
        let after = br#"{"jsonrpc":"2.0","id":5,"result":{}} {"jsonrpc":"2.0"}"#;
        assert!(!one_value(after));
        let huge_number = format!(
            r#"{{"jsonrpc":"2.0","id":6,"result":{{"n":1{}}}}}"#,
            "0".repeat(400)
        );
        assert!(one_value(huge_number.as_bytes()), "{huge_number}");
        assert!(one_value(
            b"{\"jsonrpc\":\"2.0\",\"params\":{\"data\":\"a\tb\"}}"
        ));
        assert!(one_value(
            br#"{"jsonrpc":"2.0","result":{"x":NaN,"p":"C:\Users"}}"#
        ));
        assert!(one_value(br#" {"a":"}{"} "#));
        assert!(!one_value(b"Starting the server"));
    }
}
