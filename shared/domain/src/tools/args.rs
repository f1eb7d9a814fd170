//! One definition per tool's arguments. Serde parses a call's arguments into
//! the type and schemars derives from the same type the JSON Schema the model
//! is shown, so what a model is told and what the host accepts cannot drift.
//! The type's doc comment is the tool's description, each field's doc comment
//! its property's: all of it is agent-facing text.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::error::ToolError;

/// Parses a call's arguments into `T`. A mismatch is the agent's own mistake:
/// a recoverable error naming the field, in the words serde gives.
pub fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, ToolError> {
    // A model that sends no arguments at all means "none": the same as `{}`.
    let args = if args.is_null() { &Value::Object(Default::default()) } else { args };
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        ToolError::invalid_arguments(explain(&path, &e.into_inner().to_string()))
    })
}

/// "`handoff.objective` is required." rather than "handoff: missing field `objective`".
fn explain(path: &str, error: &str) -> String {
    let inner = |name: &str| if path == "." { name.to_string() } else { format!("{path}.{name}") };
    if error.contains("expected struct") {
        return if path == "." {
            "Your arguments must be an object with this tool's properties.".to_string()
        } else {
            format!("`{path}` must be an object.")
        };
    }
    // Rust's names for numbers mean nothing to an agent.
    let error = error.replace("expected u64", "expected a whole number of at least 0");
    match error.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`')) {
        Some(field) => format!("`{}` is required.", inner(field)),
        None if path == "." => format!("Your arguments do not fit this tool: {error}."),
        None => format!("`{path}` is not valid: {error}."),
    }
}

/// The JSON Schema of `T` as an OpenAI function's `parameters`: inline, without
/// `$schema`, titles or formats, optional fields simply left out of `required`.
pub fn schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    plain(&mut value);
    value
}

/// Splits a schema into the tool's description (the type's doc comment) and its parameters.
pub fn description_and_parameters<T: JsonSchema>() -> (String, Value) {
    let mut parameters = schema::<T>();
    let description = match parameters.as_object_mut().and_then(|o| o.remove("description")) {
        Some(Value::String(d)) => d,
        _ => String::new(),
    };
    (description, parameters)
}

/// Strips what a model does not need and some providers refuse: titles,
/// number formats, defaults, the `null` that `Option` adds (leaving a field
/// out is how an agent says "none") and `true` as a schema.
fn plain(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    for key in ["title", "format", "default", "$schema"] {
        map.remove(key);
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(mut options)) = map.remove("anyOf") {
        options.retain(|o| o.get("type").is_none_or(|t| t != "null"));
        if let [Value::Object(only)] = options.as_mut_slice() {
            for (k, v) in std::mem::take(only) {
                map.entry(k).or_insert(v);
            }
        } else {
            map.insert("anyOf".into(), Value::Array(options));
        }
    }
    if map.get("items") == Some(&Value::Bool(true)) {
        map.insert("items".into(), Value::Object(Default::default()));
    }
    // Recurse into subschemas only: the keys of `properties` are field names, not keywords.
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(plain);
    }
    for key in ["items", "additionalProperties"] {
        map.get_mut(key).into_iter().for_each(plain);
    }
    if let Some(Value::Array(options)) = map.get_mut("anyOf") {
        options.iter_mut().for_each(plain);
    }
}

/// List the agents you can hand work to. Use purpose "handoff" to find who can take over the next stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentListArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<ListPurpose>,
    /// Words to look for in an agent's id, name or description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ListPurpose {
    Any,
    Delegate,
    Handoff,
}

/// Finish the work. The reply you committed is sent to the user. Commit at least once before finishing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FinishArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Ask the user a question and wait for the answer. Ask before any action the request says needs the user's
/// confirmation, or when the request is too unclear to act on. Ask one short, clear question in the user's language.
/// The user's answer comes back as this tool's result; if the user does not answer in time, the result says so and
/// you decide how to go on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AskUserArgs {
    /// The question, as the user will read it.
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// Up to six short answers the user can pick from (the user may still answer in their own words).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 6))]
    pub options: Vec<String>,
}

/// The longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2000;
/// The most answers a question may offer, and the longest of them in characters.
pub const MAX_OPTIONS: usize = 6;
pub const MAX_OPTION_CHARS: usize = 100;

impl AskUserArgs {
    /// Parses and checks a call's arguments: a question that is not empty
    /// and not too long, at most six short options.
    pub fn parse(args: &Value) -> Result<Self, ToolError> {
        let mut call: Self = parse(args)?;
        call.question = call.question.trim().to_string();
        call.options = call.options.iter().map(|o| o.trim().to_string()).filter(|o| !o.is_empty()).collect();
        if call.question.is_empty() {
            return Err(ToolError::invalid_arguments("`question` must not be empty."));
        }
        if call.question.chars().count() > MAX_QUESTION_CHARS {
            return Err(ToolError::invalid_arguments(format!(
                "`question` is too long: keep it under {MAX_QUESTION_CHARS} characters."
            )));
        }
        if call.options.len() > MAX_OPTIONS {
            return Err(ToolError::invalid_arguments(format!("`options` may list at most {MAX_OPTIONS} answers.")));
        }
        if call.options.iter().any(|o| o.chars().count() > MAX_OPTION_CHARS) {
            return Err(ToolError::invalid_arguments(format!(
                "Each of `options` must be short: at most {MAX_OPTION_CHARS} characters."
            )));
        }
        Ok(call)
    }
}
