//! Test helpers: each test gets its own database and its own queue prefix on
//! the real PostgreSQL and RabbitMQ, and both are removed when the test ends,
//! even when it fails (the clean-up runs in `Drop`).

use std::future::Future;
use std::time::Duration;

use baton::config::Settings;
use baton::fleet::Fleet;
use baton::roles::Role;
use baton_bus::lapin::options::{BasicAckOptions, BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions};
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::{Connection, Consumer};
use baton_bus::{Outgoing, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::profiles::ProfilesFile;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_store::Pool;
use futures_lite::StreamExt;
use serde_json::Value;
use uuid::Uuid;

pub mod browser;
pub mod docs;
pub mod http;
pub mod logs;
pub mod paced;
pub mod pg_cut;
pub mod turns;
pub mod webhook;

pub use baton_domain::protocol::request::sample_request_json;

/// One isolated test environment.
pub struct TestEnv {
    pub settings: Settings,
    pub pool: Pool,
    pub conn: Connection,
    pub publisher: Publisher,
    /// A bridge's own reply queue (`reply_to`), removed with the rest.
    pub reply_queue: String,
    db_name: String,
    admin_url: String,
    /// Queues a test declared itself, removed with the rest.
    own_queues: std::sync::Mutex<Vec<String>>,
}

const DEFAULT_DB: &str = "postgres://postgres@127.0.0.1:5432/postgres";

impl TestEnv {
    pub async fn new() -> Self {
        Self::migrated(None).await
    }

    /// A test environment whose database has the migrations up to
    /// `version` only (a test of a migration's data move runs the rest).
    pub async fn migrated_to(version: i32) -> Self {
        Self::migrated(Some(version)).await
    }

    async fn migrated(version: Option<i32>) -> Self {
        let id = Uuid::new_v4().simple().to_string();
        let db_name = format!("baton_test_{}", &id[..16]);
        let admin_url = std::env::var("TEST_ADMIN_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DB.to_string());
        let mut settings = Settings::from_env().expect("BATON_* settings");
        settings.database_url = admin_url.rsplit_once('/').map(|(base, _)| format!("{base}/{db_name}")).unwrap();
        settings.queue_prefix = format!("t{}.", &id[..10]);
        settings.pool_size = 4;
        settings.relay_poll = Duration::from_millis(200);
        settings.lease = Duration::from_secs(3);
        settings.worker_id = format!("test-{}", &id[..6]);
        baton_store::ensure_database(&settings.database_url).await.expect("create test database");
        let pool = baton_store::pool(&settings.database_url, 4).unwrap();
        match version {
            Some(version) => baton_store::migrate_to(&pool, version).await.expect("migrate"),
            None => baton_store::migrate(&pool).await.expect("migrate"),
        };
        let conn = baton_bus::connect(&settings.amqp_url, "baton-test").await.expect("connect to RabbitMQ");
        settings.queues().declare(&conn).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let reply_queue = format!("{}bridge.test.replies", settings.queue_prefix);
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(reply_queue.as_str().into(), durable, FieldTable::default()).await.unwrap();
        let publisher = Publisher::open(&conn).await.unwrap();
        Self { settings, pool, conn, publisher, reply_queue, db_name, admin_url, own_queues: Default::default() }
    }

    pub async fn apply_profiles(&self, text: &str) {
        let file = ProfilesFile::parse(text).expect("valid profiles");
        baton_store::profiles::apply(&self.pool.get().await.unwrap(), &file).await.unwrap();
    }

    pub async fn apply_example_profiles(&self) {
        self.apply_profiles(include_str!("../../examples/profiles.toml")).await;
    }

    /// The example profiles with status callbacks allowed to `origins` and
    /// signed with [`CALLBACK_SECRET`] (see [`callbacks_allowed`]).
    pub async fn apply_example_profiles_with_callbacks(&self, origins: &[&str]) {
        let mut file = ProfilesFile::parse(include_str!("../../examples/profiles.toml")).expect("valid profiles");
        file.callbacks = callbacks_allowed(origins);
        baton_store::profiles::apply(&self.pool.get().await.unwrap(), &file).await.unwrap();
    }

    pub fn start(&self, roles: &[Role]) -> Fleet {
        Fleet::start(&self.settings, roles)
    }

    pub fn start_all(&self) -> Fleet {
        self.start(&Role::ALL)
    }

    /// Publishes raw bytes to the fleet's request queue, as a bridge would.
    pub async fn send_raw(&self, body: &[u8], reply_to: Option<&str>) {
        let queue = self.settings.queues().name(Queue::BridgeRequests);
        let out = Outgoing { queue: &queue, body, reply_to, ..Default::default() };
        self.publisher.publish(&out).await.unwrap();
    }

    /// Sends a request whose replies come to this test's own reply queue.
    pub async fn send_request(&self, request: &Value) {
        self.send_raw(&serde_json::to_vec(request).unwrap(), Some(&self.reply_queue.clone())).await;
    }

    pub async fn consume(&self, queue: &str) -> Consumer {
        let channel = self.conn.create_channel().await.unwrap();
        channel
            .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
            .unwrap()
    }

    pub async fn replies(&self) -> Consumer {
        self.consume(&self.reply_queue.clone()).await
    }

    pub fn queue(&self, logical: Queue) -> String {
        self.settings.queues().name(logical)
    }

    pub async fn db(&self) -> baton_store::Client {
        self.pool.get().await.unwrap()
    }

    pub async fn scalar_i64(&self, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> i64 {
        self.db().await.query_one(sql, params).await.unwrap().get(0)
    }

    /// The run started for a request.
    pub async fn run_of(&self, handoff_id: &str) -> Uuid {
        let c = self.db().await;
        let r = baton_store::requests::get(&c, handoff_id).await.unwrap().expect("request stored");
        r.run_id.expect("run started")
    }

    /// The workers that started the invocations of a handoff's run, in order.
    /// The run's root invocation once intake has written it (the first
    /// there is), as its message names it.
    pub async fn root_invocation(&self) -> baton_domain::fleet::RunInvocation {
        eventually(Duration::from_secs(60), "the root invocation exists", || async {
            let sql = "SELECT id, run_id FROM invocations WHERE kind = 'root'";
            let row = self.db().await.query_opt(sql, &[]).await.unwrap();
            row.map(|r| baton_domain::fleet::RunInvocation { invocation_id: r.get(0), run_id: r.get(1) })
        })
        .await
    }

    /// Ends an invocation's lease (or eager reservation) now, as a stalled
    /// holder's, an outage's or its worker's death would.
    pub async fn lapse_lease(&self, id: Uuid) {
        let sql = "UPDATE invocations SET lease_expires_at = now() - interval '1 second' WHERE id = $1";
        self.db().await.execute(sql, &[&id]).await.unwrap();
    }

    /// The relay's stalled sweep, once, at this fleet's settings: what it re-publishes.
    pub async fn sweep_stalled(&self) -> Vec<Uuid> {
        let pace = baton_store::invocations::Pace {
            grace: self.settings.unclaimed_grace,
            lease: self.settings.lease,
            cap: self.settings.republish_max,
            handoff_backlog: false,
            delegate_backlog: false,
        };
        let stalled = baton_store::invocations::take_stalled(&self.db().await, &pace).await.unwrap();
        stalled.into_iter().map(|(id, _, _)| id).collect()
    }

    pub async fn workers_that_started(&self, handoff_id: &str) -> Vec<String> {
        let timeline = baton_store::journal::timeline(&self.db().await, self.run_of(handoff_id).await).await.unwrap();
        let started = timeline.into_iter().filter(|e| e.is(JournalEvent::InvocationStarted));
        started.map(|e| e.payload["worker"].as_str().unwrap_or("").to_string()).collect()
    }

    /// A run's journal events, in order. Every row a test sees was written
    /// by this version, so a name no [`JournalEvent`] has fails the test.
    pub async fn journal(&self, run_id: Uuid) -> Vec<JournalEvent> {
        let c = self.db().await;
        let rows = baton_store::journal::timeline(&c, run_id).await.unwrap();
        rows.iter().map(|e| e.kind.parse().unwrap_or_else(|e| panic!("a journal row: {e}"))).collect()
    }

    /// A request's handoff events, in order; as for [`TestEnv::journal`], a
    /// name no [`HandoffEvent`] has fails the test.
    pub async fn handoff_events(&self, handoff_id: &str) -> Vec<HandoffEvent> {
        let c = self.db().await;
        let rows = baton_store::requests::events(&c, handoff_id).await.unwrap();
        rows.iter().map(|e| e.kind.parse().unwrap_or_else(|e| panic!("a handoff event row: {e}"))).collect()
    }

    /// How many `kind` handoff events are stored, of every request.
    pub async fn handoff_event_count(&self, kind: HandoffEvent) -> i64 {
        self.scalar_i64("SELECT count(*) FROM handoff_events WHERE type = $1", &[&kind.as_str()]).await
    }
}

/// Reads messages until the reply (`type: reply`) arrives; returns every
/// message seen, reply last.
pub async fn until_reply(consumer: &mut Consumer, within: Duration) -> Vec<Value> {
    let mut seen = vec![];
    loop {
        let message = next_json(consumer, within).await;
        let done = message["type"] == "reply";
        seen.push(message);
        if done {
            return seen;
        }
    }
}

/// The next message on a consumer, acked, as JSON (with headers folded in
/// under `_headers` for dead-letter checks).
pub async fn next_json(consumer: &mut Consumer, within: Duration) -> Value {
    let delivery = tokio::time::timeout(within, consumer.next())
        .await
        .expect("timed out waiting for a message")
        .expect("consumer closed")
        .expect("delivery error");
    delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
    let mut value: Value = serde_json::from_slice(&delivery.data)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&delivery.data).into()));
    let error = baton_bus::publish::header(&delivery.properties, "x-baton-error");
    if let Some(error) = error {
        value = serde_json::json!({"_body": value, "_error": error});
    }
    value
}

