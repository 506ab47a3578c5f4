//! Any bytes on the command port: the framer and statement parser never panic, every framed statement
//! formats a reply that parses back, and executing it against a controller (disks in memory, every start
//! refused) never panics and answers exactly once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_control::controller::Answer;
use vlbiflow_control::proto::{parse_reply, parse_statement, Framer, Input, Reply, ReturnCode};
use vlbiflow_control::{Controller, DaemonConfig, MemDisks};
use vlbiflow_formats::time::UtcTime;

fuzz_target!(|data: &[u8]| {
    let _ = parse_statement(data);
    let disks = MemDisks::default();
    disks.add_dir("/d/0", 1);
    disks.set_space(1, 1 << 40, 1 << 41);
    let cfg = DaemonConfig::from_toml("open_group = \"g\"\n[groups]\ng = [\"/d/*\"]\n").unwrap();
    let now = UtcTime::from_unix(1_752_062_400, 0);
    let mut ctl = Controller::new(cfg, Box::new(disks), now);
    let mut inputs = Vec::new();
    // Fed in two pieces, so partial statements are kept between feeds.
    let cut = data.len() / 2;
    let mut framer = Framer::new();
    framer.feed(&data[..cut], &mut inputs);
    framer.feed(&data[cut..], &mut inputs);
    for input in inputs {
        let reply = match input {
            Input::Error(r) | Input::Foreign(r) => r,
            Input::Statement(st) => match ctl.handle(&st, now) {
                Answer::Now(r) => r,
                Answer::Later(ticket) => {
                    let _ = ctl.take_actions();
                    ctl.started(ticket, Err("refused by the fuzzer".into()), now)
                        .unwrap_or_else(|| Reply::reason(&st, ReturnCode::Failed, "no reply"))
                }
            },
        };
        let text = reply.format();
        assert!(!text.contains('\n'), "{text:?}");
        assert!(parse_reply(&text).is_some(), "{text:?}");
        ctl.tick(now);
        let _ = ctl.take_actions();
    }
    let _ = ctl.report(now);
});
