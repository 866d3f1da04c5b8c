//! `payments-api reconcile`: its lines, its summary, its exit codes, and the metric every
//! instance shows.

use std::time::Duration;

use super::reconcile_command;
use crate::support::{ServiceProcess, TestDatabase, spawn_provider, test_client, visa, wait_until};

#[actix_web::test]
async fn the_command_prints_each_discrepancy_exits_3_and_every_instance_counts_them() {
    let (_database, url) = TestDatabase::create();
    let key = "sk_test_reconcile_000000000000001".to_owned();
    // The service charges through its own in-process simulator; the command reads another
    // provider's report, which has none of those charges.
    let service = ServiceProcess::start(&[
        ("DATABASE_URL", url.clone()),
        ("BOOTSTRAP_API_KEY", key.clone()),
    ])
    .await;
    let client = test_client();
    for n in 0..2 {
        let response = client
            .post(format!("{}/v1/payments", service.address))
            .insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("Idempotency-Key", format!("rc-{n}")))
            .send_json(&visa(1200 + n))
            .await
            .expect("answered");
        assert_eq!(response.status(), 201);
    }
    let elsewhere = spawn_provider().await;

    let (code, out) = reconcile_command(&url, &elsewhere.url).await;
    assert_eq!(code, 3, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for line in &lines[..2] {
        let found: serde_json::Value = serde_json::from_str(line).expect("one JSON line");
        assert_eq!(found["kind"], "missing_at_provider");
        assert!(found["reference"].as_str().unwrap().starts_with("pay_"));
        assert_eq!(found["found"], serde_json::Value::Null);
    }
    assert_eq!(
        lines[2],
        "reconciled: 0 matched, 2 discrepancies (missing_at_provider: 2)"
    );
    // Stored once: a second run reports them again and stores nothing new.
    let (again, out) = reconcile_command(&url, &elsewhere.url).await;
    assert_eq!(again, 3);
    assert!(out.ends_with("reconciled: 0 matched, 2 discrepancies (missing_at_provider: 2)\n"));

    // The running instance shows the stored count (it did not run the reconciliation).
    let metrics = format!("{}/metrics", service.address);
    wait_until(
        Duration::from_secs(15),
        "the instance's metric shows the stored discrepancies",
        || {
            let request = client.get(&metrics).send();
            async move {
                match request.await {
                    Ok(mut response) => response.body().await.is_ok_and(|body| {
                        String::from_utf8_lossy(&body).contains(
                            "reconciliation_discrepancies{kind=\"missing_at_provider\"} 2",
                        )
                    }),
                    Err(_) => false,
                }
            }
        },
    )
    .await;

    // Nothing to reconcile against an unreachable provider: exit 1, nothing printed.
    let (unreachable, out) = reconcile_command(&url, "http://127.0.0.1:9").await;
    assert_eq!(unreachable, 1, "{out}");
    assert!(
        out.starts_with("[stderr] ") && out.contains("settlement report could not be read"),
        "nothing on stdout: {out}"
    );
}
