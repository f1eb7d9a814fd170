//! The operator's console in a real headless Chromium (issue 11).

use baton_tests::browser::Browser;

/// The harness itself: a page whose element appears late is waited for,
/// read and photographed.
#[tokio::test]
async fn the_browser_harness_waits_for_late_elements_and_takes_screenshots() {
    let app = axum::Router::new().route("/", axum::routing::get(|| async { axum::response::Html(HARNESS_PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let Some(browser) = Browser::open("harness").await else { return };
    browser.goto(&url).await;
    assert_eq!(browser.texts("#runs .chain").await, vec!["writer → editor"]);
    let late = browser.wait_for("#late").await;
    assert_eq!(late.text().await.unwrap(), "late <script>");
    let shot = browser.screenshot("harness").await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000, "{} is a real PNG", shot.display());
    browser.close().await;
    server.abort();
}

const HARNESS_PAGE: &str = r#"<!doctype html><html><body>
<table id="runs"><tr data-run="r1"><td class="chain">writer → editor</td></tr></table>
<script>setTimeout(() => { const p = document.createElement("p"); p.id = "late"; p.textContent = "late <script>"; document.body.append(p); }, 400);</script>
</body></html>"#;
