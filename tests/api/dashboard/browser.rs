//! The dashboard in a real Chromium (headless, through chromedriver): signing in, a payment
//! made by the API and its timeline, a refund clicked twice and sent again, escaping, the
//! keyboard alone, a phone-sized window. With `DASHBOARD_SCREENSHOTS=<dir>` the main pages
//! are saved there as PNGs (the README's pictures come from this test).

use std::time::Duration;

use serde_json::json;

use crate::support::webdriver::{Browser, ENTER};
use crate::support::{spawn_app, visa, wait_until};

/// Whether the page is the sign-in form (its `API key` field; the navigation's `API keys`
/// link is no sign of it).
pub(super) async fn on_sign_in(browser: &Browser) -> bool {
    browser
        .script("return document.getElementById('api_key') !== null;")
        .await
        .as_bool()
        .unwrap_or(false)
}

#[actix_web::test]
async fn the_dashboard_works_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    let payment = app.post_payment("browser-pay", &visa(2599)).await.json();
    let payment_id = payment["id"].as_str().unwrap().to_owned();
    let hostile = app
        .post_payment(
            "browser-xss",
            &json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_visa",
                "description": "<script>window.__xss = 1</script>",
                "customer_id": "<img src=x onerror=\"window.__xss = 2\">"}),
        )
        .await
        .json();
    let dashboard = format!("{}/dashboard", app.address);

    // Sign in: a wrong key first, then the right one, with the keyboard alone.
    browser.goto(&dashboard).await;
    browser.save("sign-in").await;
    let field = browser.find("#api_key").await;
    browser
        .type_into(&field, "sk_test_not_a_key_000000000000")
        .await;
    browser.keys(ENTER).await;
    browser
        .wait_for_text("That API key was not accepted.")
        .await;
    assert!(!browser.text().await.contains("sk_test_not_a_key"));
    let field = browser.find("#api_key").await;
    browser.type_into(&field, &app.api_key).await;
    browser.keys(ENTER).await;
    browser.wait_for_text("Payments per day").await;
    browser.save("overview").await;

    // To the payments with Tab and Enter; the payment made by the API is there.
    browser.tab_to("nav a[href='/dashboard/payments']").await;
    browser.keys(ENTER).await;
    wait_until(Duration::from_secs(10), "the payments page", || async {
        browser.url().await.ends_with("/dashboard/payments")
    })
    .await;
    assert!(browser.text().await.contains(&payment_id));
    assert_eq!(
        browser.script("return window.__xss === undefined;").await,
        true,
        "nothing from the database ran"
    );
    browser.save("payments").await;
    let link = browser
        .find(&format!("a[href='/dashboard/payments/{payment_id}']"))
        .await;
    browser.click(&link).await;
    let text = browser.text().await;
    assert!(
        text.contains("25.99 USD") && text.contains("Timeline"),
        "{text}"
    );
    assert!(
        text.contains("payment.succeeded"),
        "the timeline has the payment's event"
    );

    // Refund clicked twice, then the same form (its key) sent again later: one refund.
    let amount = browser.find("#refund_amount").await;
    browser.type_into(&amount, "10.00").await;
    browser
        .script(
            "const f = document.querySelector(\"form[action$='/refund']\"); \
             sessionStorage.setItem('form', f.outerHTML); \
             const b = f.querySelector('button'); b.click(); b.click(); return true;",
        )
        .await;
    wait_until(Duration::from_secs(10), "the refund is shown", || async {
        browser.text().await.contains("Refund requested.")
    })
    .await;
    browser
        .script(
            "document.body.insertAdjacentHTML('beforeend', sessionStorage.getItem('form')); \
             const f = document.body.lastElementChild; \
             f.querySelector('input[name=amount]').value = '10.00'; f.submit(); return true;",
        )
        .await;
    wait_until(Duration::from_secs(10), "back on the payment", || async {
        browser.text().await.contains("Refund requested.")
    })
    .await;
    assert_eq!(
        app.provider_refunds().len(),
        1,
        "one refund whatever the hands did"
    );
    assert_eq!(app.simulator.refund_calls(), 1);
    assert!(browser.text().await.contains("10.00 USD"));
    browser.save("payment").await;

    // The hostile payment's page shows its values as text.
    browser
        .goto(&format!(
            "{dashboard}/payments/{}",
            hostile["id"].as_str().unwrap()
        ))
        .await;
    assert!(
        browser
            .text()
            .await
            .contains("<script>window.__xss = 1</script>")
    );
    assert_eq!(
        browser.script("return window.__xss === undefined;").await,
        true
    );

    // A phone: no page scrolls sideways.
    browser.resize(390, 844).await;
    for path in ["", "/payments", &format!("/payments/{payment_id}")] {
        browser.goto(&format!("{dashboard}{path}")).await;
        assert!(browser.fits().await, "{path} scrolls sideways at 390 px");
    }
    browser.save("payment-phone").await;
    browser.resize(1280, 800).await;

    // Sign out, with the keyboard: the session is over.
    browser.goto(&dashboard).await;
    browser.tab_to(".sign-out button").await;
    browser.keys(ENTER).await;
    wait_until(Duration::from_secs(10), "the sign-in form", || async {
        on_sign_in(&browser).await
    })
    .await;
    browser.goto(&format!("{dashboard}/payments")).await;
    assert!(on_sign_in(&browser).await, "signed out");
}
