// Kept in step with migrations/*/: the same columns in both backends, with types common
// to PostgreSQL and SQLite (TEXT ids, TIMESTAMP in UTC).

diesel::table! {
    merchants (id) {
        id -> Text,
        name -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    api_keys (key_hash) {
        key_hash -> Text,
        merchant_id -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    payments (id) {
        id -> Text,
        merchant_id -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        currency -> Text,
        payment_method -> Text,
        customer_id -> Nullable<Text>,
        description -> Nullable<Text>,
        metadata -> Text,
        status -> Text,
        amount_refunded -> BigInt,
        amount_reserved -> BigInt,
        provider_charge_id -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        failure_message -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    webhook_events (id) {
        id -> Text,
        body_sha256 -> Text,
        event_type -> Text,
        received_at -> Timestamp,
    }
}

diesel::table! {
    refunds (id) {
        id -> Text,
        merchant_id -> Text,
        payment_id -> Text,
        idempotency_key -> Text,
        request_fingerprint -> Text,
        amount -> BigInt,
        currency -> Text,
        status -> Text,
        reason -> Nullable<Text>,
        provider_refund_id -> Nullable<Text>,
        failure_code -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        lease_token -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamp>,
        provider_attempts -> Integer,
        created_at -> Timestamp,
        updated_at -> Timestamp,
    }
}

diesel::joinable!(api_keys -> merchants (merchant_id));
diesel::joinable!(payments -> merchants (merchant_id));
diesel::joinable!(refunds -> payments (payment_id));
diesel::allow_tables_to_appear_in_same_query!(
    merchants,
    api_keys,
    payments,
    refunds,
    webhook_events
);
