/// An ISO 4217 currency, held in the lower-case form the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency(String);

impl Currency {
    /// Any case is accepted ("USD", "usd", "Usd"); anything that is not an ISO 4217 code is not.
    pub fn parse(code: &str) -> Result<Self, String> {
        let upper = code.to_ascii_uppercase();
        if code.len() == 3 && iso_currency::Currency::from_code(&upper).is_some() {
            Ok(Self(upper.to_ascii_lowercase()))
        } else {
            Err("must be a three-letter ISO 4217 currency code".to_owned())
        }
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
    }

    #[test]
    fn rejects_non_codes() {
        for code in ["", "us", "usdd", "xyz", "12$", "ＵＳＤ", " usd"] {
            assert!(
                Currency::parse(code).is_err(),
                "{code:?} should be rejected"
            );
        }
    }
}
