//! Pushes over loopback read with `O_DIRECT` (the default, `VLBIFLOW_XFER_DIRECT` unset): files on a disk
//! (`/var/tmp`) go past the page cache although it holds them, whatever their length; files on tmpfs
//! through it. Either way they arrive identical.

use std::path::Path;

#[path = "common/content.rs"]
mod content;
#[path = "common/push.rs"]
mod push;
use push::{direct_possible, push_files};

#[test]
fn a_file_on_disk_is_read_directly_and_arrives_identical() {
    let size = 24 << 20;
    let out = push_files(Path::new("/var/tmp"), &[size]);
    if direct_possible(Path::new("/var/tmp")) {
        // every byte (a window read again after a seek would count twice)
        assert!(
            out.bytes_read_direct >= size as u64,
            "{} read directly",
            out.bytes_read_direct
        );
    }
}

/// Its unaligned tail is read directly too (a short read at the end of the file); a small file after a
/// large one starts at an unaligned place in the window and is read through the cache.
#[test]
fn a_file_of_a_length_not_a_multiple_of_4096_arrives_identical() {
    let sizes = [(20 << 20) + 777, 100_001];
    let out = push_files(Path::new("/var/tmp"), &sizes);
    if direct_possible(Path::new("/var/tmp")) {
        assert!(
            out.bytes_read_direct >= sizes[0] as u64,
            "{} read directly",
            out.bytes_read_direct
        );
    }
}

#[test]
fn files_on_tmpfs_are_read_through_the_cache_and_arrive_identical() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm here: nothing to check");
        return;
    }
    let out = push_files(shm, &[(12 << 20) + 5, 4096]);
    assert_eq!(out.bytes_read_direct, 0);
}
