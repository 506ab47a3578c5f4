//! The jive5ab dialect over real TCP, UDP and files: a Field-System-like session (set-up, several scans
//! of `record=on`/`off` with `scan_check?` after each, status queries between) against `serve` with
//! `dialect = "jive5ab"`, checking the return code of every reply and the fields a script parses; and
//! garbage datagrams during a recording, which vlbiflow drops while it records on without a loss.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;
use vlbiflow_testkit::net::connect_from;

use common::*;
use vlbiflow_control::controller::scan_list_from_disks;
use vlbiflow_control::jive5ab::{parse_j5_reply, ParsedJ5Reply};
use vlbiflow_control::{spawn, RecorderEngine};

/// A jive5ab-dialect client: one request line out, one reply line back.
struct J5 {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl J5 {
    fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        J5 {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Sends `line` (as the FS does: `<statement> ; \n`) and returns the reply line without its end.
    fn raw(&mut self, line: &str) -> String {
        self.w.write_all(format!("{line} ; \n").as_bytes()).unwrap();
        let mut reply = String::new();
        self.r.read_line(&mut reply).unwrap();
        assert!(reply.ends_with('\n'), "{line}: {reply:?}");
        reply.trim_end().to_owned()
    }

    /// Sends `line`, checks the return code, returns the parsed reply.
    fn rc(&mut self, line: &str, code: u8) -> ParsedJ5Reply {
        let text = self.raw(line);
        let p = parse_j5_reply(&text).unwrap_or_else(|| panic!("{line}: unparseable {text:?}"));
        assert_eq!(p.code, code, "{line}: {text}");
        p
    }

    /// Sends `line` and checks the whole reply.
    fn expect(&mut self, line: &str, reply: &str) {
        assert_eq!(self.raw(line), reply, "reply to {line}");
    }

    /// Polls `record?` until the recording has stored `bytes` frame bytes.
    fn wait_bytes(&mut self, bytes: u64) {
        until(&format!("record? to count {bytes} bytes"), || {
            let r = self.rc("record?", 0);
            (r.fields.get(3).and_then(|b| b.parse::<u64>().ok()) == Some(bytes)).then_some(())
        });
    }
}

fn config(disks: &Disks) -> vlbiflow_control::DaemonConfig {
    disks.config("dialect = \"jive5ab\"")
}

/// 1000 datagrams of random sizes (never a frame's), and one 9000-byte datagram.
fn send_garbage(dest: SocketAddr) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut buf = vec![0u8; 9000];
    for i in 0..1001 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = if i == 500 { 9000 } else { 1 + (x % 1039) as usize };
        for b in buf.iter_mut().take(len) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        sock.send_to(&buf[..len], dest).unwrap();
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

#[test]
fn field_system_session_of_several_scans() {
    let disks = Disks::new(2);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut fs = J5::connect(d.control_addr);
    let port = free_udp_port();
    let dest = SocketAddr::from(([127, 0, 0, 1], port));

    // initi / fb_init: identification and status.
    let v = fs.rc("version?", 0);
    assert_eq!(v.fields[0], "vlbiflow");
    let id = fs.rc("dts_id?", 0);
    assert_eq!((id.fields[0].as_str(), id.fields[2].as_str()), ("-", "1"));
    fs.rc("os_rev?", 0);
    fs.expect("status?", "!status? 0 : 0x00000001 ;");
    fs.expect("error?", "!error? 0 :  :  :  :  :  ;");
    // fb_mode: what the FS sends for a FlexBuff (the rate is the test sender's: 100 frames/s).
    fs.expect("mode = VDIF_1000-0.8-1-2", "!mode= 0 ;");
    fs.expect("mtu = 9000", "!mtu= 0 ;");
    fs.expect(
        "net_protocol = udpsnor : 32000000 : 256000000 : 4",
        "!net_protocol= 0 ;",
    );
    fs.expect("record = nthread : : 2", "!record= 0 ;");
    fs.expect(&format!("net_port = {port}"), "!net_port= 0 ;");
    fs.expect("set_disks = main", "!set_disks= 0 : 2 ;");
    fs.expect(
        "mode?",
        "!mode? 0 : VDIF_1000-0.8-1-2 : VDIF : 2 : 400000.000 : 1000 ;",
    );
    let rtime = fs.rc("rtime?", 0);
    assert!(
        rtime.fields[0].ends_with('s') && rtime.fields[1].ends_with("GB"),
        "{rtime:?}"
    );
    assert_eq!(&rtime.fields[3..6], ["VDIF", "2", "0MHz"]);

    let scans = 10;
    for i in 1..=scans {
        let name = format!("exp_st_no{i:04}");
        fs.expect(&format!("record = on : {name}"), "!record= 0 ;");
        // Setters are refused while recording, as jive5ab refuses them.
        fs.expect(
            "mode = VDIF_8000-2048-16-2",
            "!mode= 6 : not whilst vbsrecord is in progress ;",
        );
        fs.expect("record = on : again", "!record= 6 : Already doing vbsrecord ;");
        fs.expect("status?", "!status? 0 : 0x00000059 ;");
        let first_psn = 1000 * i;
        send_frames(dest, first_psn, 250);
        fs.wait_bytes(250 * FRAME as u64);
        if i == 2 {
            // A thousand garbage datagrams and one of the wrong size mid-scan: dropped, and the
            // recording goes on (jive5ab's capture of the port would have stopped at the short one).
            send_garbage(dest);
            send_frames(dest, first_psn + 250, 250);
            fs.wait_bytes(500 * FRAME as u64);
        }
        let r = fs.rc("record?", 0);
        assert_eq!(&r.fields[..3], ["on", &i.to_string(), name.as_str()]);
        let t = fs.rc("evlbi?", 0);
        assert_eq!(t.fields[0], "total");
        fs.expect("record = off", "!record= 1 ;");
        fs.expect("record?", "!record? 0 : off ;");
        // checkfb: scan_check? of the scan just recorded.
        let c = fs.rc("scan_check?", 0);
        assert_eq!(&c.fields[..4], ["?", name.as_str(), "VDIF", "2"], "{c:?}");
        assert!(c.fields[4].contains('y') && c.fields[4].ends_with('s'), "{c:?}");
        let secs: f64 = c.fields[5].strip_suffix('s').unwrap().parse().unwrap();
        let frames = if i == 2 { 500.0 } else { 250.0 };
        assert!((secs - frames / f64::from(RATE)).abs() < 0.02, "{c:?}");
        // jive5ab's duration: the last frame's time stamp minus the first's.
        let want = if i == 2 { "4.99s" } else { "2.49s" };
        assert_eq!(c.fields[5], want, "{c:?}");
        assert_eq!(&c.fields[6..], ["0.4Mbps", "0", "1032"], "{c:?}");
        fs.expect("status?", "!status? 0 : 0x00000001 ;");
        fs.expect(
            "scan_set?",
            &format!("!scan_set? 0 : {} : {name} : 0 : 0 ;", i - 1),
        );
    }

    // scan_set picks an earlier scan of the session for scan_check?.
    fs.expect("scan_set = 1", "!scan_set= 0 ;");
    let c = fs.rc("scan_check?", 0);
    assert_eq!(c.fields[1], "exp_st_no0001");
    fs.expect("scan_set = no0002 : s : +1032", "!scan_set= 0 ;");
    fs.expect("scan_set?", "!scan_set? 0 : 1 : exp_st_no0002 : 0 : 1032 ;");
    fs.expect(
        "scan_set = nothing_like_it",
        "!scan_set= 4 : no recording 'nothing_like_it' on the selected disks ;",
    );
    // A name already on the disks gets jive5ab's suffix letter, named in the reply.
    fs.expect("record = on : exp_st_no0001", "!record= 0 : exp_st_no0001a ;");
    fs.expect("record = off", "!record= 1 ;");
    fs.rc("scan_check?", 6);
    // disk2file of one scan (rc 1, polled to completion), whole and a byte range.
    let out = disks.dir.path().join("no0001.vdif");
    let part = disks.dir.path().join("no0001.part");
    // (A search string matches the newest session scan containing it: exp_st_no0001a here.)
    fs.expect("scan_set = exp_st_no0001", "!scan_set= 0 ;");
    fs.expect(
        "scan_set?",
        &format!("!scan_set? 0 : {scans} : exp_st_no0001a : 0 : 0 ;"),
    );
    fs.expect("scan_set = 1", "!scan_set= 0 ;");
    fs.expect(
        &format!("disk2file = {} : : : w", out.display()),
        "!disk2file= 1 ;",
    );
    let done = format!("!disk2file? 0 : inactive : {} ;", out.display());
    until("disk2file to finish", || {
        (fs.raw("disk2file?") == done).then_some(())
    });
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 250 * FRAME as u64);
    fs.expect(
        &format!("disk2file = {} : 1032 : +2064", part.display()),
        "!disk2file= 1 ;",
    );
    let done = format!("!disk2file? 0 : inactive : {} ;", part.display());
    until("disk2file to finish", || {
        (fs.raw("disk2file?") == done).then_some(())
    });
    let whole = std::fs::read(&out).unwrap();
    assert_eq!(std::fs::read(&part).unwrap(), whole[FRAME..3 * FRAME]);
    // The default mode n does not overwrite: the error is queued for error?.
    fs.expect(&format!("disk2file = {}", part.display()), "!disk2file= 1 ;");
    until("the failed disk2file", || {
        let s = fs.rc("status?", 0);
        (s.fields[0] == "0x00000003").then_some(())
    });
    let e = fs.rc("error?", 0);
    assert!(
        e.fields[1].starts_with("disk2file ") && e.fields[1].contains("File exists"),
        "{e:?}"
    );
    // Mark5 hardware commands the FS may still send answer as on a FlexBuff.
    fs.expect("bank_set?", "!bank_set? 7 : ENOSYS - not implemented ;");
    fs.expect("data_check?", "!data_check? 7 : ENOSYS - not implemented ;");
    // scan_set and scan_check? see the disks set_disks selected, read now: not a scan of other disks.
    let other = disks.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    fs.expect(&format!("set_disks = {}", other.display()), "!set_disks= 0 : 1 ;");
    fs.expect(
        "scan_set = exp_st_no0001",
        "!scan_set= 4 : no recording 'exp_st_no0001a' on the selected disks ;",
    );
    fs.expect("set_disks = main", "!set_disks= 0 : 2 ;");
    fs.expect("scan_set = 1", "!scan_set= 0 ;");
    assert_eq!(fs.rc("scan_check?", 0).fields[1], "exp_st_no0001");
    d.stop();

