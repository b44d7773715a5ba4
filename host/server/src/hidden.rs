//! Characters that hide, reorder or fake the text a person reads, and their
//! visible escapes: for what a human approves (the question, the arguments)
//! and for names that reach logs and questions (subject IDs).
//!
//! A leaf: it imports nothing of the crate.

/// Whether `c` can hide, reorder or fake the text a human reads: control
/// characters (C0 but none kept, DEL, C1: a newline can start a fake
/// `Capability:` line), bidirectional controls (U+202E reverses what follows),
/// zero-width and other invisible format characters, tag characters (invisible
/// text a model reads), variation selectors, and letters that render blank.
pub(crate) fn hides(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}'
        | '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}'
        | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF9}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}

/// `text` with every character that [`hides`] written as `\uXXXX` (or
/// `\u{XXXXX}` past U+FFFF), so that a human sees it is there.
pub(crate) fn escape_hidden(text: &str) -> String {
    if !text.chars().any(hides) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hides(c) {
            out.push(c);
        } else if (c as u32) <= 0xFFFF {
            out.push_str(&format!("\\u{:04X}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:X}}}", c as u32));
        }
    }
    out
}
