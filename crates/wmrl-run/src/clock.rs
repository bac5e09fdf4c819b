//! Wall and CPU time of a phase. Costs are reported as process CPU time
//! (shared/BENCHMARKS.md, "Cost"): wall time moves with whatever else the
//! machine runs, CPU time does not.
#![allow(unsafe_code)]

use std::time::Instant;

/// CPU seconds this process has used so far, all threads together
/// (`CLOCK_PROCESS_CPUTIME_ID`); 0 where the clock is unavailable.
pub fn process_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A started phase: [`Stopwatch::elapsed`] gives its wall and CPU seconds.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    wall: Instant,
    cpu: f64,
}

impl Stopwatch {
    pub fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: process_cpu_secs(),
        }
    }

    /// `(wall seconds, CPU seconds)` since the start.
    pub fn elapsed(&self) -> (f64, f64) {
        (
            self.wall.elapsed().as_secs_f64(),
            (process_cpu_secs() - self.cpu).max(0.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_counts_work_not_sleep() {
        let w = Stopwatch::start();
        std::thread::sleep(std::time::Duration::from_millis(60));
        let (wall, cpu) = w.elapsed();
        assert!(wall >= 0.06, "{wall}");
        assert!(cpu < 0.05, "sleeping is not CPU time: {cpu}");
        // A busy loop is: its CPU time grows to 0.03 s, however long a
        // loaded machine makes it wait for a core (bounded at 60 s of wall).
        let w = Stopwatch::start();
        let mut x = 0u64;
        while w.elapsed().1 < 0.03 && w.elapsed().0 < 60.0 {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        }
        let (wall, cpu) = w.elapsed();
        assert!(cpu >= 0.03, "a busy loop is CPU time: {cpu} in {wall} s");
    }
}
