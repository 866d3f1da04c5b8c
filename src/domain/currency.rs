/// An ISO 4217 currency, held in the lower-case form the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency(String);

impl Currency {
    /// Any case is accepted ("USD", "usd", "Usd"); anything that is not an ISO 4217 code of
    /// money in use is not: funds (`USN`, `CLF`), precious metals, testing and other special
    /// codes (`XAU`, `XTS`, `XXX`) and superseded currencies (`HRK`) are codes, but nobody
    /// can be charged in them.
    pub fn parse(code: &str) -> Result<Self, String> {
        let upper = code.to_ascii_uppercase();
        let currency = (code.len() == 3)
            .then(|| iso_currency::Currency::from_code(&upper))
            .flatten()
            .ok_or_else(|| "must be a three-letter ISO 4217 currency code".to_owned())?;
        if currency.is_fund() || currency.is_special() || currency.is_superseded().is_some() {
            return Err(format!(
                "`{}` is not a currency payments can be made in (an ISO 4217 fund, precious \
                 metal, testing or superseded code)",
                upper.to_ascii_lowercase()
            ));
        }
        Ok(Self(upper.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Currency;

    #[test]
    fn normalises_case() {
        for code in ["usd", "USD", "Usd", "uSd"] {
            assert_eq!(Currency::parse(code).unwrap().as_str(), "usd");
        }
        assert_eq!(Currency::parse("EUR").unwrap().as_str(), "eur");
        assert_eq!(Currency::parse("jpy").unwrap().as_str(), "jpy");
        // Real currencies whose codes start with X.
        for code in ["xaf", "xof", "xpf", "xcd"] {
            assert_eq!(Currency::parse(code).unwrap().as_str(), code);
        }
    }

    #[test]
    fn rejects_non_codes() {
        for code in [
            "",
            "us",
            "usdd",
            "xyz",
            "12$",
            "ＵＳＤ",
            " usd",
            "xxx",
            "XTS",
            "xau",
            "usn",
            "clf",
            "hrk",
        ] {
            assert!(
                Currency::parse(code).is_err(),
                "{code:?} should be rejected"
            );
        }
    }
}
