/// An amount of money in integer minor units (cents), 1 … 99 999 999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(i64);

impl Amount {
    pub const MIN: i64 = 1;
    pub const MAX: i64 = 99_999_999;

    pub fn parse(value: i64) -> Result<Self, String> {
        if (Self::MIN..=Self::MAX).contains(&value) {
            Ok(Self(value))
        } else {
            Err(format!(
                "must be an integer between {} and {} (minor units)",
                Self::MIN,
                Self::MAX
            ))
        }
    }

    pub fn minor_units(self) -> i64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Amount;

    #[test]
    fn accepts_the_bounds() {
        assert_eq!(Amount::parse(1).map(Amount::minor_units), Ok(1));
        assert_eq!(
            Amount::parse(99_999_999).map(Amount::minor_units),
            Ok(99_999_999)
        );
    }

    #[test]
    fn rejects_zero_negative_and_too_large() {
        for v in [0, -1, 100_000_000, i64::MAX, i64::MIN] {
            assert!(Amount::parse(v).is_err(), "{v} should be rejected");
        }
    }
}
