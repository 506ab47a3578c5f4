//! `net tcp` charges a test only its own threads' CPU time: a competitor spinning in the same process
//! (`--cpu-load`) is not the test's cost, at either end.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use vlbiflow_net::host::ProcessCpu;
use vlbiflow_net::load::{CpuLoad, CpuLoadSpec};
use vlbiflow_net::{Client, Responder, ResponderConfig, TcpParams};

struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

fn start_responder() -> Running {
    let mut cfg = ResponderConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.idle_timeout = Duration::from_secs(5);
    let r = Responder::bind(cfg).unwrap();
    let addr = r.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = thread::spawn(move || r.run(s, &|_| {}).unwrap());
    Running {
        addr,
        stop,
        handle: Some(handle),
    }
}

/// The responder, the client and a two-thread competitor all run in this process, so the whole
/// process's CPU time during the test is at least what both ends' test threads used plus what the
/// competitor used. The CPU the test reports (sender and receiver seconds per GB, times the GB moved) must
/// therefore stay within the process's CPU less the competitor's. Charging the whole process, as `net tcp`
/// did, counts the competitor, and counts the process twice (once per end): about 2 x (test + competitor),
/// far above the bound.
#[test]
fn a_competitor_in_the_process_is_not_charged_to_the_tcp_test() {
    let r = start_responder();
    let stop = AtomicBool::new(false);
    let mut c = Client::connect(r.addr, Duration::from_secs(3)).unwrap();
    // The competitor at this process's own nice level: allowed without privileges, and it gets a share of
    // the CPU that a nice-19 competitor would not on a busy machine.
    let nice = rustix::process::getpriority_process(None).unwrap();
    let load = CpuLoad::start(CpuLoadSpec { nice, threads: 2 }).unwrap();
    let (process0, load0) = (ProcessCpu::read(), load.cpu());
    let tcp = c
        .tcp(
            &TcpParams {
                streams: 2,
                duration: Duration::from_millis(700),
                write_size: 64 << 10,
                send_buffer: None,
                recv_buffer: None,
            },
            &stop,
        )
        .unwrap();
    let (process1, load1) = (ProcessCpu::read(), load.cpu());
    drop(load);
    let gb = tcp.bytes_received as f64 / 1e9;
    assert!(gb > 0.0, "{tcp:?}");
    let sender = tcp.sender_cpu_s_per_gb * gb;
    let receiver = tcp.receiver_cpu_s_per_gb * gb;
    let whole = process1.since(&process0).total_s();
    let competitor = load1.since(&load0).total_s();
    // /proc reports CPU time in clock ticks (10 ms at the usual USER_HZ of 100): rounding of the process's
    // and the two competitor threads' figures, at both reads.
    let slack = 0.06;
    eprintln!(
        "sender {sender:.3} s, receiver {receiver:.3} s, competitor {competitor:.3} s, process {whole:.3} s"
    );
    assert!(sender > 0.0 && receiver > 0.0, "{tcp:?}");
    assert!(
        sender + receiver <= whole - competitor + slack,
        "the test was charged {:.3} s (sender {sender:.3} s, receiver {receiver:.3} s) but the process used \
         {whole:.3} s of which the competitor {competitor:.3} s",
        sender + receiver
    );
    // The responder's figure comes from its test threads, not its process.
    assert!(tcp.remote.threads.is_some());
    assert!((tcp.local_threads.total_s() - sender).abs() < 1e-9);
}
