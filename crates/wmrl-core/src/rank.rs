//! How well a world model ranks real outcomes: the concordance both the
//! diagnostics and the world-model refit gate ([`crate::refit`]) read.

/// Concordance of scores with real outcomes over `(real, score)` pairs: of
/// two items whose real outcomes differ, the probability that the one with
/// the higher outcome also has the higher score (score ties count one
/// half). With binary outcomes this is the AUROC of the score for success;
/// 0.5 is chance. Returns the concordance and the number of informative
/// pairs; `None` until two different outcomes have been seen.
pub fn concordance(pairs: &[(f64, f64)]) -> (Option<f64>, usize) {
    let mut p = pairs.to_vec();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Every item against all items with a strictly lower real outcome:
    // O(n^2), a few thousand items at most.
    let (mut agree, mut total) = (0.0f64, 0usize);
    let mut lower_end = 0;
    for i in 0..p.len() {
        while p[lower_end].0 < p[i].0 {
            lower_end += 1;
        }
        for q in &p[..lower_end] {
            total += 1;
            agree += match p[i].1.total_cmp(&q.1) {
                std::cmp::Ordering::Greater => 1.0,
                std::cmp::Ordering::Equal => 0.5,
                std::cmp::Ordering::Less => 0.0,
            };
        }
    }
    ((total > 0).then(|| agree / total as f64), total)
}

/// [`concordance`] counted within groups only (what group-relative
/// advantages see: a model that ranks groups right but their members wrong
/// is useless to GRPO), pooled over the groups' informative pairs. Each
/// group is `(scores, real outcomes)` of the same length.
pub fn within_group_concordance(groups: &[(Vec<f64>, Vec<f64>)]) -> (Option<f64>, usize) {
    let (mut agree, mut total) = (0.0f64, 0usize);
    for (scores, real) in groups {
        let pairs: Vec<(f64, f64)> = real.iter().copied().zip(scores.iter().copied()).collect();
        if let (Some(c), n) = concordance(&pairs) {
            agree += c * n as f64;
            total += n;
        }
    }
    ((total > 0).then(|| agree / total as f64), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concordance_counts_pairs_and_ties() {
        let perfect = [(0.0, 0.1), (0.0, 0.2), (1.0, 0.8), (1.0, 0.9)];
        assert_eq!(concordance(&perfect), (Some(1.0), 4));
        let reversed = [(0.0, 0.9), (1.0, 0.1)];
        assert_eq!(concordance(&reversed), (Some(0.0), 1));
        assert_eq!(concordance(&[(0.0, 0.5), (1.0, 0.5)]), (Some(0.5), 1));
        assert_eq!(concordance(&[(1.0, 0.5), (1.0, 0.6)]), (None, 0));
    }

    #[test]
    fn within_groups_ignores_rankings_across_groups() {
        // Each group ranked right, but group 2's failures score above group
        // 1's successes: pooled concordance is imperfect, within-group is 1.
        let g1 = (vec![0.1, 0.2], vec![0.0, 1.0]);
        let g2 = (vec![0.6, 0.9], vec![0.0, 1.0]);
        let (w, n) = within_group_concordance(&[g1.clone(), g2.clone()]);
        assert_eq!((w, n), (Some(1.0), 2));
        let pooled: Vec<(f64, f64)> = [g1, g2]
            .iter()
            .flat_map(|(s, r)| r.iter().copied().zip(s.iter().copied()))
            .collect();
        assert!(concordance(&pooled).0.expect("pairs") < 1.0);
        // A group with one outcome only carries no pair.
        assert_eq!(
            within_group_concordance(&[(vec![0.1, 0.9], vec![1.0, 1.0])]),
            (None, 0)
        );
    }
}
