//! `baton`: config → telemetry → the command asked for.

use anyhow::Context;
use baton::config::Settings;
use baton::fleet::Fleet;
use baton::roles::Role;
use baton_domain::profiles::ProfilesFile;
use clap::{Parser, Subcommand};

/// jemalloc, not the system allocator: see the workspace `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "baton",
    version,
    about = "A RabbitMQ + Postgres worker fleet for multi-agent handoffs from chat bridges"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the database if needed and apply migrations.
    Migrate,
    /// Agent profiles.
    Profiles {
        #[command(subcommand)]
        command: ProfilesCommand,
    },
    /// Run fleet roles until SIGTERM (all of them unless --role is given).
    Up {
        #[arg(long, value_enum)]
        role: Vec<Role>,
    },
    /// Ask a running process's /readyz (for container health checks): exit 0 when ready, 1 when not.
    Health {
        /// host:port of its metrics listener (default: BATON_METRICS_ADDR).
        #[arg(long)]
        addr: Option<std::net::SocketAddr>,
    },
    /// Run a real handoff chain end to end and print its timeline and reply.
    Demo(baton::demo::DemoArgs),
    /// Inspect runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Work bridge handoffs by hand (the manual flow).
    Handoff {
        #[command(subcommand)]
        command: HandoffCommand,
    },
    /// What is in `baton.dead`: list it, replay it to its queue, discard it.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
    },
    /// Write the bridge contract (JSON Schemas, TypeScript types) generated from Baton's types.
    Contract {
        /// The repository's `contract/` folder.
        #[arg(long, default_value = "contract")]
        dir: std::path::PathBuf,
        /// Write nothing; exit 1 naming the files that differ from what the code generates.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand)]
enum DeadCommand {
    /// The dead letters, oldest first, with their reason and source queue.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Republish a dead letter (or all, of one queue with --queue) to the queue it came from:
    /// only those a replay can help (as the console offers Replay), unless --force.
    Replay(DeadReplay),
    /// Drop a dead letter (or all, of one queue with --queue).
    Discard(DeadSelect),
}

#[derive(clap::Args)]
struct DeadReplay {
    #[command(flatten)]
    select: DeadSelect,
    /// Replay letters the console would not offer Replay for too (a request intake refused,
    /// once what refused it is fixed); never to a queue a replay may not reach.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
struct DeadSelect {
    /// The dead letter's id, as `baton dead list` shows it.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<String>,
    #[arg(long)]
    all: bool,
    /// Only dead letters from this queue (e.g. baton.runs.finished).
    #[arg(long)]
    queue: Option<String>,
}

#[derive(Subcommand)]
enum HandoffCommand {
    /// Handoffs waiting for a person (`--waiting`): manual handoffs to answer.
    List {
        #[arg(long)]
        waiting: bool,
        #[arg(long)]
        json: bool,
    },
    /// The request after filtering, its status and its events.
    Show { id: String },
    /// A ready-to-copy prompt for an external agent.
    Prompt { id: String },
    /// Record an external agent's result (from FILE, or - for stdin) and reply to the bridge.
    PasteResult { id: String, file: String },
    /// Cancel the handoff; the bridge is told.
    Cancel {
        id: String,
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
    },
}

#[derive(Subcommand)]
enum ProfilesCommand {
    /// Validate a profiles file and load it into Postgres.
    Apply { file: std::path::PathBuf },
    /// Validate a profiles file and say what each profile still needs; exit 1 when one is not ready.
    Check { file: std::path::PathBuf },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Runs, newest first.
    List(RunsList),
    /// A run's header (status, reason, handoff, chain, duration, tokens),
    /// who did what, and its timeline across agents.
    Show {
        /// The run's id, or its handoff's (the request's `id`).
        id: String,
        /// Also each agent's transcript: prompt, model turns, tool calls and results.
        #[arg(long)]
        transcript: bool,
        #[arg(long)]
        json: bool,
    },
    /// Resume a failed run from its last stored step; the bridge gets a new reply.
    Retry { run: uuid::Uuid },
    /// Delete finished runs older than N days with everything they own and
    /// their requests' events and messages, and what is older by age alone
    /// (answers of no kept request, idle conversations, coding sessions);
    /// each request's row stays, so its id is still a duplicate.
    Prune {
        #[arg(long)]
        older_than_days: f64,
        #[arg(long, default_value_t = 500)]
        batch: i64,
    },
    /// Cancel a run: every live invocation stops and the bridge is told `cancelled`.
    Cancel {
        run: uuid::Uuid,
        #[arg(long, default_value = "cancelled by an operator")]
        reason: String,
    },
}

#[derive(clap::Args)]
struct RunsList {
    /// running, blocked (waiting on the user's answer), completed, failed or cancelled.
    #[arg(long)]
    status: Option<String>,
    /// The request's targetAgent.
    #[arg(long)]
    target: Option<String>,
    /// The request's replyToChatId.
    #[arg(long)]
    chat: Option<String>,
    /// weixin, admin or system.
    #[arg(long)]
    source: Option<String>,
    /// Only runs created this recently: 90s, 30m, 1h, 7d.
    #[arg(long)]
    since: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: i64,
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Contract { dir, check } = &cli.command {
        return contract(dir, *check);
    }
    let quiet = matches!(cli.command, Command::Demo(_));
    baton::telemetry::init(if quiet { "warn" } else { "info" });
    let _flush = baton::telemetry::FlushOnExit;
    let settings = Settings::from_env()?;
    match cli.command {
        Command::Migrate => {
            let applied = baton::demo::prepare_database(&settings).await?;
            println!("database ready ({applied} migration(s) applied)");
        }
        Command::Profiles { command } => profiles(&settings, command).await?,
        Command::Up { role } => up(&settings, role).await?,
        Command::Health { addr } => match baton::health::check(addr.unwrap_or(settings.metrics_addr)).await {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("not ready: {e:#}");
                std::process::exit(1);
            }
        },
        Command::Demo(args) => baton::demo::run(&settings, args).await?,
        Command::Runs { command } => runs(&settings, command).await?,
        Command::Handoff { command } => handoff(&settings, command).await?,
        Command::Dead { command } => dead(&settings, command).await?,
        Command::Contract { .. } => unreachable!("handled before the settings are read"),
    }
    Ok(())
}

/// `baton contract [--check]`: needs no database, broker or settings.
fn contract(dir: &std::path::Path, check: bool) -> anyhow::Result<()> {
    let files = baton::contract::generate()?;
    if check {
        let differ = baton::contract::differences(dir, &files)?;
        if differ.is_empty() {
            println!("{}: up to date ({} files)", dir.display(), files.len());
            return Ok(());
        }
        eprintln!("{}: these files differ from what the code generates (run `baton contract`):", dir.display());
        differ.iter().for_each(|path| eprintln!("  {path}"));
        std::process::exit(1);
    }
    let changed = baton::contract::write(dir, &files)?;
    changed.iter().for_each(|path| println!("wrote {}", dir.join(path).display()));
    println!("{}: {} files, {} changed", dir.display(), files.len(), changed.len());
    Ok(())
}

async fn profiles(settings: &Settings, command: ProfilesCommand) -> anyhow::Result<()> {
    match command {
        ProfilesCommand::Apply { file } => {
            let parsed = read_profiles(&file)?;
            let pool = baton_store::pool(&settings.database_url, 1)?;
            baton_store::profiles::apply_atomically(&mut pool.get().await?, &parsed).await?;
            println!("applied {} profile(s) and {} route(s)", parsed.profiles.len(), parsed.routes.len());
        }
        ProfilesCommand::Check { file } => {
            let parsed = read_profiles(&file)?;
            let report = baton::profiles_check::check(&parsed, |name| std::env::var(name).ok());
            report.lines.iter().for_each(|line| println!("{line}"));
            if !report.problems.is_empty() {
                eprintln!("{}: {} profile(s) not ready:", file.display(), report.problems.len());
                report.problems.iter().for_each(|problem| eprintln!("  {problem}"));
                std::process::exit(1);
            }
        }
    }
    Ok(())
}

/// Runs the roles once the database's schema is this binary's; a signal
/// while it waits for the database ends it quietly.
async fn up(settings: &Settings, role: Vec<Role>) -> anyhow::Result<()> {
    if role.is_empty() || role.contains(&Role::Admin) {
        baton::console::check_bind(settings)?;
    }
    let roles = if role.is_empty() { Role::UP.to_vec() } else { role };
    // No process of the worker's user (an agent, say) may read its memory or environment.
    baton_agent::jail::harden_worker();
    if roles.contains(&Role::Invocation) {
        tracing::info!(work_dir = %settings.agent_work_dir.display(), "{}", settings.agent_jail.describe());
    }
    // Served from the start: alive (and not ready) while the schema check waits.
    let listener = tokio_util::sync::CancellationToken::new();
    if let Err(e) = baton::health::start(settings, &roles, listener.clone()).await {
        tracing::warn!(error = %format!("{e:#}"), "running without /metrics, /healthz and /readyz");
    }
    let _stop_listener = listener.drop_guard();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        checked = baton::startup::check_schema(settings) => checked?,
        _ = term.recv() => return Ok(()),
        _ = tokio::signal::ctrl_c() => return Ok(()),
    }
    tracing::info!(roles = ?roles.iter().map(|r| r.name()).collect::<Vec<_>>(), "starting");
    Fleet::start(settings, &roles).run_until_signalled().await
}

