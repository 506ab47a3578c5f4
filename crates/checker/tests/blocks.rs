//! Mark6 scans checked block by block on several validation threads give the one-pass report, byte for
//! byte as JSON: random streams (gaps, frames going back, fill, header changes, invalid frames, garbage)
//! cut into blocks of random sizes over random disks, with block-level damage (missing, repeated and
//! reordered block numbers, corrupted block headers, a truncated file).

mod common;
use common::*;
use proptest::prelude::*;
use vlbiflow_checker::engine::CheckConfig;
use vlbiflow_checker::report::check;
use vlbiflow_reader::locate;
use vlbiflow_testkit::damage;

/// What happens to a block's number or header.
#[derive(Debug, Clone, Copy)]
enum BlockFault {
    None,
    /// Numbered this much higher (and every block after it).
    Skip(i32),
    /// Same number as the block before.
    Repeat,
    /// Its header overwritten with garbage.
    Corrupt,
}

fn fault() -> impl Strategy<Value = BlockFault> {
    prop_oneof![
        20 => Just(BlockFault::None),
        1 => (1i32..4).prop_map(BlockFault::Skip),
        1 => Just(BlockFault::Repeat),
        1 => Just(BlockFault::Corrupt),
    ]
}

/// This test's frames: the fixtures' length and rate, fill frames as jive5ab writes them.
const FRAMES: damage::VdifFrames = damage::VdifFrames {
    len: FRAME_LEN,
    rate: RATE,
    fill: damage::FillStyle::WithHeader,
};

/// The stream's items in order as bytes: frames, fill and garbage runs.
fn build(threads: u16, ops: &[(u16, damage::Op)]) -> Vec<Vec<u8>> {
    damage::build(threads, ops, &FRAMES)
        .into_iter()
        .map(damage::Item::into_bytes)
        .collect()
}

/// Writes the items as a Mark6 scan of `version` over `disks` disks: blocks of `sizes[k]` items (cycled),
/// block k on disk `assign[k]` (cycled), block numbers and headers as `faults` say, the last `cut` bytes
/// of disk 0's file removed. Returns the disk directories.
#[allow(clippy::too_many_arguments)]
fn write_scan(
    root: &std::path::Path,
    items: &[Vec<u8>],
    version: i32,
    disks: usize,
    sizes: &[usize],
    assign: &[usize],
    faults: &[BlockFault],
    cut: usize,
) -> Vec<String> {
    let hlen = if version == 1 { 4 } else { 8 };
    let mut files: Vec<Vec<u8>> = (0..disks)
        .map(|_| mark6_file_header(version, (hlen + 40 * FRAME_LEN) as i32, 0, FRAME_LEN as i32))
        .collect();
    let (mut at, mut k, mut number) = (0usize, 0usize, 0i32);
    while at < items.len() {
        let n = sizes[k % sizes.len()].min(items.len() - at);
        let d = assign[k % assign.len()] % disks;
        let f = faults[k % faults.len()];
        let this = match f {
            BlockFault::Skip(s) => {
                number += s;
                number
            }
            BlockFault::Repeat => (number - 1).max(0),
            _ => number,
        };
        let start = files[d].len();
        if version == 1 {
            v1_block(&mut files[d], this, &items[at..at + n]);
        } else {
            v2_block(&mut files[d], this, &items[at..at + n]);
        }
        if let BlockFault::Corrupt = f {
            for b in &mut files[d][start..start + hlen] {
                *b = 0xee;
            }
        }
        if !matches!(f, BlockFault::Repeat) {
            number += 1;
        }
        at += n;
        k += 1;
    }
    let keep = files[0].len().saturating_sub(cut).max(20);
    files[0].truncate(keep);
    (0..disks)
        .map(|d| {
            let dir = root.join(format!("disk{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("scan.vdif"), &files[d]).unwrap();
            s(&dir)
        })
        .collect()
}

fn report(disks: &[String], threads: usize) -> String {
    let rec = locate(&["scan".into()], disks).expect("locate");
    let config = CheckConfig {
        threads: Some(threads),
        ..Default::default()
    };
    let mut r = check(&rec, config, |_| {});
    r.elapsed_s = 0.0;
    r.read_rate_bytes_per_s = 0.0;
    serde_json::to_string(&r).expect("serialise")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn blocks_checked_on_threads_equal_one_pass(
        threads in 1u16..4,
        ops in proptest::collection::vec(damage::op(1500), 1..600),
        version in 1i32..3,
        disks in 1usize..5,
        sizes in proptest::collection::vec(1usize..40, 1..6),
        assign in proptest::collection::vec(0usize..4, 1..9),
        faults in proptest::collection::vec(fault(), 1..12),
        cut in prop_oneof![4 => Just(0usize), 1 => 1usize..3000],
    ) {
        let items = build(threads, &ops);
        let dir = tempfile::tempdir().unwrap();
        let disks = write_scan(dir.path(), &items, version, disks, &sizes, &assign, &faults, cut);
        let one = report(&disks, 1);
        for workers in [2, 3] {
            prop_assert_eq!(&one, &report(&disks, workers), "{} validation threads", workers);
        }
    }
}

/// A clean scan over four disks, checked on two threads: the frames written, no finding.
#[test]
fn a_clean_scan_on_threads_is_the_one_pass_scan() {
    let frames = stream(2, 5000, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (dirs, _) = write_mark6(dir.path(), "scan", 4, 2, &frames, 300, |k| k % 4);
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let one = report(&disks, 1);
    assert_eq!(one, report(&disks, 2));
    let v: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["frames"], 10_000);
    assert_eq!(v["verdict"], "ok");
}

/// A case the property above once found (kept as a test: its seed no longer draws it): ten frames in
/// blocks of two over disks 2 and 0 of three, so that disk 1 holds no block. Version 1 blocks have no
/// size of their own, so blocks shorter than the file header's block size read as damage there; the
/// reports must still agree.
#[test]
fn a_disk_without_blocks_is_the_one_pass_scan() {
    let ops = vec![(0, damage::Op::Next); 10];
    let items = build(1, &ops);
    for version in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let faults = [BlockFault::None; 2];
        let disks = write_scan(dir.path(), &items, version, 3, &[2], &[2, 0], &faults, 0);
        let one = report(&disks, 1);
        assert_eq!(one, report(&disks, 2), "version {version}");
        assert_eq!(one, report(&disks, 3), "version {version}");
        if version == 2 {
            let v: serde_json::Value = serde_json::from_str(&one).unwrap();
            assert_eq!(v["frames"], 10, "{one}");
            assert_eq!(v["verdict"], "ok", "{one}");
        }
    }
}
