//! The action tokenizer: each action dimension discretised into `n_bins`
//! equal-width bins over `[-1, 1]`, as OpenVLA and MiniVLA do. A token is a
//! bin index; decoding returns the bin centre, so a round trip moves a value
//! by at most half a bin width.

/// Uniform binning of `[-1, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActionTokenizer {
    n_bins: usize,
}

impl ActionTokenizer {
    pub fn new(n_bins: usize) -> Self {
        Self {
            n_bins: n_bins.max(2),
        }
    }

    pub fn n_bins(&self) -> usize {
        self.n_bins
    }

    /// Width of one bin.
    pub fn bin_width(&self) -> f32 {
        2.0 / self.n_bins as f32
    }

    /// Bin index of a value; values outside `[-1, 1]` (and NaN) are clipped.
    pub fn encode(&self, value: f32) -> u32 {
        let v = if value.is_nan() {
            0.0
        } else {
            value.clamp(-1.0, 1.0)
        };
        let idx = ((v + 1.0) / self.bin_width()).floor() as i64;
        idx.clamp(0, self.n_bins as i64 - 1) as u32
    }

    /// Centre of a bin; indices past the end are clipped to the last bin.
    pub fn decode(&self, token: u32) -> f32 {
        let t = (token as usize).min(self.n_bins - 1);
        -1.0 + (t as f32 + 0.5) * self.bin_width()
    }

    pub fn encode_all(&self, values: &[f32]) -> Vec<u32> {
        values.iter().map(|&v| self.encode(v)).collect()
    }

    pub fn decode_all(&self, tokens: &[u32]) -> Vec<f32> {
        tokens.iter().map(|&t| self.decode(t)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_within_half_a_bin_and_tokens_are_fixed_points() {
        let tok = ActionTokenizer::new(256);
        for i in 0..=2000 {
            let v = -1.0 + 2.0 * i as f32 / 2000.0;
            let t = tok.encode(v);
            assert!(t < 256);
            let back = tok.decode(t);
            assert!(
                (back - v).abs() <= tok.bin_width() / 2.0 + 1e-6,
                "{v} -> {t} -> {back}"
            );
        }
        for t in 0..256u32 {
            assert_eq!(tok.encode(tok.decode(t)), t);
        }
        assert_eq!(tok.encode(-5.0), 0);
        assert_eq!(tok.encode(5.0), 255);
        assert_eq!(tok.encode(1.0), 255);
        assert_eq!(tok.encode(-1.0), 0);
        // monotone
        let toks: Vec<u32> = (0..100)
            .map(|i| tok.encode(-1.0 + i as f32 * 0.02))
            .collect();
        assert!(toks.windows(2).all(|w| w[0] <= w[1]));
    }
}
