//! One module per subcommand: `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod autoresearch;
pub mod bench;
pub mod bench_sim;
pub mod demos;
pub mod episodes;
pub mod eval;
pub mod export;
pub mod label;
pub mod quickstart;
pub mod serve_sim;
pub mod sft;
pub mod train;
pub mod wm;

use clap::builder::TypedValueParser;

/// `--arm` of the robot track: one of the core's arms ([`wmrl_core::Arm`]),
/// each listed in `--help` and completions; any other name is refused
/// where it is parsed.
pub fn arm_parser() -> impl TypedValueParser<Value = wmrl_core::Arm> {
    clap::builder::PossibleValuesParser::new(wmrl_core::Arm::ALL.map(wmrl_core::Arm::name))
        .try_map(|s| s.parse::<wmrl_core::Arm>())
}

/// `--arm` of the AutoResearch track: `real`, `wm` or `wmrl`
/// ([`wmrl_autoresearch::arm`]), listed in `--help`.
pub fn ar_arm_parser() -> impl TypedValueParser<Value = wmrl_core::Arm> {
    clap::builder::PossibleValuesParser::new(
        wmrl_autoresearch::arm::AR_ARMS.map(wmrl_autoresearch::arm::ar_name),
    )
    .try_map(|s| wmrl_autoresearch::arm::parse_ar_arm(&s))
}

/// The running `wmrl` binary, for the child processes of `bench` and
/// `quickstart`. On Linux `/proc/self/exe`, which executes this very binary
/// even after a rebuild replaced the file on disk (a long bench keeps its
/// version, instead of failing with "No such file or directory" on the
/// next run it starts); elsewhere `current_exe()`.
pub fn self_exe() -> anyhow::Result<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    {
        Ok(std::path::PathBuf::from("/proc/self/exe"))
    }
    #[cfg(not(target_os = "linux"))]
    {
        use anyhow::Context;
        std::env::current_exe().context("locating the wmrl binary")
    }
}

/// A child of `bench` or `quickstart`: on Linux it gets SIGTERM when the
/// parent dies (killed or crashed), so no orphaned run keeps writing into a
/// run directory a restarted bench then resumes.
#[allow(unsafe_code)] // pre_exec: the only way to set PR_SET_PDEATHSIG
pub fn child_command() -> anyhow::Result<std::process::Command> {
    #[allow(unused_mut)]
    let mut cmd = std::process::Command::new(self_exe()?);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    Ok(cmd)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_process_whose_binary_was_replaced_still_starts_itself() {
        // What a bench relies on: a copy of a shell deletes its own file
        // (as a rebuild replaces target/release/wmrl) and then starts a
        // child through `/proc/self/exe`, the path `self_exe` gives.
        let exe = super::self_exe().expect("exe");
        let tmp = tempfile::tempdir().expect("tmp");
        let sh = tmp.path().join("sh-copy");
        std::fs::copy("/bin/sh", &sh).expect("copy /bin/sh");
        let script = format!(
            "rm -f '{}' && {} -c 'echo alive'",
            sh.display(),
            exe.display()
        );
        let out = std::process::Command::new(&sh)
            .arg("-c")
            .arg(script)
            .output()
            .expect("run the copy");
        assert!(!sh.exists(), "the copy deleted its own file");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "alive",
            "{out:?}"
        );
    }
}

#[cfg(test)]
mod arm_tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_parser = super::arm_parser())]
        arm: wmrl_core::Arm,
    }

    #[test]
    fn every_core_arm_parses_by_name_and_others_are_refused_with_the_list() {
        for arm in wmrl_core::Arm::ALL {
            let cli = Cli::try_parse_from(["wmrl", "--arm", arm.name()]).expect("an arm");
            assert_eq!(cli.arm, arm);
        }
        let e = Cli::try_parse_from(["wmrl", "--arm", "real"])
            .err()
            .expect("the AutoResearch name is not a robot arm")
            .to_string();
        assert!(e.contains("[possible values: sparse, sparse_scarce"), "{e}");
    }
}
