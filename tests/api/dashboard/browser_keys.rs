//! The API keys page in a real Chromium, with the keyboard alone: a key created (shown
//! once, working against the API), a second browser signed in with it, the key revoked,
//! and that second browser's session over; a phone-sized window. With
//! `DASHBOARD_SCREENSHOTS=<dir>` the page with a new key is saved there as `api-keys.png`.

use std::time::Duration;

use super::browser::on_sign_in;
use crate::support::webdriver::{Browser, ENTER};
use crate::support::{spawn_app, wait_for, wait_until};

#[actix_web::test]
async fn api_keys_are_created_shown_once_and_revoked_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    let dashboard = format!("{}/dashboard", app.address);

    browser.sign_in(&dashboard, &app.api_key).await;

    // To the page with Tab and Enter.
    browser.tab_to("nav a[href='/dashboard/api-keys']").await;
    browser.keys(ENTER).await;
    wait_until(Duration::from_secs(10), "the API keys page", || async {
        browser.url().await.ends_with("/dashboard/api-keys")
    })
    .await;
    let text = browser.text().await;
    assert!(text.contains("this session's key"), "{text}");
    assert!(!text.contains(&app.api_key), "the list shows no key");

    // Create, with the keyboard: the label, then the button.
    browser.tab_to("#key_label").await;
    browser.keys("rotation 2026").await;
    browser
        .tab_to("form[action='/dashboard/api-keys'] button")
        .await;
    browser.keys(ENTER).await;
    let key = wait_for(Duration::from_secs(10), "the new key is shown", || async {
        let shown = browser
            .script(
                "const c = document.getElementById('new-key'); return c ? c.textContent : null;",
            )
            .await;
        shown.as_str().map(str::to_owned)
    })
    .await;
    assert!(key.starts_with("sk_test_"), "{key}");
    assert!(browser.text().await.contains("shown this once"));
    assert!(
        !browser.url().await.contains(&key),
        "the key is not in the URL"
    );
    browser.save("api-keys").await;
    assert_eq!(app.get_as("/v1/balance", &key).await.status, 200);

    // Drawn again, the page does not show it.
    browser.goto(&format!("{dashboard}/api-keys")).await;
    let text = browser.text().await;
    assert!(text.contains("rotation 2026") && text.contains(&key[key.len() - 4..]));
    assert!(!text.contains(&key), "shown once only");

    // A second browser signs in with the new key.
    let Some(second) = Browser::start().await else {
        return;
    };
    second.sign_in(&dashboard, &key).await;
    assert!(!on_sign_in(&second).await);

    // Revoke it, with the keyboard.
    let id = browser
        .script(
            "return [...document.querySelectorAll('tbody tr')] \
             .find(r => r.textContent.includes('rotation 2026')) \
             .querySelector('td').textContent.trim();",
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("key_"), "{id}");
    browser
        .tab_to(&format!(
            "form[action='/dashboard/api-keys/{id}/revoke'] button"
        ))
        .await;
    browser.keys(ENTER).await;
    wait_until(
        Duration::from_secs(10),
        "the revocation is shown",
        || async { browser.text().await.contains("API key revoked.") },
    )
    .await;

    // The second browser's session is over within 5 s; the API refuses the key.
    wait_until(
        Duration::from_secs(5),
        "the second browser is asked to sign in",
        || async {
            second.goto(&format!("{dashboard}/payments")).await;
            on_sign_in(&second).await
        },
    )
    .await;
    wait_until(
        Duration::from_secs(5),
        "the API refuses the key",
        || async { app.get_as("/v1/balance", &key).await.status == 401 },
    )
    .await;

    // A phone: the page, and the answer with its long key, fit the window.
    browser.resize(390, 844).await;
    browser.goto(&format!("{dashboard}/api-keys")).await;
    assert!(browser.fits().await, "the API keys page scrolls sideways");
    let label = browser.find("#key_label").await;
    browser.type_into(&label, "phone").await;
    browser.keys(ENTER).await;
    wait_until(Duration::from_secs(10), "a second key is shown", || async {
        browser.text().await.contains("shown this once")
    })
    .await;
    assert!(
        browser.fits().await,
        "the new key's page scrolls sideways at 390 px"
    );
    browser.save("api-keys-phone").await;
}
