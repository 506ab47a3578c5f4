//! Hostile or broken peers: any sequence of control messages and datagrams leaves both state machines
//! without a panic; the receiver never hands out data that does not belong to an announced file.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use vlbiflow_xfer_proto::wire::{self, ChunkHash, ControlMsg, DataPacket, DataRepr, Feedback};
use vlbiflow_xfer_proto::{Event, RateConfig, Receiver, ReceiverConfig, Sender, SenderConfig};

fn msg() -> impl Strategy<Value = ControlMsg> {
    prop_oneof![
        (0u8..3, any::<u32>(), 0u32..10_000).prop_map(|(version, transfer_id, block_size)| {
            ControlMsg::Hello {
                version,
                transfer_id: transfer_id % 3,
                block_size,
            }
        }),
        (0u32..4, 0u64..1 << 40, 0u64..1 << 26, 0usize..3).prop_map(|(file, size, chunk_size, nh)| {
            ControlMsg::Announce {
                file,
                name: "a/b".into(),
                size,
                chunk_size,
                hashes: vec![ChunkHash([nh as u8; 32]); nh],
            }
        }),
        (0u32..4, 0u32..8, any::<u8>()).prop_map(|(file, chunk, h)| ControlMsg::ChunkHash {
            file,
            chunk,
            hash: ChunkHash([h; 32])
        }),
        (0u32..4, 0u32..8).prop_map(|(file, chunk)| ControlMsg::ChunkVerified { file, chunk }),
        (0u32..4, 0u32..8).prop_map(|(file, chunk)| ControlMsg::ChunkMismatch { file, chunk }),
        (
            proptest::option::of(0u64..1000),
            proptest::collection::vec((0u64..2000, 0u32..50), 0..5),
            any::<u64>()
        )
            .prop_map(|(highest_seq, loss, recv_bytes)| ControlMsg::Feedback(Feedback {
                highest_seq,
                loss,
                recv_bytes,
                echo_ts_us: recv_bytes % 10_000_000,
                ..Default::default()
            })),
        Just(ControlMsg::Ping),
        (0u32..4, any::<u64>()).prop_map(|(files, bytes)| ControlMsg::Closed { files, bytes }),
        (0u32..4, any::<u64>()).prop_map(|(files, bytes)| ControlMsg::Done { files, bytes }),
        Just(ControlMsg::Abort {
            reason: "x".into(),
            kind: vlbiflow_xfer_proto::AbortKind::Refused
        }),
    ]
}

