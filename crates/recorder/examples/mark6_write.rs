//! Mark6 write-rate micro-benchmark: one writer thread per directory, each writing `--blocks` blocks of
//! ~10 MB through the recorder's Mark6 sink, with O_DIRECT (carry + shift) or buffered. Prints the
//! aggregate rate, to compare with `dd if=/dev/zero of=X bs=8M count=512 oflag=direct` on the same disk.
//!
//! cargo run --release -p vlbiflow-recorder --example mark6_write -- [--buffered] [--blocks N] DIR...

use std::time::Instant;

fn main() {
    let mut direct = true;
    let mut blocks = 100u32;
    let mut dirs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--buffered" => direct = false,
            "--blocks" => blocks = args.next().and_then(|v| v.parse().ok()).expect("--blocks N"),
            _ => dirs.push(std::path::PathBuf::from(a)),
        }
    }
    assert!(
        !dirs.is_empty(),
        "usage: mark6_write [--buffered] [--blocks N] DIR..."
    );
    // A typical block: 1216 frames of 8224 bytes (10 MB nominal).
    let block_bytes = 1216 * 8224;
    // What the O_DIRECT path adds per block: one memmove of the block within its buffer.
    let mut b = vlbiflow_recorder::pool::Block::new(block_bytes, 8, vlbiflow_recorder::pool::ALIGN);
    b.len = block_bytes;
    let shifts = 50;
    let t = Instant::now();
    for i in 0..shifts {
        b.shift_to(if i % 2 == 0 { 1234 } else { 3000 });
    }
    println!(
        "memmove of one {:.1} MB block: {:.2} ms",
        block_bytes as f64 / 1e6,
        t.elapsed().as_secs_f64() * 1e3 / f64::from(shifts)
    );
    let t = Instant::now();
    let threads: Vec<_> = dirs
        .iter()
        .cloned()
        .map(|d| {
            std::thread::spawn(move || {
                let _ = std::fs::remove_file(d.join("bench.vdif"));
                let r = vlbiflow_recorder::bench_mark6_write(&d, block_bytes, blocks, direct);
                let _ = std::fs::remove_file(d.join("bench.vdif"));
                r
            })
        })
        .collect();
    let mut total = 0;
    let mut all_direct = true;
    for th in threads {
        let (bytes, used) = th.join().expect("writer thread").expect("write");
        total += bytes;
        all_direct &= used;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} dirs, {}: {:.2} GB in {secs:.2} s = {:.2} GB/s",
        dirs.len(),
        if all_direct { "O_DIRECT" } else { "buffered" },
        total as f64 / 1e9,
        total as f64 / 1e9 / secs
    );
}
