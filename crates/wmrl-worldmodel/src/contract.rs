//! The progress-model contract (docs/worldmodel.md): names, element types and
//! shapes of a model's inputs and outputs, the metadata keys wmrl writes, and
//! the check a model must pass when it loads.
//!
//! The check is a pure function over a plain description of the model's
//! inputs and outputs, so it is tested without ONNX Runtime.

use crate::net::NetConfig;

pub const INPUT_FRAMES: &str = "frames";
pub const INPUT_INSTRUCTION: &str = "instruction";
pub const OUTPUT_PROGRESS: &str = "progress";
pub const OUTPUT_SUCCESS: &str = "success";

/// Contract tag written to the metadata.
pub const CONTRACT_TAG: &str = "wmrl-progress/1";
pub const META_CONTRACT: &str = "wmrl.contract";
pub const META_NUM_FRAMES: &str = "wmrl.num_frames";
pub const META_INSTRUCTION_LEN: &str = "wmrl.instruction_len";
pub const META_TOKENIZER: &str = "wmrl.tokenizer";
pub const META_HEIGHT: &str = "wmrl.height";
pub const META_WIDTH: &str = "wmrl.width";

/// Frames per rollout when neither the file nor its metadata fixes it.
pub const DEFAULT_NUM_FRAMES: usize = 8;
/// Robometer's maximum frames per rollout.
pub const MAX_NUM_FRAMES: usize = 8;
/// Instruction length when neither the file nor its metadata fixes it.
pub const DEFAULT_INSTRUCTION_LEN: usize = 64;

/// Element types the contract talks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    I64,
    Other,
}

impl std::fmt::Display for Elem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Elem::F32 => "float32",
            Elem::I64 => "int64",
            Elem::Other => "another type",
        })
    }
}

/// One input or output as the model file declares it (`-1`: dynamic).
#[derive(Debug, Clone, PartialEq)]
pub struct IoDesc {
    pub name: String,
    pub elem: Elem,
    /// `None` for non-tensor values.
    pub shape: Option<Vec<i64>>,
}

/// What the loader learned from a model that passed the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Frames per rollout, `T`.
    pub num_frames: usize,
    /// Instruction tokens, `L`.
    pub instruction_len: usize,
    /// Required frame size, when the model fixes it.
    pub frame_hw: Option<(usize, usize)>,
    /// Fixed batch size of the file, when it has one.
    pub fixed_batch: Option<usize>,
}

/// The metadata wmrl writes into every model it exports.
pub fn metadata_for(config: &NetConfig) -> Vec<(String, String)> {
    vec![
        (META_CONTRACT.into(), CONTRACT_TAG.into()),
        (META_NUM_FRAMES.into(), config.num_frames.to_string()),
        (
            META_INSTRUCTION_LEN.into(),
            config.instruction_len.to_string(),
        ),
        (META_TOKENIZER.into(), "wmrl-bytes".into()),
        (META_HEIGHT.into(), config.height.to_string()),
        (META_WIDTH.into(), config.width.to_string()),
    ]
}

