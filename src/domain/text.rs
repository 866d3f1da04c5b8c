//! The one rule for text that arrives in a request (JSON strings and object keys, query
//! parameters, path segments): checked once at the edge, so nothing past it can make the
//! database refuse a string. PostgreSQL refuses U+0000 in `text`; the other control
//! characters are refused too because no field of a payment means them (they are a
//! client's bug or an attack on whoever reads the value later: a log, a terminal, a CSV).
//!
//! Allowed: every Unicode scalar value except the control characters below. Tab, line
//! feed and carriage return stay (free text such as `description` may have lines).
//! Right-to-left marks, combining characters, emoji and non-characters are text like any
//! other. Lone surrogates cannot reach here: a Rust string cannot hold one, and the JSON
//! parser refuses `"\ud800"`. Length limits belong to each field.

/// `Err` names what is wrong, to be put in the field's 400 answer.
pub fn check_text(text: &str) -> Result<(), &'static str> {
    if text.chars().any(is_refused) {
        return Err(
            "must not contain control characters (U+0000–U+001F other than tab, \
             line feed and carriage return, U+007F–U+009F)",
        );
    }
    Ok(())
}

/// Whether `bytes` are a token as an id in a header is: 1 to `max_len` visible ASCII
/// characters, no space (a caller's `X-Request-Id`, a webhook's `webhook-id`).
pub fn is_token(bytes: &[u8], max_len: usize) -> bool {
    !bytes.is_empty() && bytes.len() <= max_len && bytes.iter().all(u8::is_ascii_graphic)
}

/// Text that arrives from the provider (its ids, failure codes and messages), made fit to
/// store: each refused character becomes U+FFFD. Refusing it is no option there: the
/// provider has already moved the money, and its answer must be recorded.
pub fn sanitized(text: String) -> String {
    if text.chars().any(is_refused) {
        text.chars()
            .map(|c| if is_refused(c) { '\u{fffd}' } else { c })
            .collect()
    } else {
        text
    }
}

/// C0 controls except tab, LF and CR; DEL; C1 controls.
fn is_refused(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

#[cfg(test)]
mod tests {
    use super::{check_text, is_token};

    #[test]
    fn a_token_is_one_to_max_visible_ascii_characters() {
        assert!(is_token(b"req-1", 5));
        assert!(is_token(b"~!", 2));
        for not in [&b""[..], b"req-12", b"req 1", b"req\t", b"r\xc3\xa9q"] {
            assert!(!is_token(not, 5), "{not:?}");
        }
    }

    #[test]
    fn refuses_nul_and_other_control_characters() {
        for bad in [
            "\0",
            "a\0b",
            "\u{1}",
            "\u{8}",
            "\u{b}",
            "\u{c}",
            "\u{1b}[31m",
            "\u{1f}",
            "\u{7f}",
            "\u{80}",
            "\u{85}",
            "\u{9f}",
        ] {
            assert!(check_text(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn provider_text_keeps_what_is_allowed_and_replaces_the_rest() {
        use super::sanitized;
        assert_eq!(sanitized("ch_1 é\n".to_owned()), "ch_1 é\n");
        assert_eq!(
            sanitized("a\0b\u{1b}[c\u{85}".to_owned()),
            "a\u{fffd}b\u{fffd}[c\u{fffd}"
        );
        assert_eq!(check_text(&sanitized("\0\u{7f}".to_owned())), Ok(()));
    }

    #[test]
    fn accepts_text_with_lines_and_any_script() {
        for good in [
            "",
            "order 42",
            "line one\nline two\r\n\tindented",
            "\u{200f}שלום\u{200e}",
            "e\u{301}",
            "💳🧾",
            "\u{fffe}\u{ffff}\u{fdd0}",
            "\u{a0}\u{a1}",
            "\u{10ffff}",
        ] {
            assert_eq!(check_text(good), Ok(()), "{good:?} should be accepted");
        }
    }
}