    // The recordings: FlexBuff chunks on the disks, every frame stored, the garbage counted and dropped.
    let dirs: Vec<PathBuf> = (0..2).map(|i| disks.disk(i)).collect();
    let list = scan_list_from_disks(&dirs);
    assert_eq!(list.len(), scans as usize + 1);
    for i in 1..=scans {
        let name = format!("exp_st_no{i:04}");
        let e = list.iter().find(|s| s.name == name).unwrap();
        let m = e.meta.as_ref().unwrap();
        assert!(m.complete);
        let c = &m.streams[0].counters;
        let frames = if i == 2 { 500 } else { 250 };
        assert_eq!((c.packets, c.lost), (frames, 0), "{name}: {c:?}");
        assert_eq!(c.rejected, if i == 2 { 1001 } else { 0 }, "{name}: {c:?}");
        assert!(
            dirs.iter()
                .any(|d| d.join(&name).join(format!("{name}.00000000")).is_file()),
            "{name}: no FlexBuff chunk 0"
        );
    }
}

#[test]
fn several_requests_per_line_crlf_and_split_segments() {
    let disks = Disks::new(1);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut s = TcpStream::connect(d.control_addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    // Two statements on one line, \r\n: one reply line holding both replies, ended by \r\n.
    s.write_all(b"mtu = 9000 ; mtu? ;\r\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "!mtu= 0 ;!mtu? 0 : 9000 ;\r\n");
    // A statement split over two writes is one statement.
    s.write_all(b"net_pro").unwrap();
    s.flush().unwrap();
    s.write_all(b"tocol? ;\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "!net_protocol? 0 : tcp : 4194304 : 131072 : 8 ;\n");
    // Garbage bytes: a syntax reply, never a dropped connection.
    s.write_all(b"\x00\xff\x7f;\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "!syntax= 7 : Not a command or query ;\n");
    d.stop();
}

/// Records one scan of `frames` frames named `name` through `fs` (set up for udps on `port`).
fn record_scan(fs: &mut J5, port: u16, name: &str, frames: u64) {
    fs.expect("mode = VDIF_1000-0.8-1-2", "!mode= 0 ;");
    fs.expect("mtu = 9000", "!mtu= 0 ;");
    fs.expect("net_protocol = udps", "!net_protocol= 0 ;");
    fs.expect(&format!("net_port = {port}"), "!net_port= 0 ;");
    fs.expect(&format!("record = on : {name}"), "!record= 0 ;");
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 0, frames);
    fs.wait_bytes(frames * FRAME as u64);
    fs.expect("record = off", "!record= 1 ;");
}

impl J5 {
    /// Polls `disk2file?` until the copy to `file` has ended.
    fn wait_disk2file_inactive(&mut self, file: &std::path::Path) {
        let done = format!("!disk2file? 0 : inactive : {} ;", file.display());
        until("disk2file to finish", || {
            (self.raw("disk2file?") == done).then_some(())
        });
    }

    /// Polls `disk2net?` until its first field is `status`.
    fn wait_disk2net(&mut self, status: &str) -> ParsedJ5Reply {
        until(&format!("disk2net? to say {status}"), || {
            let r = self.rc("disk2net?", 0);
            (r.fields[0] == status).then_some(r)
        })
    }
}

#[test]
fn disk2net_over_tcp_and_udps_as_jive5ab_replies() {
    let disks = Disks::new(2);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut fs = J5::connect(d.control_addr);
    record_scan(&mut fs, free_udp_port(), "d2n_st_no0001", 250);
    // The recording as disk2file writes it: what disk2net must send.
    let whole_file = disks.dir.path().join("whole.vdif");
    fs.expect("scan_set = d2n_st_no0001", "!scan_set= 0 ;");
    fs.expect(
        &format!("disk2file = {} : : : w", whole_file.display()),
        "!disk2file= 1 ;",
    );
    fs.wait_disk2file_inactive(&whole_file);
    let whole = std::fs::read(&whole_file).unwrap();
    assert_eq!(whole.len(), 250 * FRAME);

    // Nothing set up yet.
    fs.expect("disk2net?", "!disk2net? 0 : inactive ;");
    fs.expect("disk2net = on", "!disk2net= 6 : not doing anything ;");
    fs.expect("disk2net = disconnect", "!disk2net= 6 : Not doing disk2net ;");
    fs.expect(
        "disk2net = off",
        "!disk2net= 2 : off does not apply to disk2net ;",
    );
    fs.expect(
        "disk2net = ",
        "!disk2net= 8 : command w/o actual commands and/or arguments... ;",
    );

    // TCP: connect (1), connected, on (0), the whole range over the stream, then inactive.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = listener.local_addr().unwrap().port();
    fs.expect("net_protocol = tcp", "!net_protocol= 0 ;");
    fs.expect(&format!("net_port = {tcp_port}"), "!net_port= 0 ;");
    fs.expect("disk2net = connect : 127.0.0.1", "!disk2net= 1 ;");
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(PATIENCE)).unwrap();
    let c = fs.wait_disk2net("connected");
    let end = (250 * FRAME).to_string();
    assert_eq!(c.fields, ["connected", "127.0.0.1", "0", "0", end.as_str()]);
    fs.expect("disk2net = connect", "!disk2net= 6 : Already doing disk2net ;");
    fs.expect(
        "record = on : x",
        "!record= 6 : not whilst disk2net is in progress ;",
    );
    fs.expect("disk2net = on", "!disk2net= 0 ;");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut peer, &mut got).unwrap();
    assert_eq!(got, whole);
    fs.wait_disk2net("inactive");
    fs.expect("disk2net?", "!disk2net? 0 : inactive ;");
    fs.expect("disk2net = disconnect", "!disk2net= 6 : Not doing disk2net ;");

    // udps: one frame per datagram behind an 8-byte sequence number from 0; a byte range with `on`.
    let (udp, udp_addr) = vlbiflow_testkit::net::udp_listener(PATIENCE);
    fs.expect("net_protocol = udps", "!net_protocol= 0 ;");
    fs.expect(&format!("net_port = {}", udp_addr.port()), "!net_port= 0 ;");
    fs.expect("disk2net = connect", "!disk2net= 1 ;");
    fs.wait_disk2net("connected");
    fs.expect("disk2net = on : 1032 : +2064", "!disk2net= 0 ;");
    let mut buf = vec![0u8; 9000];
    for i in 0..2u64 {
        let n = udp.recv(&mut buf).unwrap();
        assert_eq!(n, 8 + FRAME);
        assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), i);
        let at = (1 + i as usize) * FRAME;
        assert!(buf[8..n] == whole[at..at + FRAME], "datagram {i}");
    }
    fs.wait_disk2net("inactive");

