//! Progress of long work (SFT, GRPO training, benches, demo collection):
//! an indicatif bar on a terminal; when stderr is not a terminal (a log
//! file, CI), a plain line with position, rate and ETA at least every
//! `WMRL_PROGRESS_SECS` seconds (default 30), and no ANSI codes.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Seconds between plain progress lines when stderr is not a terminal.
pub fn line_interval() -> Duration {
    let secs = std::env::var("WMRL_PROGRESS_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(30.0);
    Duration::from_secs_f64(secs)
}

struct State {
    pos: u64,
    msg: String,
    /// Position when this process started working: what `set_position`
    /// set before the first line (a resumed run's finished work), so the
    /// rate counts only this session's work.
    start: u64,
    printed: bool,
}

/// A progress reporter; see the module docs. Disabled, it prints nothing.
pub struct Progress {
    bar: ProgressBar,
    state: Arc<Mutex<State>>,
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Progress {
    /// `label` names the work, `unit` what `total` counts (e.g. "steps").
    pub fn new(label: &str, total: u64, unit: &str, enabled: bool) -> Self {
        Self::with_terminal(label, total, unit, enabled, std::io::stderr().is_terminal())
    }

    fn with_terminal(label: &str, total: u64, unit: &str, enabled: bool, terminal: bool) -> Self {
        let state = Arc::new(Mutex::new(State {
            pos: 0,
            msg: String::new(),
            start: 0,
            printed: false,
        }));
        if !enabled || !terminal {
            let ticker = enabled.then(|| {
                let (tx, rx) = channel::<()>();
                let st = Arc::clone(&state);
                let (label, unit) = (label.to_string(), unit.to_string());
                let every = line_interval();
                let handle = std::thread::spawn(move || {
                    let t0 = Instant::now();
                    loop {
                        match rx.recv_timeout(every) {
                            Err(RecvTimeoutError::Timeout) => {
                                let (pos, start, msg) = match st.lock() {
                                    Ok(mut s) => {
                                        s.printed = true;
                                        (s.pos, s.start, s.msg.clone())
                                    }
                                    Err(_) => return,
                                };
                                let line = progress_line(
                                    &label,
                                    pos,
                                    total,
                                    &unit,
                                    pos.saturating_sub(start),
                                    t0.elapsed(),
                                    &msg,
                                );
                                let _ = writeln!(std::io::stderr(), "{line}");
                            }
                            _ => return,
                        }
                    }
                });
                (tx, handle)
            });
            return Self {
                bar: ProgressBar::hidden(),
                state,
                ticker,
            };
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}} ({{elapsed}}, ETA {{eta}})"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(label.to_string());
        Self {
            bar,
            state,
            ticker: None,
        }
    }

    /// Position reached so far (before the first progress line, so a resumed
    /// run's rate counts only this session's work).
    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
        if let Ok(mut s) = self.state.lock() {
            s.pos = pos;
            if !s.printed {
                s.start = pos;
            }
        }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if let Ok(mut s) = self.state.lock() {
            s.pos += n;
        }
    }

    pub fn set_message(&self, msg: impl Into<String>) {
        let msg = msg.into();
        self.bar.set_message(msg.clone());
        if let Ok(mut s) = self.state.lock() {
            s.msg = msg;
        }
    }

    pub fn finish(&self) {
        self.bar.finish();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.ticker.take() {
            let _ = tx.send(());
            let _ = handle.join();
        }
    }
}

/// `label: 12/32 steps, 1.4 steps/min, ETA 14m 10s; msg`.
pub fn progress_line(
    label: &str,
    pos: u64,
    total: u64,
    unit: &str,
    done_here: u64,
    elapsed: Duration,
    msg: &str,
) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        done_here as f64 / secs
    } else {
        0.0
    };
    let eta = if rate > 0.0 && total >= pos {
        format_secs((total - pos) as f64 / rate)
    } else {
        "unknown".to_string()
    };
    let mut line = format!(
        "{label}: {pos}/{total} {unit}, {:.2} {unit}/min, elapsed {}, ETA {eta}",
        rate * 60.0,
        format_secs(secs)
    );
    if !msg.is_empty() {
        line.push_str("; ");
        line.push_str(msg);
    }
    line
}

fn format_secs(s: f64) -> String {
    let s = s.round() as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m {sec:02}s"),
        (h, m, _) => format!("{h}h {m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_state_position_rate_and_eta() {
        let l = progress_line("train", 12, 32, "steps", 6, Duration::from_secs(180), "ok");
        assert_eq!(
            l,
            "train: 12/32 steps, 2.00 steps/min, elapsed 3m 00s, ETA 10m 00s; ok"
        );
        let l = progress_line("sft", 0, 10, "steps", 0, Duration::from_secs(5), "");
        assert!(l.ends_with("ETA unknown"), "{l}");
        assert!(!l.contains('\u{1b}'), "no ANSI codes");
    }

    #[test]
    fn off_a_terminal_a_ticker_runs_and_stops() {
        let p = Progress::with_terminal("t", 3, "steps", true, false);
        assert!(p.bar.is_hidden());
        assert!(p.ticker.is_some());
        p.inc(2);
        p.set_message("m");
        drop(p); // joins the ticker: a hang fails the test by timeout
        let q = Progress::with_terminal("t", 3, "steps", false, false);
        assert!(q.ticker.is_none(), "disabled: no output at all");
    }

    #[test]
    fn a_resumed_position_is_not_counted_as_this_sessions_work() {
        // The ticker may start before the resumed position is set; the
        // rate must still count only what is done after it.
        let p = Progress::with_terminal("t", 750, "steps", true, false);
        p.set_position(68);
        p.inc(2);
        let s = p.state.lock().expect("state");
        assert_eq!((s.pos, s.start), (70, 68));
    }
}
