//! What every wmrl command shares around a run, whatever its track:
//!
//! - [`config`]: one loader for every command's TOML config: `extends =
//!   "other.toml"` chains, `--set section.key=value` overrides, one typed
//!   parse (a type with `#[serde(deny_unknown_fields)]` refuses unknown
//!   keys, naming them), and the settings comparison that names the first
//!   differing key;
//! - [`format`]: the layout version (`format = N`) every record carries,
//!   and the one migration per recorded type that reads older layouts;
//! - [`journal`]: the run directory as the shared loop's journal: step
//!   records and whole checkpoints with one state layout ([`Saved`]);
//! - [`records`]: JSONL record files (append, read, cut back to a
//!   checkpoint's length) and atomic writes;
//! - [`rundir`]: the run directory every kind of run writes, its one
//!   settings file (`run.toml`), and where a bench keeps each run
//!   (`<out>/<arm>/seed<k>/`);
//! - [`clock`]: the wall and process-CPU time every ledger records;
//! - [`progress`]: progress of long work, a bar on a terminal and plain
//!   lines in a log;
//! - [`bench`]: what both tracks' benches share: the `<arm>/seed<k>`
//!   fan-out and resume, progress in training steps across runs, pairing by
//!   seed and the skeleton of report.md.

pub mod bench;
pub mod clock;
pub mod config;
pub mod device;
pub mod format;
pub mod journal;
pub mod process;
pub mod progress;
pub mod records;
pub mod rundir;

pub use config::{
    ConfigError, apply_set, differing_key, first_difference, first_difference_except, load,
    load_optional, load_over_defaults, load_versioned, parse, read_doc, value_at,
};
pub use device::DeviceChoice;
pub use format::{Absent, Versioned};
pub use journal::{Opened, Resume, RunJournal, Saved};
pub use progress::Progress;
pub use records::{Marks, RecordError, append, atomic_write, cut_back, len_of, read_all};
pub use rundir::{Against, Recorded, RunDir, RunSettings, SETTINGS_FILE, differs};
