//! How operators write sizes and durations, and the sizes every layer shares: flags,
//! sidecars and budgets all read them the same way, so this module sits below the
//! layers and imports none of them.
//!
//! The parsers are our own on purpose: the forms operators already write must keep
//! working exactly, with errors that name the expected form, and the crates for this
//! read them differently (`humantime` takes no fractions such as `1.5s`; `bytesize`
//! reads `K` as 1000 where it has always meant 1024 here; `parse-size` accepts many
//! more forms, such as `1.5 kB`).

use std::time::Duration;

/// The largest linear memory a 32-bit WebAssembly module can address.
pub const MAX_MEMORY_BYTES: usize = 4 << 30;

/// `--max-memory` when not given: 256 MiB per linear memory.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = 256 << 20;

/// The longest duration a flag or setting takes unless its own help says
/// otherwise: one day. Past it a deadline (`now + duration`) could overflow the
/// clock (`9223372036854775807s` passed, and every execution then panicked).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The text of [`MAX_DURATION`] in messages.
pub const MAX_DURATION_TEXT: &str = "at most 1 day (24h)";

/// The largest size a size flag takes unless its own help says otherwise: 4 GiB.
pub const MAX_SIZE: usize = 4 << 30;

/// `bytes` as a person writes it: in the largest of GiB, MiB, KiB that divides it
/// (`256 MiB`), else in bytes.
pub fn format_bytes(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// `duration` in milliseconds, to a tenth: how log lines give a duration, as a
/// number (a JSON log's field is then a JSON number, not a string).
pub fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e4).round() / 10.0
}

/// Parses a duration: a number with `ms`, `s`, `m` or `h` (`5s`, `500ms`, `1.5s`).
///
/// # Errors
///
/// A message naming the expected form.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` needs a unit: ms, s, m or h (e.g. 5s)"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 5s, 500ms)"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`; use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is out of range"))
}

/// Parses a byte size: a whole number with an optional unit `B`, `KiB`, `MiB`, `GiB`
/// (or `K`, `M`, `G`, meaning the same powers of 1024).
///
/// # Errors
///
/// A message naming the expected form.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 1048576, 64KiB, 1MiB)"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}`; use B, KiB, MiB or GiB"
            ));
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is out of range"))
}

#[cfg(test)]
mod tests {

    #[test]
    fn millis_are_to_a_tenth() {
        assert_eq!(millis(Duration::from_micros(2_849)), 2.8);
        assert_eq!(millis(Duration::from_micros(2_850)), 2.9);
        assert_eq!(millis(Duration::from_secs(3)), 3000.0);
        assert_eq!(millis(Duration::ZERO), 0.0);
    }
    use super::*;

    #[test]
    fn sizes_are_written_in_the_largest_unit_that_divides_them() {
        assert_eq!(format_bytes(4 << 30), "4 GiB");
        assert_eq!(format_bytes(256 << 20), "256 MiB");
        assert_eq!(format_bytes(1536 << 20), "1536 MiB");
        assert_eq!(format_bytes(3 << 10), "3 KiB");
        assert_eq!(format_bytes(1000), "1000 bytes");
        assert_eq!(format_bytes(0), "0 bytes");
    }

    #[test]
    fn durations_and_sizes_parse_with_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("5"),
            Err("`5` needs a unit: ms, s, m or h (e.g. 5s)".into())
        );
        assert_eq!(
            parse_duration("5d"),
            Err("`5d`: unknown unit `d`; use ms, s, m or h".into())
        );
        assert_eq!(parse_bytes("1048576"), Ok(1_048_576));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(
            parse_bytes("1TB"),
            Err("`1TB`: unknown unit `TB`; use B, KiB, MiB or GiB".into())
        );
        assert_eq!(
            parse_bytes("lots"),
            Err("`lots` is not a size (e.g. 1048576, 64KiB, 1MiB)".into())
        );
    }
}