    // Connected, then disconnected without sending: 1, then inactive.
    fs.expect("disk2net = connect", "!disk2net= 1 ;");
    fs.wait_disk2net("connected");
    fs.expect("status?", "!status? 0 : 0x00004019 ;");
    fs.expect(
        "disk2net = on : -5",
        "!disk2net= 8 : relative start byte number not allowed here ;",
    );
    fs.expect("disk2net = disconnect", "!disk2net= 1 ;");
    fs.wait_disk2net("inactive");
    fs.expect("status?", "!status? 0 : 0x00000001 ;");
    // A refused TCP connection ends the transfer and is queued for error?.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    fs.expect("net_protocol = tcp", "!net_protocol= 0 ;");
    fs.expect(&format!("net_port = {closed_port}"), "!net_port= 0 ;");
    fs.expect("disk2net = connect", "!disk2net= 1 ;");
    fs.wait_disk2net("inactive");
    let e = until("the failed disk2net in error?", || {
        let e = fs.rc("error?", 0);
        (!e.fields[1].is_empty()).then_some(e)
    });
    // (':' in a reply field reads as ' '.)
    assert!(
        e.fields[1].starts_with("disk2net  127.0.0.1") && e.fields[1].contains("refused"),
        "{e:?}"
    );
    d.stop();
}

