//! Keeping the operator's resident memory close to what it holds.
//!
//! glibc's allocator keeps memory that was freed (a relist's old objects, a burst of reconciles)
//! in per-thread arenas instead of giving it back, so an idle operator's resident size stays at
//! its peak. Fewer arenas and a periodic trim return it; other allocators are left alone.

use std::time::Duration;

/// How often freed memory is handed back while the operator runs.
pub const TRIM_EVERY: Duration = Duration::from_secs(20);

/// Caps glibc's arenas at two: the operator's work is a couple of runtime threads, and every
/// extra arena keeps its own freed memory.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before other threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Freed memory below this stays with the allocator: giving back a little only makes the next
/// allocations fault their pages in again. It does not grow with the heap: a share of a large
/// heap left free is resident memory an idle operator does not use.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
const TRIM_AT_LEAST: usize = 8 << 20;

/// Returns freed heap memory to the system, every [`TRIM_EVERY`], for as long as it runs, when
/// there is at least [`TRIM_AT_LEAST`] of it.
pub async fn trim_periodically() {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallinfo2 reads the allocator's counters; malloc_trim only releases free pages
        // of its own heap.
        unsafe {
            let heap = libc::mallinfo2();
            if heap.fordblks >= TRIM_AT_LEAST {
                libc::malloc_trim(0);
            }
        }
    }
}
