//! The Mark6 / VEX day-of-year time form, `yyyy'y'ddd'd'hh'h'mm'm'ss's'` (e.g. `2026y200d12h00m00s`), as
//! `record=on` start times and `scan_check?` start fields carry it. Parsing is strict about the order of the
//! fields and their ranges; a fraction of a second is accepted and ignored.

use crate::time::{days_from_civil, UtcTime};

/// Parses `yyyy'y'ddd'd'hh'h'mm'm'ss's'` (case-insensitive, fraction of a second ignored) to Unix seconds.
/// `None` for anything else, including day 0, hour 24, or a year before 1970.
pub fn parse(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let (y, rest) = s.split_once('y')?;
    let (d, rest) = rest.split_once('d')?;
    let (h, rest) = rest.split_once('h')?;
    let (m, rest) = rest.split_once('m')?;
    let sec = rest.strip_suffix('s')?;
    let (sec, frac) = sec.split_once('.').unwrap_or((sec, "0"));
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let num = |t: &str, max: i64| -> Option<i64> {
        if t.is_empty() || t.len() > 4 || !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let v: i64 = t.parse().ok()?;
        (v <= max).then_some(v)
    };
    let (y, d, h, m, sec) = (
        num(y, 9999)?,
        num(d, 366)?,
        num(h, 23)?,
        num(m, 59)?,
        num(sec, 60)?,
    );
    if y < 1970 || d == 0 {
        return None;
    }
    Some((days_from_civil(y, 1, 1) + d - 1) * 86400 + h * 3600 + m * 60 + sec)
}

/// Unix seconds in the Mark6 / VEX form, e.g. `2025y190d12h00m00s`.
pub fn format(unix: i64) -> String {
    let (y, doy, sod) = UtcTime::from_unix(unix, 0).year_doy_sod();
    format!(
        "{y:04}y{doy:03}d{:02}h{:02}m{:02}s",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-07-09T12:00:00Z.
    const T0: i64 = 1_752_062_400;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse("2025y190d12h00m00s"), Some(T0));
        assert_eq!(parse("2025Y190D12H00M00.5S"), Some(T0));
        assert_eq!(parse(" 2025y190d12h00m01s "), Some(T0 + 1));
        assert_eq!(format(T0), "2025y190d12h00m00s");
        assert_eq!(parse(&format(T0 + 86_399)), Some(T0 + 86_399));
    }

    #[test]
    fn refuses_malformed_times() {
        for bad in [
            "2025y000d12h00m00s",
            "2025y190d25h00m00s",
            "2025y190d12h60m00s",
            "2025y190d12h00m61s",
            "1969y001d00h00m00s",
            "2025y190d12h00m00.xs",
            "2025y190d12h00m00",
            "60",
            "on",
            "",
            "y190d12h00m00s",
            "+2025y190d12h00m00s",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