async fn runs(settings: &Settings, command: RunsCommand) -> anyhow::Result<()> {
    let pool = baton_store::pool(&settings.database_url, 1)?;
    match command {
        RunsCommand::List(args) => runs_list(&pool, args).await?,
        RunsCommand::Show { id, transcript, json } => runs_show(&pool, &id, transcript, json).await?,
        RunsCommand::Retry { run } => {
            let attempt = baton::operator::retry_run(&pool, run).await?;
            println!("run {run} resumes (attempt {attempt}); the bridge is told `running`, then gets the new reply");
        }
        RunsCommand::Prune { older_than_days, batch } => {
            anyhow::ensure!(older_than_days >= 0.0, "--older-than-days must not be negative");
            let age = std::time::Duration::from_secs_f64(older_than_days * 86_400.0);
            let p = baton::operator::prune_runs(&pool, age, batch.max(1)).await?;
            println!(
                "pruned {} finished run(s), the trails of {} request(s), {} answer(s), {} conversation(s) and {} coding session(s)",
                p.runs, p.requests, p.answers, p.conversations, p.coding_sessions
            );
        }
        RunsCommand::Cancel { run, reason } => {
            if baton::operator::cancel_run(&pool, run, &reason).await? {
                println!("run {run} cancelled; the bridge will be told");
            } else {
                println!("run {run} had already ended");
            }
        }
    }
    Ok(())
}

