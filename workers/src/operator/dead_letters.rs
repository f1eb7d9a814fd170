//! `baton dead list | replay | discard`: what is in `baton.dead`, on the
//! command line (the bus's [`baton_bus::dead`] does the work).

use std::fmt::Write;

use baton_bus::dead::{self, Acted, DeadLetter, ReplyQueues, Select};
use baton_bus::{Connection, Queues};

use crate::config::Settings;

/// How many dead letters `baton dead list` shows at most.
pub const LIST_LIMIT: usize = 1000;

/// A connection for one operator command, named so in the management UI.
pub async fn connect(settings: &Settings) -> anyhow::Result<Connection> {
    open(settings, "baton-operator").await
}

/// A connection named `name`. Its error says what is wrong (the bus tells
/// a broker that is down from a refused login or an unknown vhost); only a
/// broker that is not reachable gets the hint to start it.
pub async fn open(settings: &Settings, name: &str) -> anyhow::Result<Connection> {
    Connection::open(&settings.amqp_url, name).await.map_err(|e| {
        let down = matches!(e.connect_failure(), Some(baton_bus::ConnectFailure::Unreachable));
        let hint = "Start it (on this machine: `rabbitmq-server -detached`) or set AMQP_URL.";
        match down {
            true => anyhow::anyhow!("{e}. {hint}"),
            false => anyhow::Error::new(e),
        }
    })
}

pub async fn list(settings: &Settings) -> anyhow::Result<Vec<DeadLetter>> {
    let conn = connect(settings).await?;
    let letters = dead::list(&conn, &settings.queues(), LIST_LIMIT).await;
    conn.close("listed").await;
    Ok(letters?)
}

/// What an operator asks of dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Replay,
    Discard,
}

/// Replays or discards one dead letter (`id`) or all of them (`None`), of
/// `queue` only when given.
pub async fn act(settings: &Settings, action: Action, id: Option<&str>, queue: Option<&str>) -> anyhow::Result<Acted> {
    let conn = connect(settings).await?;
    let select = id.map_or(Select::All, Select::Id);
    let acted = match action {
        Action::Replay => match settings.db_pool("operator") {
            Ok(pool) => replay(&conn, &pool, &settings.queues(), select, queue).await,
            Err(e) => Err(e.into()),
        },
        Action::Discard => dead::discard(&conn, &settings.queues(), select, queue).await.map_err(Into::into),
    };
    conn.close("done").await;
    acted
}

/// Replays the selected dead letters: to the fleet's own queues, or to a
/// bridge's queue that a stored request named as its `reply_to` (asked of
/// Postgres), never anywhere else a letter's headers say.
pub async fn replay(
    conn: &Connection,
    pool: &baton_store::Pool,
    queues: &Queues,
    select: Select<'_>,
    queue: Option<&str>,
) -> anyhow::Result<Acted> {
    Ok(dead::replay(conn, queues, select, queue, &Stored(pool)).await?)
}

/// The reply queues of the requests stored in Postgres.
struct Stored<'a>(&'a baton_store::Pool);

impl ReplyQueues for Stored<'_> {
    async fn named(&self, queue: &str) -> Result<bool, String> {
        let c = baton_store::client(self.0).await.map_err(|e| e.to_string())?;
        baton_store::console::is_reply_queue(&c, queue).await.map_err(|e| e.to_string())
    }
}
/// The dead letters as a table: id, source queue, reason, a body excerpt.
pub fn table(letters: &[DeadLetter]) -> String {
    if letters.is_empty() {
        return "(baton.dead is empty)\n".into();
    }
    let mut out = format!("{:<16}  {:<28}  {:<40}  {}\n", "id", "queue", "reason", "body");
    for l in letters {
        let queue = l.source_queue.as_deref().unwrap_or("-");
        let body: String = l.body_preview.replace(['\n', '\r'], " ").chars().take(60).collect();
        let reason: String = l.reason.chars().take(40).collect();
        let _ = writeln!(out, "{:<16}  {:<28}  {:<40}  {}", l.id, queue, reason, body.escape_debug());
    }
    let _ = writeln!(out, "\n{} dead letter(s); `baton dead replay ID` sends one back to its queue.", letters.len());
    out
}
