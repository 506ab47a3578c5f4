//! Sets `cfg(pathemu_root)` when the build runs as root: the tests that need CAP_NET_ADMIN and
//! /dev/net/tun (tests/verify.rs) are `#[ignore]`d, with the reason, when it does not.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(pathemu_root)");
    println!("cargo:rerun-if-changed=build.rs");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0");
    if root {
        println!("cargo:rustc-cfg=pathemu_root");
    }
}
