//! The dialect against a controller with in-memory disks: set-up replies, refusals, and that no input
//! panics.

use proptest::prelude::*;
use vlbiflow_formats::time::UtcTime;

use super::*;
use crate::{DaemonConfig, MemDisks};

fn now() -> UtcTime {
    UtcTime::from_unix(1_772_366_400, 0)
}

fn fixture() -> (Jive5ab, Conn, Controller) {
    let disks = MemDisks::default();
    disks.add_dir("/d/0", 1);
    disks.add_dir("/d/1", 2);
    disks.set_space(1, 1 << 40, 1 << 41);
    disks.set_space(2, 1 << 40, 1 << 41);
    let cfg =
        DaemonConfig::from_toml("dialect = \"jive5ab\"\nopen_group = \"g\"\n[groups]\ng = [\"/d/*\"]\n")
            .unwrap();
    let ctl = Controller::new(cfg, Box::new(disks), now());
    let id = Identity {
        host: "fb1.example.org".into(),
        os_rev: Some("Linux version 6.1".into()),
    };
    (Jive5ab::new(id), Conn::default(), ctl)
}

/// Sends one request line; returns the reply line (without its line end).
fn send(j: &mut Jive5ab, conn: &mut Conn, ctl: &mut Controller, line: &str) -> String {
    let req = parse_request(line.as_bytes());
    let mut out = String::new();
    for item in req.items {
        let r = match item {
            Item::Error(r) => r,
            Item::Statement(st) => match j.handle(conn, &st, ctl, now()) {
                Step::Now(r) | Step::WhenIdle(r) | Step::Disk2File(_, r) | Step::Disk2Net(_, r) => r,
                Step::Net2File(_) => J5Reply::new("net2file", false, ReturnCode::Done, vec!["0".into()]),
                Step::Start(p) => panic!("start {p:?}"),
            },
        };
        r.write_to(&mut out);
    }
    out
}

