//! One stream over several sockets: a group of sockets bound to the same address with `SO_REUSEPORT`,
//! and a classic BPF program (`SO_ATTACH_REUSEPORT_CBPF`, socket(7)) that picks the socket of each
//! datagram from a counter at the start of its payload, in runs: bits `shift..shift + log2(parts)` of
//! the little-endian 32-bit word at payload offset 0 (the low half of a packet sequence number).
//! Datagrams `0..2^shift` go to socket 0, the next `2^shift` to socket 1, and so on round the group,
//! so each socket (and the thread reading it) gets whole runs in order.
//!
//! For UDP the kernel runs the program on the payload: its loads start after the UDP header (the
//! kernel's own test of these programs, `tools/testing/selftests/net/reuseport_bpf.c`, sends the key
//! as the first bytes of the data and loads it at offset 0). A datagram too short to read fails the
//! program, which then picks socket 0. A train of datagrams coalesced by the sender (UDP GSO over
//! loopback) or by the receiving host (GRO) is steered as one, by its first datagram, so the tail of a
//! train that crosses a run boundary arrives at the socket of the run before:
//! `vlbiflow_seq::split` accounts for that.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;

use crate::socket::{open_udp, set_opt, SocketError, SocketReport, UdpConfig};
use crate::sys;

/// Sockets a group may have (the kernel allows more; 64 threads on one stream is already plenty).
pub const MAX_PARTS: u32 = 64;

fn insn(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The program: A = payload[0] | payload[1] << 8 | payload[2] << 16 | payload[3] << 24, then
/// (A >> shift) & (parts - 1).
pub fn run_program(shift: u32, parts: u32) -> Vec<libc::sock_filter> {
    use libc::{BPF_A, BPF_TAX, BPF_X};
    use libc::{
        BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_K, BPF_LD, BPF_LSH, BPF_MISC, BPF_OR, BPF_RET, BPF_RSH,
    };
    let mut p = Vec::with_capacity(16);
    // From the most significant byte down: A = b3; A = (A << 8) | b2; ...
    p.push(insn(BPF_LD | BPF_B | BPF_ABS, 3));
    for byte in [2, 1, 0] {
        p.push(insn(BPF_ALU | BPF_LSH | BPF_K, 8));
        p.push(insn(BPF_MISC | BPF_TAX, 0));
        p.push(insn(BPF_LD | BPF_B | BPF_ABS, byte));
        p.push(insn(BPF_ALU | BPF_OR | BPF_X, 0));
    }
    p.push(insn(BPF_ALU | BPF_RSH | BPF_K, shift));
    p.push(insn(BPF_ALU | BPF_AND | BPF_K, parts - 1));
    p.push(insn(BPF_RET | BPF_A, 0));
    p
}

/// Attaches [`run_program`] to `sock`'s reuseport group.
pub fn attach_runs(sock: &impl AsFd, shift: u32, parts: u32) -> io::Result<()> {
    let mut prog = run_program(shift, parts);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // `fprog` points at `prog`, which lives until the call has copied the program.
    set_opt(
        sock.as_fd(),
        libc::SOL_SOCKET,
        sys::SO_ATTACH_REUSEPORT_CBPF,
        &fprog,
    )
}

/// Opens `parts` sockets on `config`'s address as one reuseport group (port 0: the first socket's
/// port), steered by runs of `2^shift` datagrams. Returns them in the order the program numbers them,
/// with the first socket's report.
pub fn open_run_group(
    config: &UdpConfig,
    parts: u32,
    shift: u32,
) -> Result<(Vec<UdpSocket>, SocketReport), SocketError> {
    let invalid = |what: String| SocketError {
        addr: config.bind,
        step: "steering",
        source: io::Error::new(io::ErrorKind::InvalidInput, what),
    };
    if !(1..=MAX_PARTS).contains(&parts) || !parts.is_power_of_two() {
        return Err(invalid(format!(
            "{parts} sockets: must be a power of two from 1 to {MAX_PARTS}"
        )));
    }
    if shift + parts.trailing_zeros() > 32 {
        return Err(invalid(format!(
            "runs of 2^{shift} over {parts} sockets: more than 32 bits"
        )));
    }
    let mut cfg = config.clone();
    cfg.reuse_port = true;
    let (first, report) = open_udp(&cfg)?;
    attach_runs(&first, shift, parts).map_err(|source| SocketError {
        addr: report.local,
        step: "setsockopt(SO_ATTACH_REUSEPORT_CBPF)",
        source,
    })?;
    cfg.bind = report.local;
    let mut socks = vec![first];
    for _ in 1..parts {
        socks.push(open_udp(&cfg)?.0);
    }
    Ok((socks, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    /// Each datagram lands on the socket of its run, read from its first four bytes (little-endian).
    #[test]
    fn datagrams_go_to_the_socket_of_their_run() {
        let cfg = UdpConfig::receiver(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let (socks, report) = open_run_group(&cfg, 4, 3).unwrap();
        let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        // Numbers across the 32-bit word (high bytes set) and past it (bits above 32 are not read).
        let numbers: Vec<u64> = (0..64)
            .chain([0x0102_0304_0506_0708, 0xffff_fff8, 1 << 40])
            .collect();
        for n in &numbers {
            tx.send_to(&n.to_le_bytes(), report.local).unwrap();
        }
        let mut got = vec![Vec::new(); 4];
        let mut ep = crate::epoll::Epoll::new(socks.iter().map(|s| s.as_fd())).unwrap();
        let mut ready = Vec::new();
        while got.iter().map(Vec::len).sum::<usize>() < numbers.len() {
            ep.wait(Duration::from_secs(10), &mut ready).unwrap();
            assert!(!ready.is_empty(), "nothing more within 10 s: {got:?}");
            for &i in &ready {
                let mut b = [0u8; 16];
                let len = socks[i].recv(&mut b).unwrap();
                assert_eq!(len, 8);
                got[i].push(u64::from_le_bytes(b[..8].try_into().unwrap()));
            }
        }
        for (i, g) in got.iter().enumerate() {
            for n in g {
                assert_eq!(((*n as u32) >> 3) & 3, i as u32, "{n:#x} on socket {i}: {got:?}");
            }
        }
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), numbers.len());
        assert!(got.iter().all(|g| g.len() >= 16), "{got:?}");
    }

    #[test]
    fn groups_of_other_sizes_are_refused() {
        let cfg = UdpConfig::receiver(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let e = open_run_group(&cfg, 3, 10).err().unwrap();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
