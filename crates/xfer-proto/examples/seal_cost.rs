//! Cost of protecting one data datagram: keyed-BLAKE3 tag (authenticated) vs ChaCha20-Poly1305 (encrypted),
//! sealing and checking, for 8192-byte payloads. The tag covers the header and the payload's digest: the
//! block's BLAKE3 chaining value (8192 is a power of two, so the digest also goes into the chunk hash), or
//! the plain BLAKE3 hash for other block sizes; "v1" is the tag of protocol version 1 (keyed BLAKE3 straight
//! over header and payload in three updates, which misaligned the payload with BLAKE3's 1 KiB chunks). `cargo run --release -p vlbiflow-xfer-proto --example
//! seal_cost`. Prints ns per datagram and GB/s of payload per core.

use std::time::Instant;
use vlbiflow_xfer_proto::wire::{
    derive_data_aead_key, derive_data_key, open_encrypted, seal, seal_encrypted, verify, DataPacket, DataRepr,
};

fn main() {
    let n = 200_000u64;
    let r = DataRepr {
        transfer_id: 1,
        seq: 0,
        file: 0,
        offset: 0,
        len: 8192,
        timestamp_us: 0,
        retransmit: false,
    };
    let mut buf = vec![7u8; r.buffer_len()];
    let mac = derive_data_key(b"s", 1);
    let aead = derive_data_aead_key(b"s", 1);
    let report = |what: &str, t: f64| {
        println!(
            "{what:<34} {:>7.0} ns/datagram  {:>5.2} GB/s per core",
            t / n as f64 * 1e9,
            n as f64 * 8192.0 / t / 1e9
        )
    };
    let t = Instant::now();
    let mut sink = 0u8;
    for i in 0..n {
        r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
        buf[8..16].copy_from_slice(&i.to_be_bytes());
        let mut h = blake3::Hasher::new_keyed(&mac);
        h.update(&buf[..48]);
        h.update(&[0u8; 16]);
        h.update(&buf[64..]);
        sink ^= h.finalize().as_bytes()[0];
    }
    report("v1 tag (three updates): seal", t.elapsed().as_secs_f64());
    for (what, sub) in [("subtree digest", Some(8192)), ("plain digest", None)] {
        let t = Instant::now();
        for i in 0..n {
            r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
            buf[8..16].copy_from_slice(&i.to_be_bytes());
            sink ^= seal(&mac, sub, &mut buf)[0];
        }
        report(&format!("BLAKE3 tag, {what}: seal"), t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..n {
            assert!(verify(&mac, sub, &buf).is_ok());
        }
        report(&format!("BLAKE3 tag, {what}: verify"), t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    let t = Instant::now();
    let mut last = buf.clone();
    for i in 0..n {
        r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
        buf[8..16].copy_from_slice(&i.to_be_bytes());
        seal_encrypted(&aead, &mut buf);
        if i == n - 1 {
            last.copy_from_slice(&buf);
        }
    }
    report("ChaCha20-Poly1305: seal", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..n {
        let mut b = last.clone();
        assert!(open_encrypted(&aead, &mut b).is_ok());
    }
    report("ChaCha20-Poly1305: open (+copy)", t.elapsed().as_secs_f64());
}