fn shape_str(s: &Option<Vec<i64>>) -> String {
    match s {
        None => "not a tensor".into(),
        Some(d) => format!(
            "[{}]",
            d.iter()
                .map(|v| if *v < 0 {
                    "?".to_string()
                } else {
                    v.to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn names(list: &[IoDesc]) -> String {
    list.iter()
        .map(|d| format!("`{}` {} {}", d.name, d.elem, shape_str(&d.shape)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fixed(v: i64) -> Option<usize> {
    (v > 0).then_some(v as usize)
}

/// Check a model's inputs and outputs against the contract. `meta` looks up
/// a metadata value. The error says what was expected and what the file has.
pub fn check(
    inputs: &[IoDesc],
    outputs: &[IoDesc],
    meta: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<ModelShape, String> {
    let expected = "inputs `frames` float32 [B, T<=8, 3, H, W] and `instruction` int64 [B, L]; \
                    outputs `progress` float32 [B, T] and `success` float32 [B, T]";
    let mismatch = |what: String| {
        format!(
            "{what}; expected {expected}; the file has inputs {} and outputs {}",
            names(inputs),
            names(outputs)
        )
    };
    let find = |list: &[IoDesc], n: &str| list.iter().find(|d| d.name == n).cloned();
    let frames = find(inputs, INPUT_FRAMES).ok_or_else(|| mismatch("no input `frames`".into()))?;
    let instr =
        find(inputs, INPUT_INSTRUCTION).ok_or_else(|| mismatch("no input `instruction`".into()))?;
    if inputs.len() != 2 {
        return Err(mismatch(format!("{} inputs instead of 2", inputs.len())));
    }
    let fshape = match (&frames.elem, &frames.shape) {
        (Elem::F32, Some(s)) if s.len() == 5 => s.clone(),
        _ => {
            return Err(mismatch(
                "input `frames` is not a rank-5 float32 tensor".into(),
            ));
        }
    };
    if fshape[2] >= 0 && fshape[2] != 3 {
        return Err(mismatch(format!(
            "input `frames` has {} channels, not 3",
            fshape[2]
        )));
    }
    let ishape = match (&instr.elem, &instr.shape) {
        (Elem::I64, Some(s)) if s.len() == 2 => s.clone(),
        _ => {
            return Err(mismatch(
                "input `instruction` is not a rank-2 int64 tensor".into(),
            ));
        }
    };
    for out in [OUTPUT_PROGRESS, OUTPUT_SUCCESS] {
        let o = find(outputs, out).ok_or_else(|| mismatch(format!("no output `{out}`")))?;
        match (&o.elem, &o.shape) {
            (Elem::F32, Some(s)) if s.len() == 2 => {}
            _ => {
                return Err(mismatch(format!(
                    "output `{out}` is not a rank-2 float32 tensor"
                )));
            }
        }
    }
    let meta_usize = |k: &str| meta(k).and_then(|v| v.trim().parse::<usize>().ok());
    let num_frames = fixed(fshape[1])
        .or_else(|| meta_usize(META_NUM_FRAMES))
        .unwrap_or(DEFAULT_NUM_FRAMES);
    if num_frames > MAX_NUM_FRAMES {
        return Err(mismatch(format!(
            "T = {num_frames} frames, more than {MAX_NUM_FRAMES}"
        )));
    }
    let instruction_len = fixed(ishape[1])
        .or_else(|| meta_usize(META_INSTRUCTION_LEN))
        .unwrap_or(DEFAULT_INSTRUCTION_LEN);
    let frame_hw = match (fixed(fshape[3]), fixed(fshape[4])) {
        (Some(h), Some(w)) => Some((h, w)),
        _ => meta_usize(META_HEIGHT).zip(meta_usize(META_WIDTH)),
    };
    let fixed_batch = fixed(fshape[0]);
    if let (Some(a), Some(b)) = (fixed_batch, fixed(ishape[0]))
        && a != b
    {
        return Err(mismatch(format!(
            "batch sizes differ: frames {a}, instruction {b}"
        )));
    }
    Ok(ModelShape {
        num_frames,
        instruction_len,
        frame_hw,
        fixed_batch,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn io(name: &str, elem: Elem, shape: &[i64]) -> IoDesc {
        IoDesc {
            name: name.into(),
            elem,
            shape: Some(shape.to_vec()),
        }
    }

    fn good() -> (Vec<IoDesc>, Vec<IoDesc>) {
        (
            vec![
                io("frames", Elem::F32, &[-1, 8, 3, 64, 48]),
                io("instruction", Elem::I64, &[-1, 64]),
            ],
            vec![
                io("progress", Elem::F32, &[-1, 8]),
                io("success", Elem::F32, &[-1, 8]),
            ],
        )
    }

    #[test]
    fn accepts_the_contract_and_reads_fixed_dims() {
        let (i, o) = good();
        let s = check(&i, &o, &|_| None).unwrap();
        assert_eq!(s.num_frames, 8);
        assert_eq!(s.instruction_len, 64);
        assert_eq!(s.frame_hw, Some((64, 48)));
        assert_eq!(s.fixed_batch, None);
    }

    #[test]
    fn dynamic_dims_fall_back_to_metadata() {
        let (mut i, o) = good();
        i[0].shape = Some(vec![-1, -1, 3, -1, -1]);
        i[1].shape = Some(vec![-1, -1]);
        let meta = |k: &str| match k {
            META_NUM_FRAMES => Some("4".to_string()),
            META_INSTRUCTION_LEN => Some("32".to_string()),
            _ => None,
        };
        let s = check(&i, &o, &meta).unwrap();
        assert_eq!((s.num_frames, s.instruction_len, s.frame_hw), (4, 32, None));
    }

    #[test]
    fn mismatches_say_what_was_expected_and_what_the_file_has() {
        let (mut i, o) = good();
        i[1] = io("tokens", Elem::I64, &[-1, 64]);
        let e = check(&i, &o, &|_| None).unwrap_err();
        assert!(e.contains("no input `instruction`"), "{e}");
        assert!(e.contains("`tokens` int64 [?, 64]"), "{e}");
        assert!(e.contains("expected inputs `frames`"), "{e}");

        let (mut i, o) = good();
        i[0].elem = Elem::Other;
        assert!(
            check(&i, &o, &|_| None)
                .unwrap_err()
                .contains("rank-5 float32")
        );

        let (mut i, o) = good();
        i[0].shape = Some(vec![-1, 16, 3, 8, 8]);
        assert!(
            check(&i, &o, &|_| None)
                .unwrap_err()
                .contains("more than 8")
        );

        let (i, mut o) = good();
        o[1].shape = Some(vec![-1]);
        assert!(
            check(&i, &o, &|_| None)
                .unwrap_err()
                .contains("output `success`")
        );

        let (i, mut o) = good();
        o.remove(0);
        assert!(
            check(&i, &o, &|_| None)
                .unwrap_err()
                .contains("no output `progress`")
        );
    }
}
