//! The webhooks pages in a real Chromium (headless, through chromedriver): an endpoint added
//! with the keyboard and its secret shown once, a test event sent, a failed delivery
//! replayed and delivered, every control named and reachable with Tab, a phone-sized
//! window. With `DASHBOARD_SCREENSHOTS=<dir>` the endpoint's page is saved there as
//! `webhooks.png`.

use std::time::Duration;

use crate::deliveries::{Receiver, Reply};
use crate::support::webdriver::{Browser, ENTER};
use crate::support::{TestApp, spawn_app_with, visa, wait_until};

async fn endpoint_count(app: &TestApp) -> usize {
    let listed = app.get("/v1/webhook_endpoints?limit=100").await.json();
    listed["data"].as_array().map_or(0, Vec::len)
}

#[actix_web::test]
async fn the_webhooks_pages_work_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app_with(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![Duration::from_millis(100), Duration::from_millis(200)];
        s.webhook_timeout = Duration::from_secs(5);
    })
    .await;
    let receiver = Receiver::always(200).await;
    let dashboard = format!("{}/dashboard", app.address);

    // Sign in, then to the Webhooks page with Tab and Enter.
    browser.sign_in(&dashboard, &app.api_key).await;
    browser.tab_to("nav a[href='/dashboard/webhooks']").await;
    browser.keys(ENTER).await;
    wait_until(Duration::from_secs(10), "the webhooks page", || async {
        browser.url().await.ends_with("/dashboard/webhooks")
    })
    .await;
    assert!(browser.text().await.contains("No endpoints yet"));
    assert_eq!(browser.unnamed_controls().await, Vec::<String>::new());

    // Add an endpoint with the keyboard alone: Tab to each field, type, Enter.
    browser.tab_to("#new_url").await;
    browser.keys(&receiver.url).await;
    browser.tab_to("#new_description").await;
    browser.keys("orders").await;
    browser.tab_to("#new_events").await;
    browser
        .script("document.activeElement.select(); return true;")
        .await;
    browser
        .keys("payment.succeeded, webhook_endpoint.test")
        .await;
    browser.keys(ENTER).await;
    // The test type is no event type: the API's detail, the typed values kept.
    browser.wait_for_text("webhook_endpoint.test").await;
    assert!(browser.text().await.contains("each entry must be"));
    assert_eq!(endpoint_count(&app).await, 0);
    let events = browser.find("#new_events").await;
    browser
        .script("document.getElementById('new_events').value = ''; return true;")
        .await;
    browser.type_into(&events, "payment.succeeded").await;
    browser.keys(ENTER).await;
    browser.wait_for_text("Signing secret").await;
    let secret = browser
        .script("return document.getElementById('secret').textContent;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(endpoint_count(&app).await, 1, "one endpoint");
    let listed = app.get("/v1/webhook_endpoints").await.json();
    let id = listed["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["data"][0]["url"], receiver.url.as_str());
    assert_eq!(listed["data"][0]["description"], "orders");

    // Shown once: the endpoint's page drawn again has no secret.
    let page = format!("{dashboard}/webhooks/{id}");
    browser.goto(&page).await;
    assert_eq!(
        browser
            .script("return document.getElementById('secret') === null;")
            .await,
        true
    );
    assert!(!browser.text().await.contains(&secret));
    browser.goto(&format!("{dashboard}/webhooks")).await;
    assert!(!browser.text().await.contains(&secret));

    // Every control of the endpoint's page has a name and is reached with Tab, in order.
    browser.goto(&page).await;
    assert_eq!(browser.unnamed_controls().await, Vec::<String>::new());
    for css in [
        "form[action$='/status'] button",
        "form[action$='/test'] button",
        "#edit_url",
        "#edit_description",
        "#edit_events",
        &format!("form[action='/dashboard/webhooks/{id}'][method='post'] button"),
        "#rotate_expire",
        "form[action$='/rotate'] button",
        "#replay_since",
        "form[action$='/replay'] button",
        "#delivery_status",
        "form[method='get'] button",
        "#confirm_delete",
        "form[action$='/delete'] button",
    ] {
        browser.tab_to(css).await;
    }

    // Send test event: delivered.
    browser.goto(&page).await;
    let test = browser.find("form[action$='/test'] button").await;
    browser.click(&test).await;
    browser.wait_for_text("Delivered").await;
    let delivered = browser
        .script(
            "return [...document.querySelectorAll('section[aria-labelledby=test_title] dd')]
               .map(d => d.textContent);",
        )
        .await;
    assert_eq!(delivered[0], "yes", "{delivered}");
    assert_eq!(delivered[1], "200", "{delivered}");
    assert_eq!(receiver.received().len(), 1);
    browser.save("webhooks").await;

    // A delivery that fails every attempt, then replayed from the page: delivered.
    receiver.behave(|_, _| Reply::status(500));
    let payment = app.post_payment("browser-webhooks", &visa(1500)).await;
    assert_eq!(payment.status, 201, "{}", payment.text());
    app.wait_for_delivery(&id, "failed").await;
    let attempts = receiver.received().len();
    receiver.behave(|_, _| Reply::status(200));
    browser.goto(&format!("{page}?status=failed")).await;
    assert!(browser.text().await.contains("HTTP 500"));
    let replay = browser.find("form[action$='/replay'] button").await;
    browser.click(&replay).await;
    browser.wait_for_text("Queued 1 failed delivery").await;
    receiver
        .wait_for("the replayed delivery", |r| r.len() > attempts)
        .await;
    app.wait_for_delivery(&id, "succeeded").await;
    browser.goto(&format!("{page}?status=succeeded")).await;
    assert!(browser.text().await.contains("HTTP 200"));

    // A phone: nothing scrolls sideways, a long URL and a secret included.
    let long = format!("{}/{}", receiver.url, "a".repeat(300));
    let (long_id, _) = app.create_endpoint(&long, &["*"]).await;
    browser.resize(390, 844).await;
    for path in [
        "/webhooks".to_owned(),
        format!("/webhooks/{long_id}"),
        format!("/webhooks/{id}"),
    ] {
        browser.goto(&format!("{dashboard}{path}")).await;
        assert!(browser.fits().await, "{path} scrolls sideways at 390 px");
    }
    let rotate = browser.find("form[action$='/rotate'] button").await;
    browser.click(&rotate).await;
    browser.wait_for_text("Secret rotated.").await;
    assert!(browser.fits().await, "the secret's page scrolls sideways");
    browser.resize(1280, 800).await;
}
