//! Process-wide settings a command makes before its first thread starts.
#![allow(unsafe_code)]

/// Keep freed memory in the process instead of handing it back to the
/// kernel. candle allocates a fresh buffer for every tensor op; glibc's
/// default serves the large ones with mmap and unmaps them on free, so every
/// policy call faulted and zeroed its pages again. On the run measured in
/// docs/results.md ("Speed (point 3)") kernel time fell from 4.5 to 0.6 of
/// about 27 CPU seconds and peak memory did not move. Results are unchanged
/// bit for bit. Call it first in
/// `main`, before any other thread exists. A no-op off glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters, and no other thread
    // is allocating yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