fn datagram() -> impl Strategy<Value = Vec<u8>> {
    (
        0u32..3,
        any::<u64>(),
        0u32..4,
        0u64..1 << 20,
        0u32..9000,
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(transfer_id, seq, file, offset, len, retransmit, fill)| {
            let r = DataRepr {
                transfer_id,
                seq,
                file,
                offset: offset & !0xfff,
                len: len % 9000,
                timestamp_us: seq,
                retransmit,
            };
            let mut b = vec![fill; r.buffer_len().min(wire::HEADER_LEN + wire::MAX_PAYLOAD)];
            r.emit(&mut DataPacket::new_unchecked(&mut b[..]));
            if fill == 0 {
                b.truncate(fill as usize % 70);
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn receiver_survives_anything(ops in proptest::collection::vec(prop_oneof![msg().prop_map(Ok), datagram().prop_map(Err)], 0..40)) {
        let t0 = Instant::now();
        let mut r = Receiver::new(ReceiverConfig::default());
        let mut announced = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(i as u64);
            match op {
                Ok(m) => r.handle_control(now, m),
                Err(d) => {
                    if let Some(del) = r.handle_datagram(now, &d) {
                        prop_assert!(announced.contains(&del.file));
                        prop_assert_eq!(del.data.len(), d.len() - wire::HEADER_LEN);
                    }
                }
            }
            r.handle_timeout(now);
            while let Some(e) = r.poll_event() {
                if let Event::FileAnnounced { file, .. } = e {
                    announced.push(file);
                }
                if let Event::ChunkComplete { file, chunk, .. } = e {
                    r.chunk_hashed(file, chunk, ChunkHash([0; 32]));
                }
            }
            while r.poll_control().is_some() {}
        }
    }

    #[test]
    fn sender_survives_anything(ops in proptest::collection::vec(msg(), 0..40), sends in 0usize..200) {
        let t0 = Instant::now();
        let mut cfg = SenderConfig::new(1, RateConfig::auto(1e9));
        cfg.chunk_size = 4096;
        cfg.block_size = 4096;
        let mut s = Sender::new(cfg);
        s.add_file("x", 100_000, None).unwrap();
        s.add_file("y", 0, None).unwrap();
        s.close();
        for i in 0..sends {
            let now = t0 + Duration::from_micros(i as u64 * 10);
            if let Some(t) = s.poll_transmit(now) {
                s.set_chunk_hash(t.header.file, (t.header.offset / 4096) as u32, ChunkHash([1; 32]));
            }
        }
        for (i, m) in ops.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(10 + i as u64);
            s.handle_control(now, m);
            s.handle_timeout(now);
            while s.poll_transmit(now).is_some() {}
            while s.poll_event().is_some() {}
            while s.poll_control().is_some() {}
        }
    }
}

#[test]
fn receiver_rejects_announces_out_of_order_and_oversized() {
    let t0 = Instant::now();
    let hello = ControlMsg::Hello {
        version: wire::VERSION,
        transfer_id: 1,
        block_size: 8192,
    };
    let ann = |file, size| ControlMsg::Announce {
        file,
        name: "f".into(),
        size,
        chunk_size: 1 << 20,
        hashes: vec![],
    };
    let reason = |r: &mut Receiver| loop {
        match r.poll_event() {
            Some(Event::Aborted { reason }) => break reason,
            Some(_) => {}
            None => panic!("no abort"),
        }
    };
    let mut r = Receiver::new(ReceiverConfig::default());
    r.handle_control(t0, hello.clone());
    r.handle_control(t0, ann(5, 10));
    assert!(reason(&mut r).contains("file index 5, expected 0"));
    let mut r = Receiver::new(ReceiverConfig::default());
    r.handle_control(t0, hello);
    r.handle_control(t0, ann(0, 1 << 50));
    assert!(reason(&mut r).contains("blocks, above the limit"));
    assert!(matches!(r.poll_control(), Some(ControlMsg::Abort { .. })));
}

/// A sender that closes its list and then breaks it (announces a file past it, closes it twice, or
/// closes it below what it announced or at other sizes than its files') gets an abort, not a commit.
#[test]
fn receiver_holds_the_sender_to_its_closed_list() {
    let t0 = Instant::now();
    let hello = ControlMsg::Hello {
        version: wire::VERSION,
        transfer_id: 1,
        block_size: 8192,
    };
    // files of no bytes: each is verified (done) as it is announced
    let ann = |file| ControlMsg::Announce {
        file,
        name: format!("f{file}"),
        size: 0,
        chunk_size: 1 << 20,
        hashes: vec![],
    };
    let closed = |files, bytes| ControlMsg::Closed { files, bytes };
    let run = |msgs: Vec<ControlMsg>| {
        let mut r = Receiver::new(ReceiverConfig::default());
        r.handle_control(t0, hello.clone());
        for m in msgs {
            r.handle_control(t0, m);
        }
        let mut out = (None, false);
        while let Some(e) = r.poll_event() {
            match e {
                Event::Aborted { reason } => out.0 = Some(reason),
                Event::TransferDone => out.1 = true,
                _ => {}
            }
        }
        out
    };
    // the list closed before its last announce: done with that announce, not before
    assert_eq!(run(vec![ann(0), closed(2, 0)]), (None, false));
    assert_eq!(run(vec![ann(0), closed(2, 0), ann(1)]), (None, true));
    // (once every file of the closed list is done the receiver is done, and takes nothing more)
    assert_eq!(run(vec![closed(1, 0), ann(0), ann(1)]), (None, true));
    let (why, done) = run(vec![closed(1, 0), ann(1)]);
    assert!(!done);
    assert!(why
        .unwrap()
        .contains("file index 1, but the sender closed the list at 1 files"));
    let (why, _) = run(vec![ann(0), ann(1), closed(1, 0)]);
    assert!(why
        .unwrap()
        .contains("closed the list at 1 files, but announced 2"));
    let (why, _) = run(vec![closed(2, 0), closed(2, 0)]);
    assert!(why.unwrap().contains("second closed"));
    let (why, done) = run(vec![ann(0), closed(1, 10)]);
    assert!(!done);
    assert!(why
        .unwrap()
        .contains("closed the list at 10 bytes, but its 1 files hold 0"));
    // `closed` before `hello`
    let mut r = Receiver::new(ReceiverConfig::default());
    r.handle_control(t0, closed(0, 0));
    assert!(matches!(r.poll_event(), Some(Event::Aborted { .. })));
}

/// A genuine datagram that overtakes `hello` (UDP is faster than a control connection that lost a
/// segment) is not counted as forged: without `hello` the receiver does not know how the tag is made.
/// The same datagram after `hello` and the announce is accepted.
#[test]
fn a_datagram_before_hello_is_not_a_bad_tag() {
    let t0 = Instant::now();
    let key = [9u8; 32];
    let mut cfg = SenderConfig::new(1, RateConfig::fixed(1e9));
    cfg.data_key = Some(key);
    let mut s = Sender::new(cfg);
    s.add_file("f", 100_000, None).unwrap();
    s.close();
    let t = s.poll_transmit(t0).expect("a datagram");
    let mut d = vec![0u8; t.datagram_len()];
    t.emit_header(&mut d);
    d[wire::HEADER_LEN..].fill(7);
    s.seal(&mut d);
    let mut r = Receiver::new(ReceiverConfig {
        data_key: Some(key),
        ..ReceiverConfig::default()
    });
    assert_eq!(r.files_announced(), None);
    assert!(r.awaits_control(&d), "before hello");
    assert!(
        !r.awaits_control(&d[..wire::HEADER_LEN - 1]),
        "not a data datagram"
    );
    assert!(r.handle_datagram(t0, &d).is_none());
    assert_eq!((r.stats().bad_tag, r.stats().wrong_transfer), (0, 1));
    let mut ctl: Vec<ControlMsg> = std::iter::from_fn(|| s.poll_control()).collect();
    assert!(matches!(ctl[0], ControlMsg::Hello { .. }));
    r.handle_control(t0, ctl.remove(0));
    assert!(r.awaits_control(&d), "after hello, before its file is announced");
    assert_eq!(r.files_announced(), Some(0));
    // another transfer's datagram, or one of a file index past the limit, waits for nothing
    let mut other = d.clone();
    DataPacket::new_unchecked(&mut other[..]).set_transfer_id(2);
    assert!(!r.awaits_control(&other));
    let mut far = d.clone();
    DataPacket::new_unchecked(&mut far[..]).set_file(ReceiverConfig::default().max_files);
    assert!(!r.awaits_control(&far));
    for m in ctl {
        r.handle_control(t0, m);
    }
    assert!(!r.awaits_control(&d), "its file is announced");
    assert_eq!(r.files_announced(), Some(1));
    assert!(r.handle_datagram(t0, &d).is_some());
    assert_eq!(r.stats().bad_tag, 0);
}

/// A feedback datagram whose report does not add up (a loss range past `highest_seq`) is counted and
/// ignored like a bad control message: nothing is acknowledged and the datagram path is not confirmed.
#[test]
fn an_invalid_feedback_datagram_is_counted_and_ignored() {
    let t0 = Instant::now();
    let mut s = Sender::new(SenderConfig::new(1, RateConfig::fixed(1e9)));
    s.add_file("f", 100_000, None).unwrap();
    s.close();
    while s.poll_transmit(t0).is_some() {}
    while s.poll_control().is_some() {}
    s.handle_feedback_datagram(
        t0,
        Feedback {
            n: 1,
            highest_seq: Some(3),
            loss: vec![(2, 5)],
            ..Default::default()
        },
    );
    assert_eq!(s.stats().bad_control, 1);
    assert!(s.poll_control().is_none(), "no confirmation of the datagram path");
}
