//! `baton dead list | replay | discard`: what is in `baton.dead`, on the
//! command line (the bus's [`baton_bus::dead`] does the work).

use std::fmt::Write;

use baton_bus::dead::{self, Acted, DeadLetter, ReplyQueues, Rule, Select};
use baton_bus::{Connection, Queues};
use serde_json::Value;

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
    /// Replay those a replay can help (`Rule::Forced`, `--force`: any that
    /// may go where it names).
    Replay(Rule),
    Discard,
}

/// Replays or discards one dead letter (`id`) or all of them (`None`), of
/// `queue` only when given.
pub async fn act(settings: &Settings, action: Action, id: Option<&str>, queue: Option<&str>) -> anyhow::Result<Acted> {
    let conn = connect(settings).await?;
    let select = id.map_or(Select::All, Select::Id);
    let acted = match action {
        Action::Replay(rule) => match settings.db_pool("operator") {
            Ok(pool) => replay(&conn, &pool, &settings.queues(), select, queue, rule).await,
            Err(e) => Err(e.into()),
        },
        Action::Discard => dead::discard(&conn, &settings.queues(), select, queue).await.map_err(Into::into),
    };
    conn.close("done").await;
    acted
}

/// Replays the selected dead letters that `rule` takes (see
/// [`dead::replayable`]): to the fleet's own queues, or to a bridge's queue
/// that a stored request named as its `reply_to` (asked of Postgres), never
/// anywhere else a letter's headers say.
pub async fn replay(
    conn: &Connection,
    pool: &baton_store::Pool,
    queues: &Queues,
    select: Select<'_>,
    queue: Option<&str>,
    rule: Rule,
) -> anyhow::Result<Acted> {
    Ok(dead::replay(conn, queues, select, queue, &Stored(pool), rule).await?)
}

/// The reply queues of the requests stored in Postgres.
struct Stored<'a>(&'a baton_store::Pool);

impl ReplyQueues for Stored<'_> {
    async fn named(&self, queue: &str) -> Result<bool, String> {
        let c = baton_store::client(self.0).await.map_err(|e| e.to_string())?;
        baton_store::console::is_reply_queue(&c, queue).await.map_err(|e| e.to_string())
    }
}
/// Lines of a body `baton dead list` shows at most (`--json` has it all).
const BODY_LINES: usize = 80;

/// The dead letters, one block each: its id, where it came from, its whole
/// reason and its body made readable (a JSON body decoded and indented).
pub fn table(letters: &[DeadLetter]) -> String {
    if letters.is_empty() {
        return "(baton.dead is empty)\n".into();
    }
    let mut out = String::new();
    for l in letters {
        let queue = l.source_queue.as_deref().unwrap_or("an unrecorded queue");
        let id = l.message_id.as_deref().map(|m| format!(", message id {m}")).unwrap_or_default();
        let _ = writeln!(out, "{}  from {queue} ({} bytes{id})", l.id, l.body_bytes);
        let _ = writeln!(out, "  reason: {}", l.reason);
        out.push_str("  body:\n");
        let body = readable(&l.body_preview);
        let lines: Vec<&str> = body.lines().collect();
        for line in lines.iter().take(BODY_LINES) {
            let _ = writeln!(out, "    {line}");
        }
        let cut =
            l.body_preview.chars().count() < l.body_bytes && serde_json::from_str::<Value>(&l.body_preview).is_err();
        if lines.len() > BODY_LINES || cut {
            out.push_str("    … (the rest: `baton dead list --json`)\n");
        }
        out.push('\n');
    }
    let _ = writeln!(out, "{} dead letter(s); `baton dead replay ID` sends one back to its queue.", letters.len());
    out
}

/// A body for people: JSON decoded and indented (its strings as text, not
/// escapes), anything else as text with its control characters escaped.
fn readable(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_else(|_| body.to_string()),
        Err(_) => body
            .chars()
            .map(|c| match c {
                '\n' | '\t' => c.to_string(),
                c if c.is_control() => c.escape_default().to_string(),
                c => c.to_string(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(reason: &str, body: &str) -> DeadLetter {
        DeadLetter {
            id: "0123456789abcdef".into(),
            reason: reason.into(),
            source_queue: Some("baton.bridge.requests".into()),
            replay_queue: None,
            message_id: Some("req-1".into()),
            correlation_id: None,
            body_preview: body.into(),
            body_bytes: body.len(),
            headers: vec![],
            dead_at_ms: None,
        }
    }

    #[test]
    fn a_dead_letter_shows_its_whole_reason_and_its_json_body_decoded() {
        let reason = "invalid request: missing field `userIntent` at line 1 column 200, and the rest of a long reason";
        let text = table(&[letter(reason, r#"{"id":"req-1","text":"周五晚上\n维护"}"#)]);
        assert!(text.contains(&format!("  reason: {reason}")), "{text}");
        assert!(text.contains(r#"    "text": "周五晚上\n维护""#), "decoded, not bytes or \\u escapes:\n{text}");
        assert!(text.contains("from baton.bridge.requests") && text.contains("message id req-1"), "{text}");
    }

    #[test]
    fn a_body_that_is_not_json_is_shown_as_text() {
        assert_eq!(readable("not a run 1"), "not a run 1");
        assert_eq!(readable("a\u{7}b\nc"), "a\\u{7}b\nc");
    }
}
