//! A push over loopback with the sender's GSO turned off (`VLBIFLOW_XFER_GSO=0`, one datagram per message):
//! the files arrive identical. Its own test binary, since the variable is read by every sender of the
//! process (the pushes in `loopback.rs` send GSO messages, the default).

#[path = "common/content.rs"]
mod content;
#[path = "common/push.rs"]
mod push;

#[test]
fn a_push_without_gso_arrives_identical() {
    std::env::set_var(vlbiflow_xfer::send::GSO_ENV, "0");
    let src = tempfile::tempdir().unwrap();
    // whole blocks, a short last block, one short file; push_files checks each file's BLAKE3 at the
    // destination against its source
    push::push_files(src.path(), &[(3 << 20) + 12_345, 8191, 100_000]);
}
