//! Time arithmetic for VDIF and Mark5B: (epoch, second, frame number) <-> UTC <-> global frame index.
//!
//! UTC here is POSIX time (seconds since 1970-01-01 without leap seconds), which is what VDIF's
//! "seconds since epoch" counts in practice (DiFX, baseband and the backends all ignore leap seconds).
//! Civil-date conversion uses the days-from-civil algorithm, so this crate needs no date library.

use crate::error::{Error, Result};
use crate::vdif::{MAX_EPOCH, MAX_FRAME_NUMBER, MAX_SECONDS};

/// Days between 1970-01-01 and 2000-01-01.
const DAYS_1970_TO_2000: i64 = 10957;
/// Modified Julian Date of 1970-01-01.
pub const MJD_UNIX_EPOCH: i64 = 40587;

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A UTC instant as whole POSIX seconds plus nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcTime {
    pub unix_seconds: i64,
    pub nanos: u32,
}

impl UtcTime {
    pub fn from_unix(unix_seconds: i64, nanos: u32) -> Self {
        UtcTime { unix_seconds, nanos }
    }

    /// The current wall-clock time.
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        UtcTime {
            unix_seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }

    /// Seconds as a float, for display and deltas.
    pub fn as_f64(&self) -> f64 {
        self.unix_seconds as f64 + f64::from(self.nanos) * 1e-9
    }

    /// Modified Julian Date (day number) and seconds of that day.
    pub fn mjd(&self) -> (i64, u32) {
        let days = self.unix_seconds.div_euclid(86400);
        (
            (days + MJD_UNIX_EPOCH),
            self.unix_seconds.rem_euclid(86400) as u32,
        )
    }

    /// Parses the form [`UtcTime::to_iso8601`] writes (`YYYY-MM-DDTHH:MM:SS[.f]Z`) into Unix seconds.
    pub fn parse_iso8601(s: &str) -> Option<f64> {
        let s = s.strip_suffix('Z')?;
        let (date, time) = s.split_once('T')?;
        let mut d = date.splitn(3, '-');
        let (y, m, dd): (i64, u32, u32) = (
            d.next()?.parse().ok()?,
            d.next()?.parse().ok()?,
            d.next()?.parse().ok()?,
        );
        if !(1..=12).contains(&m) || !(1..=31).contains(&dd) {
            return None;
        }
        let mut t = time.splitn(3, ':');
        let (h, mi): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
        let sec: f64 = t.next()?.parse().ok()?;
        sec.is_finite()
            .then(|| (days_from_civil(y, m, dd) * 86400 + h * 3600 + mi * 60) as f64 + sec)
    }

    /// ISO-8601 with nanosecond precision trimmed to what is non-zero, e.g. `2024-01-01T00:00:05.5Z`.
    pub fn to_iso8601(&self) -> String {
        let days = self.unix_seconds.div_euclid(86400);
        let sod = self.unix_seconds.rem_euclid(86400);
        let (y, m, d) = civil_from_days(days);
        let mut s = format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        );
        if self.nanos != 0 {
            let frac = format!("{:09}", self.nanos);
            s.push('.');
            s.push_str(frac.trim_end_matches('0'));
        }
        s.push('Z');
        s
    }

    /// Day of year (1-based) and seconds of day, as the Mark6 `yyyy'y'ddd'd'hh'h'mm'm'ss's'` form uses.
    pub fn year_doy_sod(&self) -> (i64, u32, u32) {
        let days = self.unix_seconds.div_euclid(86400);
        let (y, _, _) = civil_from_days(days);
        let doy = (days - days_from_civil(y, 1, 1) + 1) as u32;
        (y, doy, self.unix_seconds.rem_euclid(86400) as u32)
    }
}

/// POSIX time of the start of VDIF reference epoch `epoch` (half-years since 2000-01-01).
pub fn epoch_start_unix(epoch: u8) -> i64 {
    let year = 2000 + i64::from(epoch / 2);
    let month = if epoch % 2 == 0 { 1 } else { 7 };
    days_from_civil(year, month, 1) * 86400
}

