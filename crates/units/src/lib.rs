//! Parsing of the quantities users type: bit rates (`32Gbps`, `512Mb/s`), byte sizes (`10MB`, `512KiB`),
//! durations (`10`, `90s`, `5m`, `1h`) and frequencies (`10MHz`). Decimal prefixes are powers of 1000,
//! binary ones (`Ki`, `Mi`, `Gi`) powers of 1024, as the SI and IEC say.

#![forbid(unsafe_code)]

/// Longest duration accepted, seconds (about 31.7 years): beyond it a typed duration is a mistake, and
/// `std::time::Duration` would overflow not much further.
pub const MAX_SECONDS: f64 = 1e9;
/// Highest bit rate accepted, bits/s (100 Tb/s): beyond it a typed rate is a mistake.
pub const MAX_BIT_RATE: f64 = 1e14;
/// Highest frequency accepted, Hz (1 THz).
pub const MAX_HZ: f64 = 1e12;

/// Splits "12.5Gbps" into (12.5, "Gbps").
fn split_number(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    // "e" may start a unit only if it is not an exponent: no unit here begins with e/E, so this is safe.
    let (num, unit) = s.split_at(end);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} does not start with a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{s:?} is not a non-negative finite number"));
    }
    Ok((value, unit.trim()))
}

fn prefix(p: &str) -> Option<f64> {
    Some(match p {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    })
}

/// A bit rate in bits per second: `4Gbps`, `4Gb/s`, `4G`, `500Mbps`, `1e9`.
pub fn parse_bit_rate(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    let p = unit
        .strip_suffix("bps")
        .or_else(|| unit.strip_suffix("b/s"))
        .or_else(|| unit.strip_suffix("bit/s"))
        .unwrap_or(unit);
    let m = prefix(p)
        .ok_or_else(|| format!("{s:?}: unknown rate unit {unit:?} (use e.g. 500Mbps, 4Gbps, 4Gb/s)"))?;
    let bps = v * m;
    if bps > MAX_BIT_RATE {
        return Err(format!(
            "{s:?} is above the highest rate accepted, {MAX_BIT_RATE:e} b/s"
        ));
    }
    Ok(bps)
}

/// A byte count: `10MB`, `10M`, `512KiB`, `8224`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let p = unit.strip_suffix('B').unwrap_or(unit);
    let m = prefix(p)
        .ok_or_else(|| format!("{s:?}: unknown size unit {unit:?} (use e.g. 8224, 10MB, 512KiB)"))?;
    let bytes = v * m;
    if bytes.fract() != 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// A duration in seconds: `10`, `2.5s`, `500ms`, `5m`, `1h`.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    let m = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{s:?}: unknown time unit {unit:?} (use e.g. 10, 10s, 500ms, 5m, 1h)"
            ))
        }
    };
    let seconds = v * m;
    if seconds > MAX_SECONDS {
        return Err(format!(
            "{s:?} is longer than the longest duration accepted, {MAX_SECONDS:e} s"
        ));
    }
    Ok(seconds)
}

/// A duration as [`parse_seconds`] reads it, as a [`std::time::Duration`].
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    parse_seconds(s).map(std::time::Duration::from_secs_f64)
}

/// A frequency in Hz: `10MHz`, `1.5kHz`, `250000`.
pub fn parse_hz(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    let p = unit.strip_suffix("Hz").unwrap_or(unit);
    let m = prefix(p).ok_or_else(|| format!("{s:?}: unknown frequency unit {unit:?} (use e.g. 10MHz)"))?;
    let hz = v * m;
    if hz > MAX_HZ {
        return Err(format!(
            "{s:?} is above the highest frequency accepted, {MAX_HZ:e} Hz"
        ));
    }
    Ok(hz)
}

/// A value with an SI prefix (k, M, G, T) and `decimals` decimals: `fmt_si(2.5e9, "b/s", 2)` is `2.50 Gb/s`.
pub fn fmt_si(v: f64, unit: &str, decimals: usize) -> String {
    let (d, p) = if v >= 1e12 {
        (1e12, "T")
    } else if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else if v >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    format!("{:.decimals$} {p}{unit}", v / d)
}

