//! Where a run's models go: `--device cpu|cuda|auto`, recorded as a run's
//! `device` (run.toml) and passed to what loads a model as a
//! [`Placement`], as candle passes a `&Device`. The policy runs
//! on candle's CUDA backend (a build with the `cuda` feature), the world
//! model on ONNX Runtime's CUDA execution provider (a CUDA build of the
//! library); each part that cannot use the GPU stays on the CPU, and one log
//! line names each such part and why. The in-process simulator renders with
//! the batched GPU rasteriser (`wmrl_sim::gpu`, kernels/raster.cu) when a
//! driver and NVRTC are there.

use wmrl_policy::candle::Device;
use wmrl_run::DeviceChoice;
use wmrl_worldmodel::ExecutionProvider;

/// Where each part runs.
#[derive(Debug, Clone)]
pub struct Placement {
    pub choice: DeviceChoice,
    /// candle device of the policy (and its KL reference).
    pub policy: Device,
    /// ONNX Runtime provider of the world model.
    pub world_model: ExecutionProvider,
    /// The GPU the in-process simulator renders with (`wmrl_sim::gpu`),
    /// passed to the environments the run builds (`make_env`).
    pub renderer: Option<std::sync::Arc<wmrl_sim::gpu::Gpu>>,
    /// The parts that asked for the GPU and stayed on the CPU, with why
    /// (empty for `cpu` or when everything is on the GPU).
    pub fallbacks: Vec<(&'static str, String)>,
}

impl Placement {
    /// Everything on the CPU.
    pub fn cpu() -> Self {
        Self {
            choice: DeviceChoice::Cpu,
            policy: Device::Cpu,
            world_model: ExecutionProvider::Cpu,
            renderer: None,
            fallbacks: Vec::new(),
        }
    }

    /// Work out the placement for `choice` (probes the GPU; logs nothing).
    pub fn resolve(choice: DeviceChoice) -> Self {
        if choice == DeviceChoice::Cpu {
            return Self::cpu();
        }
        let mut p = Self {
            choice,
            ..Self::cpu()
        };
        match wmrl_device::cuda_device() {
            Ok(d) => p.policy = d,
            Err(why) => p.fallbacks.push(("policy", why)),
        }
        match wmrl_worldmodel::cuda_provider_status() {
            Ok(()) => p.world_model = ExecutionProvider::Cuda,
            Err(why) => p.fallbacks.push(("world model", why)),
        }
        // The in-process simulator's renderer (bridged workers are
        // processes of their own: `wmrl serve-sim --device` places theirs).
        match wmrl_sim::gpu::open(0) {
            Ok(gpu) => p.renderer = Some(gpu),
            Err(why) => p.fallbacks.push(("renderer", why)),
        }
        p
    }

    /// The one log line about this placement, if anything fell back.
    pub fn fallback_line(&self) -> Option<String> {
        if self.fallbacks.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .fallbacks
            .iter()
            .map(|(what, why)| format!("{what} ({why})"))
            .collect();
        Some(format!(
            "--device {}: on the CPU instead: {}",
            self.choice,
            parts.join("; ")
        ))
    }
}

impl Placement {
    /// [`Placement::resolve`], then log its fallback line (a warning for
    /// `cuda`, information for `auto`). Nothing is set for the process:
    /// each part is passed to what runs there.
    pub fn select(choice: DeviceChoice) -> Self {
        let p = Self::resolve(choice);
        if let Some(line) = p.fallback_line() {
            match choice {
                DeviceChoice::Cuda => tracing::warn!("{line}"),
                _ => tracing::info!("{line}"),
            }
        }
        p
    }
}

/// Load a `tiny` policy checkpoint onto `placement`'s device (float32).
pub fn load_policy(
    dir: &std::path::Path,
    placement: &Placement,
) -> wmrl_policy::Result<wmrl_policy::Policy> {
    wmrl_policy::Policy::load_on(dir, &placement.policy, wmrl_policy::candle::DType::F32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_choices_and_refuses_others() {
        for c in [DeviceChoice::Cpu, DeviceChoice::Cuda, DeviceChoice::Auto] {
            assert_eq!(c.to_string().parse::<DeviceChoice>(), Ok(c));
        }
        let err = "gpu".parse::<DeviceChoice>().expect_err("not a device");
        assert!(err.contains("cpu, cuda or auto"), "{err}");
    }

    #[test]
    fn cpu_is_silent_and_cuda_without_a_gpu_falls_back_naming_each_part() {
        let cpu = Placement::resolve(DeviceChoice::Cpu);
        assert!(cpu.fallback_line().is_none());
        assert!(cpu.policy.is_cpu());
        for choice in [DeviceChoice::Cuda, DeviceChoice::Auto] {
            let p = Placement::resolve(choice);
            let Some(line) = p.fallback_line() else {
                // A GPU machine with every part on it.
                assert!(!p.policy.is_cpu() && p.renderer.is_some());
                continue;
            };
            assert!(line.starts_with(&format!("--device {choice}")), "{line}");
            if p.renderer.is_none() {
                assert!(line.contains("renderer ("), "{line}");
            }
            // On a machine without a GPU (CI), every part stays on the CPU
            // and the line says why for each.
            if p.policy.is_cpu() {
                assert!(line.contains("policy ("), "{line}");
            }
            if p.world_model == ExecutionProvider::Cpu {
                assert!(line.contains("world model ("), "{line}");
            }
            #[cfg(not(feature = "cuda"))]
            {
                assert!(p.policy.is_cpu());
                assert!(line.contains("without the `cuda` feature"), "{line}");
            }
        }
    }
}
