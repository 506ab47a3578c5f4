//! Helpers shared by the daemon tests: a temporary set of disks and configuration, a command client that
//! checks replies, and a VDIF sender (PSN-prefixed frames built with `VdifHeaderRepr`).
#![allow(dead_code, unused_imports)]

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use vlbiflow_control::client::CommandClient;
use vlbiflow_control::DaemonConfig;
use vlbiflow_formats::time::VdifTime;
use vlbiflow_formats::vdif::VdifHeaderRepr;

pub const FRAME: usize = 1032;
/// How long a test waits for something the daemon will do (a hang detector, not a performance figure).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `f` until it gives a value; panics naming `what` after [`PATIENCE`].
pub fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
pub const RATE: u32 = 100;

pub struct Disks {
    pub dir: tempfile::TempDir,
}

impl Disks {
    pub fn new(n: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..n {
            std::fs::create_dir(dir.path().join(format!("d{i}"))).unwrap();
        }
        Disks { dir }
    }

    pub fn disk(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("d{i}"))
    }

    /// A configuration on ephemeral ports with group `main` (every disk) open.
    pub fn config(&self, extra: &str) -> DaemonConfig {
        DaemonConfig::from_toml(&self.config_text(extra)).unwrap()
    }

    pub fn config_text(&self, extra: &str) -> String {
        format!(
            "control = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nopen_group = \"main\"\n{extra}\n\
             [groups]\nmain = [\"{}/d*\"]\n[recorder]\nblock_size = 100000\nrecv_buffer = 4194304\n\
             pool_blocks = 16\nmetadata_interval = 0.2\n",
            self.dir.path().display()
        )
    }
}

/// A UDP port free a moment ago.
pub use vlbiflow_testkit::net::free_udp_port;

pub struct Ctl(pub CommandClient);

impl Ctl {
    pub fn connect(addr: SocketAddr) -> Self {
        Ctl(CommandClient::connect(&addr.to_string(), Duration::from_secs(10)).unwrap())
    }

    /// Sends one statement and returns its reply line.
    pub fn one(&mut self, st: &str) -> String {
        let r = self.0.send(st).unwrap();
        assert_eq!(r.len(), 1, "{st}: {r:?}");
        r.into_iter().next().unwrap()
    }

    /// Sends one statement and checks the reply exactly.
    pub fn expect(&mut self, st: &str, reply: &str) {
        assert_eq!(self.one(st), reply, "reply to {st}");
    }

    /// Asks `record?` until the state is `state` (bounded by [`PATIENCE`]).
    pub fn wait_state(&mut self, state: &str) -> String {
        until(&format!("record? to say {state}"), || {
            let r = self.one("record?");
            r.starts_with(&format!("!record? 0 : {state} :")).then_some(r)
        })
    }
}

/// The second frame 0 of every [`send_frames`] stream is stamped with (frame `n` is `n / RATE` seconds
/// later): one base for the whole test process, taken from the clock once, so that frames sent by several
/// calls continue one time line wherever the clock's second turns between the calls.
fn time_base() -> VdifTime {
    static BASE: std::sync::OnceLock<VdifTime> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        VdifTime::from_unix_second(vlbiflow_formats::time::UtcTime::now().unix_seconds).unwrap()
    })
}

/// Sends `count` PSN-prefixed VDIF frames of thread 0 to `dest`: frame `first_psn + i` is stamped `RATE`
/// frames a second after [`time_base`], so a stream sent in several calls has one time line.
pub fn send_frames(dest: SocketAddr, first_psn: u64, count: u64) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let start = time_base();
    let mut dgram = vec![0u8; 8 + FRAME];
    for i in 0..count {
        let n = first_psn + i;
        dgram[..8].copy_from_slice(&n.to_ne_bytes());
        let repr = VdifHeaderRepr {
            seconds: start.seconds + (n / u64::from(RATE)) as u32,
            epoch: start.epoch,
            frame_number: (n % u64::from(RATE)) as u32,
            frame_len: FRAME,
            bits_per_sample: 2,
            station_id: u16::from_be_bytes(*b"Xx"),
            ..Default::default()
        };
        repr.emit(&mut dgram[8..]).unwrap();
        sock.send_to(&dgram, dest).unwrap();
        if i % 64 == 63 {
            // Keep well inside the 4 MiB socket buffer on a busy machine.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}
