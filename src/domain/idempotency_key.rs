/// The client's `Idempotency-Key`: 1–255 characters of visible ASCII (0x20–0x7E).
///
/// The IETF draft sends it as a structured-field string (`"abc"`); clients that follow
/// Stripe send it bare (`abc`). Both name the same key, so the quotes are removed here.
/// Text between quotes that is no structured-field string (`"a\x"`) is still visible
/// ASCII: it is taken as it is, a bare key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &[u8]) -> Result<Self, &'static str> {
        if raw.iter().any(|b| !(0x20..=0x7e).contains(b)) {
            return Err("Idempotency-Key must contain only visible ASCII characters");
        }
        // Visible ASCII only, so this cannot fail; no unwrap on input all the same.
        let text = std::str::from_utf8(raw)
            .map_err(|_| "Idempotency-Key must contain only visible ASCII characters")?;
        let key = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) => unescape_sf_string(inner).unwrap_or_else(|_| text.to_owned()),
            None => text.to_owned(),
        };
        if key.is_empty() {
            return Err("Idempotency-Key must not be empty");
        }
        if key.len() > Self::MAX_LEN {
            return Err("Idempotency-Key must be at most 255 characters");
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// RFC 8941 sf-string: inside the quotes only `\"` and `\\` are escapes, and a bare `"`
/// may not appear.
fn unescape_sf_string(inner: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err("Idempotency-Key has an invalid escape in its quoted form"),
            },
            '"' => return Err("Idempotency-Key has an unescaped quote in its quoted form"),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::IdempotencyKey;

    fn key(raw: &str) -> Result<String, &'static str> {
        IdempotencyKey::parse(raw.as_bytes()).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn bare_and_quoted_forms_are_the_same_key() {
        assert_eq!(key("order-42"), Ok("order-42".to_owned()));
        assert_eq!(key("\"order-42\""), Ok("order-42".to_owned()));
        assert_eq!(key(r#""a\"b\\c""#), Ok(r#"a"b\c"#.to_owned()));
    }

    #[test]
    fn accepts_255_visible_characters_and_spaces() {
        assert!(key(&"k".repeat(255)).is_ok());
        assert_eq!(key("a b"), Ok("a b".to_owned()));
    }

    #[test]
    fn text_in_quotes_that_is_no_quoted_form_is_a_bare_key() {
        for raw in [r#""a\x""#, r#""a"b""#, r#""\""#] {
            assert_eq!(key(raw), Ok(raw.to_owned()));
        }
    }

    #[test]
    fn rejects_bad_keys() {
        for bad in ["", "\"\"", "é", "a\tb", "a\u{7f}"] {
            assert!(key(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(key(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse(&[0x61, 0x00]).is_err());
    }
}
