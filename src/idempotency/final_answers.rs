//! Final answers already seen in this process, answered from memory.

use std::sync::Arc;

use actix_web::http::Uri;
use actix_web::web::Bytes;

use super::answer::{Answer, scope_key};

/// A keyed request exactly as it was sent: its target (path and query) and its body.
///
/// A retry usually repeats its request byte for byte (a client's retry, a double click, a
/// storm), and identical bytes under the same key can only make the same request: the same
/// route, the same parse, the same fingerprint. So an identical retry of a request whose
/// final answer is known here is replayed before its body is parsed or fingerprinted
/// ([`FinalAnswers::answer_sent`]); a request equal only in meaning (keys in another order)
/// takes the whole way and is replayed by its fingerprint.
#[derive(Debug, Clone)]
pub struct Sent {
    target: Uri,
    pub body: Bytes,
}

impl Sent {
    pub fn new(target: &Uri, body: Bytes) -> Self {
        Self {
            target: target.clone(),
            body,
        }
    }

    fn target(&self) -> &str {
        self.target.path_and_query().map_or("", |t| t.as_str())
    }

    /// The bytes kept with a final answer: the target, then the body.
    fn stored(&self) -> StoredSent {
        let target = self.target();
        let mut bytes = Vec::with_capacity(target.len() + self.body.len());
        bytes.extend_from_slice(target.as_bytes());
        bytes.extend_from_slice(&self.body);
        StoredSent {
            target_len: target.len(),
            bytes: bytes.into_boxed_slice(),
        }
    }
}

/// [`Sent`] as kept in memory with its answer: one allocation.
#[derive(Clone)]
struct StoredSent {
    target_len: usize,
    bytes: Box<[u8]>,
}

impl StoredSent {
    fn is(&self, sent: &Sent) -> bool {
        let (target, body) = self.bytes.split_at(self.target_len.min(self.bytes.len()));
        target == sent.target().as_bytes() && body == &sent.body[..]
    }
}

/// What is kept of a key whose final answer this instance has seen (shared: a lookup
/// copies a pointer, not the entry).
struct Remembered {
    fingerprint: String,
    /// The bytes of a request that had this answer, when they were known.
    sent: Option<StoredSent>,
    answer: Answer,
}

/// Final answers already seen, by (resource, merchant, key): a replay or a reuse is
/// answered from memory, with no database round trip.
///
/// Safe because a final answer never changes once stored (the contract fixes it from that
/// moment, in every instance), and a key is never freed; only final answers go in, so the
/// insert still decides every winner. Bounded by size ([`FinalAnswers::MAX_BYTES`]):
/// `quick_cache` evicts with S3-FIFO, which keeps the hot entries (a retry storm's key)
/// and lets one-hit entries go first; a miss only costs the database lookup it would have
/// cost anyway.
#[derive(Clone)]
pub struct FinalAnswers {
    answers: Arc<quick_cache::sync::Cache<String, Arc<Remembered>, AnswerWeight>>,
}

/// An entry's weight is its size in bytes, roughly: the scope key, the fingerprint, the
/// request's bytes, the answer's body and the bookkeeping around them.
#[derive(Clone)]
struct AnswerWeight;

impl quick_cache::Weighter<String, Arc<Remembered>> for AnswerWeight {
    fn weight(&self, key: &String, entry: &Arc<Remembered>) -> u64 {
        let sent = entry.sent.as_ref().map_or(0, |sent| sent.bytes.len() + 24);
        (key.len() + entry.fingerprint.len() + sent + entry.answer.body.len() + 96) as u64
    }
}

impl Default for FinalAnswers {
    fn default() -> Self {
        Self::with_capacity(Self::MAX_BYTES)
    }
}

impl FinalAnswers {
    /// What the map may hold: about 2 MiB, some 1 500 payment answers (a retry storm's
    /// key stays; a miss costs one database read). Measured: 8 MiB cost 6 MiB of peak RSS.
    pub const MAX_BYTES: u64 = 2 * 1024 * 1024;

    pub fn with_capacity(max_bytes: u64) -> Self {
        let estimated_items = usize::try_from(max_bytes / 1400).unwrap_or(1024).max(16);
        Self {
            answers: Arc::new(quick_cache::sync::Cache::with_weighter(
                estimated_items,
                max_bytes,
                AnswerWeight,
            )),
        }
    }

    /// What is kept of this key, if its final answer was seen here (a shared pointer).
    fn entry(
        &self,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
    ) -> Option<Arc<Remembered>> {
        self.answers
            .get(&scope_key(scope, merchant_id, idempotency_key))
    }

    /// The replay of a request sent exactly as one whose final answer is known here, under
    /// the same key; `None` for anything else (which takes the whole way, and is replayed
    /// or refused by its fingerprint).
    pub fn answer_sent(
        &self,
        resource: &'static str,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
        sent: &Sent,
    ) -> Option<Answer> {
        use crate::metrics::{IdempotencyOutcome, idempotency};
        let entry = self.entry(scope, merchant_id, idempotency_key)?;
        if !entry.sent.as_ref().is_some_and(|stored| stored.is(sent)) {
            return None;
        }
        idempotency(resource, IdempotencyOutcome::Replayed);
        Some(entry.answer.clone().replayed())
    }

