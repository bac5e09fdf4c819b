//! Finding and loading the ONNX Runtime shared library, once per process.
//!
//! Search order: `ORT_DYLIB_PATH`; the repository's `.cache/onnxruntime`
//! (where `scripts/setup` installs the PyPI wheel), located from this crate's
//! source directory at build time; then `.cache/onnxruntime` beside or above
//! the running executable. Never `ort::init()`, which panics when the
//! library is absent: `ort::init_from` returns an error we can explain.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{OnnxError, Result};

/// The ONNX Runtime version `scripts/setup` installs.
pub const ORT_VERSION: &str = "1.31.1";
const CAPI_DIR: &str = ".cache/onnxruntime/onnxruntime/capi";

static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> = OnceLock::new();

fn lib_in(dir: &Path) -> Option<PathBuf> {
    let exact = dir.join(format!("libonnxruntime.so.{ORT_VERSION}"));
    if exact.is_file() {
        return Some(exact);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so") || n == "libonnxruntime.dylib")
        })
        .collect();
    found.sort();
    found.pop()
}

/// Where the ONNX Runtime library would be loaded from, and every place
/// looked at (for the error message).
pub fn find_library() -> std::result::Result<PathBuf, Vec<String>> {
    let mut looked = Vec::new();
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(format!("ORT_DYLIB_PATH={} (not a file)", p.display()));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CAPI_DIR);
    if let Some(p) = lib_in(&repo) {
        return Ok(p);
    }
    looked.push(repo.display().to_string());
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(4) {
            let cand = dir.join(CAPI_DIR);
            if let Some(p) = lib_in(&cand) {
                return Ok(p);
            }
            looked.push(cand.display().to_string());
        }
    }
    Err(looked)
}

/// The directory `scripts/setup` installs the onnxruntime wheel into (for
/// `PYTHONPATH` when running the Python helpers).
pub fn python_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(".cache/onnxruntime")
}

/// Whether the library can be found (tests skip with a reason when not).
pub fn runtime_available() -> bool {
    find_library().is_ok()
}

/// The process-wide ONNX Runtime environment, created on first use.
pub fn environment() -> Result<&'static ort::environment::Environment> {
    let env = ENV.get_or_init(|| {
        let path = find_library().map_err(|looked| {
            format!("no libonnxruntime found (looked in: {})", looked.join(", "))
        })?;
        tracing::debug!(path = %path.display(), "loading ONNX Runtime");
        let builder =
            ort::init_from(&path).map_err(|e| format!("loading {}: {e}", path.display()))?;
        builder
            .with_name("wmrl")
            .build()
            .map_err(|e| format!("creating the environment from {}: {e}", path.display()))
    });
    env.as_ref().map_err(|reason| OnnxError::RuntimeMissing {
        reason: reason.clone(),
    })
}
