//! Writing the trained [`ProgressNet`](crate::ProgressNet) as a real ONNX
//! file (opset 17, IR version 8), graph built here from the candle weights.
//!
//! The graph is op-for-op the candle forward pass; any change to one must be
//! made to the other (the parity tests catch a drift). Metadata records the
//! contract (frames, instruction length, frame size) so loaders need not
//! guess.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;
use candle_nn::VarMap;
use prost::Message;

use crate::contract::{self, INPUT_FRAMES, INPUT_INSTRUCTION, OUTPUT_PROGRESS, OUTPUT_SUCCESS};
use crate::net::{CONV_K, CONV_PAD, CONV_STRIDE, NetConfig};
use crate::{Result, WmError};
use wmrl_onnx::onnx_proto::*;
use wmrl_onnx::{model_proto, write_atomic};

struct Graph {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    weights: HashMap<String, Tensor>,
}

impl Graph {
    fn node(&mut self, op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) {
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
            name: format!("{op}_{}", self.nodes.len()),
            op_type: op.to_string(),
            attribute: attrs,
            ..Default::default()
        });
    }

    fn weight(&self, name: &str) -> Result<&Tensor> {
        self.weights
            .get(name)
            .ok_or_else(|| WmError::Config(format!("export: the weights have no `{name}`")))
    }

    /// Add a weight as an initializer, transposed for MatMul when asked.
    fn init(&mut self, name: &str, transpose: bool) -> Result<String> {
        let mut t = self.weight(name)?.clone();
        if transpose {
            t = t.t()?.contiguous()?;
        }
        let dims: Vec<i64> = t.dims().iter().map(|&d| d as i64).collect();
        let data = t.flatten_all()?.to_vec1::<f32>()?;
        let init_name = if transpose {
            format!("{name}_t")
        } else {
            name.to_string()
        };
        self.inits
            .push(TensorProto::from_f32(&init_name, &dims, &data));
        Ok(init_name)
    }

    fn const_i64(&mut self, name: &str, dims: &[i64], data: &[i64]) -> String {
        self.inits.push(TensorProto::from_i64(name, dims, data));
        name.to_string()
    }
}

/// Build the ONNX model bytes for `config` with the weights in `varmap`.
/// `extra_metadata` is added to the model's metadata properties.
pub fn onnx_bytes(
    config: &NetConfig,
    varmap: &VarMap,
    extra_metadata: &[(String, String)],
) -> Result<Vec<u8>> {
    config.validate()?;
    let weights = varmap
        .data()
        .lock()
        .map_err(|_| WmError::Config("export: weight map lock poisoned".into()))?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let mut g = Graph {
        nodes: Vec::new(),
        inits: Vec::new(),
        weights,
    };
    let (t, h, w, d) = (
        config.num_frames as i64,
        config.height as i64,
        config.width as i64,
        config.hidden as i64,
    );

    frame_features(&mut g, config, (t, h, w, d))?;
    text_features(&mut g)?;
    heads(&mut g, d)?;

    let batch: std::result::Result<i64, &str> = Err("batch");
    let graph = GraphProto {
        node: g.nodes,
        name: "wmrl_progress".into(),
        initializer: g.inits,
        doc_string: "wmrl progress model: frames + instruction -> per-frame progress, success"
            .into(),
        input: vec![
            ValueInfoProto::tensor(INPUT_FRAMES, DT_FLOAT, &[batch, Ok(t), Ok(3), Ok(h), Ok(w)]),
            ValueInfoProto::tensor(
                INPUT_INSTRUCTION,
                DT_INT64,
                &[batch, Ok(config.instruction_len as i64)],
            ),
        ],
        output: vec![
            ValueInfoProto::tensor(OUTPUT_PROGRESS, DT_FLOAT, &[batch, Ok(t)]),
            ValueInfoProto::tensor(OUTPUT_SUCCESS, DT_FLOAT, &[batch, Ok(t)]),
        ],
        value_info: vec![],
    };
    let mut metadata = contract::metadata_for(config);
    metadata.extend(extra_metadata.iter().cloned());
    let model = model_proto(
        graph,
        "Robometer-style progress model trained and exported by wmrl".into(),
        metadata,
    );
    Ok(model.encode_to_vec())
}

