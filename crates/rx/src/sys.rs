//! Small shared pieces: control-message parsing and constants.

pub(crate) const SOL_UDP: i32 = 17;
/// cmsg type carrying the GRO segment size (an `int`).
pub(crate) const UDP_GRO: i32 = 104;
/// cmsg type carrying the socket's cumulative drop count (a `u32`).
pub(crate) const SO_RXQ_OVFL: i32 = 40;

/// What the control messages of one received message said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cmsgs {
    pub gro_segment: Option<u16>,
    pub drop_counter: Option<u32>,
}

/// Parses a control-message buffer as the kernel fills it (`cmsghdr` records, each padded to 8 bytes):
/// the GRO segment size and the drop counter; anything else or a malformed record is skipped.
pub(crate) fn parse_cmsgs(buf: &[u8]) -> Cmsgs {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let mut out = Cmsgs::default();
    let mut at = 0;
    while at + HDR <= buf.len() {
        let len = usize::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or_default());
        let level = i32::from_ne_bytes(buf[at + 8..at + 12].try_into().unwrap_or_default());
        let kind = i32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap_or_default());
        if len < HDR || at + len > buf.len() {
            break;
        }
        let data = &buf[at + HDR..at + len];
        match (level, kind) {
            (SOL_UDP, UDP_GRO) if data.len() >= 4 => {
                let seg = i32::from_ne_bytes(data[..4].try_into().unwrap_or_default());
                out.gro_segment = u16::try_from(seg).ok().filter(|&s| s > 0);
            }
            (libc::SOL_SOCKET, SO_RXQ_OVFL) if data.len() >= 4 => {
                out.drop_counter = Some(u32::from_ne_bytes(data[..4].try_into().unwrap_or_default()));
            }
            _ => {}
        }
        at += len.div_ceil(8) * 8;
    }
    out
}

/// Hands the datagrams of one message to `f`: the message itself, or the segments of a GRO
/// super-datagram (`segment` bytes each, the last maybe shorter). Returns how many.
#[inline]
pub(crate) fn segments(data: &[u8], segment: Option<u16>, mut f: impl FnMut(&[u8])) -> u64 {
    match segment {
        Some(s) if (s as usize) < data.len() => {
            let mut n = 0;
            for seg in data.chunks(s as usize) {
                f(seg);
                n += 1;
            }
            n
        }
        _ => {
            f(data);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let len = 16 + data.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        v.resize(len.div_ceil(8) * 8, 0);
        v
    }

    #[test]
    fn parses_gro_and_drop_counter_and_skips_the_rest() {
        let mut b = cmsg(libc::SOL_SOCKET, 35, &[0; 16]);
        b.extend(cmsg(SOL_UDP, UDP_GRO, &8232i32.to_ne_bytes()));
        b.extend(cmsg(libc::SOL_SOCKET, SO_RXQ_OVFL, &7u32.to_ne_bytes()));
        assert_eq!(
            parse_cmsgs(&b),
            Cmsgs {
                gro_segment: Some(8232),
                drop_counter: Some(7)
            }
        );
        // Truncated or garbage records end parsing without a panic.
        assert_eq!(parse_cmsgs(&b[..20]), Cmsgs::default());
        assert_eq!(parse_cmsgs(&[0xff; 40]), Cmsgs::default());
        assert_eq!(parse_cmsgs(&[]), Cmsgs::default());
    }

    #[test]
    fn splits_super_datagrams() {
        let data: Vec<u8> = (0..25).collect();
        let mut got = Vec::new();
        assert_eq!(segments(&data, Some(10), |s| got.push(s.to_vec())), 3);
        assert_eq!(
            got,
            vec![data[..10].to_vec(), data[10..20].to_vec(), data[20..].to_vec()]
        );
        got.clear();
        assert_eq!(segments(&data, None, |s| got.push(s.to_vec())), 1);
        assert_eq!(segments(&data, Some(25), |_| {}), 1);
        assert_eq!(segments(&[], None, |_| {}), 1);
    }
}
