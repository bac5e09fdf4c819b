//! The shipped SFT checkpoint (models/policy-tiny, the start of every bench
//! in docs/results.md) loads as the `tiny` preset with the wrist camera and
//! still solves the episodes its model card records as solved.

use std::path::PathBuf;

use wmrl_policy::{EvalConfig, Policy, evaluate};

#[test]
fn shipped_policy_loads_and_solves_recorded_episodes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/policy-tiny");
    let policy = Policy::load(&dir).expect("models/policy-tiny loads");
    let cfg = policy.config();
    assert_eq!(cfg.preset, "tiny");
    assert!(cfg.use_wrist);
    assert_eq!(policy.n_params(), 1_334_304);
    assert_eq!(cfg.proprio_dim, wmrl_sim::PROPRIO_DIM);

    // eval_in_domain.json records task 4 solved from training states 0-2
    // (104, 146 and 101 steps); greedy decoding on the same simulator.
    let mut env = wmrl_sim::make_vec_env(&wmrl_sim::SimConfig::default(), 3, None).expect("sim");
    let report = evaluate(
        &policy,
        &mut env,
        &EvalConfig {
            tasks: vec![4],
            init_states: vec![0, 1, 2],
            ..EvalConfig::default()
        },
    )
    .expect("evaluate");
    let solved = report.episodes.iter().filter(|e| e.success).count();
    eprintln!(
        "task 4, states 0-2: {solved}/3 solved, steps {:?}",
        report.episodes.iter().map(|e| e.steps).collect::<Vec<_>>()
    );
    assert!(solved >= 2, "{:?}", report.episodes);
}
