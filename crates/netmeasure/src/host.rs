//! Host counters read before and after a test: CPU time per state (`/proc/stat`), this process's CPU
//! time (`/proc/self/stat`), interrupts (`/proc/interrupts`) and the kernel's UDP counters
//! (`/proc/net/snmp`). Parsers take text so they are tested on fixed samples.

use serde::{Deserialize, Serialize};
use std::fs;
use vlbiflow_udp::UdpCounters;

/// Cumulative CPU ticks over all CPUs (the `cpu` line of /proc/stat).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTicks {
    /// user + nice.
    pub user: u64,
    /// system.
    pub system: u64,
    /// irq.
    pub irq: u64,
    /// softirq.
    pub softirq: u64,
    /// idle + iowait.
    pub idle: u64,
    /// steal.
    pub steal: u64,
}

impl CpuTicks {
    /// Parses the aggregate `cpu ` line of /proc/stat text.
    pub fn parse(text: &str) -> Option<CpuTicks> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        Some(CpuTicks {
            user: g(0) + g(1),
            system: g(2),
            idle: g(3) + g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        })
    }

    /// Reads /proc/stat (zeros when unreadable).
    pub fn read() -> CpuTicks {
        fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| CpuTicks::parse(&t))
            .unwrap_or_default()
    }

    fn total(&self) -> u64 {
        self.user + self.system + self.irq + self.softirq + self.idle + self.steal
    }

    /// CPU seconds (all CPUs together) spent in each state between `earlier` and `self`.
    pub fn seconds_since(&self, earlier: &CpuTicks) -> CpuSeconds {
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / hz;
        CpuSeconds {
            user: d(self.user, earlier.user),
            system: d(self.system, earlier.system),
            irq: d(self.irq, earlier.irq),
            softirq: d(self.softirq, earlier.softirq),
            idle: d(self.idle, earlier.idle),
            steal: d(self.steal, earlier.steal),
        }
    }

    /// Shares (percent of all CPU time over all CPUs) between `earlier` and `self`.
    pub fn shares_since(&self, earlier: &CpuTicks) -> CpuShares {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let total = d(self.total(), earlier.total());
        let pct = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
        CpuShares {
            user: pct(d(self.user, earlier.user)),
            system: pct(d(self.system, earlier.system)),
            irq: pct(d(self.irq, earlier.irq)),
            softirq: pct(d(self.softirq, earlier.softirq)),
            idle: pct(d(self.idle, earlier.idle)),
            steal: pct(d(self.steal, earlier.steal)),
        }
    }
}

/// Percent of all CPU time (all CPUs together) in each state during a test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuShares {
    /// user + nice.
    pub user: f64,
    /// kernel.
    pub system: f64,
    /// hard interrupts.
    pub irq: f64,
    /// soft interrupts (network receive processing).
    pub softirq: f64,
    /// idle + iowait.
    pub idle: f64,
    /// stolen by the hypervisor.
    pub steal: f64,
}

/// CPU seconds over all CPUs in each state of /proc/stat during an interval. Tick-sampled: a kernel
/// without IRQ_TIME_ACCOUNTING counts a tick that lands in softirq as softirq here *and* as system time of
/// whichever task was running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSeconds {
    /// user + nice.
    pub user: f64,
    /// kernel.
    pub system: f64,
    /// hard interrupts.
    pub irq: f64,
    /// soft interrupts (network receive processing).
    pub softirq: f64,
    /// idle + iowait.
    pub idle: f64,
    /// stolen by the hypervisor.
    pub steal: f64,
}

impl CpuSeconds {
    /// Busy seconds: user + system + irq + softirq.
    pub fn busy(&self) -> f64 {
        self.user + self.system + self.irq + self.softirq
    }
}

/// The kernel's boot id: two ends of a test that report the same one share a kernel (e.g. two network
/// namespaces of one host), so machine-wide counters must be counted once. Empty when unreadable.
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// This process's user and system CPU time, seconds (fields 14 and 15 of /proc/self/stat).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpu {
    /// User seconds.
    pub user_s: f64,
    /// System seconds.
    pub system_s: f64,
}

impl ProcessCpu {
    /// Parses `/proc/<pid>/stat` text (the command name may contain spaces and parentheses).
    pub fn parse(text: &str, ticks_per_s: f64) -> Option<ProcessCpu> {
        let rest = &text[text.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state is field 3, utime field 14, stime field 15.
        let utime: u64 = f.get(11)?.parse().ok()?;
        let stime: u64 = f.get(12)?.parse().ok()?;
        Some(ProcessCpu {
            user_s: utime as f64 / ticks_per_s,
            system_s: stime as f64 / ticks_per_s,
        })
    }

    /// Reads /proc/self/stat (zeros when unreadable).
    pub fn read() -> ProcessCpu {
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| ProcessCpu::parse(&t, hz))
            .unwrap_or_default()
    }

    /// The calling thread's CPU time (`getrusage(RUSAGE_THREAD)`: the total is the scheduler's exact
    /// run time, split into user and system by the kernel's tick samples; zeros if it fails).
    pub fn read_thread() -> ProcessCpu {
        // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, exclusively borrowed rusage for the call to fill.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
            return ProcessCpu::default();
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        ProcessCpu {
            user_s: secs(u.ru_utime),
            system_s: secs(u.ru_stime),
        }
    }

