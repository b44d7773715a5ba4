//! The `Arguments:` block a capability's description ends with: what its source
//! says about each parameter beyond its type (an upstream tool's schema keywords,
//! a plugin's WIT doc comments), one bounded printable line per documented
//! parameter, so that the model reads formats and defaults instead of learning
//! them by failing.

/// Most bytes of the `Arguments:` block of one capability.
pub const MAX_ARGUMENT_DOCS: usize = 2048;

/// The heading of the block of parameter documentation in a description.
pub const ARGUMENTS_HEADING: &str = "Arguments:";

/// The block of `lines` (each already one line, `- name: ...`), in order, cut
/// at [`MAX_ARGUMENT_DOCS`] bytes (the last line that does not fit is cut with
/// `...`, the rest left out). `None` when there are no lines.
pub fn argument_block(lines: impl IntoIterator<Item = String>) -> Option<String> {
    let mut block = String::new();
    for line in lines {
        let separator = usize::from(!block.is_empty());
        let room = MAX_ARGUMENT_DOCS.saturating_sub(block.len() + separator);
        if line.len() > room {
            let mut end = room.saturating_sub(3);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            if end > 0 {
                if !block.is_empty() {
                    block.push('\n');
                }
                block.push_str(&line[..end]);
                block.push_str("...");
            }
            break;
        }
        if !block.is_empty() {
            block.push('\n');
        }
        block.push_str(&line);
    }
    (!block.is_empty()).then_some(block)
}

/// `description` followed by the `Arguments:` block.
pub fn with_arguments(description: &str, block: &str) -> String {
    format!("{description}\n\n{ARGUMENTS_HEADING}\n{block}")
}

/// `text` as one printable line (runs of whitespace and non-printable characters
/// one space), cut at `max` bytes on a character boundary with `...`.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for word in text
        .split(|c: char| c.is_whitespace() || !super::is_printable(c))
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > max {
            break;
        }
    }
    if out.len() > max {
        let mut end = max.saturating_sub(3);
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_makes_text_one_printable_bounded_line() {
        assert_eq!(one_line("  a\n\tb\u{7}c \u{2028} d ", 100), "a b c d");
        assert_eq!(one_line("héllo world", 5), "h...");
        assert_eq!(one_line("", 10), "");
    }

    #[test]
    fn the_block_keeps_order_and_cuts_the_line_that_does_not_fit() {
        assert_eq!(argument_block(Vec::new()), None);
        assert_eq!(
            argument_block(["- a: x".to_owned(), "- b: y".to_owned()]),
            Some("- a: x\n- b: y".to_owned())
        );
        let long = format!("- c: {}", "z".repeat(MAX_ARGUMENT_DOCS));
        let block =
            argument_block(["- a: x".to_owned(), long, "- d: w".to_owned()]).unwrap_or_default();
        assert_eq!(block.len(), MAX_ARGUMENT_DOCS);
        assert!(block.starts_with("- a: x\n- c: zz"), "{block}");
        assert!(block.ends_with("zz..."), "{block}");
        assert_eq!(
            with_arguments("Does it.", "- a: x"),
            "Does it.\n\nArguments:\n- a: x"
        );
    }
}
