//! Cost of protecting one data datagram: keyed-BLAKE3 tag (authenticated) vs ChaCha20-Poly1305 (encrypted),
//! sealing and checking, for 8192-byte payloads. `cargo run --release -p vlbiflow-xfer-proto --example
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
    for i in 0..n {
        r.emit(&mut DataPacket::new_unchecked(&mut buf[..]));
        buf[8..16].copy_from_slice(&i.to_be_bytes());
        seal(&mac, &mut buf);
    }
    report("BLAKE3 tag: seal", t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..n {
        assert!(verify(&mac, &buf).is_ok());
    }
    report("BLAKE3 tag: verify", t.elapsed().as_secs_f64());
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