/// Polls `check` until it yields `Some`, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let mut queues = vec![self.reply_queue.clone()];
        queues.extend(self.own_queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..));
        let (admin, db) = (self.admin_url.clone(), self.db_name.clone());
        remove_queues(&self.settings.amqp_url, self.settings.queues(), queues);
        // A fresh runtime on its own thread: Drop may run while a test panics
        // inside another runtime.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                if let Ok((client, c)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
                    tokio::spawn(c);
                    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)")).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

impl TestEnv {
    /// A queue the test declared itself (another bridge's reply queue, say),
    /// removed with the fleet's when the test ends, pass or fail.
    pub fn remove_at_end(&self, queue: &str) {
        self.own_queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(queue.to_string());
    }
}

/// Deletes a fleet's queues and `others`, on a connection and a runtime of
/// its own (a test may be panicking inside another runtime); errors are
/// ignored, as there is nothing left to do about them.
pub fn remove_queues(amqp: &str, queues: baton_bus::Queues, others: Vec<String>) {
    let amqp = amqp.to_string();
    let cleanup = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            if let Ok(conn) = baton_bus::connect(&amqp, "baton-test-cleanup").await {
                if let Ok(ch) = conn.create_channel().await {
                    let _ = queues.delete(&ch).await;
                    for queue in &others {
                        let _ = ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await;
                    }
                }
                let _ = conn.close(200, "bye".into()).await;
            }
        });
    });
    let _ = cleanup.join();
}

