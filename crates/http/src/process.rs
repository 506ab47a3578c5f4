//! The standard process metrics (<https://prometheus.io/docs/instrumenting/writing_clientlibs/#process-metrics>)
//! read from Linux's /proc (proc(5)): `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds`.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::metrics::Families;

/// This process, read at each scrape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Process;

/// The figures of /proc/self/stat that the metrics need (proc(5) field numbers in the comments).
#[derive(Debug, Default, PartialEq)]
struct Stat {
    /// utime + stime (14, 15), clock ticks.
    cpu_ticks: u64,
    /// starttime (22), clock ticks after boot.
    start_ticks: u64,
    /// vsize (23), bytes.
    vsize: u64,
    /// rss (24), pages.
    rss_pages: u64,
}

fn parse_stat(s: &str) -> Option<Stat> {
    // The command name (field 2) is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    // `rest` starts at field 3.
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let n = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: n(14)? + n(15)?,
        start_ticks: n(22)?,
        vsize: n(23)?,
        rss_pages: n(24)?,
    })
}

/// `btime` of /proc/stat: the boot time, seconds since the Unix epoch.
fn boot_time() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in /proc/self/limits.
fn max_fds() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let l = s.lines().find(|l| l.starts_with("Max open files"))?;
    l["Max open files".len()..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Collector for Process {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut f = Families(encoder);
        let Some(stat) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_stat(&s))
        else {
            return Ok(());
        };
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as u64;
        f.counter1(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            stat.cpu_ticks as f64 / hz,
        )?;
        f.gauge1(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            stat.rss_pages * page,
        )?;
        f.gauge1(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            stat.vsize,
        )?;
        if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle itself is one of the entries.
            let n = d.count().saturating_sub(1);
            f.gauge1("process_open_fds", "Number of open file descriptors.", n as u64)?;
        }
        if let Some(m) = max_fds() {
            f.gauge1("process_max_fds", "Maximum number of open file descriptors.", m)?;
        }
        if let Some(b) = boot_time() {
            f.gauge1(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                b as f64 + stat.start_ticks as f64 / hz,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parentheses_in_the_name() {
        let s = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 1234 5000000 300 \
                 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                cpu_ticks: 10,
                start_ticks: 1234,
                vsize: 5_000_000,
                rss_pages: 300,
            })
        );
    }
}
