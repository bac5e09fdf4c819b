//! `wmrl label serve --run DIR`: the label page for a run whose anchor
//! rollouts people label (`labels.source = "human"`, docs/labels.md).
//! Loopback by default; bound elsewhere, it requires a token in the URL
//! (printed at start), so that only people given the URL can label.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use wmrl_train::labels::http::{LabelServer, serve};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: LabelCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum LabelCommand {
    /// Serve the label page of a running or resumable run
    /// (`labels.source = "human"`): one anchor rollout at a time with its
    /// agent-view and wrist videos, success / failure / unsure with keys
    /// and undo, the counts, and the calibration and the world model's
    /// agreement with the labels so far.
    Serve(ServeArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The run directory (`wmrl train --out DIR` with
    /// `--set labels.source="human"`).
    #[arg(long)]
    pub run: PathBuf,
    /// Address to listen on (port 0: any free port). Anything but loopback
    /// requires the token.
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub bind: String,
    /// The token the URL must carry (`?token=...`); one is made up when the
    /// address is not loopback and none is given.
    #[arg(long)]
    pub token: Option<String>,
    /// How long a rollout handed to one labeller is kept from the others.
    #[arg(long, default_value_t = 120)]
    pub lease_secs: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        LabelCommand::Serve(a) => serve_cmd(a),
    }
}

fn serve_cmd(a: ServeArgs) -> anyhow::Result<()> {
    let addr: SocketAddr = a
        .bind
        .parse()
        .with_context(|| format!("--bind {}: expected IP:PORT", a.bind))?;
    let token = match a.token {
        Some(t) => Some(t),
        None if !addr.ip().is_loopback() => Some(random_token()?),
        None => None,
    };
    let server = LabelServer::open(&a.run, token.clone(), Duration::from_secs(a.lease_secs))?;
    let listener = TcpListener::bind(addr).with_context(|| format!("listening on {}", a.bind))?;
    let local = listener.local_addr()?;
    let url = match &token {
        Some(t) => format!("http://{local}/?token={t}"),
        None => format!("http://{local}/"),
    };
    // The one line a script waits for.
    println!("label page for {}: {url}", a.run.display());
    serve(Arc::new(server), listener)
}

/// 128 random bits as hex.
fn random_token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom for a token")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}
