//! Time specifications of the mesh configuration (sans-IO): durations in the command line's syntax
//! (`2m`, `30s`, `1h`; the former ISO-8601 form `PT2M`, `P1D`, `PT0.5S` is still read) and five-field
//! cron expressions (`*/2 * * * *`, UTC). Times are milliseconds since the
//! Unix epoch (UTC) throughout the crate.

/// Milliseconds since the Unix epoch, UTC.
pub type Ms = i64;

/// Parses a duration in the command line's syntax (`2m`, `30s`, `500ms`, `1h`, as `vlbiflow_units` reads
/// it) or, for configurations written before, an ISO-8601 one (`PT2M`, see [`parse_iso_duration`]; see
/// [`is_iso_duration`] to warn about it), into milliseconds.
pub fn parse_duration(s: &str) -> Result<Ms, String> {
    if is_iso_duration(s) {
        return parse_iso_duration(s);
    }
    let secs = vlbiflow_units::parse_seconds(s)?;
    if secs > 366.0 * 86_400.0 * 100.0 {
        return Err(format!("{s:?} is longer than a century"));
    }
    Ok((secs * 1000.0).round() as Ms)
}

/// Whether a duration is written in the former ISO-8601 form (`PT2M`).
pub fn is_iso_duration(s: &str) -> bool {
    s.starts_with(['P', 'p'])
}

/// A duration in the command line's syntax, in the largest whole unit: `2m`, `90s`, `1500ms`, `36h`.
pub fn format_units(ms: Ms) -> String {
    if ms != 0 && ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms != 0 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses an ISO-8601 duration `PnW` or `PnDTnHnMnS` (fractions allowed on the last field) into
/// milliseconds. Years and months are refused (their length varies).
pub fn parse_iso_duration(s: &str) -> Result<Ms, String> {
    let err = |why: &str| format!("{s:?} is not an ISO-8601 duration such as PT2M, PT30S or P1D: {why}");
    let rest = s
        .strip_prefix('P')
        .or_else(|| s.strip_prefix('p'))
        .ok_or_else(|| err("it must start with P"))?;
    if rest.is_empty() {
        return Err(err("nothing after P"));
    }
    let mut total = 0f64;
    let mut in_time = false;
    let mut num = String::new();
    let mut seen_any = false;
    let mut last_unit_rank = 0u8;
    for c in rest.chars() {
        match c {
            'T' | 't' => {
                if in_time || !num.is_empty() {
                    return Err(err("misplaced T"));
                }
                in_time = true;
            }
            '0'..='9' | '.' | ',' => num.push(if c == ',' { '.' } else { c }),
            _ => {
                let unit = c.to_ascii_uppercase();
                let (rank, ms) = match (in_time, unit) {
                    (false, 'W') => (1, 7.0 * 86_400_000.0),
                    (false, 'D') => (2, 86_400_000.0),
                    (true, 'H') => (3, 3_600_000.0),
                    (true, 'M') => (4, 60_000.0),
                    (true, 'S') => (5, 1000.0),
                    (false, 'Y') | (false, 'M') => return Err(err("years and months have no fixed length")),
                    _ => return Err(err(&format!("unknown unit {c:?}"))),
                };
                if rank <= last_unit_rank {
                    return Err(err("units out of order or repeated"));
                }
                last_unit_rank = rank;
                let v: f64 = num
                    .parse()
                    .map_err(|_| err(&format!("{num:?} before {c} is not a number")))?;
                if !v.is_finite() || v < 0.0 {
                    return Err(err("negative or non-finite number"));
                }
                total += v * ms;
                num.clear();
                seen_any = true;
            }
        }
    }
    if !num.is_empty() {
        return Err(err("a number without a unit at the end"));
    }
    if !seen_any {
        return Err(err("no fields"));
    }
    if total > 366.0 * 86_400_000.0 * 100.0 {
        return Err(err("longer than a century"));
    }
    Ok(total.round() as Ms)
}

/// Formats milliseconds as an ISO-8601 duration (`PT2M`, `PT1.5S`, `P1DT2H`).
pub fn format_duration(ms: Ms) -> String {
    if ms == 0 {
        return "PT0S".into();
    }
    let (d, rest) = (ms / 86_400_000, ms % 86_400_000);
    let (h, rest) = (rest / 3_600_000, rest % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let mut s = String::from("P");
    if d > 0 {
        s += &format!("{d}D");
    }
    if h > 0 || m > 0 || rest > 0 {
        s.push('T');
    }
    if h > 0 {
        s += &format!("{h}H");
    }
    if m > 0 {
        s += &format!("{m}M");
    }
    if rest > 0 {
        if rest % 1000 == 0 {
            s += &format!("{}S", rest / 1000);
        } else {
            s += &format!("{}S", rest as f64 / 1000.0);
        }
    }
    s
}

/// A five-field cron expression (minute hour day-of-month month day-of-week), evaluated in UTC.
/// Fields take `*`, numbers, ranges `a-b`, lists `a,b` and steps `*/n`, `a-b/n`; day-of-week 0 or 7
/// is Sunday. As in Vixie cron, when both day fields are restricted a day matching either fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    dom_any: bool,
    dow_any: bool,
    text: String,
}

impl Cron {
    /// Parses the expression.
    pub fn parse(s: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = s.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "cron {s:?}: expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            ));
        }
        let f = |i: usize, lo: u32, hi: u32, name: &str| {
            parse_field(fields[i], lo, hi).map_err(|e| format!("cron {s:?}, {name} field: {e}"))
        };
        let minutes = f(0, 0, 59, "minute")?;
        let hours = f(1, 0, 23, "hour")? as u32;
        let days = f(2, 1, 31, "day-of-month")? as u32;
        let months = f(3, 1, 12, "month")? as u16;
        let mut weekdays = f(4, 0, 7, "day-of-week")?;
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1;
        }
        Ok(Cron {
            minutes,
            hours,
            days,
            months,
            weekdays: (weekdays & 0x7f) as u8,
            dom_any: fields[2] == "*",
            dow_any: fields[4] == "*",
            text: s.to_string(),
        })
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn matches_day(&self, day: u32, month: u32, weekday: u32) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom = self.days & (1 << day) != 0;
        let dow = self.weekdays & (1 << weekday) != 0;
        match (self.dom_any, self.dow_any) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            (false, false) => dom || dow,
        }
    }

    /// The first firing time strictly after `t`, or None within the next five years.
    pub fn next_after(&self, t: Ms) -> Option<Ms> {
        // Start at the next whole minute.
        let mut minute = t.div_euclid(60_000) + 1;
        let limit = minute + 5 * 366 * 1440;
        while minute < limit {
            let day_index = minute.div_euclid(1440);
            let (_, month, day) = civil_from_days(day_index);
            // 1970-01-01 was a Thursday (4).
            let weekday = (day_index + 4).rem_euclid(7) as u32;
            if !self.matches_day(day, month, weekday) {
                minute = (day_index + 1) * 1440;
                continue;
            }
            let in_day = minute - day_index * 1440;
            let (h, m) = ((in_day / 60) as u32, (in_day % 60) as u32);
            if self.hours & (1 << h) == 0 {
                minute = day_index * 1440 + (h as i64 + 1) * 60;
                continue;
            }
            if self.minutes & (1 << m) == 0 {
                minute += 1;
                continue;
            }
            return Some(minute * 60_000);
        }
        None
    }

    /// The last firing time at or before `t`, or None within the previous five years.
    pub fn prev_at_or_before(&self, t: Ms) -> Option<Ms> {
        // Walk back day by day, then search forward within the day.
        let start_day = t.div_euclid(86_400_000);
        for d in 0..(5 * 366) {
            let day = start_day - d;
            let mut best = None;
            let mut cur = day * 86_400_000 - 1;
            while let Some(n) = self.next_after(cur) {
                if n > t || n >= (day + 1) * 86_400_000 {
                    break;
                }
                best = Some(n);
                cur = n;
            }
            if best.is_some() {
                return best;
            }
        }
        None
    }
}

