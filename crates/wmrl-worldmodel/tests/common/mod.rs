#![allow(dead_code)]
use wmrl_worldmodel::NetConfig;

/// A network small enough for debug-build tests.
pub fn tiny_config() -> NetConfig {
    NetConfig {
        num_frames: 8,
        instruction_len: 64,
        height: 16,
        width: 16,
        pool: 1,
        channels: vec![4, 8],
        hidden: 16,
        text_dim: 8,
    }
}

/// Print why a test that needs ONNX Runtime is skipped; true when it is.
pub fn skip_without_runtime(test: &str) -> bool {
    if wmrl_onnx::runtime_available() {
        return false;
    }
    eprintln!("SKIPPED {test}: ONNX Runtime library not found; run scripts/setup");
    true
}