async fn runs_list(pool: &baton_store::Pool, args: RunsList) -> anyhow::Result<()> {
    use baton::operator::listing;
    let now = chrono::Utc::now();
    let filter = baton_store::overview::RunFilter {
        status: args.status.as_deref().map(str::parse).transpose().map_err(|e| anyhow::anyhow!("--status: {e}"))?,
        target: args.target,
        chat: args.chat,
        source: args.source.as_deref().map(str::parse).transpose().map_err(|e| anyhow::anyhow!("--source: {e}"))?,
        since: args.since.as_deref().map(listing::parse_age).transpose()?.map(|age| now - age),
        before: None,
        limit: args.limit.max(1),
    };
    let rows = listing::runs(pool, &filter).await?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&rows)?),
        false => print!("{}", listing::runs_table(&rows, now)),
    }
    Ok(())
}

async fn runs_show(pool: &baton_store::Pool, id: &str, transcript: bool, json: bool) -> anyhow::Result<()> {
    use baton::operator::{listing, show};
    let c = pool.get().await?;
    let run = show::resolve(&c, id).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing::run_json(&c, &run, transcript).await?)?);
        return Ok(());
    }
    print!("{}", show::render(&show::header(&c, &run).await?, chrono::Utc::now()));
    if transcript {
        print!("{}", listing::transcript_text(&listing::run_json(&c, &run, true).await?));
    }
    println!();
    let events = baton_store::journal::timeline(&c, run.id).await?;
    print!("{}", baton::timeline::render(&events));
    if let Some(throttled) = baton::timeline::render_throttled(&events) {
        println!("{throttled}");
    }
    if let Some(spend) = baton_store::runs::budgets::get(&c, run.id).await? {
        println!("{}", baton::timeline::render_spend(&spend));
    }
    Ok(())
}

