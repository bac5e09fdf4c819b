//! How a refit's candidate should be fitted, measured on the anchor groups
//! a bench's `wmrl` runs gathered (their checkpoints keep them): for each
//! refit point, a candidate fitted on the predictor's data plus the anchor
//! groups before the newest `holdout` ones, judged on those (within-group
//! concordance, as the gate judges), and how far it re-draws the
//! incumbent's ranking of them (Spearman). Designs: the old refit from
//! scratch, a warm start from the incumbent, and an ensemble of fits from
//! scratch. Ignored by default: it reads a finished bench named by
//! `WMRL_REFIT_BENCH` (e.g. results/autoresearch_bench_refit4_gated).
#![allow(clippy::unwrap_used)]

use wmrl_autoresearch::predictor::{Example, Predictor, PredictorConfig, spearman};
use wmrl_core::rank::within_group_concordance;

struct Group {
    step: u64,
    rows: Vec<Example>,
}

fn read_groups(state: &std::path::Path) -> Vec<Group> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    v["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| Group {
            step: k["step"].as_u64().unwrap(),
            rows: serde_json::from_value(k["rows"].clone()).unwrap(),
        })
        .collect()
}

fn inputs(rows: &[Example]) -> Vec<Vec<f32>> {
    rows.iter().map(Example::input).collect()
}

#[test]
#[ignore = "reads a finished bench named by WMRL_REFIT_BENCH"]
fn refit_designs_compared_on_a_bench_s_anchor_groups() {
    let Ok(out) = std::env::var("WMRL_REFIT_BENCH") else {
        eprintln!("set WMRL_REFIT_BENCH to a bench folder");
        return;
    };
    let out = std::path::PathBuf::from(out);
    let (cfg, _) = wmrl_run::RunDir::new(&out)
        .read_settings::<wmrl_autoresearch::bench::BenchConfig>()
        .unwrap();
    let pcfg: PredictorConfig = cfg.predictor.clone();
    let every = 4u64;
    let holdout_steps = 4u64;
    let data: Vec<Example> = std::fs::read_to_string(out.join("predictor_train.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let incumbent = Predictor::load(&out.join("predictor.json")).unwrap();
    type Fit<'a> = Box<dyn Fn(&[Example]) -> Vec<Predictor> + 'a>;
    let scratch = |seed: u64, rows: &[Example]| {
        Predictor::train(
            &PredictorConfig {
                seed,
                ..pcfg.clone()
            },
            rows,
        )
        .unwrap()
        .0
    };
    let designs: Vec<(&str, Fit)> = vec![
        ("scratch (old)", Box::new(|r| vec![scratch(pcfg.seed, r)])),
        (
            "warm start",
            Box::new(|r| vec![incumbent.fine_tuned(&pcfg, r).unwrap().0]),
        ),
        (
            "warm start x2 epochs",
            Box::new(|r| {
                let c = PredictorConfig {
                    refit_epochs: pcfg.refit_epochs * 2,
                    ..pcfg.clone()
                };
                vec![incumbent.fine_tuned(&c, r).unwrap().0]
            }),
        ),
        (
            "ensemble of 3 from scratch",
            Box::new(|r| (0..3).map(|s| scratch(pcfg.seed + s, r)).collect()),
        ),
    ];
    // Per design: concordance pooled over refit points (agree, pairs),
    // Spearman vs the incumbent per point.
    let mut agree = vec![0.0; designs.len()];
    let mut inc_agree = 0.0;
    let mut pairs_total = 0usize;
    let mut wins = vec![0usize; designs.len()];
    let mut rho: Vec<Vec<f64>> = vec![Vec::new(); designs.len()];
    let mut points = 0;
    for seed in 0.. {
        let state = out
            .join("wmrl")
            .join(format!("seed{seed}"))
            .join("checkpoint/state.json");
        if !state.exists() {
            break;
        }
        let groups = read_groups(&state);
        let last = groups.iter().map(|g| g.step).max().unwrap_or(0) + 1;
        for done in (2 * every..=last).step_by(every as usize) {
            let held: Vec<&Group> = groups
                .iter()
                .filter(|g| g.step >= done - holdout_steps && g.step < done)
                .collect();
            let train: Vec<Example> = data
                .iter()
                .cloned()
                .chain(
                    groups
                        .iter()
                        .filter(|g| g.step < done - holdout_steps)
                        .flat_map(|g| g.rows.clone()),
                )
                .collect();
            let score = |ps: &[Predictor], rows: &[Example]| -> Vec<f64> {
                let per: Vec<Vec<f64>> = ps
                    .iter()
                    .map(|p| p.predict(&inputs(rows)).unwrap())
                    .collect();
                (0..rows.len())
                    .map(|i| per.iter().map(|s| s[i]).sum::<f64>() / per.len() as f64)
                    .collect()
            };
            let judged = |ps: &[Predictor]| {
                let gs: Vec<(Vec<f64>, Vec<f64>)> = held
                    .iter()
                    .map(|g| {
                        (
                            score(ps, &g.rows),
                            g.rows.iter().map(|e| e.reward).collect(),
                        )
                    })
                    .collect();
                within_group_concordance(&gs)
            };
            let (Some(inc), n) = judged(std::slice::from_ref(&incumbent)) else {
                continue;
            };
            points += 1;
            pairs_total += n;
            inc_agree += inc * n as f64;
            let held_rows: Vec<Example> = held.iter().flat_map(|g| g.rows.clone()).collect();
            let inc_scores = score(std::slice::from_ref(&incumbent), &held_rows);
            let mut line = format!("seed {seed} refit {done:>2}: {n:>3} pairs, incumbent {inc:.3}");
            for (d, (name, fit)) in designs.iter().enumerate() {
                let ps = fit(&train);
                let c = judged(&ps).0.unwrap();
                agree[d] += c * n as f64;
                wins[d] += usize::from(c >= inc);
                let r = spearman(&score(&ps, &held_rows), &inc_scores).unwrap_or(f64::NAN);
                rho[d].push(r);
                line += &format!(" | {name} {c:.3} (rho {r:.2})");
            }
            eprintln!("{line}");
        }
    }
    assert!(
        points > 0,
        "no refit point with informative pairs in {}",
        out.display()
    );
    eprintln!(
        "over {points} refit points, {pairs_total} pairs: incumbent {:.3}",
        inc_agree / pairs_total as f64
    );
    for (d, (name, _)) in designs.iter().enumerate() {
        let r = &rho[d];
        eprintln!(
            "  {name:<28} concordance {:.3}, would pass the gate {}/{points}, Spearman vs incumbent mean {:.2} (min {:.2})",
            agree[d] / pairs_total as f64,
            wins[d],
            r.iter().sum::<f64>() / r.len() as f64,
            r.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }
}