    /// A thread of this process by its id, from `/proc/self/task/<tid>/stat` (in clock ticks); None when
    /// the thread has ended or the file is unreadable.
    pub fn read_task(tid: i32) -> Option<ProcessCpu> {
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        let text = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        ProcessCpu::parse(&text, hz)
    }

    /// The sum of `self` and `other`.
    pub fn plus(&self, other: &ProcessCpu) -> ProcessCpu {
        ProcessCpu {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
        }
    }

    /// CPU seconds used since `earlier`.
    pub fn since(&self, earlier: &ProcessCpu) -> ProcessCpu {
        ProcessCpu {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            system_s: (self.system_s - earlier.system_s).max(0.0),
        }
    }

    /// user + system.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// Sum of all interrupt counts in /proc/interrupts (every CPU column of every line).
pub fn parse_interrupts(text: &str) -> u64 {
    let ncpu = text
        .lines()
        .next()
        .map(|l| l.split_whitespace().filter(|w| w.starts_with("CPU")).count())
        .unwrap_or(0);
    text.lines()
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(ncpu)
                .map_while(|w| w.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Reads the total interrupt count (0 when unreadable).
pub fn read_interrupts() -> u64 {
    fs::read_to_string("/proc/interrupts")
        .map(|t| parse_interrupts(&t))
        .unwrap_or(0)
}

/// Counters taken at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSnapshot {
    cpu: CpuTicks,
    process: ProcessCpu,
    interrupts: u64,
    udp: Option<UdpCounters>,
}

impl HostSnapshot {
    /// Reads all counters now.
    pub fn take() -> HostSnapshot {
        HostSnapshot {
            cpu: CpuTicks::read(),
            process: ProcessCpu::read(),
            interrupts: read_interrupts(),
            udp: UdpCounters::read().ok(),
        }
    }

    /// What changed between `earlier` and `self`.
    pub fn since(&self, earlier: &HostSnapshot) -> HostUsage {
        let udp = match (self.udp, earlier.udp) {
            (Some(a), Some(b)) => Some(UdpErrors::from(a.delta(&b))),
            _ => None,
        };
        HostUsage {
            cpu: self.cpu.shares_since(&earlier.cpu),
            process: self.process.since(&earlier.process),
            interrupts: self.interrupts.saturating_sub(earlier.interrupts),
            udp,
        }
    }
}

/// The kernel's UDP counters that changed during a test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpErrors {
    /// Datagrams delivered.
    pub in_datagrams: u64,
    /// Receive errors.
    pub in_errors: u64,
    /// Dropped for a full receive buffer.
    pub rcvbuf_errors: u64,
    /// Dropped for a full send buffer.
    pub sndbuf_errors: u64,
    /// Sent for a closed port.
    pub no_ports: u64,
}

impl From<UdpCounters> for UdpErrors {
    fn from(c: UdpCounters) -> Self {
        UdpErrors {
            in_datagrams: c.in_datagrams,
            in_errors: c.in_errors,
            rcvbuf_errors: c.rcvbuf_errors,
            sndbuf_errors: c.sndbuf_errors,
            no_ports: c.no_ports,
        }
    }
}

/// Host activity during a test on one end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostUsage {
    /// Whole-machine CPU shares, percent.
    pub cpu: CpuShares,
    /// The measuring process's CPU seconds.
    pub process: ProcessCpu,
    /// Interrupts taken (all CPUs).
    pub interrupts: u64,
    /// UDP counter changes (whole host namespace), when /proc/net/snmp was readable.
    pub udp: Option<UdpErrors>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_shares() {
        let a = CpuTicks::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n").unwrap();
        let b = CpuTicks::parse("cpu  150 10 90 900 50 5 45 0 0 0\n").unwrap();
        let s = b.shares_since(&a);
        // Deltas: user 60, system 40, idle 100, irq 5, softirq 45: total 250.
        assert!((s.user - 24.0).abs() < 1e-9);
        assert!((s.system - 16.0).abs() < 1e-9);
        assert!((s.idle - 40.0).abs() < 1e-9);
        assert!((s.softirq - 18.0).abs() < 1e-9);
        assert!((s.irq - 2.0).abs() < 1e-9);
        assert!(CpuTicks::parse("intr 5\n").is_none());
    }

    #[test]
    fn self_stat_with_odd_name() {
        let t = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0";
        let p = ProcessCpu::parse(t, 100.0).unwrap();
        assert_eq!((p.user_s, p.system_s), (2.5, 1.5));
        assert!(ProcessCpu::parse("garbage", 100.0).is_none());
    }

    #[test]
    fn interrupts_sum_cpu_columns_only() {
        let t = "           CPU0       CPU1\n  0:         10          5   IO-APIC   2-edge      timer\n\
                 NMI:          1          2   Non-maskable interrupts\nERR:          0\n";
        assert_eq!(parse_interrupts(t), 18);
    }

    #[test]
    fn live_counters_read() {
        let a = HostSnapshot::take();
        let b = HostSnapshot::take();
        let u = b.since(&a);
        assert!(u.process.total_s() >= 0.0);
    }
}
