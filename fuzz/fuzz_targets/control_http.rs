//! HTTP requests sent to the command port (what a web page can make a browser send): whatever the target,
//! headers and body, the request line closes the session before anything is executed, with one error
//! reply, with or without a token.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_control::proto::{Reply, ReturnCode, Statement};
use vlbiflow_control::session::{CommandTarget, Mark6Session};
use vlbiflow_formats::time::UtcTime;

struct Count(usize);

impl CommandTarget for Count {
    fn execute(&mut self, st: &Statement, _now: UtcTime) -> Reply {
        self.0 += 1;
        Reply::to(st, ReturnCode::Done, Vec::new())
    }
}

const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI",
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\n')
        .unwrap_or(rest.len());
    let mut target: Vec<u8> = rest[..end]
        .iter()
        .copied()
        .filter(|b| b.is_ascii_graphic() && *b != b';')
        .collect();
    if target.is_empty() {
        target.push(b'/');
    }
    let mut request = format!("{} ", METHODS[sel as usize % METHODS.len()]).into_bytes();
    request.extend_from_slice(&target);
    request.extend_from_slice(b" HTTP/1.1\r\n");
    request.extend_from_slice(&rest[end..]);
    for token in [None, Some("sesame-0123".to_owned())] {
        let mut s = Mark6Session::new(token);
        let mut count = Count(0);
        // in two pieces, so partial lines are kept between feeds
        let cut = (sel as usize * 7) % (request.len() + 1);
        let mut out = String::new();
        for piece in [&request[..cut], &request[cut..]] {
            if s.should_close() {
                break;
            }
            let inputs = s.frame(piece);
            out.push_str(&s.process(inputs, &mut count, UtcTime::from_unix(1_752_062_400, 0)));
        }
        assert_eq!(count.0, 0, "executed after an HTTP request line: {out:?}");
        assert!(s.should_close());
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(out.contains("not HTTP"), "{out:?}");
    }
});
