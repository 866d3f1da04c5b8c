//! Pay, replay, refund and list against a running service:
//!
//! ```sh
//! cargo run --release                                    # the service; note the demo key it logs
//! cargo run -p payments-client --example quickstart -- http://127.0.0.1:8080 sk_test_…
//! ```
//!
//! An `https://` URL works as it is when a public CA signed the service's certificate; for a
//! private CA, give its PEM file as a third argument.

use std::time::Duration;

use payments_client::{Client, CreatePayment, CreateRefund, ErrorCode, ListPayments, TryStreamExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(api_key)) = (args.next(), args.next()) else {
        eprintln!("usage: quickstart BASE_URL API_KEY [CA_PEM_FILE]");
        std::process::exit(2);
    };
    let mut builder = Client::builder(url, api_key);
    if let Some(ca_file) = args.next() {
        builder = builder.add_ca_file(ca_file);
    }
    let client = builder.build()?;
    let order = format!("order-{}", uuid::Uuid::new_v4().simple());

    // A payment, waited out if the provider is slow; the key is the order id.
    let params = CreatePayment::new(2000, "usd", "pm_card_visa").customer_id("cus_demo");
    let created = client
        .create_payment(&params)
        .idempotency_key(order.clone())
        .wait_until_final(Duration::from_secs(60))
        .send()
        .await?;
    println!(
        "{} {:?} (HTTP {})",
        created.data.id, created.data.status, created.status
    );

    // The same call again: the stored answer, nothing charged twice.
    let again = client
        .create_payment(&params)
        .idempotency_key(order.clone())
        .send()
        .await?;
    println!(
        "replayed: {} (same payment: {})",
        again.replayed,
        again.data.id == created.data.id
    );

    // The same key for another request is refused, typed.
    let other = CreatePayment::new(9999, "usd", "pm_card_visa");
    match client.create_payment(&other).idempotency_key(order).await {
        Err(e) if e.code() == Some(&ErrorCode::IdempotencyKeyReused) => {
            println!("reuse refused: {e}")
        }
        other => println!("unexpected: {other:?}"),
    }

    let refund = client
        .create_refund(
            &created.data.id,
            &CreateRefund {
                amount: Some(500),
                reason: None,
            },
        )
        .await?;
    println!("refund {} {:?}", refund.id, refund.status);

    let mine: Vec<_> = client
        .stream_payments(ListPayments {
            customer_id: Some("cus_demo".into()),
            limit: Some(100),
            ..Default::default()
        })
        .try_collect()
        .await?;
    println!("cus_demo has {} payments", mine.len());
    Ok(())
}
