//! The candle device a `--device` choice ([`DeviceChoice`], recorded in
//! a run's settings by wmrl-run) names, beside the models that run on it:
//! the robot track's placement (`wmrl_train::Placement`, for the policy and
//! its KL reference), `wmrl sft`, `wmrl wm train` (the progress network)
//! and the AutoResearch solution policy all resolve it here. The policy
//! update (wmrl-grpo) runs on whatever device its tensors are on.

use candle_core::Device;
pub use wmrl_run::DeviceChoice;

/// The first CUDA device for candle, or why there is none: this build has
/// no candle CUDA backend (the `cuda` feature), or candle finds no GPU or
/// driver.
pub fn cuda_device() -> Result<Device, String> {
    if !candle_core::utils::cuda_is_available() {
        return Err("wmrl was built without the `cuda` feature \
             (`cargo build --release -p wmrl-cli --features cuda`, needs nvcc)"
            .into());
    }
    Device::new_cuda(0).map_err(|e| format!("candle finds no CUDA device: {e}"))
}

/// The candle device `choice` names, for code that runs one candle
/// network (`what`, named in the log): [`cuda_device`] for `cuda` and
/// `auto`, else the CPU with one log line (a warning for `cuda`).
pub fn candle_device(choice: DeviceChoice, what: &str) -> Device {
    if choice.is_cpu() {
        return Device::Cpu;
    }
    cuda_device().unwrap_or_else(|why| {
        let line = format!("--device {choice}: {what} on the CPU instead ({why})");
        match choice {
            DeviceChoice::Cuda => tracing::warn!("{line}"),
            _ => tracing::info!("{line}"),
        }
        Device::Cpu
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_the_cpu_and_a_build_without_cuda_falls_back_saying_why() {
        assert!(candle_device(DeviceChoice::Cpu, "test").is_cpu());
        if !candle_core::utils::cuda_is_available() {
            let why = cuda_device().expect_err("no CUDA backend");
            assert!(why.contains("`cuda` feature"), "{why}");
            assert!(candle_device(DeviceChoice::Auto, "test").is_cpu());
        }
    }
}