#[test]
fn field_system_set_up_sequence() {
    let (mut j, mut c, mut ctl) = fixture();
    for (line, reply) in [
        ("mode?", "!mode? 0 :  : <unknown> : 0 : 0.000 ;"),
        ("mode = VDIF_8000-2048-16-2 ; ", "!mode= 0 ;"),
        (
            "mode?",
            "!mode? 0 : VDIF_8000-2048-16-2 : VDIF : 32 : 64000000.000 : 8000 ;",
        ),
        ("mtu = 9000 ; ", "!mtu= 0 ;"),
        ("mtu?", "!mtu? 0 : 9000 ;"),
        (
            "net_protocol = udpsnor : 64000000 : 256000000 : 4 ;",
            "!net_protocol= 0 ;",
        ),
        (
            "net_protocol?",
            "!net_protocol? 0 : udpsnor : 64000000 : 256000000 : 4 ;",
        ),
        (
            "net_protocol = udp ;net_protocol?",
            "!net_protocol= 0 ;!net_protocol? 0 : udps : 64000000 : 256000000 : 4 ;",
        ),
        ("record = nthread : : 2 ;", "!record= 0 ;"),
        ("record? nthread", "!record? 0 : 1 : 2 ;"),
        ("net_port = 46227", "!net_port= 0 ;"),
        ("net_port?", "!net_port? 0 : 46227 ;"),
        ("set_disks = g", "!set_disks= 0 : 2 ;"),
        ("set_disks?", "!set_disks? 0 : 2 : /d/0 : /d/1 ;"),
        ("record?", "!record? 0 : off ;"),
        ("status?", "!status? 0 : 0x00000001 ;"),
        ("error?", "!error? 0 :  :  :  :  :  ;"),
        (
            "dts_id?",
            &format!(
                "!dts_id? 0 : - : vlbiflow-{} : 1 : fb1 : 0 : 0 : - : - : - ;",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        ("os_rev?", "!os_rev? 0 : Linux version 6.1 ;"),
        ("transfermode?", "!transfermode? 0 : no_transfer ;"),
        (
            "rtime?",
            "!rtime? 0 : 8555.71s : 2199.02GB : 50% : VDIF : 32 : 0MHz : 2056.19Mbps ;",
        ),
        (
            "evlbi?",
            "!evlbi? 0 : total : 0 : loss : 0 ( 0.00%) : out-of-order : 0 ( 0.00%) : extent : 0seqnr/pkt ;",
        ),
        ("dir_info?", "!dir_info? 0 : ? : 2199023255552 : 4398046511104 ;"),
        ("echo = on ; echo?", "!echo= 0 ;!echo? 0 : on ;"),
    ] {
        assert_eq!(send(&mut j, &mut c, &mut ctl, line), reply, "{line}");
    }
}

#[test]
fn refusals_carry_jive5abs_codes() {
    let (mut j, mut c, mut ctl) = fixture();
    for (line, reply) in [
        ("bank_set?", "!bank_set? 7 : ENOSYS - not implemented ;"),
        ("data_check?", "!data_check? 7 : ENOSYS - not implemented ;"),
        ("packet = 36 : 0 : 5008 : 0 : 0", "!packet= 7 : ENOSYS - not implemented ;"),
        ("in2net = connect : host", "!in2net= 7 : ENOSYS - not implemented ;"),
        ("tstat?", "!tstat? 2 : not implemented by vlbiflow's jive5ab dialect ;"),
        ("version = 1", "!version= 2 : only available as query ;"),
        ("status = x", "!status= 2 : only available as query ;"),
        ("hello", "!syntax= 7 : Not a command or query ;"),
        ("=x", "!syntax= 7 : No keyword given ;"),
        ("mtu = ", "!mtu= 8 : Missing argument to command ;"),
        ("mtu = 10000", "!mtu= 6 : MTU '10000' is not 64..9000 ;"),
        ("mode = VDIF-2048-16-2", "!mode= 4 : VDIF-2048-16-2  format not supported  it lacks the VDIF framesize (VDIF_<payload>-<Mbps>-<nchan>-<bits>) ;"),
        ("net_protocol = carrier_pigeon", "!net_protocol= 6 : unknown protocol 'carrier_pigeon' ;"),
        ("net_protocol = udp : 1", "!net_protocol= 8 : socbuf size '1' out of range [1024, 1073741824] ;"),
        ("net_port = x", "!net_port= 8 : 'x' is not a port number ;"),
        ("net_port = 1=a", "!net_port= 8 : a single port cannot carry a suffix ;"),
        ("set_disks = /nowhere", "!set_disks= 8 : 0 : no mountpoints matched your selection criteria ;"),
        ("record = off", "!record= 6 : Not doing record ;"),
        ("record = on", "!record= 6 : must provide a scan name ;"),
        ("record = on : s1", "!record= 6 : vbsrecord can only record a known data format (mode = ...) ;"),
        ("record = bogus", "!record= 2 : bogus does not apply to record ;"),
        ("record = nthread : : 0", "!record= 6 : nthread takes <readers> and <writers 1..64> ;"),
        ("scan_check?", "!scan_check? 8 : no scan name given ;"),
        ("scan_set =", "!scan_set= 6 : there are no scans recorded in this session ;"),
        ("disk2file = x", "!disk2file= 6 : no scan was set using scan_set= ;"),
        ("disk2file?", "!disk2file? 0 : inactive ;"),
        ("reset = abort", "!reset= 6 : nothing running to abort ;"),
        ("runtime = x : exists", "!runtime= 6 : 'x' doesn't exist ;"),
        ("runtime = default : delete", "!runtime= 6 : cannot delete the default runtime ;"),
    ] {
        assert_eq!(send(&mut j, &mut c, &mut ctl, line), reply, "{line}");
    }
    // Without UDP, or with frames too large for the MTU, record=on says why.
    send(&mut j, &mut c, &mut ctl, "mode = VDIF_8000-2048-16-2");
    assert!(send(&mut j, &mut c, &mut ctl, "record = on : s1").contains("not tcp"));
    send(&mut j, &mut c, &mut ctl, "net_protocol = udpsnor");
    assert!(send(&mut j, &mut c, &mut ctl, "record = on : s1")
        .starts_with("!record= 6 : a 8032-byte frame needs 8068-byte datagrams but mtu = 1500"));
    send(&mut j, &mut c, &mut ctl, "mtu = 9000");
    assert!(send(&mut j, &mut c, &mut ctl, "record = on : a/b").starts_with("!record= 8 : scan name 'a/b' "));
}

#[test]
fn datastream_definitions_as_jive5ab_answers() {
    let (mut j, mut c, mut ctl) = fixture();
    for (line, reply) in [
        ("datastream?", "!datastream? 0 : 0 ;"),
        ("datastream = add : {thread} : *", "!datastream= 0 ;"),
        (
            "datastream = add : rdbeA : 192.168.1.10/0-4,12-16 : : Hh.5",
            "!datastream= 0 ;",
        ),
        ("datastream?", "!datastream? 0 : 2 : rdbeA : {thread} ;"),
        (
            "datastream? rdbeA",
            "!datastream? 0 : rdbeA : 192.168.1.10/0-4,12-16 : Hh.5 ;",
        ),
        ("datastream? nope", "!datastream? 8 : The stream 'nope' is not defined ;"),
        (
            "datastream = add : rdbeA : *",
            "!datastream= 4 : The data stream 'rdbeA' already has a definition ;",
        ),
        ("datastream = add : x", "!datastream= 8 : Missing data stream match specification(s) ;"),
        ("datastream = add : x : : ", "!datastream= 8 : Missing data stream match specification(s) ;"),
        ("datastream = add", "!datastream= 8 : Missing data stream name ;"),
        ("datastream = remove", "!datastream= 8 : Missing data stream name ;"),
        (
            "datastream = add : x : 1024",
            "!datastream= 4 : the vdif criterion '1024' has thread id 1024 out of range (0..1023) ;",
        ),
        (
            "datastream = add : x : ABC.1",
            "!datastream= 4 : the vdif criterion 'ABC.1' has a station that is not 1-2 letters, 0x and 1-4 hex digits, or '*' ;",
        ),
        (
            "datastream = add : a/b : *",
            "!datastream= 4 : data stream name 'a/b' makes an invalid recording name (must not contain '/') ;",
        ),
        (
            "datastream = remove : nope",
            "!datastream= 4 : The data stream 'nope' was not defined so cannot remove it ;",
        ),
        ("datastream = remove : rdbeA", "!datastream= 0 ;"),
        ("datastream?", "!datastream? 0 : 1 : {thread} ;"),
        ("datastream = reset", "!datastream= 0 ;"),
        ("datastream?", "!datastream? 0 : 1 : {thread} ;"),
        ("datastream = clear", "!datastream= 0 ;"),
        ("datastream?", "!datastream? 0 : 0 ;"),
        ("datastream =", "!datastream= 8 : subcommand (add, remove, clear, reset) is required ;"),
        ("datastream = delete : x", "!datastream= 2 : delete does not apply to datastream ;"),
    ] {
        assert_eq!(send(&mut j, &mut c, &mut ctl, line), reply, "{line}");
    }
}

#[test]
fn datastreams_belong_to_their_runtime() {
    let (mut j, mut c, mut ctl) = fixture();
    send(&mut j, &mut c, &mut ctl, "datastream = add : L : *.1,3");
    send(&mut j, &mut c, &mut ctl, "runtime = other");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "datastream?"),
        "!datastream? 0 : 0 ;"
    );
    send(&mut j, &mut c, &mut ctl, "runtime = 0");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "datastream?"),
        "!datastream? 0 : 1 : L ;"
    );
    let ds = &j.runtime(DEFAULT_RUNTIME).unwrap().datastreams;
    assert_eq!(ds.route(0, 3, None), Some("L"));
    assert_eq!(ds.route(0, 2, None), None);
}

