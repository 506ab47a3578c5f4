//! Any bytes on a `vlbiflow net` control connection: the line framing and the request and reply
//! decoders never panic, whatever is split where; a decoded request re-encodes to a line that decodes
//! to the same request.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_net::proto::{decode, encode, LineCodec, Reply, Request};

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the stream is cut into two reads, so lines split across reads and
    // several lines in one read are both exercised.
    let (cut, stream) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c).min(rest.len()), rest),
        None => return,
    };
    let mut codec = LineCodec::new();
    for part in [&stream[..cut], &stream[cut..]] {
        codec.feed(part);
        while let Ok(Some(line)) = codec.next_line() {
            if let Ok(req) = decode::<Request>(&line, "request") {
                let again = encode(&req);
                let text = std::str::from_utf8(&again).expect("encoded as UTF-8");
                assert_eq!(decode::<Request>(text.trim_end(), "request").unwrap(), req);
            }
            let _ = decode::<Reply>(&line, "reply");
        }
    }
    assert!(codec.pending() <= stream.len());
});