/// Frames to per-frame features `feat_btd` `[B, T, hidden]`: (pool,)
/// conv + ReLU stack, flatten, linear + ReLU.
fn frame_features(
    g: &mut Graph,
    config: &NetConfig,
    (t, h, w, d): (i64, i64, i64, i64),
) -> Result<()> {
    let s = g.const_i64("shape_frames", &[4], &[-1, 3, h, w]);
    g.node("Reshape", &[INPUT_FRAMES, &s], "x_in", vec![]);
    let mut x = "x_in".to_string();
    if config.pool > 1 {
        let p = config.pool as i64;
        g.node(
            "AveragePool",
            &[&x],
            "x_pool",
            vec![
                AttributeProto::ints("kernel_shape", &[p, p]),
                AttributeProto::ints("strides", &[p, p]),
            ],
        );
        x = "x_pool".into();
    }
    for i in 0..config.channels.len() {
        let wn = g.init(&format!("conv{i}.weight"), false)?;
        let bn = g.init(&format!("conv{i}.bias"), false)?;
        let (k, st, pd) = (CONV_K as i64, CONV_STRIDE as i64, CONV_PAD as i64);
        let out = format!("conv{i}_out");
        g.node(
            "Conv",
            &[&x, &wn, &bn],
            &out,
            vec![
                AttributeProto::ints("kernel_shape", &[k, k]),
                AttributeProto::ints("strides", &[st, st]),
                AttributeProto::ints("pads", &[pd, pd, pd, pd]),
                AttributeProto::ints("dilations", &[1, 1]),
                AttributeProto::int("group", 1),
            ],
        );
        let r = format!("conv{i}_relu");
        g.node("Relu", &[&out], &r, vec![]);
        x = r;
    }
    g.node(
        "Flatten",
        &[&x],
        "flat",
        vec![AttributeProto::int("axis", 1)],
    );
    let (fw, fb) = (g.init("fc.weight", false)?, g.init("fc.bias", false)?);
    g.node(
        "Gemm",
        &["flat", &fw, &fb],
        "fc_out",
        vec![AttributeProto::int("transB", 1)],
    );
    g.node("Relu", &["fc_out"], "feat", vec![]);
    let s = g.const_i64("shape_btd", &[3], &[-1, t, d]);
    g.node("Reshape", &["feat", &s], "feat_btd", vec![]);

    Ok(())
}

/// The instruction to `text_feat`: token embeddings, their mean, linear.
fn text_features(g: &mut Graph) -> Result<()> {
    let emb = g.init("emb.weight", false)?;
    g.node(
        "Gather",
        &[&emb, INPUT_INSTRUCTION],
        "tok_emb",
        vec![AttributeProto::int("axis", 0)],
    );
    g.node(
        "ReduceMean",
        &["tok_emb"],
        "text_mean",
        vec![
            AttributeProto::ints("axes", &[1]),
            AttributeProto::int("keepdims", 0),
        ],
    );
    let (tw, tb) = (g.init("text.weight", false)?, g.init("text.bias", false)?);
    g.node(
        "Gemm",
        &["text_mean", &tw, &tb],
        "text_feat",
        vec![AttributeProto::int("transB", 1)],
    );

    Ok(())
}

/// The context (text and first frame), per-frame hidden layer, and the
/// progress and success outputs.
fn heads(g: &mut Graph, d: i64) -> Result<()> {
    let zero = g.const_i64("idx0", &[], &[0]);
    g.node(
        "Gather",
        &["feat_btd", &zero],
        "feat0",
        vec![AttributeProto::int("axis", 1)],
    );
    let first = g.init("first.weight", true)?;
    g.node("MatMul", &["feat0", &first], "first_feat", vec![]);
    g.node("Add", &["text_feat", "first_feat"], "ctx", vec![]);
    let s = g.const_i64("shape_b1d", &[3], &[-1, 1, d]);
    g.node("Reshape", &["ctx", &s], "ctx_b1d", vec![]);

    let frame_w = g.init("frame.weight", true)?;
    let frame_b = g.init("frame.bias", false)?;
    g.node("MatMul", &["feat_btd", &frame_w], "frame_mm", vec![]);
    g.node("Add", &["frame_mm", &frame_b], "frame_lin", vec![]);
    g.node("Add", &["frame_lin", "ctx_b1d"], "hidden_pre", vec![]);
    g.node("Relu", &["hidden_pre"], "hidden", vec![]);
    let head_w = g.init("head.weight", true)?;
    let head_b = g.init("head.bias", false)?;
    g.node("MatMul", &["hidden", &head_w], "head_mm", vec![]);
    g.node("Add", &["head_mm", &head_b], "logits", vec![]);
    g.node("Sigmoid", &["logits"], "probs", vec![]);
    let one = g.const_i64("idx1", &[], &[1]);
    g.node(
        "Gather",
        &["probs", &zero],
        OUTPUT_PROGRESS,
        vec![AttributeProto::int("axis", 2)],
    );
    g.node(
        "Gather",
        &["probs", &one],
        OUTPUT_SUCCESS,
        vec![AttributeProto::int("axis", 2)],
    );

    Ok(())
}

/// Write the ONNX file atomically (temporary name, then rename).
pub fn export_onnx(
    config: &NetConfig,
    varmap: &VarMap,
    path: &Path,
    extra_metadata: &[(String, String)],
) -> Result<()> {
    Ok(write_atomic(
        path,
        &onnx_bytes(config, varmap, extra_metadata)?,
    )?)
}
