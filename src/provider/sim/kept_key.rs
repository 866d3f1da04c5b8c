//! How the journal keeps a key's text: a key ending in a UUID's 32 hex digits keeps them as
//! the 16 bytes they spell.
//!
//! Every key the service sends is one of its ids (`pay_…`, `re_…`, `cap_…`, `po_…`: a short
//! prefix and a UUID in lower-case hex), and a charge's key is also its reference, which its
//! settlement movement shows: packed, a payment id is 21 bytes instead of 36, the largest
//! part of what the simulator keeps per charge. Any other key is kept as its text.

use std::borrow::Cow;

/// The hex digits a packed key ends in, and the longest text before them that is packed.
const DIGITS: usize = 32;
const MAX_HEAD: usize = 32;
/// Marks a packed key: the byte after its head. It is never in UTF-8 text, so no key kept
/// as text has it, and the head (text) never does either.
const MARK: u8 = 0xFF;
const PACKED_TAIL: usize = 1 + DIGITS / 2;

/// A key in the form it is kept in (and compared and hashed in).
pub enum KeptKey<'a> {
    Text(&'a str),
    Packed {
        bytes: [u8; MAX_HEAD + PACKED_TAIL],
        len: usize,
    },
}

impl KeptKey<'_> {
    pub fn of(key: &str) -> KeptKey<'_> {
        Self::packed(key).unwrap_or(KeptKey::Text(key))
    }

    fn packed(key: &str) -> Option<KeptKey<'static>> {
        let head_len = key.len().checked_sub(DIGITS)?;
        if head_len > MAX_HEAD {
            return None;
        }
        let (head, digits) = key.as_bytes().split_at(head_len);
        let mut bytes = [0; MAX_HEAD + PACKED_TAIL];
        bytes[..head_len].copy_from_slice(head);
        bytes[head_len] = MARK;
        let tail = &mut bytes[head_len + 1..head_len + PACKED_TAIL];
        for (byte, pair) in tail.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(KeptKey::Packed {
            bytes,
            len: head_len + PACKED_TAIL,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            KeptKey::Text(text) => text.as_bytes(),
            KeptKey::Packed { bytes, len } => &bytes[..*len],
        }
    }
}

/// Lower-case hex only: `…AB…` is another key than `…ab…`, kept as its text.
fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

/// The text of a key kept as `kept` (see [`KeptKey::bytes`]).
pub fn text_of(kept: &[u8]) -> Option<Cow<'_, str>> {
    match kept.len().checked_sub(PACKED_TAIL) {
        Some(head_len) if kept[head_len] == MARK => {
            let mut text = String::with_capacity(head_len + DIGITS);
            text.push_str(std::str::from_utf8(&kept[..head_len]).ok()?);
            crate::domain::push_hex(&mut text, &kept[head_len + 1..]);
            Some(Cow::Owned(text))
        }
        _ => std::str::from_utf8(kept).ok().map(Cow::Borrowed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(key: &str) -> Vec<u8> {
        KeptKey::of(key).bytes().to_vec()
    }

    #[test]
    fn ids_are_packed_and_read_back_whole() {
        let id = format!("pay_{}", uuid::Uuid::new_v4().simple());
        assert_eq!(kept(&id).len(), 4 + 17);
        assert_eq!(text_of(&kept(&id)).as_deref(), Some(id.as_str()));
        let bare = "0123456789abcdef0123456789abcdef";
        assert_eq!(kept(bare).len(), 17);
        assert_eq!(text_of(&kept(bare)).as_deref(), Some(bare));
    }

    #[test]
    fn other_keys_are_kept_as_text_and_no_two_keys_read_the_same() {
        let upper = "pay_0123456789ABCDEF0123456789abcdef";
        let long_head = format!("{}{}", "h".repeat(33), "0".repeat(32));
        for key in [
            "pay_a",
            "",
            "é",
            upper,
            "pay_0123456789abcdef0123456789abcde",
            &long_head,
        ] {
            assert_eq!(kept(key), key.as_bytes(), "{key}");
            assert_eq!(text_of(&kept(key)).as_deref(), Some(key));
        }
        let lower = upper.to_lowercase();
        assert_ne!(kept(upper), kept(&lower));
        assert_ne!(kept("re_0123456789abcdef0123456789abcdef"), kept(&lower));
    }
}