impl TestEnv {
    /// The invocations of a run that ran a given profile, oldest first.
    pub async fn invocations_of(&self, run_id: Uuid, profile: &str) -> Vec<baton_store::invocations::Invocation> {
        let all = baton_store::invocations::for_run(&self.db().await, run_id).await.unwrap();
        all.into_iter().filter(|i| i.profile_id == profile).collect()
    }

    /// The tool results an invocation's model read, in order.
    pub async fn tool_results(&self, invocation: Uuid) -> Vec<Value> {
        let steps = baton_store::invocations::steps::load(&self.db().await, invocation).await.unwrap();
        steps.into_iter().filter(|s| s.kind == "tool_result").map(|s| s.payload).collect()
    }

    /// Runs the sample request with this id through the whole fleet and
    /// returns the bridge's messages.
    pub async fn run_request(&self, id: &str) -> Vec<Value> {
        self.run(&sample_request_json(id, "docs_agent", "en")).await
    }

    /// Runs one request through the whole fleet and returns the bridge's messages.
    pub async fn run(&self, request: &Value) -> Vec<Value> {
        let fleet = self.start_all();
        let mut replies = self.replies().await;
        self.send_request(request).await;
        let messages = until_reply(&mut replies, Duration::from_secs(30)).await;
        fleet.stop().await;
        messages
    }
}

