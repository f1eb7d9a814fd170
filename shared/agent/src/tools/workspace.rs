//! `workspace_*`: the shared run workspace, stored in Postgres.

use baton_domain::error::codes;
use baton_domain::journal;
use baton_domain::tool_args::{self, FinishArgs};
use baton_domain::workspace::{self as ws, CommitArgs, CommitMode, ListArgs, PatchArgs, ReadArgs, ReadWindow, WriteArgs};
use baton_domain::ToolError;
use baton_store::journal::Event;
use baton_store::workspace::{self as store, NewCommit};
use baton_store::{lifecycle, GenericClient};
use serde_json::{json, Value};

use super::{tool_event, Effect, ToolCtx, ToolOutcome, ToolResult};

pub async fn list(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let checked = tool_args::parse::<ListArgs>(args).and_then(|a| Ok((ws::list_prefix(a.path.as_deref())?, a.depth)));
    let (prefix, depth) = match checked {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let depth = depth.unwrap_or(2).clamp(1, 4) as usize;
    let files = store::list(c, ctx.invocation.run_id).await?;
    let text = ws::render_listing(&files, &prefix, depth);
    Ok(Ok(ToolOutcome::ok(ctx, text, json!({"count": files.len()}))))
}

/// Loads a visible file, or says why it cannot be read.
async fn load(c: &impl GenericClient, ctx: &ToolCtx<'_>, path: &str) -> Result<Result<store::File, ToolError>, crate::Error> {
    let run = ctx.invocation.run_id;
    if let Some(file) = store::read(c, run, path).await? {
        return Ok(Ok(file));
    }
    if store::is_folder(c, run, path).await? {
        return Ok(Err(ToolError::new(codes::PATH_IS_DIRECTORY, format!("`{path}` is a folder; use workspace_list."))));
    }
    Ok(Err(ToolError::new(codes::FILE_NOT_FOUND, format!("`{path}` does not exist yet."))))
}

pub async fn read(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let checked = tool_args::parse::<ReadArgs>(args).and_then(|a| Ok((ws::visible_path(&a.path)?, ReadWindow::from_args(&a)?)));
    let (path, window) = match checked {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let file = match load(c, ctx, &path).await? {
        Ok(f) => f,
        Err(e) => return Ok(Err(e)),
    };
    let text = match ws::render_read(&path, &file.content, window) {
        Ok(t) => t,
        Err(e) => return Ok(Err(e)),
    };
    store::mark_read(c, ctx.invocation.id, &path, &file.sha256, window.is_whole()).await?;
    Ok(Ok(ToolOutcome::ok(ctx, text, json!({"path": path, "sha256": file.sha256}))))
}

/// Replacing or patching a file needs a read of its current version first,
/// so an agent never overwrites what it has not seen.
async fn check_read(
    c: &impl GenericClient,
    ctx: &ToolCtx<'_>,
    path: &str,
    file: &store::File,
    (missing, stale): (&'static str, &'static str),
) -> Result<Result<(), ToolError>, crate::Error> {
    Ok(match store::read_mark(c, ctx.invocation.id, path).await? {
        None => Err(ToolError::new(missing, format!("Read `{path}` before changing it."))),
        Some((sha, _)) if sha != file.sha256 => {
            Err(ToolError::new(stale, format!("`{path}` changed since you read it; read it again first.")))
        }
        Some(_) => Ok(()),
    })
}

pub async fn write(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let parsed = tool_args::parse::<WriteArgs>(args)
        .and_then(|a| Ok((ws::visible_path(&a.path)?, a.content, a.mode == Some(CommitMode::Append))));
    let (path, content, append) = match parsed {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let run = ctx.invocation.run_id;
    let existing = store::read(c, run, &path).await?;
    if let (Some(file), false) = (&existing, append) {
        if let Err(e) = check_read(c, ctx, &path, file, (codes::WRITE_REQUIRES_READ, codes::WRITE_STALE_FILE)).await? {
            return Ok(Err(e));
        }
    }
    let new_content = match (&existing, append) {
        (Some(file), true) => format!("{}{content}", file.content),
        _ => content,
    };
    let sha = ws::sha256_hex(&new_content);
    store::write(c, run, &path, &new_content, &sha).await?;
    store::mark_read(c, ctx.invocation.id, &path, &sha, true).await?;
    let bytes = new_content.len();
    let event = tool_event(ctx, journal::WORKSPACE_FILE_WRITTEN, json!({"path": path, "bytes": bytes}));
    let outcome = ToolOutcome::ok(ctx, format!("Wrote {path} ({bytes} bytes)."), json!({"path": path, "sha256": sha}));
    Ok(Ok(outcome.with_event(event)))
}

pub async fn patch(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let parsed = tool_args::parse::<PatchArgs>(args)
        .and_then(|a| Ok((ws::visible_path(&a.path)?, a.old_string, a.new_string, a.replace_all.unwrap_or(false))));
    let (path, old, new, replace_all) = match parsed {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let file = match load(c, ctx, &path).await? {
        Ok(f) => f,
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = check_read(c, ctx, &path, &file, (codes::PATCH_REQUIRES_READ, codes::PATCH_STALE_FILE)).await? {
        return Ok(Err(e));
    }
    let patched = match ws::apply_patch(&file.content, &old, &new, replace_all) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let sha = ws::sha256_hex(&patched);
    store::write(c, ctx.invocation.run_id, &path, &patched, &sha).await?;
    store::mark_read(c, ctx.invocation.id, &path, &sha, true).await?;
    let event = tool_event(ctx, journal::WORKSPACE_PATCH_APPLIED, json!({"path": path}));
    Ok(Ok(ToolOutcome::ok(ctx, format!("Patched {path}."), json!({"path": path, "sha256": sha})).with_event(event)))
}

pub async fn commit(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let parsed = CommitArgs::parse(args)
        .and_then(|a| Ok((ws::visible_path(a.path.as_deref().unwrap_or(ws::DEFAULT_BODY_PATH))?, a.mode.unwrap_or_default(), a.reason)));
    let (path, mode, reason) = match parsed {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let file = match load(c, ctx, &path).await? {
        Ok(f) => f,
        Err(e) => return Ok(Err(e)),
    };
    if file.content.trim().is_empty() {
        return Ok(Err(ToolError::new(codes::REQUIRED_ARTIFACT_EMPTY, format!("`{path}` is empty; write the reply first."))));
    }
    let run = ctx.invocation.run_id;
    let previous = store::latest_reply(c, run).await?;
    let reply = mode.apply(previous.as_deref(), &file.content);
    let new = NewCommit {
        run_id: run,
        invocation_id: ctx.invocation.id,
        tool_call_id: &ctx.call.id,
        path: &path,
        mode: mode.as_str(),
        reason: reason.as_deref(),
        reply: &reply,
    };
    let ordinal = store::commit(c, &new).await?;
    baton_store::runs::set_final_text(c, run, &reply).await?;
    let event = tool_event(ctx, journal::CHAT_COMMIT_COMPLETED, json!({"path": path, "mode": mode.as_str(), "ordinal": ordinal}));
    let text = format!("Committed {path} as the reply. You may edit and commit again; close with workspace_finish.");
    Ok(Ok(ToolOutcome::ok(ctx, text, json!({"ordinal": ordinal, "path": path})).with_event(event)))
}

pub async fn finish(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    // The reason is for the journal's readers only; it must still be well-formed.
    if let Err(e) = tool_args::parse::<FinishArgs>(args) {
        return Ok(Err(e));
    }
    if store::latest_reply(c, ctx.invocation.run_id).await?.is_none() {
        return Ok(Err(ToolError::new(
            codes::FOREGROUND_COMMIT_REQUIRED,
            "Nothing has been committed yet: write the reply, call workspace_commit, then finish.",
        )));
    }
    let mut events: Vec<Event> = vec![tool_event(ctx, journal::TOOL_CALL_COMPLETED, json!({}))];
    events.extend(lifecycle::complete_run(c, ctx.invocation).await?);
    Ok(Ok(ToolOutcome {
        content: "Finished. Your committed reply will be sent to the user.".into(),
        is_error: false,
        structured: json!({"finished": true}),
        effect: Effect::Finished,
        events,
    }))
}
