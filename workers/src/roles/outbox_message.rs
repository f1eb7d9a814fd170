//! An outbox row made ready for the broker: its queue, its bytes within
//! `BATON_MAX_MESSAGE_BYTES` (a bridge message cut, anything else refused),
//! and its `publish` span in the trace of the span that wrote it. The relay
//! and the in-process publisher ([`crate::roles::publish_after_commit`]) prepare rows alike.

use baton_bus::Outgoing;
use baton_domain::protocol::outgoing::{self as bound, Verdict};
use baton_store::outbox::{Message, Row};

use crate::config::Settings;

/// One row made ready to publish.
pub(super) struct Prepared {
    pub(super) queue: String,
    /// The bytes to send: the body, or the body cut to the bound.
    pub(super) body: Vec<u8>,
    /// The body's size when it had to be cut.
    pub(super) cut_from: Option<usize>,
    /// Why the row can never be published, decided before the broker sees it.
    pub(super) refused: Option<String>,
    /// The `publish` span (a child of the span that wrote the row) and the
    /// `traceparent`/`tracestate` headers naming it; none for an untraced row.
    pub(super) trace: Option<(tracing::Span, Vec<(&'static str, String)>)>,
}

impl Prepared {
    /// Opens the row's `publish` span in the row's trace, if it has one.
    pub(super) fn traced(mut self, row: &Row) -> Self {
        let Some((parent, state)) = row.trace.clone() else {
            return self;
        };
        let m = &row.message;
        let handoff = m.correlation_id.as_deref().unwrap_or_default();
        let span = tracing::info_span!("publish", queue = %m.queue, handoff_id = %handoff, outbox_row = row.id);
        crate::telemetry::continue_trace(&span, Some(parent), state);
        let headers = span.in_scope(crate::telemetry::current_trace).map(|(parent, state)| {
            let mut headers = vec![("traceparent", parent)];
            headers.extend(state.map(|s| ("tracestate", s)));
            headers
        });
        self.trace = Some((span, headers.unwrap_or_default()));
        self
    }

    /// Sent as it was written: not cut, not refused.
    pub(super) fn is_plain(&self) -> bool {
        self.cut_from.is_none() && self.refused.is_none()
    }
}

/// The queue and the bytes to send, within the bound.
pub(super) fn prepare(settings: &Settings, m: &Message) -> anyhow::Result<Prepared> {
    let queue = if m.external { m.queue.clone() } else { settings.queues().prefixed(&m.queue) };
    let max = settings.max_message_bytes;
    let body = serde_json::to_vec(&m.body)?;
    let size = body.len();
    let mut prepared = Prepared { queue, body, cut_from: None, refused: None, trace: None };
    match bound::verdict(size, max, bound::is_bridge_message(&m.body)) {
        Verdict::Send => {}
        Verdict::Cut => {
            let cut = bound::fit_sized(&m.body, size, max, bound::language_of(&m.body));
            prepared.body = serde_json::to_vec(cut.as_ref().unwrap_or(&m.body))?;
            prepared.cut_from = Some(size);
        }
        Verdict::TooBig => {
            prepared.refused =
                Some(format!("the message is {size} bytes, over the limit of {max} (BATON_MAX_MESSAGE_BYTES)"));
        }
    }
    Ok(prepared)
}

pub(super) fn outgoing<'a>(m: &'a Message, p: &'a Prepared) -> Outgoing<'a> {
    Outgoing {
        queue: &p.queue,
        body: &p.body,
        headers: p.trace.as_ref().map(|(_, headers)| headers.clone()).unwrap_or_default(),
        message_id: m.message_id.as_deref(),
        // A bridge message goes out correlated by the bridge's own id (with
        // `[[bridges]]` the fleet's key is `<bridge>:<id>`).
        correlation_id: m.body["handoffId"].as_str().or(m.correlation_id.as_deref()),
        mandatory: m.mandatory,
        ..Default::default()
    }
}