#[test]
fn record_on_with_datastreams_checks_jive5abs_conditions() {
    let (mut j, mut c, mut ctl) = fixture();
    for line in [
        "net_protocol = udpsnor",
        "mtu = 9000",
        "mode = MARK5B-512-16-2",
        "datastream = add : {thread} : *",
    ] {
        assert!(send(&mut j, &mut c, &mut ctl, line).contains(" 0 ;"), "{line}");
    }
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "record = on : s1"),
        "!record= 4 : Datastreams can only be enabled for VDIF ;"
    );
    send(&mut j, &mut c, &mut ctl, "mode = VDIF_8000-2048-16-2");
    send(&mut j, &mut c, &mut ctl, "net_port = 2630=a : 2631=b");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "record = on : s1"),
        "!record= 4 : Mixing suffixes on datastreams and net_ports currently not supported ;"
    );
    send(&mut j, &mut c, &mut ctl, "net_port = 2630");
    send(&mut j, &mut c, &mut ctl, "record = mk6 : 1");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "record = on : s1"),
        "!record= 4 : vlbiflow records datastreams as FlexBuff recordings only, not Mark6 (record = mk6 = 0) ;"
    );
    assert_eq!(send(&mut j, &mut c, &mut ctl, "record?"), "!record? 0 : off ;");
    // With record = mk6 : 0 it starts: crates/control/tests/jive5ab.rs records datastreams through the
    // daemon.
}

