//! Human durations (`30s`, `5m`, `2h`, `3d`, `1h30m`) as used in the config and in PR commands.

use std::time::Duration;

pub const ACCEPTED_FORM: &str = "a duration like 30s, 5m, 2h, 3d or 1h30m";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not {ACCEPTED_FORM}")]
pub struct BadDuration(pub String);

/// Parses one or more `<number><unit>` parts, units `s`, `m`, `h`, `d`, `w`.
pub fn parse(text: &str) -> Result<Duration, BadDuration> {
    let bad = || BadDuration(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit = match rest.as_bytes().get(digits) {
            Some(b's') => 1,
            Some(b'm') => 60,
            Some(b'h') => 3_600,
            Some(b'd') => 86_400,
            Some(b'w') => 604_800,
            _ => return Err(bad()),
        };
        total = number
            .checked_mul(unit)
            .and_then(|secs| total.checked_add(secs))
            .ok_or_else(bad)?;
        rest = &rest[digits + 1..];
    }
    Ok(Duration::from_secs(total))
}

/// What a person says for time left: whole minutes, the largest two units ("2d 3h",
/// "5h 10m", "4m").
pub fn roughly(seconds: u64) -> String {
    let minutes = seconds.div_ceil(60) * 60;
    let spelled = format(Duration::from_secs(minutes));
    let parts: Vec<&str> = spelled
        .split_inclusive(|c: char| c.is_ascii_alphabetic())
        .take(2)
        .collect();
    parts.join(" ")
}

/// The shortest exact spelling in the units `parse` accepts: `3d`, `1h30m`, `0s`.
pub fn format(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("72h"), Ok(Duration::from_secs(72 * 3600)));
        assert_eq!(parse("14d"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in [
            "",
            "3",
            "h",
            "3x",
            "-1h",
            "1.5h",
            "3 d",
            "1h30",
            "9999999999d",
        ] {
            assert_eq!(parse(bad), Err(BadDuration(bad.into())), "{bad:?}");
        }
    }

    #[test]
    fn format_round_trips() {
        for text in ["0s", "45s", "5m", "1h30m", "3d", "2d1h", "1d0h1m1s"] {
            let duration = parse(text).unwrap();
            assert_eq!(parse(&format(duration)), Ok(duration));
        }
        assert_eq!(format(Duration::from_secs(93_600)), "1d2h");
    }
}
