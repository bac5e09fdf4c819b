//! Every shipped run config parses and validates (unknown keys included).

use wmrl_train::TrainConfig;

#[test]
fn shipped_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    for name in [
        "quickstart.toml",
        "bench_sim.toml",
        "bench_sim_free.toml",
        "libero_long_sim.toml",
        "grpo_sim.toml",
    ] {
        let cfg = TrainConfig::load(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(cfg.steps > 0, "{name}");
    }
}