/// The signing secret of the tests' status callbacks (32 bytes).
pub const CALLBACK_SECRET: &str = "whsec_YmF0b24gdGVzdCBzaWduaW5nIHNlY3JldCwgMzIgQiE=";
/// The variable that holds [`CALLBACK_SECRET`].
pub const CALLBACK_SECRET_ENV: &str = "BATON_TEST_CALLBACK_SECRET";

/// A `[callbacks]` section allowing `origins`, every source signed with
/// [`CALLBACK_SECRET`], which it puts in this test process's environment
/// (each test runs in its own process) for the in-process relay to read.
pub fn callbacks_allowed(origins: &[&str]) -> baton_domain::protocol::callback::CallbacksConfig {
    std::env::set_var(CALLBACK_SECRET_ENV, CALLBACK_SECRET);
    let signing = baton_domain::protocol::callback::SourceSigning { secret_env: CALLBACK_SECRET_ENV.to_string() };
    baton_domain::protocol::callback::CallbacksConfig {
        allowed_origins: origins.iter().map(ToString::to_string).collect(),
        sources: baton_domain::protocol::request::Source::ALL
            .iter()
            .map(|s| (s.as_str().to_string(), signing.clone()))
            .collect(),
    }
}

/// The same section as the profiles file's TOML.
pub fn callbacks_toml(origins: &[&str]) -> String {
    let config = callbacks_allowed(origins);
    let origins: Vec<String> = config.allowed_origins.iter().map(|o| format!("\"{o}\"")).collect();
    let mut text = format!("[callbacks]\nallowed_origins = [{}]\n", origins.join(", "));
    for (source, signing) in &config.sources {
        text.push_str(&format!("[callbacks.sources.{source}]\nsecret_env = \"{}\"\n", signing.secret_env));
    }
    text
}

/// A profile in the profiles file's TOML, for tests that script agents.
pub fn profile(id: &str, tools: &[&str], delegation: &str, script: &[&str]) -> String {
    let tools: Vec<String> = tools.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"The {id} agent.\"\ntools = [{}]\n[profiles.model]\nprovider = \"scripted\"\nscript = [\n{}\n]\n[profiles.delegation]\n{delegation}\n",
        tools.join(", "),
        script.iter().map(|s| format!("  {s},")).collect::<Vec<_>>().join("\n")
    )
}

/// A real `baton` process (the binary `cargo test --workspace` builds),
/// killed when dropped.
pub struct BatonProcess {
    pub child: tokio::process::Child,
    pub worker_id: String,
}

/// Where the `baton` binary is: next to this test binary's `deps/` folder.
pub fn baton_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = dir.join("baton");
    assert!(bin.exists(), "{} is missing: run the tests with `cargo nextest run --workspace` (or `cargo test --workspace`), which builds it", bin.display());
    bin
}

impl TestEnv {
    /// Starts `baton up --role ROLE` as a separate process on this test's
    /// database and queues.
    pub fn spawn_baton(&self, role: &str, worker_id: &str) -> BatonProcess {
        self.spawn_baton_env(role, worker_id, &[])
    }
}

