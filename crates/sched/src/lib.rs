//! Scheduling of data-plane threads: the real-time class and timer slack.
//!
//! A paced sender keeps its rate only if it runs when its next datagram is due. On a loaded host (the
//! receiver, a disk writer, other transfers and, in the benchmarks, the path emulator on the same two
//! cores) an ordinary thread waits its turn in the run queue, and the sending time it loses there is not
//! made up. `SCHED_FIFO` at a low priority puts the thread ahead of every ordinary thread while staying
//! below interrupt handling and any real-time thread of higher priority (a recorder's capture threads
//! should be given one). The threads put there never spin: they sleep between batches, so they take
//! only the CPU their work needs, and the kernel's real-time throttling (`sched_rt_runtime_us`) leaves
//! the others at least 5% even if one did.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;

/// The priority vlbiflow's data-plane threads take in the real-time class (`--realtime`): above every
/// ordinary thread, below the 10 of `vlbiflow pathemu --realtime` and the 50 the kernel gives its
/// threaded interrupt handlers.
pub const DATA_PLANE_PRIORITY: i32 = 5;

/// The priority of the threads that do the data plane's heavy work in bursts (reading and hashing a
/// sender's windows, writing a receiver's chunks): in the real-time class, still above every ordinary
/// thread, but below the threads that pace and receive. Threads of one `SCHED_FIFO` priority never
/// preempt each other, so a reading thread hashing an 8 MiB window (6 ms of CPU on a 2-vCPU VM of
/// 2026-11-27) at the pacing thread's priority held it off its core: the sender's pacing thread waited
/// 1.67 s in the run queue in a 15 s push.
pub const BULK_PRIORITY: i32 = DATA_PLANE_PRIORITY - 1;

/// The calling thread's scheduling policy and priority before [`enter_realtime`]; dropping the guard
/// puts them back.
#[derive(Debug)]
#[must_use = "the thread leaves the real-time class when the guard is dropped"]
pub struct RealtimeGuard {
    policy: libc::c_int,
    priority: libc::c_int,
}

impl Drop for RealtimeGuard {
    fn drop(&mut self) {
        let _ = set_scheduler(self.policy, self.priority);
    }
}

fn set_scheduler(policy: libc::c_int, priority: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param that outlives the call.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts the calling thread in the `SCHED_FIFO` class at `priority` (1-99) until the guard is dropped.
/// Not permitted without root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` (`ulimit -r`) of at least
/// `priority`: the error then says so.
pub fn enter_realtime(priority: i32) -> io::Result<RealtimeGuard> {
    // SAFETY: pid 0 is the calling thread; sched_getscheduler takes no pointer.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid, writable sched_param.
    if unsafe { libc::sched_getparam(0, &mut param) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let prev = RealtimeGuard {
        policy,
        priority: param.sched_priority,
    };
    set_scheduler(libc::SCHED_FIFO, priority).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            io::Error::new(
                e.kind(),
                format!(
                    "the real-time scheduling class (SCHED_FIFO, priority {priority}) is not permitted to this user: \
                     run as root, grant CAP_SYS_NICE, or raise RLIMIT_RTPRIO (ulimit -r, limits.conf rtprio) to at least {priority}"
                ),
            )
        } else {
            io::Error::new(e.kind(), format!("entering the real-time class SCHED_FIFO at priority {priority}: {e}"))
        }
    })?;
    Ok(prev)
}

/// Whether this process may put a thread in the real-time class at `priority`: tried on a short-lived
/// thread of its own (the caller's scheduling is not touched), so that a tool can refuse `--realtime`
/// before it starts work rather than in the middle of a transfer.
pub fn check_realtime(priority: i32) -> io::Result<()> {
    std::thread::Builder::new()
        .name("rt-check".into())
        .spawn(move || enter_realtime(priority).map(drop))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("starting a thread to check the real-time class: {e}"),
            )
        })?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the real-time check panicked")))
}

/// How much nicer than its process [`nicer`] makes a thread of bulk work (reading and hashing a sender's
/// windows, writing a receiver's chunks) in the ordinary class: at nice +5 the kernel weighs it at a
/// third of the pacing and receiving threads, so that they, woken on time, take its core at once, while
/// it catches up from the windows queued ahead of it.
pub const BULK_NICE: i32 = 5;

/// Makes the calling thread `by` nicer (a lower priority in the ordinary class; any user may). Threads
/// have their own nice value on Linux: the process's other threads keep theirs.
pub fn nicer(by: i32) -> io::Result<()> {
    use rustix::process::{getpriority_process, setpriority_process};
    let me = Some(rustix::thread::gettid());
    let now = getpriority_process(me)?;
    setpriority_process(me, (now + by).min(19))?;
    Ok(())
}

/// Sets the calling thread's timer slack (the kernel's default of 50 µs blurs every wake-up of a paced
/// thread); 0 is taken as the smallest slack, 1 ns.
pub fn set_timer_slack(ns: u64) {
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(ns.max(1)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: pid 0 is the calling thread; no pointer.
        unsafe { libc::sched_getscheduler(0) }
    }

    fn nice() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[test]
    fn a_nicer_thread_leaves_its_process_as_it_was() {
        let before = nice();
        let (mine, other) = std::thread::scope(|s| {
            let t = s.spawn(|| {
                nicer(BULK_NICE).unwrap();
                nice()
            });
            let mine = t.join().unwrap();
            (mine, s.spawn(nice).join().unwrap())
        });
        assert_eq!(mine, (before + BULK_NICE).min(19));
        assert_eq!(
            other, before,
            "a new thread takes the process's nice value, not the nicer one's"
        );
        assert_eq!(nice(), before);
    }

    #[test]
    fn the_guard_puts_the_thread_back() {
        std::thread::spawn(|| {
            let before = policy();
            match enter_realtime(DATA_PLANE_PRIORITY) {
                Ok(g) => {
                    assert_eq!(policy(), libc::SCHED_FIFO);
                    drop(g);
                    assert_eq!(policy(), before);
                }
                // not root and no CAP_SYS_NICE: the error names the way out, and nothing changed
                Err(e) => {
                    assert!(e.to_string().contains("RLIMIT_RTPRIO"), "{e}");
                    assert_eq!(policy(), before);
                }
            }
            // the check agrees with what entering did, and leaves this thread alone
            assert_eq!(
                check_realtime(DATA_PLANE_PRIORITY).is_ok(),
                enter_realtime(DATA_PLANE_PRIORITY).is_ok()
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_priority_out_of_range_is_an_error_that_says_so() {
        let e = check_realtime(100).unwrap_err();
        assert!(e.to_string().contains("priority 100"), "{e}");
    }
}
