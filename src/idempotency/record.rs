//! A row that is its own idempotency record: its key, its fingerprint, its lease while
//! unfinished and its stored answer once final.

use super::answer::Answer;
use crate::domain::Timestamp;

/// A row that is its own idempotency record: a stored final answer once finished, and a
/// lease naming the request that works on it until then.
pub trait IdempotentRecord {
    fn record_id(&self) -> &str;
    fn merchant_id(&self) -> &str;
    fn idempotency_key(&self) -> &str;
    /// The fingerprint of the request that claimed the key.
    fn fingerprint(&self) -> &str;
    /// The token of the request that owns the record (none: nobody).
    fn lease_token(&self) -> Option<&str>;
    /// The stored response columns (status, body): set exactly when the record is final.
    fn stored_response(&self) -> (Option<i32>, Option<&str>);
    /// Until when the request holding the lease owns the record (none: nobody).
    fn lease_expires_at(&self) -> Option<Timestamp>;

    /// The final answer, if there is one (replayed byte for byte).
    fn stored_answer(&self) -> Option<Answer> {
        let (status, body) = self.stored_response();
        let status = u16::try_from(status?).ok()?;
        Some(Answer::new(status, body?))
    }

    /// Nobody owns the record: the lease was given up or has run out.
    fn lease_is_free(&self, now: Timestamp) -> bool {
        self.lease_expires_at().is_none_or(|until| until <= now)
    }
}

/// Implements [`IdempotentRecord`] for a row struct with the shared columns (`id`,
/// `merchant_id`, `idempotency_key`, `request_fingerprint`, `response_status`,
/// `response_body`, `lease_token`, `lease_expires_at`).
macro_rules! idempotent_record {
    ($row:ty) => {
        impl $crate::idempotency::record::IdempotentRecord for $row {
            fn record_id(&self) -> &str {
                &self.id
            }
            fn merchant_id(&self) -> &str {
                &self.merchant_id
            }
            fn idempotency_key(&self) -> &str {
                &self.idempotency_key
            }
            fn fingerprint(&self) -> &str {
                &self.request_fingerprint
            }
            fn lease_token(&self) -> Option<&str> {
                self.lease_token.as_deref()
            }
            fn stored_response(&self) -> (Option<i32>, Option<&str>) {
                (self.response_status, self.response_body.as_deref())
            }
            fn lease_expires_at(&self) -> Option<$crate::domain::Timestamp> {
                self.lease_expires_at
            }
        }
    };
}
pub(crate) use idempotent_record;