/// `4.000 Gb/s` style formatting of a bit rate.
pub fn fmt_bit_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.3} Gb/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.3} Mb/s", bps / 1e6)
    } else {
        format!("{:.1} kb/s", bps / 1e3)
    }
}

/// `1.23 GB` style formatting of a byte count (decimal units, like disk vendors and the seeds' tables).
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e12 {
        format!("{:.2} TB", b / 1e12)
    } else if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// A count and its noun, singular for exactly one: `fmt_count(1, "byte", "bytes")` is `1 byte`,
/// `fmt_count(0, "byte", "bytes")` is `0 bytes`.
pub fn fmt_count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A fraction (a loss rate) in scientific notation with `decimals` decimals, and zero as `0`:
/// `fmt_fraction(0.00123, 2)` is `1.23e-3`, `fmt_fraction(0.0, 2)` is `0` (not `0.00e0`).
pub fn fmt_fraction(v: f64, decimals: usize) -> String {
    if v == 0.0 {
        "0".to_string()
    } else {
        format!("{v:.decimals$e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_bit_rate("32Gbps").unwrap(), 32e9);
        assert_eq!(parse_bit_rate("4Gb/s").unwrap(), 4e9);
        assert_eq!(parse_bit_rate("512M").unwrap(), 512e6);
        assert_eq!(parse_bit_rate("1e9").unwrap(), 1e9);
        assert!(parse_bit_rate("fast").is_err());
        assert!(parse_bit_rate("4GBps").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_bytes("512KiB").unwrap(), 524_288);
        assert_eq!(parse_bytes("8224").unwrap(), 8224);
        assert!(parse_bytes("1.5").is_err());
        assert!(parse_bytes("-1").is_err());
    }

    #[test]
    fn si_prefixes() {
        assert_eq!(fmt_si(2.5e9, "b/s", 2), "2.50 Gb/s");
        assert_eq!(fmt_si(999.0, "B", 0), "999 B");
        assert_eq!(fmt_si(1.5e13, "B", 1), "15.0 TB");
    }

    #[test]
    fn byte_counts_plurals_and_fractions() {
        assert_eq!(fmt_bytes(8), "8 B");
        assert_eq!(fmt_bytes(8224), "8.2 kB");
        assert_eq!(fmt_bytes(1_234_567), "1.23 MB");
        assert_eq!(fmt_count(0, "byte", "bytes"), "0 bytes");
        assert_eq!(fmt_count(1, "byte", "bytes"), "1 byte");
        assert_eq!(fmt_count(8, "byte", "bytes"), "8 bytes");
        assert_eq!(fmt_fraction(0.0, 2), "0");
        assert_eq!(fmt_fraction(0.00123, 2), "1.23e-3");
        assert_eq!(fmt_fraction(1.0, 3), "1.000e0");
    }

    #[test]
    fn durations_and_frequencies() {
        assert_eq!(parse_seconds("5m").unwrap(), 300.0);
        assert_eq!(parse_seconds("500ms").unwrap(), 0.5);
        assert_eq!(parse_hz("10MHz").unwrap(), 10e6);
        assert!(parse_seconds("5 fortnights").is_err());
        assert_eq!(parse_duration("90s").unwrap(), std::time::Duration::from_secs(90));
    }

    #[test]
    fn out_of_range_and_non_numbers_are_clear_errors() {
        for bad in [
            "1e30", "NaN", "nan", "inf", "-5", "-0.5s", "1e400", "2e7h", "1e308h",
        ] {
            let e = parse_seconds(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_seconds("1e30").unwrap_err().contains("longest duration"));
        assert_eq!(parse_seconds("1e9").unwrap(), 1e9);
        for bad in ["1e300Gbps", "1e15", "NaN", "-1Gbps", "inf"] {
            assert!(parse_bit_rate(bad).is_err(), "{bad}");
        }
        assert!(parse_bit_rate("1e15").unwrap_err().contains("highest rate"));
        assert_eq!(parse_bit_rate("100Tbps").unwrap(), 1e14);
        assert!(parse_hz("1e300THz").is_err());
    }
}
