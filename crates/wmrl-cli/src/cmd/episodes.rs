use std::path::PathBuf;

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory holding `ep_NNNNNN.msgpack` files.
    pub dir: PathBuf,
    /// Print one JSON object per episode instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let paths = wmrl_env::list_episodes(&args.dir)
        .with_context(|| format!("listing {}", args.dir.display()))?;
    if !args.json {
        println!(
            "{:<22} {:>4} {:>5} {:>6} {:>7}  source",
            "file", "task", "init", "steps", "success"
        );
    }
    let mut n_success = 0usize;
    for path in &paths {
        let ep = wmrl_env::read_episode(path)?;
        n_success += usize::from(ep.success);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        if args.json {
            let v = serde_json::json!({
                "file": name, "task": ep.task, "init_state": ep.init_state,
                "steps": ep.steps.len(), "success": ep.success,
                "final_progress": ep.final_progress, "source": ep.source,
            });
            println!("{v}");
        } else {
            println!(
                "{:<22} {:>4} {:>5} {:>6} {:>7}  {}",
                name,
                ep.task,
                ep.init_state,
                ep.steps.len(),
                ep.success,
                ep.source
            );
        }
    }
    if !args.json {
        println!("{} episodes, {} successful", paths.len(), n_success);
    }
    Ok(())
}
