//! `wmrl-tests`: the workspace's cross-crate end-to-end tests, as a package
//! of its own (as rapier keeps its examples3d/). The tests are its test
//! targets (`cargo test -p wmrl-tests`, or `cargo test --workspace`):
//!
//! - `e2e`: tiny GRPO runs of every arm through the embedded simulator, a
//!   candle policy, an ONNX world model through ONNX Runtime and the
//!   correction loop (ledger, flat groups, frozen parameters, resume);
//! - `human_labels`: runs whose anchor labels come from people through the
//!   label files (a waiting run ends as the simulator run; late labels are
//!   taken once);
//! - `shipped_policy`: models/policy-tiny loads and solves the episodes its
//!   model card records.
//!
//! The library itself is empty: Cargo needs one target that is not a test.