#[test]
fn transient_runtimes_go_with_their_connection() {
    let disks = Disks::new(1);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut a = J5::connect(d.control_addr);
    let mut b = J5::connect(d.control_addr);
    a.expect("runtime = kept : new", "!runtime= 0 : kept ;");
    a.expect("runtime = tmp : transient", "!runtime= 0 : tmp ;");
    a.expect(
        "runtime = tmp : transient",
        "!runtime= 6 : 'tmp' already exists ;",
    );
    a.expect("mtu = 1500", "!mtu= 0 ;");
    b.expect("runtime?", "!runtime? 0 : default : 3 : kept : tmp ;");
    drop(a);
    until("the transient runtime to go", || {
        (b.raw("runtime?") == "!runtime? 0 : default : 2 : kept ;").then_some(())
    });
    b.expect("runtime = tmp : exists", "!runtime= 6 : 'tmp' doesn't exist ;");
    d.stop();
}

#[test]
fn datastreams_are_kept_per_runtime_and_refused_while_recording() {
    let disks = Disks::new(1);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut fs = J5::connect(d.control_addr);
    let mut other = J5::connect(d.control_addr);
    let port = free_udp_port();
    fs.expect("datastream = add : t{thread} : *.0 : 1", "!datastream= 0 ;");
    fs.expect("datastream = add : rest : *", "!datastream= 0 ;");
    fs.expect("datastream?", "!datastream? 0 : 2 : rest : t{thread} ;");
    fs.expect("datastream? t{thread}", "!datastream? 0 : t{thread} : *.0 : 1 ;");
    other.expect("runtime = r2 : new", "!runtime= 0 : r2 ;");
    other.expect("datastream?", "!datastream? 0 : 0 ;");
    // jive5ab's conditions for recording datastreams, and vlbiflow's (FlexBuff recordings only).
    fs.expect("mode = MARK5B-512-16-2", "!mode= 0 ;");
    fs.expect(
        "record = on : ds1",
        "!record= 4 : Datastreams can only be enabled for VDIF ;",
    );
    fs.expect("mode = VDIF_1000-0.8-1-2", "!mode= 0 ;");
    fs.expect("mtu = 9000", "!mtu= 0 ;");
    fs.expect("net_protocol = udps", "!net_protocol= 0 ;");
    fs.expect(
        &format!("net_port = {port}=a : {}=b", free_udp_port()),
        "!net_port= 0 ;",
    );
    fs.expect(
        "record = on : ds1",
        "!record= 4 : Mixing suffixes on datastreams and net_ports currently not supported ;",
    );
    fs.expect(&format!("net_port = {port}"), "!net_port= 0 ;");
    fs.expect("record = mk6 : 1", "!record= 0 ;");
    fs.expect(
        "record = on : ds1",
        "!record= 4 : vlbiflow records datastreams as FlexBuff recordings only, not Mark6 (record = mk6 = 0) ;",
    );
    fs.expect("record = mk6 : 0", "!record= 0 ;");
    fs.expect("record?", "!record? 0 : off ;");
    // ... and, cleared, the scan records as one recording; datastream commands wait for it to end.
    fs.expect("datastream = clear", "!datastream= 0 ;");
    fs.expect("record = on : ds1", "!record= 0 ;");
    fs.expect(
        "datastream = add : x : *",
        "!datastream= 6 : not whilst vbsrecord is in progress ;",
    );
    fs.expect("datastream?", "!datastream? 0 : 0 ;");
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 0, 5);
    fs.wait_bytes(5 * FRAME as u64);
    fs.expect("record = off", "!record= 1 ;");
    fs.expect("datastream = add : x : *", "!datastream= 0 ;");
    d.stop();
}

