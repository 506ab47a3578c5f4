//! jive5ab's data-format strings (`mode = ...`), as the Field System sends them: `VDIF_<payload>-<Mb/s>-
//! <channels>-<bits>` (optionally `VDIFL` legacy header, `VDIFC` complex, `/<n>` after the rate or the
//! bits, which jive5ab parses and ignores), `Mark5B-<Mb/s>-<channels>-<bits>` and `none`
//! (jive5ab 3.1.0 `src/headersearch.cc`, `text2headersearch`). Keyword and letters are case-insensitive.

/// The sample format a mode names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Vdif { legacy: bool, complex: bool },
    Mark5b,
}

/// A parsed mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Mode {
    /// The string as given (echoed by `mode?`).
    pub text: String,
    pub format: Format,
    /// VDIF payload bytes per frame (Mark5B: 10000).
    pub payload: u32,
    /// Total data rate, Mb/s.
    pub mbps: f64,
    pub channels: u32,
    pub bits: u32,
}

/// Mark5B frame: 16-byte header and 10000 bytes of data.
pub const MARK5B_FRAME: u32 = 10016;

impl Mode {
    /// Bytes per frame, header included.
    pub fn frame_size(&self) -> u32 {
        match self.format {
            Format::Vdif { legacy: true, .. } => self.payload + 16,
            Format::Vdif { .. } => self.payload + 32,
            Format::Mark5b => MARK5B_FRAME,
        }
    }

    /// Tracks, jive5ab's way: channels x bits, doubled for complex samples.
    pub fn ntrack(&self) -> u32 {
        let n = self.channels * self.bits;
        match self.format {
            Format::Vdif { complex: true, .. } => 2 * n,
            _ => n,
        }
    }

    /// Bit rate per track, b/s.
    pub fn track_rate(&self) -> f64 {
        self.mbps * 1e6 / f64::from(self.ntrack().max(1))
    }

    /// Frames per second, when the rate is a whole number of frames.
    pub fn frame_rate(&self) -> Option<u32> {
        let data = match self.format {
            Format::Mark5b => 10_000.0,
            Format::Vdif { .. } => f64::from(self.payload),
        };
        let fps = self.mbps * 1e6 / 8.0 / data;
        (fps >= 1.0 && fps.fract() == 0.0 && fps <= f64::from(u32::MAX)).then_some(fps as u32)
    }

    /// jive5ab's name of the format (`mode?`, `scan_check?`).
    pub fn format_name(&self) -> &'static str {
        match self.format {
            Format::Vdif {
                legacy: false,
                complex: false,
            } => "VDIF",
            Format::Vdif {
                legacy: true,
                complex: false,
            } => "VDIF (legacy)",
            Format::Vdif {
                legacy: false,
                complex: true,
            } => "VDIF (complex)",
            Format::Vdif { .. } => "VDIF (legacy, complex)",
            Format::Mark5b => "Mark5B",
        }
    }
}

