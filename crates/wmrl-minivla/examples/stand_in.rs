//! Write a stand-in MiniVLA directory (random weights, word-level
//! tokenizer: `wmrl_minivla::stand_in`) that `wmrl eval --policy DIR` runs,
//! for measuring the full-size path where no published checkpoint is at
//! hand. The full size in bf16 takes 2.5 GB on disk, in f32 5 GB.
//!
//!     cargo run --release -p wmrl-minivla --example stand_in -- \
//!         --out runs/minivla-stand-in [--preset full|scaled_down] [--dtype bf16|f32] [--seed 0]

use candle_core::DType;
use wmrl_minivla::MiniVlaConfig;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = arg(&args, "--out").ok_or("--out DIR is required")?;
    let cfg = match arg(&args, "--preset").as_deref().unwrap_or("full") {
        "full" => MiniVlaConfig::full(),
        "scaled_down" => MiniVlaConfig::scaled_down(),
        p => return Err(format!("--preset {p}: full or scaled_down").into()),
    };
    let dtype = match arg(&args, "--dtype").as_deref().unwrap_or("bf16") {
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        d => return Err(format!("--dtype {d}: bf16 or f32").into()),
    };
    let seed: u64 = arg(&args, "--seed").map_or(Ok(0), |s| s.parse())?;
    // The embedded simulator's instructions name these objects and places.
    let words = [
        "put",
        "pick",
        "up",
        "place",
        "the",
        "both",
        "and",
        "in",
        "on",
        "into",
        "of",
        "bowl",
        "plate",
        "basket",
        "box",
        "mug",
        "cup",
        "left",
        "right",
        "top",
        "drawer",
        "open",
        "close",
        "turn",
        "stove",
        "it",
        "caddy",
        "book",
        "back",
        "compartment",
    ];
    wmrl_minivla::stand_in::write_stand_in(std::path::Path::new(&out), &cfg, seed, dtype, &words)?;
    println!(
        "{out}: {} preset, {dtype:?}, {} parameters",
        cfg.preset,
        wmrl_minivla::MiniVla::parameter_count(&cfg)?
    );
    Ok(())
}
