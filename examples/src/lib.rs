//! `wmrl-examples`: runnable programs that span crates (the crates' own
//! examples stay in the crates).
//!
//! - `cargo run --release -p wmrl-examples --example sim_demos -- OUT PER_TASK [NOISE] [INIT_STATES]`:
//!   expert demonstrations from the embedded simulator;
//! - `cargo run --release -p wmrl-examples --example sim_sft -- DEMOS OUT STEPS ...`:
//!   SFT of a policy on them, evaluated in the simulator;
//! - `cargo run --release -p wmrl-examples --example sim_check -- RUN DEMO_EPISODE`:
//!   a demonstration's actions against the policy's on the same state;
//! - `cargo bench -p wmrl-examples --bench bridge [-- --libero]`: stepping
//!   in-process against ZeroMQ worker processes (and the real LIBERO server).
//!
//! The library itself is empty: Cargo needs one target.
