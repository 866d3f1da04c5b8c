//! Signatures and transport: a rotated secret beside the new one, https with a verified
//! certificate, and the signed test event.

use super::*;

#[actix_web::test]
async fn a_rotated_secret_signs_beside_the_new_one_until_it_expires() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let (endpoint_id, first) = app.create_endpoint(&receiver.url, &["*"]).await;
    let rotated = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 3600}),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text());
    let second = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert!(second.starts_with("whsec_") && second != first);
    let read = app
        .get(&format!("/v1/webhook_endpoints/{endpoint_id}"))
        .await
        .json();
    assert_eq!(
        read["secret"],
        Value::Null,
        "the secret is never shown again"
    );
    assert!(!read.as_object().unwrap().contains_key("secret"));

    app.paid_payment(1000).await;
    let received = receiver.wait_for("a delivery", |r| r.len() == 1).await;
    assert_eq!(signature_matches(&second, &received[0]), [true, false]);
    assert_eq!(signature_matches(&first, &received[0]), [false, true]);

    // No body: the current secret overlaps for the default 24 h; then expire it at once.
    let default = app
        .request(
            "POST",
            &format!("/v1/webhook_endpoints/{endpoint_id}/rotate_secret"),
            &[("Authorization", format!("Bearer {}", app.api_key))],
            Vec::new(),
        )
        .await;
    assert_eq!(default.status, 200, "{}", default.text());
    let third = default.json()["secret"].as_str().unwrap().to_owned();
    let last = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 0}),
        )
        .await;
    let fourth = last.json()["secret"].as_str().unwrap().to_owned();
    app.paid_payment(1100).await;
    let received = receiver
        .wait_for("a second delivery", |r| r.len() == 2)
        .await;
    assert_eq!(signature_matches(&fourth, &received[1]), [true]);
    for old in [&first, &second, &third] {
        assert_eq!(signature_matches(old, &received[1]), [false]);
    }
    let problem = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 604801}),
        )
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "expire_current_in_s");
}

/// A CA of the test's own and a certificate for 127.0.0.1 signed by it: the CA's PEM, and
/// the receiver's TLS configuration.
fn test_certificates() -> (String, rustls::ServerConfig) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "payments-api test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    (ca.pem(), server)
}

/// Endpoints may be `https` (CONTRACT §9): deliveries go over TLS, verified against the
/// built-in roots and TLS_CA_FILE's; a certificate nobody vouches for fails the attempt.
#[actix_web::test]
async fn https_endpoints_are_delivered_to_over_verified_tls() {
    let (ca_pem, server_tls) = test_certificates();
    let ca_file = std::env::temp_dir().join(format!("ca-{}.pem", uuid::Uuid::new_v4().simple()));
    std::fs::write(&ca_file, ca_pem).unwrap();
    let receiver = Receiver::start_tls(|_, _| Reply::status(200), server_tls).await;
    assert!(receiver.url.starts_with("https://127.0.0.1:"));

    let trusting = {
        let ca_file = ca_file.clone();
        app_delivering(move |s| s.tls_ca_file = Some(ca_file)).await
    };
    let (endpoint_id, secret) = trusting.create_endpoint(&receiver.url, &["*"]).await;
    trusting.paid_payment(1000).await;
    let delivered = trusting.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["last_attempt"]["status_code"], 200);
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(signature_matches(&secret, &received[0]), [true]);

    // Without the CA the receiver's certificate is not trusted: nothing is sent.
    let unaware = app_delivering(|_| {}).await;
    let (endpoint_id, _) = unaware.create_endpoint(&receiver.url, &["*"]).await;
    let path = format!("/v1/webhook_endpoints/{endpoint_id}/test");
    let test = unaware
        .post_json(&path, &unaware.api_key, None, &json!({}))
        .await
        .json();
    assert_eq!(test["delivered"], false, "{test}");
    assert!(
        test["error"].as_str().unwrap().contains("certificate"),
        "{test}"
    );
    assert_eq!(test["status_code"], Value::Null, "{test}");
    assert_eq!(
        receiver.received().len(),
        1,
        "no request reached the receiver"
    );
    let _ = std::fs::remove_file(ca_file);
}

#[actix_web::test]
async fn test_sends_a_signed_test_event_now_that_is_not_in_the_feed() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let (endpoint_id, secret) = app
        .create_endpoint(&receiver.url, &["payment.failed"])
        .await;
    let headers = [
        ("Authorization", format!("Bearer {}", app.api_key)),
        ("X-Request-Id", "req-test-1".to_owned()),
    ];
    let path = format!("/v1/webhook_endpoints/{endpoint_id}/test");
    let result = app.request("POST", &path, &headers, Vec::new()).await;
    assert_eq!(result.status, 200, "{}", result.text());
    let result = result.json();
    assert_eq!(result["delivered"], true);
    assert_eq!(result["status_code"], 200);
    assert_eq!(result["error"], Value::Null);
    assert!(result["duration_ms"].is_u64());
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    let event = received[0].json();
    assert_eq!(event["type"], "webhook_endpoint.test");
    assert_eq!(event["data"]["object"]["id"], endpoint_id.as_str());
    assert_eq!(event["request"]["id"], "req-test-1");
    assert_eq!(signature_matches(&secret, &received[0]), [true]);
    assert_eq!(app.get("/v1/events").await.json()["data"], json!([]));

    receiver.behave(|_, _| Reply::status(500));
    let failed = app
        .post_json(&path, &app.api_key, Some("test-key"), &json!({}))
        .await
        .json();
    assert_eq!(
        (
            failed["delivered"].clone(),
            failed["status_code"].clone(),
            failed["error"].clone()
        ),
        (json!(false), json!(500), json!("answered 500"))
    );
    // With a key, the first answer is the answer.
    receiver.behave(|_, _| Reply::status(200));
    let replay = app
        .post_json(&path, &app.api_key, Some("test-key"), &json!({}))
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json(), failed);
    assert_eq!(receiver.received().len(), 2);

    let other = app.create_merchant("other-test").await;
    app.post_json(&path, &other, None, &json!({}))
        .await
        .assert_problem(404, "not_found");
}