/// What `mode = <text>` asks for: a mode, `none`, or an error message (jive5ab answers 4).
pub fn parse_mode(text: &str) -> Result<Option<Mode>, String> {
    let lower = text.to_ascii_lowercase();
    if lower == "none" {
        return Ok(None);
    }
    let (format, payload, rest) = if let Some(r) = lower.strip_prefix("mark5b-") {
        (Format::Mark5b, 10_000, r)
    } else if let Some(r) = lower.strip_prefix("vdif") {
        let (flags, r) = r.split_once('_').ok_or_else(|| {
            if r.starts_with('-') {
                format!("{text}: format not supported; it lacks the VDIF framesize (VDIF_<payload>-<Mbps>-<nchan>-<bits>)")
            } else {
                format!("{text}: not VDIF_<payload>-<Mbps>-<nchan>-<bits>")
            }
        })?;
        let (legacy, complex) = match flags {
            "" => (false, false),
            "l" => (true, false),
            "c" => (false, true),
            "lc" | "cl" => (true, true),
            _ => {
                return Err(format!(
                    "{text}: unknown VDIF flavour {flags:?} (VDIF, VDIFL, VDIFC)"
                ))
            }
        };
        let (p, r) = r
            .split_once('-')
            .ok_or_else(|| format!("{text}: not VDIF_<payload>-<Mbps>-<nchan>-<bits>"))?;
        let payload: u32 = p
            .parse()
            .ok()
            .filter(|&p| p >= 8 && p % 8 == 0 && p <= 8 * ((1 << 24) - 4))
            .ok_or_else(|| format!("{text}: VDIF payload {p:?} is not a multiple of 8 bytes"))?;
        (Format::Vdif { legacy, complex }, payload, r)
    } else {
        return Err(format!(
            "{text}: vlbiflow records VDIF_<payload>-<Mbps>-<nchan>-<bits>, Mark5B-<Mbps>-<nchan>-<bits> or none"
        ));
    };
    let parts: Vec<&str> = rest.split('-').collect();
    let [rate, chans, bits] = parts[..] else {
        return Err(format!("{text}: expected <Mbps>-<nchan>-<bits> after the format"));
    };
    // `/<n>` suffixes (period after the rate, decimation after the bits) are parsed and ignored.
    let strip = |s: &str| s.split_once('/').map_or(s, |(a, _)| a).to_owned();
    let mbps: f64 = strip(rate)
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && *r > 0.0 && *r <= 1e6)
        .ok_or_else(|| format!("{text}: data rate {rate:?} is not Mb/s"))?;
    let channels: u32 = chans
        .parse()
        .ok()
        .filter(|c: &u32| c.is_power_of_two() && *c <= 1024)
        .ok_or_else(|| format!("{text}: channel count {chans:?} is not a power of two up to 1024"))?;
    let bits: u32 = strip(bits)
        .parse()
        .ok()
        .filter(|b| (1..=32).contains(b))
        .ok_or_else(|| format!("{text}: bits per sample {bits:?} is not 1..32"))?;
    Ok(Some(Mode {
        text: text.to_owned(),
        format,
        payload,
        mbps,
        channels,
        bits,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_system_mode_strings() {
        let m = parse_mode("VDIF_8000-2048-16-2").unwrap().unwrap();
        assert_eq!(
            m.format,
            Format::Vdif {
                legacy: false,
                complex: false
            }
        );
        assert_eq!((m.payload, m.frame_size(), m.ntrack()), (8000, 8032, 32));
        assert_eq!(m.track_rate(), 64e6);
        assert_eq!(m.frame_rate(), Some(32_000));
        assert_eq!(m.format_name(), "VDIF");
        let m = parse_mode("mark5b-512-16-2").unwrap().unwrap();
        assert_eq!(
            (m.frame_size(), m.ntrack(), m.frame_rate()),
            (10016, 32, Some(6400))
        );
        assert_eq!(m.format_name(), "Mark5B");
        let m = parse_mode("vdifc_1000-2/1-1-2/2").unwrap().unwrap();
        assert_eq!((m.ntrack(), m.frame_size(), m.frame_rate()), (4, 1032, Some(250)));
        assert_eq!(
            parse_mode("VDIFL_5000-64-1-2").unwrap().unwrap().frame_size(),
            5016
        );
        assert_eq!(parse_mode("none").unwrap(), None);
    }

    #[test]
    fn bad_mode_strings_say_why() {
        for (s, why) in [
            ("VDIF-2048-16-2", "lacks the VDIF framesize"),
            ("VDIF_8001-2048-16-2", "multiple of 8"),
            ("VDIF_8000-x-16-2", "data rate"),
            ("VDIF_8000-2048-3-2", "power of two"),
            ("VDIF_8000-2048-16-0", "bits per sample"),
            ("VDIF_8000-2048-16", "expected"),
            ("MKIV1_4-512-16-2", "vlbiflow records"),
            ("", "vlbiflow records"),
            ("VDIFX_8000-2048-16-2", "flavour"),
        ] {
            let e = parse_mode(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
