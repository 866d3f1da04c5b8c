//! Money as people write it: minor units shown and read in the currency's major units
//! (`12.50` for 1250 cents of usd, `1250` for 1250 yen).

/// The currency's number of decimals (2 when unknown).
fn exponent(currency: &str) -> u32 {
    iso_currency::Currency::from_code(&currency.to_ascii_uppercase())
        .and_then(|c| c.exponent())
        .map_or(2, u32::from)
}

/// `1250, "usd"` → `12.50 USD`.
pub fn money(minor: i64, currency: &str) -> String {
    let digits = exponent(currency);
    let code = currency.to_ascii_uppercase();
    if digits == 0 {
        return format!("{minor} {code}");
    }
    let scale = 10_i64.pow(digits);
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let scale = scale.unsigned_abs();
    format!(
        "{sign}{}.{:0width$} {code}",
        abs / scale,
        abs % scale,
        width = digits as usize
    )
}

/// `"12.5"`, `"12.50"`, `"12"` → 1250 (usd). Empty → `None`. Refused: more decimals than
/// the currency has, signs, anything but digits and one `.`.
pub fn parse_major(text: &str, currency: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let digits = exponent(currency);
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let is_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !is_digits(whole)
        || !is_digits(fraction)
        || fraction.len() > digits as usize
        || whole.len() > 12
    {
        return Err(format!(
            "`{text}` is not an amount: write it like 12.50 (at most {digits} decimals)"
        ));
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| "too large".to_owned())?
    };
    let mut fraction_units: i64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| "too large".to_owned())?
    };
    for _ in fraction.len()..digits as usize {
        fraction_units *= 10;
    }
    whole
        .checked_mul(10_i64.pow(digits))
        .and_then(|w| w.checked_add(fraction_units))
        .map(Some)
        .ok_or_else(|| "too large".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_shown_and_read_in_major_units() {
        assert_eq!(money(1250, "usd"), "12.50 USD");
        assert_eq!(money(-5, "usd"), "-0.05 USD");
        assert_eq!(money(1250, "jpy"), "1250 JPY");
        assert_eq!(parse_major("12.50", "usd"), Ok(Some(1250)));
        assert_eq!(parse_major("12.5", "usd"), Ok(Some(1250)));
        assert_eq!(parse_major(" 12 ", "usd"), Ok(Some(1200)));
        assert_eq!(parse_major(".5", "usd"), Ok(Some(50)));
        assert_eq!(parse_major("", "usd"), Ok(None));
        assert_eq!(parse_major("1250", "jpy"), Ok(Some(1250)));
        for bad in [
            "12.505",
            "-1",
            "1,5",
            "abc",
            ".",
            "1.2.3",
            "12.5",
            "99999999999999",
        ] {
            let currency = if bad == "12.5" { "jpy" } else { "usd" };
            assert!(parse_major(bad, currency).is_err(), "{bad}");
        }
    }
}