/// The latest VDIF reference epoch that starts at or before `unix_seconds` (63 at most).
pub fn epoch_for_unix(unix_seconds: i64) -> Result<u8> {
    if unix_seconds < DAYS_1970_TO_2000 * 86400 {
        return Err(Error::OutOfRange {
            field: "VDIF time",
            value: unix_seconds.max(0) as u64,
            allowed: "2000-01-01 or later",
        });
    }
    let days = unix_seconds.div_euclid(86400);
    let (y, m, _) = civil_from_days(days);
    // After mid-2031 the 6-bit epoch saturates; the 30-bit second count then carries the time (to 2065).
    let epoch = ((y - 2000) * 2 + i64::from(m >= 7)).min(i64::from(MAX_EPOCH)) as u8;
    if unix_seconds - epoch_start_unix(epoch) > i64::from(MAX_SECONDS) {
        return Err(Error::OutOfRange {
            field: "VDIF time",
            value: unix_seconds as u64,
            allowed: "before the end of epoch 63 (2065)",
        });
    }
    Ok(epoch)
}

/// A VDIF time stamp: reference epoch, whole seconds since it, frame number within the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VdifTime {
    pub epoch: u8,
    pub seconds: u32,
    pub frame: u32,
}

impl VdifTime {
    /// The VDIF time of a whole UTC second, in the latest epoch that contains it.
    pub fn from_unix_second(unix_seconds: i64) -> Result<Self> {
        let epoch = epoch_for_unix(unix_seconds)?;
        let seconds = unix_seconds - epoch_start_unix(epoch);
        Ok(VdifTime {
            epoch,
            seconds: seconds as u32,
            frame: 0,
        })
    }

    /// POSIX second of this time stamp (the frame number is not included).
    pub fn unix_second(&self) -> i64 {
        epoch_start_unix(self.epoch) + i64::from(self.seconds)
    }

    /// UTC instant of the start of this frame at `frame_rate` frames per second.
    pub fn to_utc(&self, frame_rate: u32) -> Result<UtcTime> {
        check_rate(frame_rate)?;
        if self.frame >= frame_rate {
            return Err(Error::OutOfRange {
                field: "VDIF frame number",
                value: self.frame.into(),
                allowed: "below the frame rate",
            });
        }
        let nanos = (u64::from(self.frame) * 1_000_000_000 / u64::from(frame_rate)) as u32;
        Ok(UtcTime {
            unix_seconds: self.unix_second(),
            nanos,
        })
    }
}

fn check_rate(frame_rate: u32) -> Result<()> {
    if frame_rate == 0 || frame_rate > MAX_FRAME_NUMBER + 1 {
        return Err(Error::OutOfRange {
            field: "frame rate",
            value: frame_rate.into(),
            allowed: "1..=2^24 frames per second",
        });
    }
    Ok(())
}

/// Numbers frames on one global axis: index = POSIX second x rate + frame number. The index is the same
/// whatever epoch a stamp uses, so streams and files stamped in different epochs compare directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameClock {
    frame_rate: u32,
}

impl FrameClock {
    pub fn new(frame_rate: u32) -> Result<Self> {
        check_rate(frame_rate)?;
        Ok(FrameClock { frame_rate })
    }

    pub fn frame_rate(&self) -> u32 {
        self.frame_rate
    }

    /// Global index of a VDIF time stamp. Does no range checks: a frame number past the rate simply counts
    /// into the next second, which is what a continuity check wants to see.
    #[inline]
    pub fn index(&self, t: VdifTime) -> i64 {
        t.unix_second() * i64::from(self.frame_rate) + i64::from(t.frame)
    }

    /// Index from raw header fields; avoids building a `VdifTime` on the per-frame path.
    #[inline]
    pub fn index_of(&self, epoch_start_unix: i64, seconds: u32, frame: u32) -> i64 {
        (epoch_start_unix + i64::from(seconds)) * i64::from(self.frame_rate) + i64::from(frame)
    }

