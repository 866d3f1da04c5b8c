use sha2::{Digest, Sha256};

/// SHA-256 as lower-case hex: request fingerprints, API-key hashes, webhook body hashes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(2 * digest.len());
    push_hex(&mut hex, &digest);
    hex
}

/// Appends `bytes` to `text` as lower-case hex, two digits a byte.
pub fn push_hex(text: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        text.push(char::from(HEX[usize::from(b >> 4)]));
        text.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_answer() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
