//! The built-in instruction tokenizer shared by the policy and the world
//! model at the small presets: UTF-8 bytes shifted by one, `0` is padding.
//! It needs no vocabulary file, so a model trained here runs anywhere; users
//! with a real tokenizer.json use the `tokenizers` crate instead.

/// Token id used for padding.
pub const PAD_ID: i64 = 0;
/// Vocabulary size of the byte tokenizer (256 bytes + padding).
pub const BYTE_VOCAB: usize = 257;

/// Lower-cased UTF-8 bytes + 1, truncated or padded with [`PAD_ID`] to `len`.
pub fn byte_tokens(instruction: &str, len: usize) -> Vec<i64> {
    let mut out: Vec<i64> = instruction
        .to_lowercase()
        .bytes()
        .take(len)
        .map(|b| i64::from(b) + 1)
        .collect();
    out.resize(len, PAD_ID);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_truncates_and_never_emits_pad_for_text() {
        let t = byte_tokens("Put A", 8);
        assert_eq!(t.len(), 8);
        assert_eq!(&t[..5], &[113, 118, 117, 33, 98]);
        assert!(t[5..].iter().all(|&x| x == PAD_ID));
        assert_eq!(byte_tokens("abcdef", 3), vec![98, 99, 100]);
        assert!(
            byte_tokens("é", 4)[..2]
                .iter()
                .all(|&x| x > 0 && x < BYTE_VOCAB as i64)
        );
    }
}
