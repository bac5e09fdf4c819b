#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The shipped progress models read back under today's settings types,
//! which refuse unknown keys: every recorded training settings file (an
//! older wmrl's train_config.json, or run.toml) still parses
//! and builds its network over the saved weights.

#[test]
fn the_shipped_models_read_back() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
    for name in ["progress-tiny", "progress-five"] {
        let (_, varmap, cfg) = wmrl_worldmodel::train::load(&root.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!varmap.all_vars().is_empty(), "{name}");
        assert!(cfg.steps > 0, "{name}");
    }
}
