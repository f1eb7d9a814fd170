//! Loads history: finished runs with their invocations and events
//! (and as many raw rows), so the hot path can be measured against a big table.

use std::time::{Duration, Instant};

use baton_domain::run::journal::JournalEvent;
use baton_store::Pool;

/// Five invocations per run: a root and four handoff stages.
const PER_RUN: i64 = 5;

pub async fn load(pool: &Pool, invocations: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let n = invocations as i64;
    let runs = (n + PER_RUN - 1) / PER_RUN;
    let c = pool.get().await?;
    // Each invocation's three journal rows, as SQL literals.
    let kinds = [JournalEvent::InvocationStarted, JournalEvent::ModelResponseStored, JournalEvent::LoopFinished]
        .map(|e| format!("'{e}'"))
        .join(", ");
    let statements = [
        format!(
            "INSERT INTO runs (id, status, root_profile_id, handoff_count, final_text, created_at, finished_at)
             SELECT md5('run' || r)::uuid, 'completed', 's1', 4, 'done', now() - interval '30 days', now() - interval '30 days'
               FROM generate_series(1, {runs}) r"
        ),
        format!(
            "INSERT INTO invocations (id, run_id, parent_invocation_id, profile_id, kind, status, exit_policy, brief,
                                      handoff, claim_epoch, created_at, started_at, finished_at)
             SELECT md5('inv' || i)::uuid, md5('run' || ((i - 1) / {PER_RUN} + 1))::uuid,
                    CASE WHEN (i - 1) % {PER_RUN} = 0 THEN NULL ELSE md5('inv' || (i - 1))::uuid END,
                    's1', CASE WHEN (i - 1) % {PER_RUN} = 0 THEN 'root' ELSE 'handoff' END,
                    CASE WHEN (i - 1) % {PER_RUN} = {PER_RUN} - 1 THEN 'completed' ELSE 'transferred' END,
                    'run_finish_allowed', CASE WHEN (i - 1) % {PER_RUN} = 0 THEN '# Brief' END,
                    CASE WHEN (i - 1) % {PER_RUN} = 0 THEN NULL ELSE jsonb_build_object('objective', 'Go on.') END, 1,
                    now() - interval '30 days', now() - interval '30 days', now() - interval '30 days'
               FROM generate_series(1, {n}) i"
        ),
        format!(
            "INSERT INTO journal (run_id, invocation_id, invocations, types, payloads, created_at)
             SELECT md5('run' || ((i - 1) / {PER_RUN} + 1))::uuid, md5('inv' || i)::uuid, array_fill(NULL::uuid, ARRAY[3]),
                    ARRAY[{kinds}]::journal_event[], '[{{}},{{}},{{}}]'::json, now() - interval '30 days'
               FROM generate_series(1, {n}) i"
        ),
        format!(
            "INSERT INTO raw_items (id, chain, stage, status, claimed_by, created_at)
             SELECT md5('raw' || g)::uuid, md5('chain' || (g / 3))::uuid, g % 3 + 1, 'running', 'history', now() - interval '30 days'
               FROM generate_series(1, {n}) g"
        ),
        format!(
            "INSERT INTO raw_events (item, kind, at) SELECT md5('raw' || g)::uuid, 'started', now() - interval '30 days'
               FROM generate_series(1, {n}) g"
        ),
        "ANALYZE".to_string(),
        // Flush the load now, so its writes do not land in the measurement.
        "CHECKPOINT".to_string(),
    ];
    for sql in statements {
        c.batch_execute(&sql).await?;
    }
    Ok(started.elapsed())
}
