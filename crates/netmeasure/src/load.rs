//! A CPU-hungry competitor at a chosen nice level, to measure throughput against the CPU left
//! (the experiment of seeds/000: a CPU-intensive task at nice 19 down to 10 during a transfer).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use crate::host::ProcessCpu;

/// What load to run: `nice=N[,threads=K]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLoadSpec {
    /// Nice level of the load threads (-20..=19).
    pub nice: i32,
    /// Spinning threads.
    pub threads: usize,
}

impl CpuLoadSpec {
    /// Parses `nice=N[,threads=K]` (threads defaults to the number of CPUs).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut nice = None;
        let mut threads = None;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("cpu load {s:?}: expected key=value, got {part:?}"))?;
            match k {
                "nice" => {
                    let n: i32 = v
                        .parse()
                        .map_err(|_| format!("cpu load: nice {v:?} is not an integer"))?;
                    if !(-20..=19).contains(&n) {
                        return Err(format!("cpu load: nice {n} outside -20..=19"));
                    }
                    nice = Some(n);
                }
                "threads" => {
                    let t: usize = v
                        .parse()
                        .map_err(|_| format!("cpu load: threads {v:?} is not a number"))?;
                    if !(1..=256).contains(&t) {
                        return Err(format!("cpu load: threads {t} outside 1..=256"));
                    }
                    threads = Some(t);
                }
                other => return Err(format!("cpu load: unknown key {other:?} (nice, threads)")),
            }
        }
        Ok(CpuLoadSpec {
            nice: nice.ok_or_else(|| format!("cpu load {s:?}: nice=N is required"))?,
            threads: threads.unwrap_or_else(|| thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
        })
    }
}

impl fmt::Display for CpuLoadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nice={},threads={}", self.nice, self.threads)
    }
}

/// Running load threads (named `cpu-load`); dropping stops and joins them.
pub struct CpuLoad {
    stop: Arc<AtomicBool>,
    handles: Vec<thread::JoinHandle<u64>>,
    spec: CpuLoadSpec,
    tids: Vec<i32>,
}

impl CpuLoad {
    /// Starts the threads, each setting its own nice level first; an error names the refused level.
    pub fn start(spec: CpuLoadSpec) -> Result<CpuLoad, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let mut load = CpuLoad {
            stop: stop.clone(),
            handles: Vec::new(),
            spec,
            tids: Vec::new(),
        };
        for _ in 0..spec.threads {
            let (stop, tx) = (stop.clone(), tx.clone());
            let spawned = thread::Builder::new().name("cpu-load".into()).spawn(move || {
                // The nice level of this thread alone (Linux: a thread ID is a process ID for setpriority).
                let tid = rustix::thread::gettid();
                let set = rustix::process::setpriority_process(Some(tid), spec.nice)
                    .map(|()| tid.as_raw_nonzero().get())
                    .map_err(std::io::Error::from);
                let failed = set.is_err();
                let _ = tx.send(set);
                if failed {
                    return 0;
                }
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..100_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                    }
                }
                x
            });
            match spawned {
                Ok(h) => load.handles.push(h),
                Err(e) => return Err(format!("cpu load: starting a thread: {e}")),
            }
        }
        for _ in 0..spec.threads {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(tid)) => load.tids.push(tid),
                Ok(Err(e)) => return Err(format!("cpu load: setpriority(nice {}): {e}", spec.nice)),
                Err(_) => return Err("cpu load: thread did not start within 5 s".into()),
            }
        }
        Ok(load)
    }

    /// What is running.
    pub fn spec(&self) -> CpuLoadSpec {
        self.spec
    }

    /// The CPU time the load threads have used so far (from `/proc/self/task`, in clock ticks).
    pub fn cpu(&self) -> ProcessCpu {
        self.tids
            .iter()
            .filter_map(|&t| ProcessCpu::read_task(t))
            .fold(ProcessCpu::default(), |sum, t| sum.plus(&t))
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Parses a nice sweep `FROM:TO` (e.g. `19:0`) into the levels, stepping towards TO.
pub fn parse_nice_sweep(s: &str) -> Result<Vec<i32>, String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("nice sweep {s:?}: expected FROM:TO, e.g. 19:0"))?;
    let p = |x: &str| -> Result<i32, String> {
        let n: i32 = x
            .trim()
            .parse()
            .map_err(|_| format!("nice sweep: {x:?} is not an integer"))?;
        if (-20..=19).contains(&n) {
            Ok(n)
        } else {
            Err(format!("nice sweep: {n} outside -20..=19"))
        }
    };
    let (a, b) = (p(a)?, p(b)?);
    Ok(if a >= b {
        (b..=a).rev().collect()
    } else {
        (a..=b).collect()
    })
}

/// The competitor levels of a series: none (`[None]`), one `nice=N[,threads=K]` spec, or a nice
/// sweep `FROM:TO` with `threads` threads each (default one per CPU).
pub fn plan(
    spec: Option<&str>,
    sweep: Option<&str>,
    threads: Option<usize>,
) -> Result<Vec<Option<CpuLoadSpec>>, String> {
    if let Some(spec) = spec {
        return Ok(vec![Some(CpuLoadSpec::parse(spec)?)]);
    }
    let Some(sweep) = sweep else {
        return Ok(vec![None]);
    };
    let threads = threads.unwrap_or_else(|| thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    Ok(parse_nice_sweep(sweep)?
        .into_iter()
        .map(|nice| Some(CpuLoadSpec { nice, threads }))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(
            CpuLoadSpec::parse("nice=19,threads=2").unwrap(),
            CpuLoadSpec { nice: 19, threads: 2 }
        );
        assert!(CpuLoadSpec::parse("nice=30").is_err());
        assert!(CpuLoadSpec::parse("threads=2").is_err());
        assert!(CpuLoadSpec::parse("nice=1,foo=2").is_err());
        assert_eq!(parse_nice_sweep("19:16").unwrap(), vec![19, 18, 17, 16]);
        assert_eq!(parse_nice_sweep("0:2").unwrap(), vec![0, 1, 2]);
        assert!(parse_nice_sweep("19").is_err());
        assert_eq!(plan(None, None, None).unwrap(), vec![None]);
        let two = Some(CpuLoadSpec { nice: 19, threads: 2 });
        assert_eq!(plan(Some("nice=19,threads=2"), None, None).unwrap(), vec![two]);
        assert_eq!(plan(None, Some("19:18"), Some(2)).unwrap().len(), 2);
    }

    #[test]
    fn load_runs_and_stops() {
        let l = CpuLoad::start(CpuLoadSpec { nice: 19, threads: 1 }).unwrap();
        assert_eq!(l.spec().nice, 19);
        drop(l);
    }
}
