//! Per-chunk credit from a progress signal (`[update.credit]`): instead of
//! crediting every chunk of a rollout with the rollout's advantage alone,
//! each chunk also gets its own progress return, normalised within the
//! group, so the chunk in which the object was grasped is told apart from
//! the chunks that wandered.

/// Progress returns of one rollout's chunks: `c_k = sum_{j >= k}
/// lambda^(j-k) (p_{j+1} - p_j)` for `k` in `0..n_chunks`, from the
/// progress `p_j` at each policy call and `p_{n_chunks}` at the end.
/// `None` when a progress value is missing or there are fewer than
/// `n_chunks + 1` of them.
pub fn progress_returns(
    progress: &[Option<f32>],
    n_chunks: usize,
    lambda: f64,
) -> Option<Vec<f64>> {
    if progress.len() < n_chunks + 1 {
        return None;
    }
    let p: Vec<f64> = progress[..=n_chunks]
        .iter()
        .map(|v| v.map(f64::from))
        .collect::<Option<_>>()?;
    let mut out = vec![0.0; n_chunks];
    let mut acc = 0.0;
    for k in (0..n_chunks).rev() {
        acc = (p[k + 1] - p[k]) + lambda * acc;
        out[k] = acc;
    }
    Some(out)
}

/// Normalise a group's chunk returns together (mean 0, standard deviation
/// 1 over every chunk of every rollout); all zeros when they do not vary.
pub fn normalise_group(returns: &mut [Vec<f64>]) {
    let n: usize = returns.iter().map(Vec::len).sum();
    if n == 0 {
        return;
    }
    let mean = returns.iter().flatten().sum::<f64>() / n as f64;
    let var = returns
        .iter()
        .flatten()
        .map(|c| (c - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    let sd = var.sqrt();
    for c in returns.iter_mut().flatten() {
        *c = if sd > 1e-9 { (*c - mean) / sd } else { 0.0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_discount_future_progress_and_credit_the_chunk_that_made_it() {
        // Progress rises in chunk 1 (grasp) and chunk 3 (placed).
        let p = [Some(0.0), Some(0.0), Some(0.5), Some(0.5), Some(1.0)];
        let c = progress_returns(&p, 4, 0.5).expect("returns");
        let want = [0.5 * 0.5 + 0.125 * 0.5, 0.5 + 0.25 * 0.5, 0.5 * 0.5, 0.5];
        for (a, b) in c.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{c:?}");
        }
        // lambda 0: each chunk's own progress; lambda 1: all that follows.
        assert_eq!(
            progress_returns(&p, 4, 0.0).expect("r"),
            vec![0.0, 0.5, 0.0, 0.5]
        );
        assert_eq!(
            progress_returns(&p, 4, 1.0).expect("r"),
            vec![1.0, 1.0, 0.5, 0.5]
        );
        // A drop (object dropped) is negative credit.
        let d = [Some(0.0), Some(0.5), Some(0.0)];
        assert_eq!(progress_returns(&d, 2, 0.0).expect("r"), vec![0.5, -0.5]);
    }

    #[test]
    fn missing_progress_gives_no_returns() {
        assert!(progress_returns(&[Some(0.0), None, Some(1.0)], 2, 0.5).is_none());
        assert!(progress_returns(&[Some(0.0), Some(1.0)], 2, 0.5).is_none());
        assert_eq!(progress_returns(&[Some(0.3)], 0, 0.5), Some(vec![]));
    }

    #[test]
    fn group_normalisation_spans_every_chunk_and_flat_groups_get_zero() {
        let mut g = vec![vec![1.0, 0.0], vec![0.0, 0.0, 3.0]];
        normalise_group(&mut g);
        let all: Vec<f64> = g.iter().flatten().copied().collect();
        let mean = all.iter().sum::<f64>() / 5.0;
        let var = all.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / 5.0;
        assert!(mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-12, "{g:?}");
        assert!(g[1][2] > g[0][0] && g[0][0] > g[0][1]);
        let mut flat = vec![vec![0.5, 0.5], vec![0.5]];
        normalise_group(&mut flat);
        assert!(flat.iter().flatten().all(|c| *c == 0.0));
    }
}