/// Sends frames `0..per_thread` of VDIF threads `0..threads` interleaved (frame `i` of every thread, then
/// `i + 1`), PSN-prefixed (one sequence over the datagrams), [`RATE`] frames per second per thread
/// from the current second, station `Xx`; each frame's payload stamped with `(i, thread)`.
fn send_threads(dest: SocketAddr, per_thread: u64, threads: u16) {
    use vlbiflow_testkit::vdif::{stamp, udps, Frame};
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let start = vlbiflow_formats::time::VdifTime::from_unix_second(
        vlbiflow_formats::time::UtcTime::now().unix_seconds,
    )
    .unwrap();
    let mut psn = 0u64;
    for i in 0..per_thread {
        for t in 0..threads {
            let mut f = Frame::new(FRAME)
                .seconds(start.seconds)
                .epoch(start.epoch)
                .at(i, RATE)
                .thread(t)
                .station(b"Xx")
                .build();
            stamp(&mut f, i, t);
            sock.send_to(&udps(psn, &f), dest).unwrap();
            psn += 1;
            if psn % 64 == 0 {
                // Keep well inside the socket buffer on a busy machine.
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }
}

/// The frames of recording `name` on `dirs` as vlbiflow's reader reads them: (stamp, header thread).
fn read_recording(name: &str, dirs: &[PathBuf]) -> Vec<((u64, u16), u16)> {
    let rec = vlbiflow_reader::source::locate_scan(name, dirs).unwrap();
    let mut r = vlbiflow_reader::frames::FrameReader::open(&rec);
    let mut out = Vec::new();
    while let Some(b) = r.next_batch() {
        for (e, f) in b.iter() {
            assert!(!e.fill);
            let thread = ((u32::from_le_bytes(f[12..16].try_into().unwrap()) >> 16) & 0x3ff) as u16;
            out.push((vlbiflow_testkit::vdif::stamped_id(f), thread));
        }
    }
    assert!(r.take_findings().is_empty(), "{name}: findings");
    out
}

#[test]
fn datastreams_record_each_thread_into_its_own_recording() {
    let disks = Disks::new(2);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut fs = J5::connect(d.control_addr);
    let port = free_udp_port();
    let dest = SocketAddr::from(([127, 0, 0, 1], port));
    let per_thread = 300;
    fs.expect("mode = VDIF_1000-0.8-1-2", "!mode= 0 ;");
    fs.expect("mtu = 9000", "!mtu= 0 ;");
    fs.expect("net_protocol = udps", "!net_protocol= 0 ;");
    fs.expect(&format!("net_port = {port}"), "!net_port= 0 ;");
    fs.expect("set_disks = main", "!set_disks= 0 : 2 ;");
    // Scan 1: a datastream per thread. Scan 2: one `{thread}` pattern. Thread 2 matches neither.
    let scans: [(&str, &[&str], [&str; 2]); 2] = [
        (
            "dsx_st_no0001",
            &["datastream = add : a : 0", "datastream = add : b : *.1"],
            ["dsx_st_no0001_dsa", "dsx_st_no0001_dsb"],
        ),
        (
            "dsx_st_no0002",
            &["datastream = clear", "datastream = add : t{thread} : Xx.0-1"],
            ["dsx_st_no0002_dst0", "dsx_st_no0002_dst1"],
        ),
    ];
    for (n, (scan, set_up, names)) in scans.into_iter().enumerate() {
        for line in set_up {
            fs.expect(line, "!datastream= 0 ;");
        }
        fs.expect(&format!("record = on : {scan}"), "!record= 0 ;");
        send_threads(dest, per_thread, 3);
        // Only the two threads' frames are stored: record? counts their bytes.
        fs.wait_bytes(2 * per_thread * FRAME as u64);
        fs.expect("record = off", "!record= 1 ;");
        // As jive5ab: the session holds the scan name, which is no recording itself ...
        fs.expect("scan_set?", &format!("!scan_set? 0 : {n} : {scan} : 0 : 0 ;"));
        fs.expect(
            "scan_check?",
            &format!("!scan_check? 4 : no recording '{scan}' on the selected disks ;"),
        );
        // ... and the recordings are found by their names.
        for name in names {
            fs.expect(&format!("scan_set = {name}"), "!scan_set= 0 ;");
            let c = fs.rc("scan_check?", 0);
            assert_eq!(&c.fields[..4], ["?", name, "VDIF", "2"], "{c:?}");
            assert_eq!(c.fields[5], "2.99s", "{c:?}");
            assert_eq!(&c.fields[6..], ["0.4Mbps", "0", "1032"], "{c:?}");
        }
    }
    d.stop();

    // Read back: exactly four recordings on the disks, each holding exactly its thread's frames.
    let dirs: Vec<PathBuf> = (0..2).map(|i| disks.disk(i)).collect();
    let list = scan_list_from_disks(&dirs);
    let mut found: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    found.sort();
    let all: Vec<&str> = scans.iter().flat_map(|s| s.2).collect();
    assert_eq!(found, all);
    for (t, name) in all.iter().enumerate() {
        let t = (t % 2) as u16;
        let frames = read_recording(name, &dirs);
        let want: Vec<((u64, u16), u16)> = (0..per_thread).map(|i| ((i, t), t)).collect();
        assert!(
            frames == want,
            "{name}: {} frames, not thread {t}'s {per_thread}",
            frames.len()
        );
        let m = list
            .iter()
            .find(|s| s.name == *name)
            .unwrap()
            .meta
            .clone()
            .unwrap();
        assert!(m.complete);
        assert_eq!(m.streams.len(), 1);
        let c = m.streams[0].counters;
        assert_eq!((c.packets, c.lost), (per_thread, 0), "{name}: {c:?}");
        assert_eq!(m.streams[0].threads, [t]);
    }
}

impl J5 {
    /// Polls `net2file?` until it says `reply`.
    fn wait_net2file(&mut self, reply: &str) {
        until(&format!("net2file? to say {reply}"), || {
            (self.raw("net2file?") == reply).then_some(())
        });
    }
}

#[test]
fn net2file_receives_a_disk2net_of_another_daemon_over_tcp_and_udps() {
    let (disks_a, disks_b) = (Disks::new(2), Disks::new(1));
    let a = spawn(config(&disks_a), Box::new(RecorderEngine)).unwrap();
    let b = spawn(config(&disks_b), Box::new(RecorderEngine)).unwrap();
    let (mut sender, mut receiver) = (J5::connect(a.control_addr), J5::connect(b.control_addr));
    record_scan(&mut sender, free_udp_port(), "n2f_st_no0001", 250);
    let whole_file = disks_a.dir.path().join("whole.vdif");
    sender.expect("scan_set = n2f_st_no0001", "!scan_set= 0 ;");
    sender.expect(
        &format!("disk2file = {} : : : w", whole_file.display()),
        "!disk2file= 1 ;",
    );
    sender.wait_disk2file_inactive(&whole_file);
    let whole = std::fs::read(&whole_file).unwrap();
    assert_eq!(whole.len(), 250 * FRAME);

    // Refusals, as jive5ab words them.
    receiver.expect("net2file?", "!net2file? 0 : inactive : 0 ;");
    receiver.expect("net2file = close", "!net2file= 6 : Not doing net2file yet ;");
    receiver.expect("net2file = stop", "!net2file= 6 : Not doing net2file yet ;");
    receiver.expect("net2file = ", "!net2file= 2 :  does not apply to net2file ;");
    receiver.expect(
        "net2file = flush",
        "!net2file= 2 : flush does not apply to net2file ;",
    );
    let out = disks_b.dir.path().join("n2f.vdif");
    receiver.expect(
        &format!("net2file = open : {}", out.display()),
        "!net2file= 4 : add ',<mode>' to the filename (w,a,n) ;",
    );
    receiver.expect("net_port = 2630 : 2631", "!net_port= 0 ;");
    receiver.expect(
        &format!("net2file = open : {},w", out.display()),
        "!net2file= 6 : This code does not support reading from multiple (=2) ports ;",
    );

    // TCP: open (0 : file size), the sender's disk2net connects and sends, the stream's end ends it.
    let tcp_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for j5 in [&mut sender, &mut receiver] {
        j5.expect("net_protocol = tcp", "!net_protocol= 0 ;");
        j5.expect(&format!("net_port = {tcp_port}"), "!net_port= 0 ;");
    }
    receiver.expect(
        &format!("net2file = open : {},w", out.display()),
        "!net2file= 0 : 0 ;",
    );
    receiver.expect("net2file?", "!net2file? 0 : active : 0 ;");
    receiver.expect(
        &format!("net2file = open : {},w", out.display()),
        "!net2file= 6 : Already doing net2file ;",
    );
    receiver.expect(
        "record = on : x",
        "!record= 6 : not whilst net2file is in progress ;",
    );
    sender.expect("disk2net = connect : 127.0.0.1", "!disk2net= 1 ;");
    sender.wait_disk2net("connected");
    sender.expect("disk2net = on", "!disk2net= 0 ;");
    sender.wait_disk2net("inactive");
    receiver.wait_net2file("!net2file? 0 : inactive : 0 ;");
    assert!(std::fs::read(&out).unwrap() == whole, "the TCP copy differs");
    // `n` refuses an existing file; `a` appends to it and reports its size.
    receiver.rc(&format!("net2file = open : {},n", out.display()), 4);
    let size = whole.len().to_string();
    receiver.expect(
        &format!("net2file = open : {},a", out.display()),
        &format!("!net2file= 0 : {size} ;"),
    );
    receiver.expect("net2file = close", "!net2file= 0 ;");
    receiver.wait_net2file("!net2file? 0 : inactive : 0 ;");
    assert_eq!(std::fs::read(&out).unwrap().len(), whole.len());

    // udps: each datagram's payload behind its sequence number, until closed; a byte range of the scan.
    let udp_port = free_udp_port();
    for j5 in [&mut sender, &mut receiver] {
        j5.expect("net_protocol = udps", "!net_protocol= 0 ;");
        j5.expect(&format!("net_port = {udp_port}"), "!net_port= 0 ;");
    }
    let out_udp = disks_b.dir.path().join("n2f-udp.vdif");
    receiver.expect(
        &format!("net2file = open : {},n", out_udp.display()),
        "!net2file= 0 : 0 ;",
    );
    sender.expect("disk2net = connect : 127.0.0.1", "!disk2net= 1 ;");
    sender.wait_disk2net("connected");
    let (from, len) = (10 * FRAME, 100 * FRAME);
    sender.expect(&format!("disk2net = on : {from} : +{len}"), "!disk2net= 0 ;");
    sender.wait_disk2net("inactive");
    receiver.wait_net2file(&format!("!net2file? 0 : active : {len} ;"));
    receiver.expect("net2file = stop", "!net2file= 0 ;");
    receiver.wait_net2file("!net2file? 0 : inactive : 0 ;");
    assert!(
        std::fs::read(&out_udp).unwrap() == whole[from..from + len],
        "the udps copy differs"
    );

    // A destination that stays empty is removed, as jive5ab does.
    let empty = disks_b.dir.path().join("empty.vdif");
    receiver.expect(
        &format!("net2file = open : {},w", empty.display()),
        "!net2file= 0 : 0 ;",
    );
    receiver.expect("net2file = close", "!net2file= 0 ;");
    receiver.wait_net2file("!net2file? 0 : inactive : 0 ;");
    assert!(!empty.exists());
    a.stop();
    b.stop();
}

#[test]
fn udp_disk2net_is_paced_by_ipd_or_the_modes_rate() {
    let disks = Disks::new(1);
    let d = spawn(config(&disks), Box::new(RecorderEngine)).unwrap();
    let mut fs = J5::connect(d.control_addr);
    fs.expect("ipd?", "!ipd? 0 : 0 ;");
    fs.expect("ipd = ", "!ipd= 8 : Command must have argument ;");
    fs.expect(
        "ipd = 5x",
        "!ipd= 6 : ipd '5x' NaN/out of range (range [-1.0,2147483647ns]) ;",
    );
    fs.expect(
        "ipd = -2",
        "!ipd= 6 : ipd '-2' NaN/out of range (range [-1.0,2147483us]) ;",
    );
    fs.expect("ipd = 1.5", "!ipd= 0 ;");
    fs.expect("ipd?", "!ipd? 0 : 1.500000 ;");
    fs.expect("ipd = 500n", "!ipd= 0 ;");
    fs.expect("ipd?", "!ipd? 0 : 0.500000 ;");
    fs.expect("ipd = 40us", "!ipd= 0 ;");
    fs.expect("ipd?", "!ipd? 0 : 40 ;");
    fs.expect("ipd = -1", "!ipd= 0 ;");
    fs.expect("ipd?", "!ipd? 0 : -1 : 0 ;");
    record_scan(&mut fs, free_udp_port(), "ipd_st_no0001", 100);
    fs.expect("scan_set = ipd_st_no0001", "!scan_set= 0 ;");

    // `ipd = -1`: from the mode (VDIF_1000-0.8-1-2, 1032-byte frames: 0.8 Mb/s / 8256 bits x 1.1 =
    // 106.59 datagrams/s, 9381818 ns apart), computed when the transfer connects.
    let (udp, udp_addr) = vlbiflow_testkit::net::udp_listener(PATIENCE);
    fs.expect(&format!("net_port = {}", udp_addr.port()), "!net_port= 0 ;");
    fs.expect("disk2net = connect : 127.0.0.1", "!disk2net= 1 ;");
    fs.wait_disk2net("connected");
    fs.expect("ipd?", "!ipd? 0 : -1 : 9381.818359 ;");
    fs.expect("disk2net = disconnect", "!disk2net= 1 ;");
    fs.wait_disk2net("inactive");

    // Two seconds apart: the first datagram goes at once, the second not before `disconnect` stops
    // the transfer (unpaced, all 100 would be there).
    fs.expect("ipd = 2000000", "!ipd= 0 ;");
    fs.expect("disk2net = connect", "!disk2net= 1 ;");
    fs.wait_disk2net("connected");
    fs.expect("disk2net = on", "!disk2net= 0 ;");
    let mut buf = vec![0u8; 9000];
    let n = udp.recv(&mut buf).unwrap();
    assert_eq!(
        (n, u64::from_le_bytes(buf[..8].try_into().unwrap())),
        (8 + FRAME, 0)
    );
    fs.expect("disk2net = disconnect", "!disk2net= 1 ;");
    fs.wait_disk2net("inactive");
    udp.set_nonblocking(true).unwrap();
    let more = std::iter::from_fn(|| udp.recv(&mut buf).ok()).count();
    assert!(more <= 1, "{more} more datagrams arrived after the first");
    d.stop();
}

/// Reads until the daemon closes the connection; returns what it said.
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut out = Vec::new();
    let _ = std::io::Read::read_to_end(s, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_gate_screens_connections_and_the_allow_list_admits_the_field_system() {
    let disks = Disks::new(1);
    let cfg = disks.config(
        "dialect = \"jive5ab\"\ntoken = \"sesame-0123\"\nrequire_token = true\nallow = [\"127.0.0.3\"]",
    );
    let d = spawn(cfg, Box::new(RecorderEngine)).unwrap();
    let c = d.control_addr;
    // Not on the allow-list: the token first.
    let mut op = J5::connect(c);
    op.expect(
        "version?",
        "!version? 6 : authentication required  send auth=<token>  first ;",
    );
    op.expect("auth = nope", "!auth= 8 : wrong token ;");
    op.expect("auth = sesame-0123", "!auth= 0 ;");
    op.rc("version?", 0);
    // Silent: closed at the deadline.
    let mut silent = TcpStream::connect(c).unwrap();
    assert_eq!(
        read_to_close(&mut silent),
        "!auth= 4 : no auth=<token> in time, closing ;\n"
    );
    // An HTTP request whose body is commands: the request line closes the connection, nothing runs.
    let mut h = TcpStream::connect(c).unwrap();
    h.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\n\r\nauth=sesame-0123;record=on:x;\n")
        .unwrap();
    assert_eq!(
        read_to_close(&mut h),
        "!syntax= 7 : this is the jive5ab command port, not HTTP  closing ;\r\n"
    );
    // Garbage before the token: one reply, then closed.
    let mut g = TcpStream::connect(c).unwrap();
    g.write_all(b"Host: x\nauth=sesame-0123;record?;\n").unwrap();
    assert_eq!(read_to_close(&mut g), "!syntax= 7 : Not a command or query ;\n");
    // The Field System's address (allow-listed) needs no token.
    let fs_stream = connect_from("127.0.0.3", c);
    fs_stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut fs = J5 {
        r: BufReader::new(fs_stream.try_clone().unwrap()),
        w: fs_stream,
    };
    fs.rc("version?", 0);
    fs.expect("net_protocol = udpsnor", "!net_protocol= 0 ;");
    // HTTP from an authenticated peer is refused too.
    let mut h = connect_from("127.0.0.3", c);
    h.write_all(b"GET / HTTP/1.0\n").unwrap();
    assert!(read_to_close(&mut h).contains("not HTTP"));
    d.stop();
    let bad = disks.config_text("allow = [\"10.0.0.0/33\"]");
    let e = vlbiflow_control::DaemonConfig::from_toml(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("allow"), "{e}");
}
