//! The input-stream model: one stream as the Mark6 `input_stream=add` command describes it, its parser, and
//! its mapping onto the recorder's [`StreamSpec`].

use std::net::{IpAddr, SocketAddr};

use vlbiflow_recorder::StreamSpec;
use vlbiflow_scan::FrameKind;

/// Bytes of Ethernet + IPv4 + UDP headers before a datagram's payload (Mark6 offsets count from the frame).
pub const UDP_HEADER_OFFSET: u32 = vlbiflow_formats::psn::MARK6_PSN_OFFSET;
/// Highest VDIF thread ID (10 bits).
pub const MAX_THREAD_ID: u16 = vlbiflow_formats::vdif::MAX_THREAD_ID;

/// One input stream as the Mark6 `input_stream=add` command describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputStream {
    pub label: String,
    pub kind: FrameKind,
    /// Frame size (Mark6 "payload size").
    pub payload_size: u32,
    /// Offset of the frame in the Ethernet frame (42 without PSN, 50 with).
    pub payload_offset: u32,
    pub psn_offset: u32,
    /// Interface name as given; informational (the socket binds to the filter address).
    pub interface: String,
    /// Address to receive on.
    pub address: SocketAddr,
    /// The Mark6 field between port and threads, kept for `input_stream?`.
    pub slot: String,
    pub threads: Vec<u16>,
    /// Frame rate from the configuration, if any.
    pub frame_rate: Option<u32>,
    /// Sources accepted (the stream's `from=`, or the daemon's `from` for `input_stream=add`); empty:
    /// any.
    pub from: vlbiflow_guard::net::AllowList,
}

impl InputStream {
    /// The recorder's stream specification.
    pub fn spec(&self) -> StreamSpec {
        StreamSpec {
            label: self.label.clone(),
            kind: self.kind,
            address: self.address,
            threads: self.threads.clone(),
            psn: self.payload_offset == UDP_HEADER_OFFSET + 8,
            frame_size: self.payload_size,
            frame_rate: self.frame_rate,
            from: self.from.clone(),
            split: 1,
        }
    }

    /// From a configured stream.
    pub fn from_spec(s: &StreamSpec) -> Self {
        InputStream {
            label: s.label.clone(),
            kind: s.kind,
            payload_size: s.frame_size,
            payload_offset: UDP_HEADER_OFFSET + if s.psn { 8 } else { 0 },
            psn_offset: if s.psn { UDP_HEADER_OFFSET } else { 0 },
            interface: "-".into(),
            address: s.address,
            slot: String::new(),
            threads: s.threads.clone(),
            frame_rate: s.frame_rate,
            from: s.from.clone(),
        }
    }

    pub(crate) fn fields(&self) -> Vec<String> {
        vec![
            self.label.clone(),
            self.kind.name().into(),
            self.payload_size.to_string(),
            self.payload_offset.to_string(),
            self.psn_offset.to_string(),
            self.interface.clone(),
            self.address.ip().to_string(),
            self.address.port().to_string(),
            threads_text(&self.threads),
        ]
    }
}

pub(crate) fn threads_text(t: &[u16]) -> String {
    if t.is_empty() {
        "all".into()
    } else {
        t.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
    }
}

/// Parses the fields after `input_stream=add`:
/// `<label>:<vdif|m5b>:<payload size>:<payload offset>:<psn offset>:<interface>:<filter address>[:<port>[:<slot>]:<threads>]`.
pub fn parse_input_stream(a: &[String]) -> std::result::Result<InputStream, String> {
    if a.len() < 7 || a.len() > 10 {
        return Err(format!(
            "{} fields: expected <label>:<vdif|m5b>:<payload size>:<payload offset>:<psn offset>:<interface>:<filter address>[:<port>[:<slot>]:<threads>]",
            a.len()
        ));
    }
    let label = a[0].as_str();
    vlbiflow_scan::validate_stream_label(label)?;
    let kind: FrameKind = a[1]
        .parse()
        .map_err(|e: vlbiflow_formats::UnknownFrameKind| e.to_string())?;
    let num = |i: usize, what: &str| -> std::result::Result<u32, String> {
        a[i].parse::<u32>()
            .map_err(|_| format!("{what} {:?} is not a number", a[i]))
    };
    let payload_size = num(2, "payload size")?;
    let payload_offset = num(3, "payload offset")?;
    let psn_offset = if a[4].is_empty() { 0 } else { num(4, "psn offset")? };
    match (payload_offset, psn_offset) {
        (UDP_HEADER_OFFSET, _) => {}
        (o, UDP_HEADER_OFFSET) if o == UDP_HEADER_OFFSET + 8 => {}
        _ => {
            return Err(format!(
                "payload offset {payload_offset} / psn offset {psn_offset}: a UDP socket sees datagrams from byte 42, \
                 so the payload offset must be 42 (no PSN) or 50 with psn offset 42"
            ))
        }
    }
    let interface = a[5].clone();
    if interface.len() > 32
        || !interface
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err(format!("interface {interface:?}: up to 32 of A-Z a-z 0-9 _ - ."));
    }
    let ip: IpAddr = a[6]
        .parse()
        .map_err(|_| format!("filter address {:?} is not an IP address", a[6]))?;
    let port = match a.get(7).map(String::as_str) {
        None | Some("") => 4001,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("port {p:?} is not 0..65535"))?,
    };
    let (slot, threads) = match a.len() {
        10 => (a[8].clone(), a[9].as_str()),
        9 => (String::new(), a[8].as_str()),
        _ => (String::new(), ""),
    };
    let mut t = Vec::new();
    for x in threads.split([',', '+']).map(str::trim).filter(|x| !x.is_empty()) {
        t.push(vlbiflow_scan::spec::parse_thread(x).map_err(|e| format!("thread {e}"))?);
    }
    if kind == FrameKind::M5b && !t.is_empty() {
        return Err("threads: Mark5B streams have no threads".into());
    }
    t.sort_unstable();
    t.dedup();
    let s = InputStream {
        label: label.to_string(),
        kind,
        payload_size,
        payload_offset,
        psn_offset: if payload_offset == UDP_HEADER_OFFSET {
            0
        } else {
            psn_offset
        },
        interface,
        address: SocketAddr::new(ip, port),
        slot,
        threads: t,
        frame_rate: None,
        from: Default::default(),
    };
    s.spec().validate().map_err(|e| e.to_string())?;
    Ok(s)
}