async fn dead(settings: &Settings, command: DeadCommand) -> anyhow::Result<()> {
    use baton::operator::dead_letters::{self, Action};
    use baton_bus::dead::Rule;
    let (action, select) = match command {
        DeadCommand::List { json } => {
            let letters = dead_letters::list(settings).await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&letters)?),
                false => print!("{}", dead_letters::table(&letters)),
            }
            return Ok(());
        }
        DeadCommand::Replay(DeadReplay { select, force }) => {
            (Action::Replay(if force { Rule::Forced } else { Rule::Replayable }), select)
        }
        DeadCommand::Discard(select) => (Action::Discard, select),
    };
    let acted = dead_letters::act(settings, action, select.id.as_deref(), select.queue.as_deref()).await?;
    let verb = if action == Action::Discard { "discarded" } else { "replayed" };
    println!("{verb} {}", acted.done.len());
    if !acted.withheld.is_empty() {
        println!("left {} in baton.dead that a replay cannot help:", acted.withheld.len());
    }
    for (id, why) in &acted.withheld {
        println!("  {id} stays in baton.dead: {why}");
    }
    for (id, why) in &acted.failed {
        println!("  {id} stays in baton.dead: {why}");
    }
    anyhow::ensure!(acted.failed.is_empty(), "{} dead letter(s) could not be {verb}", acted.failed.len());
    if let (Some(id), Some((_, why))) = (&select.id, acted.withheld.first()) {
        anyhow::bail!(
            "dead letter `{id}` is not replayed, and nothing changed: {why} (`baton dead discard {id}` removes it)"
        );
    }
    if let (Some(id), true) = (&select.id, acted.done.is_empty()) {
        anyhow::bail!("no dead letter `{id}` (see `baton dead list`)");
    }
    Ok(())
}

async fn handoff(settings: &Settings, command: HandoffCommand) -> anyhow::Result<()> {
    use baton::operator::{self, Settle};
    let pool = baton_store::pool(&settings.database_url, 1)?;
    match command {
        HandoffCommand::List { waiting, json } => {
            anyhow::ensure!(waiting, "`baton handoff list` lists the handoffs waiting for a person: add --waiting");
            let rows = baton_store::overview::waiting(&pool.get().await?).await?;
            match json {
                true => println!("{}", serde_json::to_string_pretty(&rows)?),
                false => print!("{}", operator::listing::waiting_table(&rows, chrono::Utc::now())),
            }
        }
        HandoffCommand::Show { id } => print!("{}", operator::handoff_show(&pool, &id).await?),
        HandoffCommand::Prompt { id } => print!("{}", operator::handoff_prompt(&pool, &id).await?),
        HandoffCommand::PasteResult { id, file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?
            };
            anyhow::ensure!(!text.trim().is_empty(), "the result is empty");
            let run = operator::settle_handoff(&pool, &id, Settle::Result, text.trim()).await?;
            println!("handoff {id} completed (run {run}); the reply is on its way to the bridge");
        }
        HandoffCommand::Cancel { id, reason } => {
            operator::settle_handoff(&pool, &id, Settle::Cancel, &reason).await?;
            println!("handoff {id} cancelled; the bridge will be told");
        }
    }
    Ok(())
}

fn read_profiles(file: &std::path::Path) -> anyhow::Result<ProfilesFile> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(ProfilesFile::parse(&text)?)
}
