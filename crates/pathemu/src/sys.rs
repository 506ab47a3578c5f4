//! The system calls: TUN devices (`/dev/net/tun`, TUNSETIFF), waiting for one to become readable with a
//! nanosecond timeout (`ppoll`), the thread's timer slack, and the `ip` commands that make namespaces and
//! move and address the devices.

use rustix::fs::{Mode, OFlags};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::time::Duration;
use vlbiflow_udp::poll::PollFlags;

/// An L3 TUN device (IFF_TUN | IFF_NO_PI), non-blocking. Closing it removes the device, in whatever
/// namespace it has been moved to.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Creates the device `name` (at most 15 bytes) in the calling thread's network namespace.
    pub fn create(name: &str) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad device name {name:?}"),
            ));
        }
        let fd = rustix::fs::open(
            "/dev/net/tun",
            OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        // SAFETY: ifreq is plain data; all zeros is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which outlives the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun {
            fd,
            name: name.to_string(),
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one packet; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(rustix::io::read(&self.fd, buf)?)
    }

    /// Writes one packet (the kernel takes it whole or not at all).
    pub fn write(&self, pkt: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::write(&self.fd, pkt)?)
    }

    /// Waits until a packet can be read or `timeout` has passed; `Ok(true)` when readable. An interrupting
    /// signal counts as a timeout.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let ready = vlbiflow_udp::poll::wait(&self.fd, PollFlags::IN, timeout)?;
        Ok(ready.intersects(PollFlags::IN | PollFlags::ERR | PollFlags::HUP))
    }
}

/// Runs `ip ARGS`; an error names the command and repeats what `ip` said.
pub fn ip(args: &[&str]) -> io::Result<String> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("running `ip {}` (is iproute2 installed?): {e}", args.join(" ")),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the named network namespace exists (as `ip netns` keeps them, under /run/netns).
pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// Checks a namespace name: letters, digits, `-`, `_`, `.`, at most 64 bytes, not `.` or `..`.
pub fn check_netns_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "namespace name {name:?}: use 1..64 letters, digits, '-', '_' or '.'"
        ))
    }
}

/// The kernel's drop counters of a device in a namespace: (tx_dropped, rx_dropped), from `ip -s -j link`.
/// On a TUN device, tx are the packets the namespace sent into it (towards the emulator) and rx the ones
/// the emulator wrote.
pub fn link_drops(ns: &str, dev: &str) -> Option<(u64, u64)> {
    let out = ip(&["-n", ns, "-s", "-j", "link", "show", "dev", dev]).ok()?;
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    let st = &v.get(0)?["stats64"];
    Some((st["tx"]["dropped"].as_u64()?, st["rx"]["dropped"].as_u64()?))
}
