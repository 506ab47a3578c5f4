//! Any bytes on a jive5ab-dialect command port: the request framer and parser never panic, and
//! executing every statement against a controller (disks in memory, every start refused) never panics
//! and gives one reply of printable ASCII that parses back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vlbiflow_control::jive5ab::{
    parse_j5_reply, parse_request, Conn, Identity, Item, J5Reply, Jive5ab, RequestFramer, Step,
};
use vlbiflow_control::proto::ReturnCode;
use vlbiflow_control::{Controller, DaemonConfig, MemDisks};
use vlbiflow_formats::time::UtcTime;

fuzz_target!(|data: &[u8]| {
    let disks = MemDisks::default();
    disks.add_dir("/d/0", 1);
    disks.set_space(1, 1 << 40, 1 << 41);
    let cfg = DaemonConfig::from_toml("dialect = \"jive5ab\"\nopen_group = \"g\"\n[groups]\ng = [\"/d/*\"]\n")
        .unwrap();
    let now = UtcTime::from_unix(1_752_062_400, 0);
    let mut ctl = Controller::new(cfg, Box::new(disks), now);
    let mut j5 = Jive5ab::new(Identity::default());
    let mut conn = Conn::default();
    // Fed in two pieces, so partial requests are kept between feeds.
    let cut = data.len() / 2;
    let mut framer = RequestFramer::new();
    let mut raws = framer.feed(&data[..cut]);
    raws.extend(framer.feed(&data[cut..]));
    for raw in raws {
        for item in parse_request(&raw).items {
            let reply = match item {
                Item::Error(r) => r,
                Item::Statement(st) => match j5.handle(&mut conn, &st, &mut ctl, now) {
                    Step::Now(r) | Step::WhenIdle(r) | Step::Disk2File(_, r) | Step::Disk2Net(_, r) => r,
                    Step::Net2File(_) => J5Reply::new("net2file", false, ReturnCode::Done, vec!["0".into()]),
                    Step::Start(p) => {
                        let _ = ctl.take_actions();
                        let r = ctl.started(p.ticket, Err("refused by the fuzzer".into()), now);
                        j5.started(&p, r, now)
                    }
                },
            };
            let text = reply.format();
            assert!(text.bytes().all(|b| b.is_ascii_graphic() || b == b' '), "{text:?}");
            assert!(parse_j5_reply(&text).is_some(), "{text:?}");
            ctl.tick(now);
            let _ = ctl.take_actions();
        }
    }
});
