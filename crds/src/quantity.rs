//! Kubernetes quantities (`"64Mi"`, `"1.5G"`, `"100m"`), parsed and formatted without floating
//! rounding surprises for the whole numbers Flotilla sums and compares.

/// Parses a Kubernetes quantity into thousandths of its unit, and whether it used a binary
/// suffix (Ki, Mi, ...). `None` for malformed quantities.
pub fn parse_quantity(s: &str) -> Option<(i128, bool)> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (multiplier_milli, binary): (f64, bool) = match suffix {
        "" => (1e3, false),
        "m" => (1.0, false),
        "k" => (1e6, false),
        "M" => (1e9, false),
        "G" => (1e12, false),
        "T" => (1e15, false),
        "P" => (1e18, false),
        "E" => (1e21, false),
        "Ki" => (1024.0 * 1e3, true),
        "Mi" => (1024f64.powi(2) * 1e3, true),
        "Gi" => (1024f64.powi(3) * 1e3, true),
        "Ti" => (1024f64.powi(4) * 1e3, true),
        "Pi" => (1024f64.powi(5) * 1e3, true),
        "Ei" => (1024f64.powi(6) * 1e3, true),
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    Some(((value * multiplier_milli).round() as i128, binary))
}

/// Formats thousandths of a unit: whole numbers plainly (with the largest exact binary suffix
/// when the inputs used binary suffixes), fractions in milli-units.
pub fn format_quantity(milli: i128, binary: bool) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let whole = milli / 1000;
    if binary && whole != 0 {
        for (suffix, factor) in [
            ("Ei", 1i128 << 60),
            ("Pi", 1 << 50),
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if whole % factor == 0 {
                return format!("{}{suffix}", whole / factor);
            }
        }
    }
    whole.to_string()
}

/// A quantity of bytes: `None` for malformed or negative quantities and fractions of a byte.
pub fn bytes(s: &str) -> Option<u64> {
    let (milli, _) = parse_quantity(s)?;
    (milli >= 0 && milli % 1000 == 0)
        .then(|| u64::try_from(milli / 1000).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_quantities() {
        assert_eq!(bytes("64Mi"), Some(64 << 20));
        assert_eq!(bytes("2G"), Some(2_000_000_000));
        assert_eq!(bytes("1024"), Some(1024));
        assert_eq!(bytes("0"), Some(0));
        assert_eq!(bytes("-1"), None);
        assert_eq!(bytes("1.5"), None);
        assert_eq!(bytes("lots"), None);
    }
}