impl BatonProcess {
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let status =
            tokio::time::timeout(within, self.child.wait()).await.expect("the process did not exit in time").unwrap();
        status.code()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl TestEnv {
    /// This test's own database.
    pub fn db_name(&self) -> &str {
        &self.db_name
    }

    /// A connection to the server's `postgres` database, for faults scoped to
    /// this test's own database (never the whole server).
    pub async fn admin(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.admin_url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    /// [`TestEnv::spawn_baton`] with extra environment variables.
    pub fn spawn_baton_env(&self, role: &str, worker_id: &str, extra: &[(&str, &str)]) -> BatonProcess {
        self.spawn_baton_roles(&[role], worker_id, extra)
    }

    /// `baton up` with each of `roles` (`--role` once per role) in one
    /// process, with extra environment variables.
    pub fn spawn_baton_roles(&self, roles: &[&str], worker_id: &str, extra: &[(&str, &str)]) -> BatonProcess {
        let log = std::fs::File::create(self.log_of(worker_id)).unwrap();
        let mut command = tokio::process::Command::new(baton_binary());
        command.arg("up");
        for role in roles {
            command.args(["--role", role]);
        }
        command
            .env("DATABASE_URL", &self.settings.database_url)
            .env("AMQP_URL", &self.settings.amqp_url)
            .env("BATON_QUEUE_PREFIX", &self.settings.queue_prefix)
            .env("BATON_LEASE_MS", self.settings.lease.as_millis().to_string())
            .env("BATON_RELAY_POLL_MS", self.settings.relay_poll.as_millis().to_string())
            .env("BATON_WORKER_ID", worker_id)
            .env("BATON_DB_POOL_SIZE", "3")
            .env("RUST_LOG", "info");
        for (name, value) in extra {
            command.env(name, value);
        }
        let child =
            command.stdout(log.try_clone().unwrap()).stderr(log).kill_on_drop(true).spawn().expect("spawn baton");
        BatonProcess { child, worker_id: worker_id.to_string() }
    }

    /// Where a spawned `baton` process of this test writes its output.
    pub fn log_of(&self, worker_id: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{}{worker_id}.log", self.settings.queue_prefix))
    }

    /// Makes this test's database read-only (or writable again) and ends its
    /// sessions, so pooled sessions reconnect with the new default, as after a
    /// failover to a replica that is not yet promoted.
    pub async fn set_read_only(&self, on: bool) {
        let admin = self.admin().await;
        let db = self.db_name();
        let value = if on { "on" } else { "off" };
        admin
            .batch_execute(&format!("ALTER DATABASE \"{db}\" SET default_transaction_read_only = {value}"))
            .await
            .unwrap();
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&db],
            )
            .await
            .unwrap();
        // The test's own idle sessions were ended too: forget them, so its
        // next query opens a fresh one instead of failing on a dead one.
        self.pool.retain(|_, _| false);
    }
}

/// The operator's console of a test's database and queues, on a free
/// loopback port; stopped when dropped.
pub struct ServedConsole {
    pub base: String,
    stop: tokio_util::sync::CancellationToken,
}

impl ServedConsole {
    /// An HTTP client as the console's own pages are: it names the console
    /// as its `Origin` (a browser does on every POST) and follows no redirect.
    pub fn client(&self) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::ORIGIN, self.base.parse().unwrap());
        let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        builder.default_headers(headers).build().unwrap()
    }

    /// `host:port`, as a browser names the console in `Host`.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }
}

impl Drop for ServedConsole {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestEnv {
    /// Serves the console in-process (with `token`, if given).
    pub async fn serve_console(&self, token: Option<&str>) -> ServedConsole {
        self.serve_console_with(token, |_| {}).await
    }

