//! `baton demo`: migrate, load the example profiles of the language asked
//! for, start every role in this process, send a WeChat-style request
//! through `baton.bridge.requests`, and print who did what (one row per
//! agent) and the reply the bridge received.
//!
//! - `request`: the request it sends and the built-in profiles of each language.
//! - `guard`: it never replaces a fleet's profiles (a database's own set is left alone).
//! - `coding`: `--target codex` (or `claude_code`, `qwen_code`, `gemini_cli`)
//!   runs that real CLI on a throwaway project against a scripted model.

mod coding;
mod guard;
mod request;

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_bus::{Connection, Outgoing};
use baton_domain::fleet::Queue;
use baton_domain::profiles::ProfilesFile;
use serde_json::Value;

use crate::config::Settings;
use crate::fleet::Fleet;
use crate::roles::Role;

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Reply language: en or zh-CN.
    #[arg(long, default_value = "en")]
    pub language: String,
    /// A profiles file to use instead of the built-in example.
    #[arg(long)]
    pub profiles: Option<std::path::PathBuf>,
    /// How long to wait for the reply, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// The request's targetAgent (routed through the profiles file); a
    /// coding CLI's name (`codex`, `claude_code`, `qwen_code`, `gemini_cli`)
    /// runs that CLI on a throwaway project against a scripted model.
    #[arg(long, default_value = "docs_agent")]
    pub target: String,
    /// Route the request to an agent that asks the user a question first
    /// (profile `announcer`); the demo, playing the bridge, answers it.
    #[arg(long)]
    pub ask: bool,
}

/// The profile `--ask` routes the request to.
const ASKING_PROFILE: &str = "announcer";

/// Creates the database if needed and migrates it, with a clear error when
/// PostgreSQL is not reachable.
pub async fn prepare_database(settings: &Settings) -> anyhow::Result<usize> {
    baton_store::ensure_database(&settings.database_url).await.map_err(|e| {
        let context = if e.is_transient() {
            format!(
                "PostgreSQL is not reachable at {}. Start it (on this machine: `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`) or set DATABASE_URL.",
                settings.database_url_redacted()
            )
        } else {
            format!("creating the database at {}", settings.database_url_redacted())
        };
        anyhow::Error::new(e).context(context)
    })?;
    let pool = baton_store::pool(&settings.database_url, 1)?;
    Ok(baton_store::migrate(&pool).await?)
}

pub async fn run(settings: &Settings, args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    request::check_language(&args.language)?;
    step("checking PostgreSQL and RabbitMQ");
    let broker = crate::operator::dead_letters::open(settings, "baton-demo-bridge").await?;
    let applied = prepare_database(settings).await?;
    step(&format!("database migrated ({applied} new migration(s))"));
    let coding = match coding::cli_of(&args.target).filter(|_| args.profiles.is_none()) {
        Some(cli) => {
            let demo = coding::CodingDemo::prepare(cli, None).await?;
            step(&format!(
                "{} will work on a throwaway project ({}), its model scripted at {}",
                cli.display_name(),
                demo.repository.display(),
                demo.server.base_url()
            ));
            Some(demo)
        }
        None => None,
    };
    let mut args = args;
    let text = match (&args.profiles, &coding) {
        (Some(path), _) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        (None, Some(demo)) => {
            args.target = demo.target.clone();
            demo.profiles.clone()
        }
        (None, None) => request::example_profiles(&args.language).to_string(),
    };
    let mut profiles = ProfilesFile::parse(&text)?;
    if args.ask {
        if !profiles.profiles.iter().any(|p| p.id == ASKING_PROFILE) {
            bail!("--ask needs a profile `{ASKING_PROFILE}` (an agent with ask_user) in the profiles file");
        }
        profiles.routes.insert(args.target.clone(), ASKING_PROFILE.to_string());
    }
    let pool = baton_store::pool(&settings.database_url, 2)?;
    let mut client = pool.get().await?;
    let verb = match guard::apply_if_allowed(&mut client, &profiles).await? {
        guard::Decision::Apply => "applied",
        guard::Decision::Keep => "using the",
        guard::Decision::Refuse(why) => bail!("{why}"),
    };
    drop(client);
    step(&format!("{verb} {} profiles: {}", profiles.profiles.len(), names(&profiles)));

    // Declare the fleet's queues before its roles start: a request published
    // to a missing queue would be lost, and a quorum queue still starting
    // refuses a consumer (the role would log the refusal and retry).
    broker.declare(&settings.queues()).await?;
    let fleet = Fleet::start(settings, &Role::ALL);
    step("started roles: intake, invocation, relay, collector");
    let project = coding.as_ref().map(|_| coding::PROJECT);
    let outcome = send_and_wait(settings, &broker, &args, project).await;
    fleet.stop().await;
    broker.close("demo done").await;
    let (request_id, reply) = outcome?;

    let request = baton_store::requests::get(&pool.get().await?, &request_id).await?.context("request not stored")?;
    let run_id = request.run_id.context("no run was started")?;
    let c = pool.get().await?;
    let run = crate::operator::show::resolve(&c, &run_id.to_string()).await?;
    let header = crate::operator::show::header(&c, &run).await?;
    println!("\nWho did what in run {run_id} (`baton runs show {request_id}` prints its timeline)\n");
    print!("{}", crate::operator::agents::render(&header.agents));
    print_reply(&reply);
    if let Some(demo) = &coding {
        print_changes(demo, &reply).await?;
    }
    println!("\nDone in {:.1}s ({} model tokens).", started.elapsed().as_secs_f64(), header.tokens);
    if reply["status"] != "completed" {
        bail!("the run ended {}", reply["status"]);
    }
    Ok(())
}

