//! `workspace_*`: the shared run workspace, stored in Postgres.

use baton_domain::run::journal::JournalEvent;
use baton_domain::tools::args::{self, FinishArgs};
use baton_domain::tools::error::codes;
use baton_domain::tools::workspace::{
    self as ws, CommitArgs, CommitMode, ListArgs, PatchArgs, ReadArgs, ReadWindow, WriteArgs,
};
use baton_domain::ToolError;
use baton_store::journal::Event;
use baton_store::runs::workspace::{self as store, NewCommit};
use baton_store::{runs::ending, GenericClient};
use serde_json::{json, Value};

use super::{tool_event, Effect, ToolCtx, ToolOutcome, ToolResult};

pub async fn list(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = args::parse::<ListArgs>(args)?;
    let prefix = ws::list_prefix(args.path.as_deref())?;
    let depth = args.depth.unwrap_or(2).clamp(1, 4) as usize;
    let files = store::list(c, ctx.invocation.run_id).await?;
    let text = ws::render_listing(&files, &prefix, depth);
    Ok(ToolOutcome::ok(ctx, text, json!({"count": files.len()})))
}

/// What a step's transaction wrote to the run's workspace through these
/// tools: the files (as stored: the transaction holds their rows, so no
/// other writer's version can be read before it commits) and whether it
/// committed a reply. A later call of the same turn reads them from here
/// (a reply's usual `workspace_write`, `workspace_commit`,
/// `workspace_finish`: two reads fewer). `task_return`'s own writes end the
/// invocation, so no call of its step reads after them.
#[derive(Default)]
pub struct StepWorkspace {
    files: std::sync::Mutex<std::collections::HashMap<String, store::File>>,
    committed: std::sync::atomic::AtomicBool,
}

impl StepWorkspace {
    fn wrote(&self, path: &str, file: store::File) {
        self.files.lock().expect("not poisoned").insert(path.to_string(), file);
    }

    fn file(&self, path: &str) -> Option<store::File> {
        self.files.lock().expect("not poisoned").get(path).cloned()
    }
}

/// The file as stored: what this step wrote, else read.
async fn current(c: &impl GenericClient, ctx: &ToolCtx<'_>, path: &str) -> ToolResult<Option<store::File>> {
    match ctx.workspace.file(path) {
        Some(file) => Ok(Some(file)),
        None => Ok(store::read(c, ctx.invocation.run_id, path).await?),
    }
}

/// Loads a visible file, or says why it cannot be read.
async fn load(c: &impl GenericClient, ctx: &ToolCtx<'_>, path: &str) -> ToolResult<store::File> {
    let run = ctx.invocation.run_id;
    if let Some(file) = current(c, ctx, path).await? {
        return Ok(file);
    }
    if store::is_folder(c, run, path).await? {
        return Err(
            ToolError::new(codes::PATH_IS_DIRECTORY, format!("`{path}` is a folder; use workspace_list.")).into()
        );
    }
    Err(ToolError::new(codes::FILE_NOT_FOUND, format!("`{path}` does not exist yet.")).into())
}

pub async fn read(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = args::parse::<ReadArgs>(args)?;
    let (path, window) = (ws::visible_path(&args.path)?, ReadWindow::from_args(&args)?);
    let file = load(c, ctx, &path).await?;
    let text = ws::render_read(&path, &file.content, window)?;
    store::mark_read(c, ctx.invocation.id, &path, &file.sha256, window.is_whole()).await?;
    Ok(ToolOutcome::ok(ctx, text, json!({"path": path, "sha256": file.sha256})))
}

/// Replacing or patching a file needs a read of its current version first,
/// so an agent never overwrites what it has not seen.
async fn check_read(
    c: &impl GenericClient,
    ctx: &ToolCtx<'_>,
    path: &str,
    file: &store::File,
    (missing, stale): (&'static str, &'static str),
) -> ToolResult<()> {
    // Its own write is a read of the version it wrote.
    if file.written_by == Some(ctx.invocation.id) {
        return Ok(());
    }
    match store::read_mark(c, ctx.invocation.id, path).await? {
        None => Err(ToolError::new(missing, format!("Read `{path}` before changing it.")).into()),
        Some((sha, _)) if sha != file.sha256 => {
            Err(ToolError::new(stale, format!("`{path}` changed since you read it; read it again first.")).into())
        }
        Some(_) => Ok(()),
    }
}

