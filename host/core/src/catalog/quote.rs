//! How the catalog quotes text for a model: Go's `%q` and `strconv.IsPrint`, as
//! the seed's diagnostics and notation print them. A leaf of `catalog`: both
//! `bind` (paths in errors) and `shape` (enum cases in signatures) use it.

/// Whether a character may reach a model as is (Go's `strconv.IsPrint`, as the seed
/// uses it for paths and failure messages).
pub fn is_printable(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Go's `%q`, byte for byte as the seed's diagnostics print it (hand-written for that
/// reason): double quotes, `\"` and `\\`, `\n \r \t`, other non-printables as
/// `\xNN` / `\uNNNN` / `\UNNNNNNNN`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote("labels['env']"), r#""labels['env']""#);
        assert_eq!(go_quote("m[\"a\"]"), r#""m[\"a\"]""#);
        assert_eq!(go_quote("\u{1}"), r#""\x01""#);
        assert_eq!(go_quote("tab\there"), r#""tab\there""#);
        assert!(!is_printable('\u{2028}'));
        assert!(is_printable('é'));
    }
}
