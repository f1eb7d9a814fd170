//! `baton`: config → telemetry → the command asked for.

use anyhow::Context;
use baton::config::Settings;
use baton::fleet::Fleet;
use baton::roles::Role;
use baton_domain::profiles::ProfilesFile;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "baton", version, about = "A RabbitMQ + Postgres worker fleet for multi-agent handoffs from chat bridges")]
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
}

#[derive(Subcommand)]
enum HandoffCommand {
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
    /// Validate a profiles file and say what each profile still needs.
    Check { file: std::path::PathBuf },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Print a run's timeline across agents.
    Show { run: uuid::Uuid },
    /// Delete finished runs older than N days with everything they own
    /// (the bridge requests and their events stay).
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let quiet = matches!(cli.command, Command::Demo(_));
    baton::telemetry::init(if quiet { "warn" } else { "info" });
    let settings = Settings::from_env()?;
    match cli.command {
        Command::Migrate => {
            let applied = baton::demo::prepare_database(&settings).await?;
            println!("database ready ({applied} migration(s) applied)");
        }
        Command::Profiles { command } => profiles(&settings, command).await?,
        Command::Up { role } => up(&settings, role).await?,
        Command::Demo(args) => baton::demo::run(&settings, args).await?,
        Command::Runs { command } => runs(&settings, command).await?,
        Command::Handoff { command } => handoff(&settings, command).await?,
    }
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
            for p in read_profiles(&file)?.profiles {
                println!("{:<16} {:<9} {}", p.id, p.model.provider_name(), readiness(&p));
            }
        }
    }
    Ok(())
}

/// What `profiles check` says of one profile: ready, or what it still needs.
fn readiness(p: &baton_domain::profiles::Profile) -> String {
    let mut missing: Vec<String> = p.model.missing_configuration().iter().map(|m| m.to_string()).collect();
    if let baton_domain::profiles::ModelBinding::Openai { api_key_env: Some(var), .. } = &p.model {
        if std::env::var(var).is_err() {
            missing.push(format!("environment variable {var}"));
        }
    }
    match (missing.is_empty(), p.model.unavailable()) {
        (false, _) => format!("requires configuration: {}", missing.join(", ")),
        (true, Some(why)) => format!("not runnable: {why}"),
        (true, None) => "ready".to_string(),
    }
}

/// Runs the roles once the database's schema is this binary's; a signal
/// while it waits for the database ends it quietly.
async fn up(settings: &Settings, role: Vec<Role>) -> anyhow::Result<()> {
    if role.is_empty() || role.contains(&Role::Admin) {
        baton::console::check_bind(settings)?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        checked = baton::startup::check_schema(settings) => checked?,
        _ = term.recv() => return Ok(()),
        _ = tokio::signal::ctrl_c() => return Ok(()),
    }
    let roles = if role.is_empty() { Role::UP.to_vec() } else { role };
    tracing::info!(roles = ?roles.iter().map(|r| r.name()).collect::<Vec<_>>(), "starting");
    Fleet::start(settings, &roles).run_until_signalled().await
}

async fn runs(settings: &Settings, command: RunsCommand) -> anyhow::Result<()> {
    let pool = baton_store::pool(&settings.database_url, 1)?;
    match command {
        RunsCommand::Show { run } => {
            let c = pool.get().await?;
            let events = baton_store::journal::timeline(&c, run).await?;
            print!("{}", baton::timeline::render(&events));
            println!("tokens used: {}", baton_store::runs::tokens_used(&c, run).await?);
            if let Some(spend) = baton_store::budgets::get(&c, run).await? {
                println!("{}", baton::timeline::render_spend(&spend));
            }
        }
        RunsCommand::Prune { older_than_days, batch } => {
            anyhow::ensure!(older_than_days >= 0.0, "--older-than-days must not be negative");
            let age = std::time::Duration::from_secs_f64(older_than_days * 86_400.0);
            let n = baton::operator::prune_runs(&pool, age, batch.max(1)).await?;
            println!("pruned {n} finished run(s)");
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

async fn handoff(settings: &Settings, command: HandoffCommand) -> anyhow::Result<()> {
    use baton::operator::{self, Settle};
    let pool = baton_store::pool(&settings.database_url, 1)?;
    match command {
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
