//! A headless Chromium for browser tests, driven over WebDriver.
//!
//! [`Browser::open`] starts Debian's `chromedriver` on a free port in its own
//! process group (the whole group, Chromium included, is killed when the
//! `Browser` is dropped, also when a test fails) and opens a WebDriver session
//! in headless Chromium with `fantoccini`. Outside CI a machine without
//! `chromedriver` skips the test with a printed reason; under `CI=true` a
//! missing browser fails it.
//!
//! Waits poll the page until a deadline (never a fixed sleep); screenshots go
//! to `target/console-screenshots/<test>.png`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Map, Value};

/// How long a wait lasts unless a test says otherwise.
pub const WAIT: Duration = Duration::from_secs(20);

const DRIVER_CANDIDATES: [&str; 2] = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"];
const CHROMIUM: &str = "/usr/bin/chromium";

/// A WebDriver session in headless Chromium, with its `chromedriver`.
pub struct Browser {
    pub client: Client,
    driver: Driver,
    test: String,
}

/// The `chromedriver` process, killed with its process group on drop.
struct Driver {
    child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where `chromedriver` is: `$CHROMEDRIVER`, Debian's paths, or `PATH`.
pub fn chromedriver() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMEDRIVER") {
        return Some(PathBuf::from(path)).filter(|p| p.exists());
    }
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    DRIVER_CANDIDATES.iter().map(PathBuf::from).chain(on_path.map(|dir| dir.join("chromedriver"))).find(|p| p.is_file())
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A free TCP port on 127.0.0.1 (bound, then released for the caller).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Starts `chromedriver` and headless Chromium for the test `test`.
    /// `None` (with the reason printed) when there is no `chromedriver` on
    /// this machine outside CI; panics under `CI=true`.
    pub async fn open(test: &str) -> Option<Browser> {
        Self::open_with(test, &[]).await
    }

    /// [`Browser::open`] with more Chromium switches (say
    /// `--host-resolver-rules=MAP attacker.example 127.0.0.1`, a name an
    /// attacker pointed at this machine).
    pub async fn open_with(test: &str, switches: &[&str]) -> Option<Browser> {
        let Some(driver_path) = chromedriver() else {
            let reason = "no chromedriver on this machine (install Debian's `chromium` and `chromium-driver`, or set CHROMEDRIVER)";
            assert!(!in_ci(), "browser test `{test}` cannot run under CI=true: {reason}");
            println!("SKIPPED browser test `{test}`: {reason}");
            return None;
        };
        let port = free_port();
        let driver = start_driver(&driver_path, port, test);
        let url = format!("http://127.0.0.1:{port}");
        wait_for_port(port, Duration::from_secs(20)).await;
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities(switches))
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("opening a headless Chromium session through {}: {e}", driver_path.display()));
        client.set_window_size(1280, 1000).await.expect("window size");
        Some(Browser { client, driver, test: test.to_string() })
    }

    /// Loads a page.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("[{}] opening {url}: {e}", self.test));
    }

    /// Waits until an element matching `css` is on the page and returns it.
    pub async fn wait_for(&self, css: &str) -> Element {
        self.wait_for_within(css, WAIT).await
    }

    /// [`Browser::wait_for`] with its own deadline.
    pub async fn wait_for_within(&self, css: &str, within: Duration) -> Element {
        let found =
            self.client.wait().at_most(within).every(Duration::from_millis(100)).for_element(Locator::Css(css)).await;
        match found {
            Ok(element) => element,
            Err(e) => self.fail(&format!("no `{css}` on the page within {within:?}: {e}")).await,
        }
    }

    /// Waits until an element matching `css` holds `needle` in its text,
    /// reloading the page between looks when `reload` is set (for pages
    /// that show state which changes behind them).
    pub async fn wait_for_text(&self, css: &str, needle: &str, reload: bool) -> Element {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            for element in self.client.find_all(Locator::Css(css)).await.unwrap_or_default() {
                if element.text().await.is_ok_and(|t| t.contains(needle)) {
                    return element;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                self.fail(&format!("no `{css}` holding {needle:?} within {WAIT:?}")).await;
            }
            if reload {
                let _ = self.client.refresh().await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Clicks the element matching `css`, waiting for it to be there and
    /// enabled, and again when a self-refreshing page replaced it under the
    /// click. Confirmation dialogs the click opens are accepted.
    pub async fn click(&self, css: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            let _ = self.client.execute("window.confirm = function () { return true; };", vec![]).await;
            if let Ok(element) = self.client.find(Locator::Css(css)).await {
                if element.is_enabled().await.unwrap_or(false) {
                    match element.click().await {
                        Ok(()) => return,
                        Err(e) => last = e.to_string(),
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.fail(&format!("could not click `{css}` within {WAIT:?} {last}")).await;
    }

    /// Runs a script in the page and returns what it returns.
    pub async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("[{}] script {script:?}: {e}", self.test))
    }

    /// Every element matching `css` now (no waiting).
    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap_or_default()
    }

    /// The texts of every element matching `css`, in page order.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut texts = vec![];
        for element in self.all(css).await {
            texts.push(element.text().await.unwrap_or_default());
        }
        texts
    }

    /// The attribute `name` of every element matching `css`, in page order.
    pub async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let mut values = vec![];
        for element in self.all(css).await {
            values.extend(element.attr(name).await.ok().flatten());
        }
        values
    }

    /// The page's current URL.
    pub async fn url(&self) -> String {
        self.client.current_url().await.map(|u| u.to_string()).unwrap_or_default()
    }

    /// Saves a PNG of the page to `target/console-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("[{}] screenshot: {}", self.test, path.display());
        path
    }

    /// Fails the test with a screenshot of the page as it is.
    async fn fail(&self, why: &str) -> ! {
        let shot = self.screenshot(&format!("{}-failed", self.test)).await;
        let url = self.url().await;
        panic!("[{}] {why} (page {url}, screenshot {})", self.test, shot.display());
    }

    /// Ends the WebDriver session, then `chromedriver` (dropping also does).
    pub async fn close(self) {
        let Browser { client, driver, .. } = self;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
        drop(driver);
    }
}

/// `target/console-screenshots/`, under `CARGO_TARGET_DIR` when it is set.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("target"));
    target.join("console-screenshots")
}

fn start_driver(path: &Path, port: u16, test: &str) -> Driver {
    use std::os::unix::process::CommandExt;
    let log = std::env::temp_dir().join(format!("chromedriver-{test}-{port}.log"));
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .arg(format!("--log-path={}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
    Driver { child }
}

/// Waits until something listens on 127.0.0.1:`port`.
pub async fn wait_for_port(port: u16, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "nothing listened on port {port} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn capabilities(switches: &[&str]) -> Map<String, Value> {
    let mut args =
        vec!["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000"];
    args.extend_from_slice(switches);
    let mut options = json!({ "args": args });
    if Path::new(CHROMIUM).exists() {
        options["binary"] = CHROMIUM.into();
    }
    let mut caps = Map::new();
    caps.insert("browserName".into(), "chrome".into());
    caps.insert("goog:chromeOptions".into(), options);
    caps
}
