//! The subset of the ONNX protobuf schema (`onnx/onnx.proto`, IR version 8)
//! that wmrl's exporter writes, as hand-written `prost` messages with the
//! official field numbers (no `protoc` is available on the build machines).
//!
//! Only what the exporter needs is declared; unknown fields in a file read
//! back are skipped by prost. This module never interprets a model: ONNX
//! Runtime does that.

/// `TensorProto.DataType.FLOAT`.
pub const DT_FLOAT: i32 = 1;
/// `TensorProto.DataType.INT64`.
pub const DT_INT64: i32 = 7;

/// `AttributeProto.AttributeType` values.
pub mod attr_type {
    pub const FLOAT: i32 = 1;
    pub const INT: i32 = 2;
    pub const INTS: i32 = 7;
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "4")]
    pub domain: String,
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(string, tag = "10")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(string, tag = "7")]
    pub domain: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "6")]
    pub doc_string: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// `oneof value { Tensor tensor_type = 1; ... }`: only tensors here.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
    #[prost(string, tag = "6")]
    pub denotation: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    #[prost(oneof = "DimensionValue", tags = "1, 2")]
    pub value: Option<DimensionValue>,
    #[prost(string, tag = "3")]
    pub denotation: String,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum DimensionValue {
    #[prost(int64, tag = "1")]
    DimValue(i64),
    #[prost(string, tag = "2")]
    DimParam(String),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    #[prost(string, tag = "12")]
    pub doc_string: String,
}

impl TensorProto {
    /// A float32 initializer stored little-endian in `raw_data`.
    pub fn from_f32(name: &str, dims: &[i64], data: &[f32]) -> Self {
        Self {
            dims: dims.to_vec(),
            data_type: DT_FLOAT,
            name: name.to_string(),
            raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            doc_string: String::new(),
        }
    }

    /// An int64 initializer stored little-endian in `raw_data`.
    pub fn from_i64(name: &str, dims: &[i64], data: &[i64]) -> Self {
        Self {
            dims: dims.to_vec(),
            data_type: DT_INT64,
            name: name.to_string(),
            raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            doc_string: String::new(),
        }
    }
}

impl AttributeProto {
    pub fn int(name: &str, v: i64) -> Self {
        Self {
            name: name.into(),
            r#type: attr_type::INT,
            i: v,
            ..Default::default()
        }
    }

    pub fn ints(name: &str, v: &[i64]) -> Self {
        Self {
            name: name.into(),
            r#type: attr_type::INTS,
            ints: v.to_vec(),
            ..Default::default()
        }
    }

    pub fn float(name: &str, v: f32) -> Self {
        Self {
            name: name.into(),
            r#type: attr_type::FLOAT,
            f: v,
            ..Default::default()
        }
    }
}

impl ValueInfoProto {
    /// A tensor value; `None` dimensions become symbolic (`dim_param`) with
    /// the given name.
    pub fn tensor(name: &str, elem_type: i32, dims: &[Result<i64, &str>]) -> Self {
        let dim = dims
            .iter()
            .map(|d| Dimension {
                value: Some(match d {
                    Ok(v) => DimensionValue::DimValue(*v),
                    Err(p) => DimensionValue::DimParam((*p).to_string()),
                }),
                denotation: String::new(),
            })
            .collect();
        Self {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type,
                    shape: Some(TensorShapeProto { dim }),
                }),
                denotation: String::new(),
            }),
            doc_string: String::new(),
        }
    }
}