#[test]
fn runtimes_keep_their_own_settings() {
    let (mut j, mut c, mut ctl) = fixture();
    send(&mut j, &mut c, &mut ctl, "mtu = 9000");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "runtime = corr : new"),
        "!runtime= 0 : corr ;"
    );
    assert_eq!(send(&mut j, &mut c, &mut ctl, "mtu?"), "!mtu? 0 : 1500 ;");
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "runtime?"),
        "!runtime? 0 : corr : 2 : default ;"
    );
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "runtime = corr : new"),
        "!runtime= 6 : 'corr' already exists ;"
    );
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "runtime = 0"),
        "!runtime= 0 : default ;"
    );
    assert_eq!(send(&mut j, &mut c, &mut ctl, "mtu?"), "!mtu? 0 : 9000 ;");
    let mut other = Conn {
        runtime: "corr".into(),
        ..Conn::default()
    };
    assert_eq!(
        send(&mut j, &mut c, &mut ctl, "runtime = corr : delete"),
        "!runtime= 0 : corr ;"
    );
    assert_eq!(
        send(&mut j, &mut other, &mut ctl, "mtu?"),
        "!mtu? 4 : current runtime ('corr') has been deleted ;"
    );
}

#[test]
fn numbers_print_as_cpp_streams_do() {
    for (x, s) in [
        (0.0, "0"),
        (64.0, "64"),
        (2.5, "2.5"),
        (8242.357, "8242.36"),
        (123456.7, "123457"),
        (1234567.0, "1.23457e+06"),
        (0.0001234, "0.0001234"),
        (0.00001234, "1.234e-05"),
        (50.0, "50"),
    ] {
        assert_eq!(fmt_g(x), s, "{x}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes, framed in arbitrary pieces: never a panic; every reply is one line of
    /// printable ASCII that parses back.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..600) {
        let (mut j, mut c, mut ctl) = fixture();
        let mut framer = RequestFramer::new();
        let cut = cut.min(data.len());
        let mut raws = framer.feed(&data[..cut]);
        raws.extend(framer.feed(&data[cut..]));
        for raw in raws {
            let req = parse_request(&raw);
            for item in req.items {
                let r = match item {
                    Item::Error(r) => r,
                    Item::Statement(st) => match j.handle(&mut c, &st, &mut ctl, now()) {
                        Step::Now(r) | Step::WhenIdle(r) | Step::Disk2File(_, r) | Step::Disk2Net(_, r) => r,
                    Step::Net2File(_) => J5Reply::new("net2file", false, ReturnCode::Done, vec!["0".into()]),
                        Step::Start(p) => {
                            let _ = ctl.take_actions();
                            let r = ctl.started(p.ticket, Err("refused by the test".into()), now());
                            j.started(&p, r, now())
                        }
                    },
                };
                let text = r.format();
                prop_assert!(text.bytes().all(|b| b.is_ascii_graphic() || b == b' '), "{text:?}");
                prop_assert!(parse_j5_reply(&text).is_some(), "{text:?}");
            }
        }
    }

    /// Statement-shaped input (keywords of the dialect, arguments of every kind) never panics.
    #[test]
    fn statements_never_panic(
        kw in prop::sample::select(vec!["record", "mode", "net_protocol", "net_port", "mtu", "set_disks",
            "scan_set", "scan_check", "status", "error", "rtime", "evlbi", "runtime", "echo", "reset",
            "dts_id", "version", "os_rev", "dir_info", "transfermode", "bank_set", "tstat", "datastream"]),
        q in any::<bool>(),
        args in proptest::collection::vec("[a-zA-Z0-9_./@=+*-]{0,12}", 0..5),
    ) {
        let (mut j, mut c, mut ctl) = fixture();
        let line = format!("{kw}{}{};", if q { "?" } else { "=" }, args.join(":"));
        for _ in 0..2 {
            let req = parse_request(line.as_bytes());
            for item in req.items {
                if let Item::Statement(st) = item {
                    match j.handle(&mut c, &st, &mut ctl, now()) {
                        Step::Now(r) | Step::WhenIdle(r) | Step::Disk2File(_, r) | Step::Disk2Net(_, r) => prop_assert!(parse_j5_reply(&r.format()).is_some()),
                        Step::Net2File(_) => {}
                        Step::Start(p) => {
                            let _ = ctl.take_actions();
                            let r = ctl.started(p.ticket, Err("refused by the test".into()), now());
                            let r = j.started(&p, r, now());
                            prop_assert_eq!(r.code, ReturnCode::Error);
                        }
                    }
                }
            }
        }
    }
}