fn step(text: &str) {
    println!("==> {text}");
}

fn names(profiles: &ProfilesFile) -> String {
    profiles.profiles.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
}

/// Plays the bridge on a reply queue and a publishing channel of its own.
async fn send_and_wait(
    settings: &Settings,
    broker: &Connection,
    args: &DemoArgs,
    project: Option<&str>,
) -> anyhow::Result<(String, Value)> {
    let mut replies = broker.subscribe_private().await?;
    let publisher = broker.publisher().await?;
    let outcome = bridge(settings, &publisher, &mut replies, args, project).await;
    // Closed, not only dropped: a channel dropped closes in the background,
    // and its late answer on a connection already closing is logged as an error.
    replies.close().await;
    publisher.close().await;
    outcome
}

/// Publishes the request with `reply_to` set to the bridge's queue and
/// prints each status until the reply arrives.
async fn bridge(
    settings: &Settings,
    publisher: &baton_bus::Publisher,
    replies: &mut baton_bus::consume::Subscription,
    args: &DemoArgs,
    project: Option<&str>,
) -> anyhow::Result<(String, Value)> {
    let id = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut request = request::build(&id, &args.target, &args.language)?;
    if let Some(project) = project {
        request["projectId"] = project.into();
        request["userIntent"] = "Add a hello.txt greeting to the site.".into();
        // A chat of its own: each demo starts a new session on a new project.
        request["conversationKey"] = format!("demo-chat-{id}").into();
    }
    let body = serde_json::to_vec(&request)?;
    let queue = settings.queues().name(Queue::BridgeRequests);
    let out = Outgoing {
        queue: &queue,
        body: &body,
        message_id: Some(&id),
        reply_to: Some(replies.queue()),
        mandatory: true,
        ..Default::default()
    };
    if let baton_bus::Published::Returned(why) = publisher.publish(&out).await? {
        bail!("the request was not delivered: {why}");
    }
    step(&format!("bridge sent request {id} to {queue}"));

    let deadline = tokio::time::sleep(Duration::from_secs(args.timeout));
    tokio::pin!(deadline);
    loop {
        let delivery = tokio::select! {
            d = replies.next() => d.context("reading the reply queue")?,
            _ = &mut deadline => bail!("no reply within {}s; is an invocation worker running?", args.timeout),
        };
        delivery.ack().await?;
        let message: Value = serde_json::from_slice(delivery.body())?;
        if message["type"] == "status" {
            step(&format!("bridge got status #{}: {}", message["seq"], message["status"].as_str().unwrap_or("?")));
        } else if message["type"] == "question" {
            answer(publisher, &queue, &message).await?;
        } else {
            step("bridge got the reply");
            return Ok((id, message));
        }
    }
}

/// Plays the user: shows the question and answers with its first option.
async fn answer(publisher: &baton_bus::Publisher, queue: &str, question: &Value) -> anyhow::Result<()> {
    step(&format!("bridge got a question: {}", question["text"].as_str().unwrap_or("?").replace('\n', " ")));
    let text = question["options"][0].as_str().unwrap_or("yes");
    let id = format!("answer-{}", uuid::Uuid::new_v4().simple());
    let body = serde_json::json!({
        "type": "answer", "id": id, "handoffId": question["handoffId"], "questionId": question["questionId"],
        "text": text, "at": baton_store::requests::bridge::timestamp(),
    });
    let body = serde_json::to_vec(&body)?;
    let out = Outgoing { queue, body: &body, message_id: Some(&id), mandatory: true, ..Default::default() };
    if let baton_bus::Published::Returned(why) = publisher.publish(&out).await? {
        bail!("the answer was not delivered: {why}");
    }
    step(&format!("bridge answered: {text}"));
    Ok(())
}

/// What the coding agent changed, as the reply and the repository tell it.
async fn print_changes(demo: &coding::CodingDemo, reply: &Value) -> anyhow::Result<()> {
    let changes = &reply["result"]["changes"];
    if changes.is_null() {
        return Ok(());
    }
    println!("\nWhat {} changed (result.changes)", demo.cli.display_name());
    println!("{}", "-".repeat(90));
    let files: Vec<&str> =
        changes["files"].as_array().map(|f| f.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    println!("project:  {}", changes["project"].as_str().unwrap_or("?"));
    println!("files:    {} (+{} −{})", files.join(", "), changes["insertions"], changes["deletions"]);
    println!("branch:   {}", changes["branch"].as_str().unwrap_or("-"));
    println!("commit:   {}", changes["commit"].as_str().unwrap_or("-"));
    if let Some(branch) = changes["branch"].as_str() {
        println!("{}", "-".repeat(90));
        print!("{}", demo.pushed(branch).await?);
    }
    println!("{}", "-".repeat(90));
    println!("model calls the scripted model answered: {}", demo.server.model_calls().len());
    Ok(())
}

fn print_reply(reply: &Value) {
    println!("\nReply the bridge received");
    println!("{}", "-".repeat(90));
    let agents: Vec<&str> =
        reply["result"]["agents"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    println!("status:   {}", reply["status"].as_str().unwrap_or("?"));
    println!("language: {}", reply["language"].as_str().unwrap_or("?"));
    println!("chat:     {}", reply["replyToChatId"].as_str().unwrap_or("-"));
    println!("agents:   {}", agents.join(" → "));
    println!("parts:    {}", reply["parts"].as_array().map(Vec::len).unwrap_or(0));
    println!("{}", "-".repeat(90));
    println!("{}", reply["text"].as_str().unwrap_or(""));
    println!("{}", "-".repeat(90));
}
