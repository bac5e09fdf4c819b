//! Write synthetic episodes (frames encode progress) for a smoke run of
//! `wmrl wm train/export/report/bench` without the simulator:
//! `cargo run -p wmrl-worldmodel --example synth_episodes -- DIR [N] [SIZE]`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: synth_episodes DIR [N] [SIZE]")?);
    let n: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(40);
    let size: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(64);
    for i in 0..n {
        let ep = wmrl_worldmodel::synthetic::episode(i, size, 20 + (i as usize % 17), i % 3 != 0);
        wmrl_env::write_episode(&dir, i as usize, &ep)?;
    }
    println!(
        "wrote {n} synthetic episodes of {size}x{size} to {}",
        dir.display()
    );
    Ok(())
}
