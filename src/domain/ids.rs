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

impl ObjectId for PayoutId {
    const OBJECT: &'static str = "payout";

    fn parse_id(raw: &str) -> Option<Self> {
        Self::parse(raw)
    }
}

impl ObjectId for DisputeId {
    const OBJECT: &'static str = "dispute";

    fn parse_id(raw: &str) -> Option<Self> {
        Self::parse(raw)
    }
}

/// Defines an id type: `PREFIX` + a UUIDv7 in simple form (32 lower-case hex digits),
/// opaque to clients, time-ordered for us, so that "newest first" is "largest id first" and
/// a cursor is just an id. The one way ids of this API are made and recognised.
macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident = $prefix:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            pub fn generate() -> Self {
                Self(format!("{}{}", Self::PREFIX, v7_now().simple()))
            }

            /// An id for an object whose `created_at` is `at`, decided before the id is
            /// made: its UUIDv7 carries `at` to the microsecond, so that ids sort as the
            /// objects' `created_at` do (`v7_at`).
            pub fn generate_at(at: crate::domain::Timestamp) -> Self {
                Self(format!("{}{}", Self::PREFIX, v7_at(at).simple()))
            }

            /// A bound below every id made at or after `at` and above every id made before
            /// it (a UUIDv7 starts with its millisecond): a time range is an id range.
            pub fn first_at(at: crate::domain::Timestamp) -> String {
                let ms = at.and_utc().timestamp_millis().max(0) as u64;
                format!("{}{ms:012x}", Self::PREFIX)
            }

            /// A syntactically valid id (a path id or cursor worth a query); whether it
            /// exists is the database's to say.
            pub fn parse(raw: &str) -> Option<Self> {
                Self::is_valid(raw).then(|| Self(raw.to_owned()))
            }

            /// Whether `raw` has this id's shape: `PREFIX` + 32 lower-case hex digits.
            pub fn is_valid(raw: &str) -> bool {
                raw.strip_prefix(Self::PREFIX).is_some_and(is_simple_uuid)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A payment: `pay_…`.
    PaymentId = "pay_"
);
prefixed_id!(
    /// A refund: `re_…`.
    RefundId = "re_"
);
prefixed_id!(
    /// A payout: `po_…`, the provider's idempotency key for it.
    PayoutId = "po_"
);
prefixed_id!(
    /// A balance transaction: `txn_…`.
    TransactionId = "txn_"
);
prefixed_id!(
    /// An event: `evt_…`.
    EventId = "evt_"
);
prefixed_id!(
    /// A merchant's webhook endpoint: `we_…`.
    EndpointId = "we_"
);
prefixed_id!(
    /// A delivery of an event to an endpoint: `wd_…`.
    DeliveryId = "wd_"
);
prefixed_id!(
    /// A merchant: `mer_…`.
    MerchantId = "mer_"
);
prefixed_id!(
    /// An API key's id (not the key): `key_…`. Keys given an id by the migration have a
    /// random one of the same shape.
    ApiKeyId = "key_"
);

prefixed_id!(
    /// A dispute: `dp_…`.
    DisputeId = "dp_"
);
prefixed_id!(
    /// A step taken on a dispute (evidence saved or submitted, the dispute closed):
    /// `dps_…`, the provider's idempotency key for it.
    DisputeStepId = "dps_"
);

/// The id of a capture (`cap_…`) or a cancel (`cnl_…`) of a payment: the provider's
/// idempotency key for that operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(String);

impl OperationId {
    /// `kind` is `capture` or `cancel`.
    pub fn generate(kind: &str) -> Self {
        let prefix = if kind == "capture" { "cap_" } else { "cnl_" };
        Self(format!("{prefix}{}", v7_now().simple()))
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The counter that keeps the ids this process makes in one millisecond in the order it made
/// them (as `Uuid::now_v7`'s does).
static V7_CONTEXT: std::sync::Mutex<uuid::ContextV7> =
    std::sync::Mutex::new(uuid::ContextV7::new());

/// A UUIDv7 made now by [`crate::domain::now`], the clock every instance shares (not this
/// host's own, as `Uuid::now_v7` would): ids made on two hosts whose clocks differ still sort
/// as they were made, and newest-first lists page without skipping.
pub fn v7_now() -> uuid::Uuid {
    let at = crate::domain::now().and_utc();
    let seconds = u64::try_from(at.timestamp()).unwrap_or(0);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        &V7_CONTEXT,
        seconds,
        at.timestamp_subsec_nanos(),
    ))
}

/// A UUIDv7 for the moment `at`: its 48-bit millisecond, then in the 12 bits RFC 9562 lets a
/// generator use for finer time (its method 3) the fraction of that millisecond, then 62
/// random bits. Two such ids order as their moments do, to the microsecond; ids of one
/// microsecond (equal `created_at`) order at random.
fn v7_at(at: crate::domain::Timestamp) -> uuid::Uuid {
    let micros = u128::try_from(at.and_utc().timestamp_micros()).unwrap_or(0);
    let (ms, sub_ms) = (micros / 1000, micros % 1000);
    let fraction = sub_ms * 4096 / 1000;
    let random = uuid::Uuid::new_v4().as_u128() & ((1 << 62) - 1);
    uuid::Uuid::from_u128(
        (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | fraction << 64 | 0b10 << 62 | random,
    )
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
    use super::{DeliveryId, EventId, PaymentId, RefundId, TransactionId, v7_now};

    /// Ids made one after another, many within one millisecond and from several threads at
    /// once, each sort after the one made before it in its thread, and carry the shared
    /// clock's millisecond.
    #[test]
    fn ids_made_now_sort_in_the_order_they_were_made_and_carry_the_shared_clock() {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let ids: Vec<uuid::Uuid> = (0..2_000).map(|_| v7_now()).collect();
                    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("in order");
        }
        let before = crate::domain::now().and_utc().timestamp_millis();
        let id = v7_now();
        let after = crate::domain::now().and_utc().timestamp_millis();
        let millis = i64::try_from(id.as_u128() >> 80).unwrap();
        assert!(
            (before..=after).contains(&millis),
            "{before} {millis} {after}"
        );
    }

    #[test]
    fn ids_made_for_a_moment_sort_as_their_moments_to_the_microsecond() {
        let base = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
            .and_then(|d| d.and_hms_micro_opt(8, 6, 26, 813_400))
            .unwrap();
        let mut previous = TransactionId::generate_at(base);
        assert!(TransactionId::is_valid(previous.as_str()));
        let version = previous.as_str().as_bytes()[4 + 12];
        assert_eq!(version, b'7', "a UUIDv7: {}", previous.as_str());
        for step in [1, 2, 9, 999, 1000, 1001, 86_400_000_000] {
            let at = base + chrono::Duration::microseconds(step);
            let next = TransactionId::generate_at(at);
            assert!(
                next > previous,
                "{} after {}",
                next.as_str(),
                previous.as_str()
            );
            assert!(next.as_str() >= TransactionId::first_at(at).as_str());
            previous = TransactionId::generate_at(at);
        }
    }

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

    #[test]
    fn every_kind_of_id_recognises_only_its_own() {
        let id = EventId::generate();
        assert!(EventId::is_valid(id.as_str()), "{id}");
        assert!(!DeliveryId::is_valid(id.as_str()));
        assert!(!EventId::is_valid("evt_XYZ"));
        assert!(!EventId::is_valid("evt_"));
        assert!(!EventId::is_valid("evt_0190A0B0C0D0E0F00000000000000000"));
    }
}