    /// The VDIF time stamp of a global index, in reference epoch `epoch`.
    pub fn time_of(&self, index: i64, epoch: u8) -> Result<VdifTime> {
        let rate = i64::from(self.frame_rate);
        let unix = index.div_euclid(rate);
        let frame = index.rem_euclid(rate) as u32;
        let seconds = unix - epoch_start_unix(epoch);
        if !(0..=i64::from(MAX_SECONDS)).contains(&seconds) {
            return Err(Error::OutOfRange {
                field: "VDIF seconds from epoch",
                value: seconds.max(0) as u64,
                allowed: "0..=2^30-1 in the given epoch",
            });
        }
        Ok(VdifTime {
            epoch,
            seconds: seconds as u32,
            frame,
        })
    }

    /// UTC instant of the start of a global index.
    pub fn utc_of(&self, index: i64) -> UtcTime {
        let rate = i64::from(self.frame_rate);
        let frame = index.rem_euclid(rate) as u64;
        UtcTime {
            unix_seconds: index.div_euclid(rate),
            nanos: (frame * 1_000_000_000 / rate as u64) as u32,
        }
    }

    /// The first global index at or after a UTC instant.
    pub fn index_at_or_after(&self, t: UtcTime) -> i64 {
        let rate = u64::from(self.frame_rate);
        let frame = (u64::from(t.nanos) * rate).div_ceil(1_000_000_000) as i64;
        t.unix_seconds * rate as i64 + frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn epoch_starts() {
        assert_eq!(epoch_start_unix(0), 946684800);
        assert_eq!(epoch_start_unix(1), 962409600); // 2000-07-01
        assert_eq!(epoch_start_unix(48), 1704067200); // 2024-01-01
        assert_eq!(epoch_for_unix(1704067200).unwrap(), 48);
        assert_eq!(epoch_for_unix(1704067199).unwrap(), 47);
        assert!(epoch_for_unix(0).is_err());
    }

    #[test]
    fn baseband_example_time() {
        // Epoch 48, second 5227200 -> 2024-03-01T12:00:00 (60.5 days after 2024-01-01).
        let t = VdifTime {
            epoch: 48,
            seconds: 5227200,
            frame: 0,
        };
        assert_eq!(t.to_utc(125000).unwrap().to_iso8601(), "2024-03-01T12:00:00Z");
        let half = VdifTime { frame: 62500, ..t };
        assert_eq!(
            half.to_utc(125000).unwrap().to_iso8601(),
            "2024-03-01T12:00:00.5Z"
        );
    }

    #[test]
    fn mjd_and_doy() {
        let t = UtcTime::from_unix(1704067200 + 86400 * 31 + 3661, 0); // 2024-02-01T01:01:01
        assert_eq!(t.mjd(), (60341, 3661));
        assert_eq!(t.year_doy_sod(), (2024, 32, 3661));
    }

    proptest! {
        #[test]
        fn civil_round_trip(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn index_round_trip(unix in 946684800i64..2_900_000_000, rate in 1u32..=1_000_000, f in 0u32..1_000_000) {
            let frame = f % rate;
            let clock = FrameClock::new(rate).unwrap();
            let t = VdifTime::from_unix_second(unix).unwrap();
            let t = VdifTime { frame, ..t };
            let idx = clock.index(t);
            prop_assert_eq!(clock.time_of(idx, t.epoch).unwrap(), t);
            let utc = t.to_utc(rate).unwrap();
            prop_assert_eq!(clock.index_at_or_after(utc), idx);
            prop_assert_eq!(clock.utc_of(idx), utc);
        }
    }

    #[test]
    fn iso8601_parses_what_it_writes() {
        let t = UtcTime::from_unix(1_704_067_205, 500_000_000);
        assert_eq!(UtcTime::parse_iso8601(&t.to_iso8601()), Some(1_704_067_205.5));
        assert_eq!(UtcTime::parse_iso8601("2024-13-01T00:00:00Z"), None);
        assert_eq!(UtcTime::parse_iso8601("2024-01-01 00:00:00"), None);
    }
}
