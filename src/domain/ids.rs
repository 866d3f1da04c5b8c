use std::fmt;

/// The id of an object a route addresses (`/v1/payments/{id}`): what the object is called
/// and how a path segment becomes one. Ids are visible ASCII of a fixed shape, so a
/// segment that parses cannot carry anything the database would refuse.
pub trait ObjectId: Sized {
    /// The object's name in a 404 answer: "payment".
    const OBJECT: &'static str;

    fn parse_id(raw: &str) -> Option<Self>;
}

impl ObjectId for PaymentId {
    const OBJECT: &'static str = "payment";

    fn parse_id(raw: &str) -> Option<Self> {
        Self::parse(raw)
    }
}

/// `pay_` + a UUIDv7 in simple form: opaque to clients, time-ordered for us, so that
/// "newest first" is "largest id first" and a cursor is just an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaymentId(String);

impl PaymentId {
    pub const PREFIX: &'static str = "pay_";

    pub fn generate() -> Self {
        Self(format!("{}{}", Self::PREFIX, uuid::Uuid::now_v7().simple()))
    }

    /// A syntactically valid id (used for cursors); whether it exists is the database's to say.
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix(Self::PREFIX)?;
        is_simple_uuid(hex).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PaymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of a capture (`cap_…`) or a cancel (`cnl_…`) of a payment: the provider's
/// idempotency key for that operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(String);

impl OperationId {
    /// `kind` is `capture` or `cancel`.
    pub fn generate(kind: &str) -> Self {
        let prefix = if kind == "capture" { "cap_" } else { "cnl_" };
        Self(format!("{prefix}{}", uuid::Uuid::now_v7().simple()))
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `re_` + a UUIDv7 in simple form, like [`PaymentId`]: newest first is largest id first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RefundId(String);

impl RefundId {
    pub const PREFIX: &'static str = "re_";

    pub fn generate() -> Self {
        Self(format!("{}{}", Self::PREFIX, uuid::Uuid::now_v7().simple()))
    }

    /// A syntactically valid id (used for cursors).
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix(Self::PREFIX)?;
        is_simple_uuid(hex).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RefundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `po_` + a UUIDv7 in simple form, like [`PaymentId`]: newest first is largest id first.
/// The provider's idempotency key for the payout.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PayoutId(String);

impl PayoutId {
    pub const PREFIX: &'static str = "po_";

    pub fn generate() -> Self {
        Self(format!("{}{}", Self::PREFIX, uuid::Uuid::now_v7().simple()))
    }

    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix(Self::PREFIX)?;
        is_simple_uuid(hex).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ObjectId for PayoutId {
    const OBJECT: &'static str = "payout";

    fn parse_id(raw: &str) -> Option<Self> {
        Self::parse(raw)
    }
}

impl fmt::Display for PayoutId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_simple_uuid(hex: &str) -> bool {
    hex.len() == 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A new secret API key: 256 random bits from the OS generator (through UUIDv4).
pub fn new_api_key() -> String {
    format!(
        "sk_test_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Names the request that owns a payment's lease, so that only the owner can release it.
pub fn new_lease_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::{PaymentId, RefundId};

    #[test]
    fn refund_ids_are_time_ordered_and_parse_back() {
        let a = RefundId::generate();
        let b = RefundId::generate();
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(RefundId::parse(a.as_str()), Some(a));
        assert!(RefundId::parse("pay_0190a0b0c0d0e0f00000000000000000").is_none());
        assert!(RefundId::parse("re_0190").is_none());
    }

    #[test]
    fn ids_are_time_ordered_and_parse_back() {
        let a = PaymentId::generate();
        let b = PaymentId::generate();
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(PaymentId::parse(a.as_str()), Some(a));
    }

    #[test]
    fn rejects_foreign_ids() {
        for bad in [
            "",
            "pay_",
            "re_0190a0b0c0d0e0f00000000000000000",
            "pay_XYZ",
            "pay_0190",
        ] {
            assert!(PaymentId::parse(bad).is_none(), "{bad:?}");
        }
    }
}