pub async fn write(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = args::parse::<WriteArgs>(args)?;
    let (path, content, append) = (ws::visible_path(&args.path)?, args.content, args.mode == Some(CommitMode::Append));
    let run = ctx.invocation.run_id;
    // A file this step has not written is made at once if it is new (either
    // mode then writes `content`), else read, in one statement.
    let (existing, created) = match ctx.workspace.file(&path) {
        Some(file) => (Some(file), false),
        None => {
            let sha = ws::sha256_hex(&content);
            match store::create_or_read(c, run, &path, (&content, &sha), Some(ctx.invocation.id)).await? {
                store::Created::Created => (None, true),
                store::Created::Exists(file) => (Some(file), false),
                store::Created::Raced => (store::read(c, run, &path).await?, false),
            }
        }
    };
    if let (Some(file), false) = (&existing, append) {
        check_read(c, ctx, &path, file, (codes::WRITE_REQUIRES_READ, codes::WRITE_STALE_FILE)).await?;
    }
    let new_content = match (&existing, append) {
        (Some(file), true) => format!("{}{content}", file.content),
        _ => content,
    };
    let sha = ws::sha256_hex(&new_content);
    if !created {
        store::write(c, run, &path, (&new_content, &sha), Some(ctx.invocation.id)).await?;
    }
    let bytes = new_content.len();
    let written = store::File { content: new_content, sha256: sha.clone(), written_by: Some(ctx.invocation.id) };
    ctx.workspace.wrote(&path, written);
    let event = tool_event(ctx, JournalEvent::WorkspaceFileWritten, json!({"path": path, "bytes": bytes}));
    let outcome = ToolOutcome::ok(ctx, format!("Wrote {path} ({bytes} bytes)."), json!({"path": path, "sha256": sha}));
    Ok(outcome.with_event(event))
}

pub async fn patch(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = args::parse::<PatchArgs>(args)?;
    let path = ws::visible_path(&args.path)?;
    let file = load(c, ctx, &path).await?;
    check_read(c, ctx, &path, &file, (codes::PATCH_REQUIRES_READ, codes::PATCH_STALE_FILE)).await?;
    let patched =
        ws::apply_patch(&file.content, &args.old_string, &args.new_string, args.replace_all.unwrap_or(false))?;
    let sha = ws::sha256_hex(&patched);
    store::write(c, ctx.invocation.run_id, &path, (&patched, &sha), Some(ctx.invocation.id)).await?;
    let written = store::File { content: patched, sha256: sha.clone(), written_by: Some(ctx.invocation.id) };
    ctx.workspace.wrote(&path, written);
    let event = tool_event(ctx, JournalEvent::WorkspacePatchApplied, json!({"path": path}));
    Ok(ToolOutcome::ok(ctx, format!("Patched {path}."), json!({"path": path, "sha256": sha})).with_event(event))
}

pub async fn commit(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = CommitArgs::parse(args)?;
    let path = ws::visible_path(args.path.as_deref().unwrap_or(ws::DEFAULT_BODY_PATH))?;
    let (mode, reason) = (args.mode.unwrap_or_default(), args.reason);
    let file = load(c, ctx, &path).await?;
    if file.content.trim().is_empty() {
        return Err(ToolError::new(
            codes::REQUIRED_ARTIFACT_EMPTY,
            format!("`{path}` is empty; write the reply first."),
        )
        .into());
    }
    let run = ctx.invocation.run_id;
    // Only an append reads the reply before it.
    let previous = match mode {
        CommitMode::Append => store::latest_reply(c, run).await?,
        CommitMode::Replace => None,
    };
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
    // The run's final text is its newest commit's reply, taken when it ends.
    let ordinal = store::commit(c, &new).await?;
    ctx.workspace.committed.store(true, std::sync::atomic::Ordering::Relaxed);
    let event = tool_event(
        ctx,
        JournalEvent::ChatCommitCompleted,
        json!({"path": path, "mode": mode.as_str(), "ordinal": ordinal}),
    );
    let text = format!("Committed {path} as the reply. You may edit and commit again; close with workspace_finish.");
    Ok(ToolOutcome::ok(ctx, text, json!({"ordinal": ordinal, "path": path})).with_event(event))
}

pub async fn finish(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    // The reason is for the journal's readers only; it must still be well-formed.
    args::parse::<FinishArgs>(args)?;
    let committed = ctx.workspace.committed.load(std::sync::atomic::Ordering::Relaxed)
        || store::latest_reply(c, ctx.invocation.run_id).await?.is_some();
    if !committed {
        let text = "Nothing has been committed yet: write the reply, call workspace_commit, then finish.";
        return Err(ToolError::new(codes::FOREGROUND_COMMIT_REQUIRED, text).into());
    }
    let mut events: Vec<Event> = vec![tool_event(ctx, JournalEvent::ToolCallCompleted, json!({}))];
    // The step's spend (this call's result included) counts in the write
    // that ends the invocation, as a handoff's does.
    let spending = (ctx.spending.tokens, ctx.spending.model_calls, ctx.spending.tool_calls + 1);
    events.extend(ending::complete_run(c, ctx.invocation, spending, ctx.may_have_children).await?);
    Ok(ToolOutcome {
        content: "Finished. Your committed reply will be sent to the user.".into(),
        is_error: false,
        structured: json!({"finished": true}),
        effect: Effect::Completed,
        events,
    })
}