    /// [`TestEnv::serve_console`] with more settings changed by `change`
    /// (`admin_url`, say). Each call is another replica on the same database.
    pub async fn serve_console_with(&self, token: Option<&str>, change: impl FnOnce(&mut Settings)) -> ServedConsole {
        let mut settings = self.settings.clone();
        settings.admin_addr = "127.0.0.1:0".parse().unwrap();
        settings.admin_token = token.map(baton::config::Secret::new);
        change(&mut settings);
        let console = baton::console::Console::bind(&settings).await.expect("the console binds");
        let base = format!("http://{}", console.local_addr());
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(console.serve(stop.clone()));
        ServedConsole { base, stop }
    }

    /// Runs the `baton` binary with `args` on this test's database and
    /// queues, asserts it succeeded and returns what it printed.
    pub async fn baton_cli(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(baton_binary())
            .args(args)
            .env("DATABASE_URL", &self.settings.database_url)
            .env("AMQP_URL", &self.settings.amqp_url)
            .env("BATON_QUEUE_PREFIX", &self.settings.queue_prefix)
            .env("RUST_LOG", "warn")
            .output()
            .await
            .expect("run baton");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "baton {args:?} failed: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// How the invocation role's log says a claimed invocation's loop ended on
/// its worker (`workers/src/roles/invocation/mod.rs`, `Worker::execute`).
const LOOP_ENDINGS: [&str; 6] = [
    "invocation exited",
    "parked until its delegated tasks are done",
    "invocation interrupted",
    "claim released",
    "claim already gone",
    "could not release claim",
];

impl TestEnv {
    /// Waits until the loop of every claim of the run's invocations has
    /// ended on its worker in this process (its log says how), so nothing
    /// of the run runs any more: what a test then counts can no longer
    /// change. Needs [`logs::capture`] before the fleet starts.
    pub async fn wait_for_loops_to_end(&self, run: Uuid, within: Duration) {
        let claims = self
            .db()
            .await
            .query("SELECT id, claim_epoch FROM invocations WHERE run_id = $1 AND claim_epoch > 0", &[&run])
            .await
            .unwrap();
        for claim in claims {
            let (id, epoch): (Uuid, i64) = (claim.get(0), claim.get(1));
            let (id, epoch) = (format!("invocation={id}"), format!("epoch={epoch} "));
            eventually(within, &format!("the loop of {id} {epoch}ended"), || async {
                let lines = logs::lines_with(&[&id, &epoch]);
                lines.iter().any(|(_, line)| LOOP_ENDINGS.iter().any(|end| line.contains(end))).then_some(())
            })
            .await;
        }
    }

    /// Counts the relay's sweeps from now on: a statement trigger on the
    /// sweep's `UPDATE runs … republish_count + 1` (`runs::unreplied`, once
    /// per sweep; a statement trigger fires even when no row changes) adds a
    /// row to `test_sweeps`. A test that checks that sweeps did not do
    /// something waits for a number of them instead of guessing a time.
    pub async fn count_sweeps(&self) {
        self.db()
            .await
            .batch_execute(
                "CREATE TABLE test_sweeps (at timestamptz NOT NULL DEFAULT clock_timestamp());
                 CREATE FUNCTION test_count_sweep() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF current_query() LIKE '%republish_count = republish_count + 1%' THEN
                         INSERT INTO test_sweeps DEFAULT VALUES;
                     END IF;
                     RETURN NULL;
                 END $$;
                 CREATE TRIGGER test_count_sweep AFTER UPDATE ON runs
                     FOR EACH STATEMENT EXECUTE FUNCTION test_count_sweep();",
            )
            .await
            .unwrap();
    }

    /// The relay's sweeps since [`TestEnv::count_sweeps`].
    pub async fn sweeps(&self) -> i64 {
        self.scalar_i64("SELECT count(*) FROM test_sweeps", &[]).await
    }

    /// Waits until the relay has swept `n` more times than it had now.
    pub async fn wait_for_sweeps(&self, n: i64, within: Duration) {
        let target = self.sweeps().await + n;
        eventually(within, &format!("{n} more relay sweeps"), || async {
            (self.sweeps().await >= target).then_some(())
        })
        .await;
    }
}