    /// What a request with this key and fingerprint is answered from memory, if the key's
    /// final answer is known here: the replay, or 422 for a different request.
    /// `resource` names the request in the metrics; `scope` is the key's scope.
    pub fn answer(
        &self,
        resource: &'static str,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Option<Result<Answer, crate::error::ApiError>> {
        use crate::metrics::{IdempotencyOutcome, idempotency};
        let entry = self.entry(scope, merchant_id, idempotency_key)?;
        if entry.fingerprint != fingerprint {
            idempotency(resource, IdempotencyOutcome::Reused);
            return Some(Err(crate::error::ApiError::IdempotencyKeyReused));
        }
        idempotency(resource, IdempotencyOutcome::Replayed);
        Some(Ok(entry.answer.clone().replayed()))
    }

    /// Remembers a final answer (anything else is ignored), with the bytes of the request
    /// it answers when they are known.
    pub fn remember(
        &self,
        scope: &str,
        merchant_id: &str,
        idempotency_key: &str,
        (fingerprint, sent): (&str, Option<&Sent>),
        answer: &Answer,
    ) {
        if !answer.is_final() {
            return;
        }
        let mut stored = answer.clone();
        stored.replayed = false;
        self.answers.insert(
            scope_key(scope, merchant_id, idempotency_key),
            Arc::new(Remembered {
                fingerprint: fingerprint.to_owned(),
                sent: sent.map(Sent::stored),
                answer: stored,
            }),
        );
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_answers_replay_the_same_request_and_refuse_another() {
        let answers = FinalAnswers::default();
        answers.remember(
            "payment",
            "mer_1",
            "k",
            ("fp-a", None),
            &Answer::new(201, "{\"a\":1}"),
        );
        answers.remember(
            "payment",
            "mer_1",
            "pending",
            ("fp-a", None),
            &Answer::new(202, "{}"),
        );

        let replay = answers
            .answer("payment", "payment", "mer_1", "k", "fp-a")
            .unwrap()
            .unwrap();
        assert_eq!(replay, Answer::new(201, "{\"a\":1}").replayed());
        assert!(matches!(
            answers.answer("payment", "payment", "mer_1", "k", "fp-b"),
            Some(Err(crate::error::ApiError::IdempotencyKeyReused))
        ));
        assert!(
            answers
                .answer("payment", "payment", "mer_2", "k", "fp-a")
                .is_none(),
            "per merchant"
        );
        assert!(
            answers
                .answer("refund", "refund", "mer_1", "k", "fp-a")
                .is_none(),
            "per resource"
        );
        assert!(
            answers.entry("payment", "mer_1", "pending").is_none(),
            "202 is not final"
        );
    }

    #[test]
    fn only_the_same_bytes_at_the_same_target_are_replayed_before_parsing() {
        let answers = FinalAnswers::default();
        let target = |t: &str| t.parse::<Uri>().unwrap();
        let sent = |t: &str, body: &'static str| Sent::new(&target(t), Bytes::from(body));
        let first = sent("/v1/payments/pay_1/refunds", r#"{"amount":5}"#);
        let answer = Answer::new(201, "{\"id\":\"re_1\"}");
        answers.remember("refund", "m", "k", ("fp", Some(&first)), &answer);
        answers.remember("refund", "m", "no-bytes", ("fp", None), &answer);

        let replay = answers.answer_sent("refund", "refund", "m", "k", &first.clone());
        assert_eq!(replay, Some(answer.clone().replayed()));
        for other in [
            sent("/v1/payments/pay_1/refunds", r#"{"amount": 5}"#),
            sent("/v1/payments/pay_1/refunds", r#"{"amount":5"#),
            sent("/v1/payments/pay_2/refunds", r#"{"amount":5}"#),
            sent("/v1/payments/pay_1/refunds?x=1", r#"{"amount":5}"#),
            sent("/v1/payments/pay_1/refund", r#"s{"amount":5}"#),
        ] {
            let answered = answers.answer_sent("refund", "refund", "m", "k", &other);
            assert_eq!(answered, None, "{other:?} goes the whole way");
        }
        assert_eq!(
            answers.answer_sent("refund", "refund", "n", "k", &first),
            None
        );
        assert_eq!(
            answers.answer_sent("refund", "refund", "m", "no-bytes", &first),
            None,
            "an answer remembered without its request's bytes is found by fingerprint only"
        );
    }

    #[test]
    fn final_answers_stay_within_their_size_and_keep_a_hot_key() {
        let answers = FinalAnswers::with_capacity(64 * 1024);
        let body = "x".repeat(900);
        answers.remember(
            "payment",
            "m",
            "hot",
            ("fp", None),
            &Answer::new(201, body.as_str()),
        );
        for i in 0..2000 {
            // The storm's key is asked for again and again while one-off keys stream by.
            assert!(
                answers.entry("payment", "m", "hot").is_some(),
                "hot key lost at {i}"
            );
            answers.remember(
                "payment",
                "m",
                &format!("k{i}"),
                ("fp", None),
                &Answer::new(201, body.as_str()),
            );
        }
        assert!(answers.len() < 80, "bounded: {} entries", answers.len());
        assert!(answers.len() > 20, "not emptied: {} entries", answers.len());
    }
}