fn parse_field(s: &str, lo: u32, hi: u32) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in s.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, st)) => {
                let st: u32 = st.parse().map_err(|_| format!("step {st:?} is not a number"))?;
                if st == 0 {
                    return Err("step 0".into());
                }
                (r, st)
            }
            None => (part, 1),
        };
        let num = |x: &str| -> Result<u32, String> {
            let v: u32 = x.parse().map_err(|_| format!("{x:?} is not a number"))?;
            if v < lo || v > hi {
                return Err(format!("{v} outside {lo}..={hi}"));
            }
            Ok(v)
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (num(a)?, num(b)?)
        } else {
            let a = num(range)?;
            (a, if step > 1 { hi } else { a })
        };
        if a > b {
            return Err(format!("range {a}-{b} runs backwards"));
        }
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    if bits == 0 {
        return Err(format!("{s:?} selects nothing"));
    }
    Ok(bits)
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// RFC 3339 text of a time, UTC, millisecond precision.
pub fn rfc3339(t: Ms) -> String {
    match chrono::DateTime::from_timestamp_millis(t) {
        Some(d) => d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("{t} ms"),
    }
}

/// The wall clock, ms since the epoch.
pub fn now_ms() -> Ms {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("PT2M").unwrap(), 120_000);
        assert_eq!(parse_duration("PT30S").unwrap(), 30_000);
        assert_eq!(parse_duration("PT0.5S").unwrap(), 500);
        assert_eq!(parse_duration("P1DT1H").unwrap(), 90_000_000);
        assert_eq!(parse_duration("P2W").unwrap(), 14 * 86_400_000);
        for bad in [
            "", "P", "PT", "2M", "P1M", "PT1M2H", "PT-1S", "PTxS", "PT5", "P1H",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for ms in [0, 500, 1500, 120_000, 90_000_000] {
            assert_eq!(parse_duration(&format_duration(ms)).unwrap(), ms);
        }
    }

    #[test]
    fn cron_every_two_minutes() {
        let c = Cron::parse("*/2 * * * *").unwrap();
        assert_eq!(c.next_after(0), Some(120_000));
        assert_eq!(c.next_after(119_999), Some(120_000));
        assert_eq!(c.next_after(120_000), Some(240_000));
        assert_eq!(c.prev_at_or_before(250_000), Some(240_000));
        assert_eq!(c.prev_at_or_before(240_000), Some(240_000));
    }

    #[test]
    fn cron_days() {
        // 2024-01-01 was a Monday; "0 6 * * 1" fires then at 06:00.
        let monday = 19_723 * 86_400_000i64;
        let c = Cron::parse("0 6 * * 1").unwrap();
        assert_eq!(c.next_after(monday - 1), Some(monday + 6 * 3_600_000));
        assert_eq!(
            c.next_after(monday + 6 * 3_600_000),
            Some(monday + 7 * 86_400_000 + 6 * 3_600_000)
        );
        let c = Cron::parse("30 12 1 1 *").unwrap();
        assert_eq!(c.next_after(monday), Some(monday + 12 * 3_600_000 + 30 * 60_000));
        for bad in ["* * * *", "60 * * * *", "*/0 * * * *", "5-1 * * * *", "a * * * *"] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }
}
