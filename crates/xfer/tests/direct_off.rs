//! A push over loopback with `O_DIRECT` reads turned off (`VLBIFLOW_XFER_DIRECT=0`): a file on a disk is
//! read through the page cache and arrives identical. Its own test binary, since the variable is read by
//! every sender of the process (the pushes in `direct.rs` read directly, the default).

use std::path::Path;

#[path = "common/content.rs"]
mod content;
#[path = "common/push.rs"]
mod push;

#[test]
fn a_push_with_direct_reads_off_reads_through_the_cache() {
    std::env::set_var(vlbiflow_xfer::source::DIRECT_ENV, "0");
    let out = push::push_files(Path::new("/var/tmp"), &[(20 << 20) + 777]);
    assert_eq!(out.bytes_read_direct, 0);
}
