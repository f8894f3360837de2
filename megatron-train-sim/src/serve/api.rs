//! The OpenAI-compatible request and response shapes: parsing and checking
//! a request body field by field (so that an error names its field in
//! `param`), the chat template, and the JSON of responses, stream chunks and
//! errors.
//!
//! Unknown fields are ignored, as OpenAI-compatible servers do.

use serde_json::{Map, Value, json};

/// An OpenAI-shaped error: status, `type`, `param`, `code`, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) kind: &'static str,
    pub(crate) param: Option<&'static str>,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// The 404 of a model this server does not serve (`model`, as sent).
pub(crate) fn model_not_found(model: &str, limits: &Limits) -> ApiError {
    ApiError {
        status: 404,
        kind: "invalid_request_error",
        param: Some("model"),
        code: "model_not_found",
        message: format!(
            "the model {} does not exist; this server serves {}",
            shown_text(model),
            shown_text(&limits.model_name)
        ),
    }
}

impl ApiError {
    /// 400 for an invalid field.
    pub(crate) fn invalid(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            param: Some(param),
            code: "invalid_value",
            message: message.into(),
        }
    }

    /// 400 for a body that is not a JSON object.
    pub(crate) fn malformed(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            param: None,
            code: "invalid_json",
            message: message.into(),
        }
    }

    /// The error's JSON body.
    pub(crate) fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

impl Endpoint {
    /// The route (the router's, so the HTTP server span's `http.route`).
    pub(crate) fn route(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }

    /// `gen_ai.operation.name`.
    pub(crate) fn operation(self) -> &'static str {
        match self {
            Endpoint::Completions => megatron_telemetry::inference::OPERATION_TEXT_COMPLETION,
            Endpoint::Chat => megatron_telemetry::inference::OPERATION_CHAT,
        }
    }
}

/// What the server's flags allow.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) model_name: String,
    pub(crate) max_tokens: u64,
    pub(crate) max_model_len: usize,
    /// Choices the server holds at once, running or waiting
    /// (`--max-batch-size` plus `--max-queue`): a `prompt` list longer than
    /// this could never be admitted, so it is refused (400), not queued
    /// (429 is for a queue that can drain).
    pub(crate) max_choices: usize,
}

/// `max_tokens` when the request gives none (OpenAI's default for
/// completions), bounded by `--max-tokens` and the room the prompt leaves.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 16;
/// At most this many stop sequences (OpenAI's limit).
const MAX_STOP_SEQUENCES: usize = 4;

/// A checked request.
#[derive(Clone, Debug)]
pub(crate) struct Generation {
    pub(crate) endpoint: Endpoint,
    /// One prompt per choice (completions may send a list).
    pub(crate) prompts: Vec<Vec<u8>>,
    pub(crate) max_tokens: u64,
    pub(crate) temperature: f32,
    pub(crate) top_p: f32,
    pub(crate) seed: Option<i64>,
    pub(crate) stop: Vec<Vec<u8>>,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
}

/// The plain chat template: one `{role}: {content}` line per message, then
/// `assistant: ` for the model to continue.
pub(crate) fn chat_prompt(messages: &[(String, String)]) -> Vec<u8> {
    let mut prompt = String::new();
    for (role, content) in messages {
        prompt.push_str(role);
        prompt.push_str(": ");
        prompt.push_str(content);
        prompt.push('\n');
    }
    prompt.push_str("assistant: ");
    prompt.into_bytes()
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most this many characters of a value sent are echoed in an error
/// message; the rest is cut and marked with `…`.
const ECHO_LIMIT: usize = 100;

/// A value sent, as an error message shows it: as JSON (a string quoted), a
/// number by [`shown_number`], cut at [`ECHO_LIMIT`] characters.
fn shown(value: &Value) -> String {
    let text = match value {
        Value::Number(number) => shown_number(number),
        other => other.to_string(),
    };
    match text.char_indices().nth(ECHO_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A number sent, as an error message shows it: an integer in full, a
/// float short and still a float (`1e308` rather than 309 digits, `0.25`,
/// `100.0`). serde_json's parse may be a unit in the last place off the
/// decimal sent (`-1.0000000000000001e-60` for `-1e-60`), so a float is
/// shown to 15 significant digits, which gives back any value sent with 15
/// or fewer.
fn shown_number(number: &serde_json::Number) -> String {
    let Some(float) = number.as_f64().filter(|_| number.is_f64()) else { return number.to_string() };
    let float = format!("{float:.14e}").parse::<f64>().unwrap_or(float);
    let magnitude = float.abs();
    if magnitude != 0.0 && !(1e-4..1e15).contains(&magnitude) {
        return format!("{float:e}");
    }
    let text = float.to_string();
    if text.contains('.') { text } else { format!("{text}.0") }
}

/// [`shown`] for a string sent.
fn shown_text(text: &str) -> String {
    shown(&Value::String(text.to_owned()))
}

fn present<'a>(body: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    body.get(key).filter(|value| !value.is_null())
}

/// A number field, or `default` when it is absent. `valid` says which
/// values are accepted and `accepted` says the same in words, for the error
/// message. The check is on the value as sent (an `f64`), before any cast.
fn number(
    body: &Map<String, Value>,
    key: &'static str,
    default: f64,
    valid: fn(f64) -> bool,
    accepted: &str,
) -> Result<f64, ApiError> {
    let Some(value) = present(body, key) else { return Ok(default) };
    let Some(number) = value.as_f64() else {
        return Err(ApiError::invalid(key, format!("`{key}` must be a number, not {}", type_name(value))));
    };
    if !valid(number) {
        return Err(ApiError::invalid(key, format!("`{key}` is {}; it must be {accepted}", shown(value))));
    }
    Ok(number)
}

/// A boolean field of `body`, false when absent; `name` is how the error
/// message names it (the path from the request's top, such as
/// `stream_options.include_usage`).
fn boolean(body: &Map<String, Value>, key: &str, param: &'static str, name: &str) -> Result<bool, ApiError> {
    match present(body, key) {
        None => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(other) => Err(ApiError::invalid(param, format!("`{name}` must be a boolean, not {}", type_name(other)))),
    }
}

/// The bytes of a string; `name` is how the error message names the value
/// (such as `prompt[2]`).
fn text_of(value: &Value, param: &'static str, name: &str) -> Result<Vec<u8>, ApiError> {
    match value {
        Value::String(text) => Ok(text.as_bytes().to_vec()),
        other => Err(ApiError::invalid(param, format!("`{name}` must be a string, not {}", type_name(other)))),
    }
}

fn prompts(body: &Map<String, Value>) -> Result<Vec<Vec<u8>>, ApiError> {
    let Some(prompt) = present(body, "prompt") else {
        return Err(ApiError::invalid("prompt", "`prompt` is required (a string or a list of strings)"));
    };
    match prompt {
        Value::String(_) => Ok(vec![text_of(prompt, "prompt", "prompt")?]),
        Value::Array(items) if items.is_empty() => Err(ApiError::invalid("prompt", "`prompt` is an empty list")),
        Value::Array(items) => {
            items.iter().enumerate().map(|(index, item)| text_of(item, "prompt", &format!("prompt[{index}]"))).collect()
        }
        other => Err(ApiError::invalid(
            "prompt",
            format!("`prompt` must be a string or a list of strings, not {}", type_name(other)),
        )),
    }
}

/// The roles a chat message may have.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// The text of `messages[index].content`: a string, or a list of text parts
/// joined.
fn message_content(index: usize, content: Option<&Value>) -> Result<String, ApiError> {
    const TEXT_PART: &str = "{\"type\": \"text\", \"text\": ...}";
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (part_index, part) in parts.iter().enumerate() {
                let name = format!("messages[{index}].content[{part_index}]");
                let Value::Object(part) = part else {
                    return Err(ApiError::invalid(
                        "messages",
                        format!("`{name}` must be a text part ({TEXT_PART}), not {}", type_name(part)),
                    ));
                };
                match present(part, "type") {
                    Some(Value::String(kind)) if kind == "text" => {}
                    None => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!("`{name}.type` is required; this server accepts only text parts ({TEXT_PART})"),
                        ));
                    }
                    Some(other) => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!(
                                "`{name}.type` is {}; this server accepts only text parts ({TEXT_PART})",
                                shown(other)
                            ),
                        ));
                    }
                }
                match present(part, "text") {
                    Some(Value::String(part_text)) => text.push_str(part_text),
                    None => {
                        return Err(ApiError::invalid("messages", format!("`{name}.text` is required (a string)")));
                    }
                    Some(other) => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!("`{name}.text` must be a string, not {}", type_name(other)),
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(
            "messages",
            format!("`messages[{index}].content` must be a string or a list of text parts, not {}", type_name(other)),
        )),
    }
}

fn messages(body: &Map<String, Value>) -> Result<Vec<u8>, ApiError> {
    let Some(value) = present(body, "messages") else {
        return Err(ApiError::invalid("messages", "`messages` is required (a list of {role, content} objects)"));
    };
    let Value::Array(items) = value else {
        return Err(ApiError::invalid("messages", format!("`messages` must be a list, not {}", type_name(value))));
    };
    if items.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` is an empty list"));
    }
    let roles = ROLES.join(", ");
    let mut parsed = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Value::Object(message) = item else {
            return Err(ApiError::invalid(
                "messages",
                format!("`messages[{index}]` must be a {{role, content}} object, not {}", type_name(item)),
            ));
        };
        let role = match present(message, "role") {
            Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role.clone(),
            None => {
                return Err(ApiError::invalid(
                    "messages",
                    format!("`messages[{index}].role` is required; it must be one of {roles}"),
                ));
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "messages",
                    format!("`messages[{index}].role` is {}; it must be one of {roles}", shown(other)),
                ));
            }
        };
        parsed.push((role, message_content(index, message.get("content"))?));
    }
    Ok(chat_prompt(&parsed))
}

fn stop(body: &Map<String, Value>) -> Result<Vec<Vec<u8>>, ApiError> {
    let list = match present(body, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(text)) if text.is_empty() => {
            return Err(ApiError::invalid("stop", "`stop` is an empty string; a stop sequence must not be empty"));
        }
        Some(Value::String(text)) => vec![text.as_bytes().to_vec()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(index, item)| text_of(item, "stop", &format!("stop[{index}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid(
                "stop",
                format!("`stop` must be a string or a list of strings, not {}", type_name(other)),
            ));
        }
    };
    if list.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::invalid(
            "stop",
            format!("`stop` has {} sequences; at most {MAX_STOP_SEQUENCES}", list.len()),
        ));
    }
    if let Some(index) = list.iter().position(Vec::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            format!("`stop[{index}]` is an empty string; a stop sequence must not be empty"),
        ));
    }
    Ok(list)
}

/// `max_tokens`, or `max_completion_tokens` (OpenAI's newer name) when only
/// that is sent; absent, [`DEFAULT_MAX_TOKENS`] bounded by `--max-tokens`
/// and `room`. Errors name the field the client sent and its value as sent.
fn max_tokens(body: &Map<String, Value>, limits: &Limits, longest: usize, room: u64) -> Result<u64, ApiError> {
    let (key, value) = match (present(body, "max_tokens"), present(body, "max_completion_tokens")) {
        (Some(value), _) => ("max_tokens", value),
        (None, Some(value)) => ("max_completion_tokens", value),
        (None, None) => return Ok(DEFAULT_MAX_TOKENS.min(limits.max_tokens).min(room)),
    };
    let requested = match (value.as_u64(), value.as_i64()) {
        (Some(requested), _) if requested >= 1 => requested,
        (Some(requested), _) => {
            return Err(ApiError::invalid(key, format!("`{key}` is {requested}; it must be at least 1")));
        }
        (None, Some(requested)) => {
            return Err(ApiError::invalid(key, format!("`{key}` is {requested}; it must be at least 1")));
        }
        (None, None) => {
            return Err(ApiError::invalid(key, format!("`{key}` must be an integer, not {}", shown(value))));
        }
    };
    if requested > limits.max_tokens {
        return Err(ApiError::invalid(
            key,
            format!("`{key}` is {requested}; this server allows at most {} (--max-tokens)", limits.max_tokens),
        ));
    }
    if requested > room {
        return Err(ApiError::invalid(
            key,
            format!(
                "the prompt ({longest} tokens) plus `{key}` ({requested}) exceeds the maximum context length of {} \
                 tokens (--max-model-len)",
                limits.max_model_len
            ),
        ));
    }
    Ok(requested)
}

/// Parses and checks a request body against the server's limits.
pub(crate) fn parse(endpoint: Endpoint, body: &[u8], limits: &Limits) -> Result<Generation, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ApiError::malformed(format!("the request body is not valid JSON: {error}")))?;
    let Value::Object(body) = value else {
        return Err(ApiError::malformed(format!("the request body must be a JSON object, not {}", type_name(&value))));
    };
    match present(&body, "model") {
        Some(Value::String(model)) if *model == limits.model_name => {}
        Some(Value::String(model)) => return Err(model_not_found(model, limits)),
        Some(other) => {
            return Err(ApiError::invalid("model", format!("`model` must be a string, not {}", type_name(other))));
        }
        None => return Err(ApiError::invalid("model", "`model` is required")),
    }
    let prompts = match endpoint {
        Endpoint::Completions => prompts(&body)?,
        Endpoint::Chat => vec![messages(&body)?],
    };
    if prompts.len() > limits.max_choices {
        return Err(ApiError::invalid(
            "prompt",
            format!(
                "`prompt` is a list of {} prompts; this server holds at most {} at once (--max-batch-size plus \
                 --max-queue), so it could never run: send at most {} prompts per request",
                prompts.len(),
                limits.max_choices,
                limits.max_choices
            ),
        ));
    }
    match present(&body, "n") {
        None => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("`n` is {}; this server generates one choice (n = 1)", shown(n)),
            ));
        }
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let prompt_param = if endpoint == Endpoint::Chat { "messages" } else { "prompt" };
    if longest >= limits.max_model_len {
        return Err(ApiError::invalid(
            prompt_param,
            format!(
                "the prompt is {longest} tokens; the maximum context length (--max-model-len) is {} tokens, prompt plus output",
                limits.max_model_len
            ),
        ));
    }
    let room = (limits.max_model_len - longest) as u64;
    let max_tokens = max_tokens(&body, limits, longest, room)?;
    let temperature = number(&body, "temperature", 1.0, |t| (0.0..=2.0).contains(&t), "between 0 and 2")? as f32;
    // Checked as sent: 1e-60 is greater than 0 although it is 0 as an `f32`.
    // Any `top_p` that small keeps only the most likely byte (as any `top_p`
    // below that byte's probability does), so it is accepted and raised to
    // the smallest normal `f32` rather than cast to 0.
    let top_p = number(&body, "top_p", 1.0, |p| p > 0.0 && p <= 1.0, "greater than 0 and at most 1")?;
    let top_p = (top_p as f32).max(f32::MIN_POSITIVE);
    let seed = match present(&body, "seed") {
        None => None,
        Some(value) => match (value.as_i64(), value.as_u64()) {
            (Some(seed), _) => Some(seed),
            (None, Some(seed)) => {
                return Err(ApiError::invalid(
                    "seed",
                    format!("`seed` is {seed}; it must be an integer from {} to {}", i64::MIN, i64::MAX),
                ));
            }
            (None, None) => {
                return Err(ApiError::invalid("seed", format!("`seed` must be an integer, not {}", shown(value))));
            }
        },
    };
    let stop = stop(&body)?;
    let stream = boolean(&body, "stream", "stream", "stream")?;
    let include_usage = match present(&body, "stream_options") {
        None => false,
        Some(Value::Object(options)) => {
            boolean(options, "include_usage", "stream_options", "stream_options.include_usage")?
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("`stream_options` must be an object, not {}", type_name(other)),
            ));
        }
    };
    // OpenAI's rule: any `stream_options` (not only `include_usage: true`)
    // needs `stream: true`.
    if !stream && present(&body, "stream_options").is_some() {
        return Err(ApiError::invalid("stream_options", "`stream_options` is only allowed with `stream: true`"));
    }
    Ok(Generation { endpoint, prompts, max_tokens, temperature, top_p, seed, stop, stream, include_usage })
}

/// `usage`.
pub(crate) fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// One finished choice.
#[derive(Clone, Debug, Default)]
pub(crate) struct Choice {
    pub(crate) text: String,
    pub(crate) finish_reason: &'static str,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
}

/// The whole (non-streaming) response.
pub(crate) fn response(endpoint: Endpoint, id: &str, created: u64, model: &str, choices: &[Choice]) -> Value {
    let prompt_tokens = choices.iter().map(|c| c.prompt_tokens).sum();
    let completion_tokens = choices.iter().map(|c| c.completion_tokens).sum();
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(index, choice)| match endpoint {
            Endpoint::Completions => json!({
                "index": index, "text": choice.text, "logprobs": null, "finish_reason": choice.finish_reason,
            }),
            Endpoint::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": choice.text},
                "logprobs": null,
                "finish_reason": choice.finish_reason,
            }),
        })
        .collect();
    let object = match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion",
    };
    json!({
        "id": id, "object": object, "created": created, "model": model,
        "choices": choices, "usage": usage(prompt_tokens, completion_tokens),
    })
}

/// One stream chunk: `text` for choice `index`, or its end (`finish`).
pub(crate) fn chunk(
    endpoint: Endpoint,
    id: &str,
    created: u64,
    model: &str,
    index: usize,
    text: Option<&str>,
    finish: Option<&str>,
) -> Value {
    match endpoint {
        Endpoint::Completions => json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}],
        }),
        Endpoint::Chat => {
            let delta = match text {
                Some(text) => json!({"role": "assistant", "content": text}),
                None => json!({}),
            };
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": index, "delta": delta, "logprobs": null, "finish_reason": finish}],
            })
        }
    }
}

/// The usage chunk of `stream_options.include_usage` (no choices).
pub(crate) fn usage_chunk(
    endpoint: Endpoint,
    id: &str,
    created: u64,
    model: &str,
    prompt: u64,
    completion: u64,
) -> Value {
    let object = match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion.chunk",
    };
    json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage(prompt, completion)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { model_name: "m".into(), max_tokens: 100, max_model_len: 64, max_choices: 3 }
    }

    fn param_of(endpoint: Endpoint, body: &str) -> Option<&'static str> {
        parse(endpoint, body.as_bytes(), &limits()).unwrap_err().param
    }

    #[test]
    fn each_bad_field_is_named_in_param() {
        let c = Endpoint::Completions;
        assert_eq!(param_of(c, r#"{"model":"m"}"#), Some("prompt"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":5}"#), Some("prompt"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","max_tokens":-1}"#), Some("max_tokens"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","max_tokens":"9"}"#), Some("max_tokens"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","max_tokens":1e30}"#), Some("max_tokens"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","temperature":"hot"}"#), Some("temperature"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","top_p":2}"#), Some("top_p"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","n":2}"#), Some("n"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","stop":[1]}"#), Some("stop"));
        assert_eq!(param_of(c, r#"{"model":"m","prompt":"a","stream":"yes"}"#), Some("stream"));
        assert_eq!(param_of(c, r#"{"model":7,"prompt":"a"}"#), Some("model"));
        assert_eq!(
            param_of(Endpoint::Chat, r#"{"model":"m","messages":[{"role":"x","content":"a"}]}"#),
            Some("messages")
        );
        let long = format!(r#"{{"model":"m","prompt":"{}"}}"#, "a".repeat(64));
        assert_eq!(param_of(c, &long), Some("prompt"));
        let unknown = parse(c, br#"{"model":"other","prompt":"a"}"#, &limits()).unwrap_err();
        assert_eq!((unknown.status, unknown.param), (404, Some("model")));
    }

    #[test]
    fn a_prompt_list_longer_than_the_server_holds_is_refused_naming_the_limit() {
        let c = Endpoint::Completions;
        let fits = parse(c, br#"{"model":"m","prompt":["a","b","c"]}"#, &limits()).unwrap();
        assert_eq!(fits.prompts.len(), 3, "as many prompts as the server holds are accepted");
        let error = parse(c, br#"{"model":"m","prompt":["a","b","c","d"]}"#, &limits()).unwrap_err();
        assert_eq!((error.status, error.param, error.code), (400, Some("prompt"), "invalid_value"));
        assert!(error.message.contains("list of 4 prompts"), "{}", error.message);
        assert!(error.message.contains("at most 3 at once (--max-batch-size plus --max-queue)"), "{}", error.message);
    }

    #[test]
    fn unknown_fields_are_ignored_and_defaults_fit_the_context() {
        let body = br#"{"model":"m","prompt":"hello","frequency_penalty":0.5,"user":"u"}"#;
        let generation = parse(Endpoint::Completions, body, &limits()).unwrap();
        assert_eq!(generation.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(generation.prompts, vec![b"hello".to_vec()]);
    }

    /// The error a client sees for `body`: status, `param` and message.
    fn error_of(endpoint: Endpoint, body: &str) -> (u16, Option<&'static str>, String) {
        let error = parse(endpoint, body.as_bytes(), &limits()).unwrap_err();
        (error.status, error.param, error.message)
    }

    fn invalid(param: &'static str, message: &str) -> (u16, Option<&'static str>, String) {
        (400, Some(param), message.to_owned())
    }

    #[test]
    fn max_completion_tokens_errors_name_max_completion_tokens() {
        let c = Endpoint::Completions;
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_completion_tokens":-3}"#),
            invalid("max_completion_tokens", "`max_completion_tokens` is -3; it must be at least 1")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_completion_tokens":0}"#),
            invalid("max_completion_tokens", "`max_completion_tokens` is 0; it must be at least 1")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_completion_tokens":101}"#),
            invalid(
                "max_completion_tokens",
                "`max_completion_tokens` is 101; this server allows at most 100 (--max-tokens)"
            )
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_completion_tokens":"9"}"#),
            invalid("max_completion_tokens", r#"`max_completion_tokens` must be an integer, not "9""#)
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_completion_tokens":64}"#),
            invalid(
                "max_completion_tokens",
                "the prompt (1 tokens) plus `max_completion_tokens` (64) exceeds the maximum context length of 64 \
                 tokens (--max-model-len)"
            )
        );
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"a"}],"max_completion_tokens":5}"#;
        assert_eq!(parse(Endpoint::Chat, chat, &limits()).unwrap().max_tokens, 5);
        // `max_tokens` wins when both are sent, and its errors name it.
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_tokens":-1,"max_completion_tokens":5}"#),
            invalid("max_tokens", "`max_tokens` is -1; it must be at least 1")
        );
    }

    #[test]
    fn integers_beyond_the_accepted_range_are_reported_as_sent() {
        let c = Endpoint::Completions;
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_tokens":18446744073709551615}"#),
            invalid(
                "max_tokens",
                "`max_tokens` is 18446744073709551615; this server allows at most 100 (--max-tokens)"
            )
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_tokens":-9223372036854775808}"#),
            invalid("max_tokens", "`max_tokens` is -9223372036854775808; it must be at least 1")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_tokens":1e30}"#),
            invalid("max_tokens", "`max_tokens` must be an integer, not 1e30")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","seed":18446744073709551615}"#),
            invalid(
                "seed",
                "`seed` is 18446744073709551615; it must be an integer from -9223372036854775808 to \
                 9223372036854775807"
            )
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","seed":1.5}"#),
            invalid("seed", "`seed` must be an integer, not 1.5")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","seed":"x"}"#),
            invalid("seed", r#"`seed` must be an integer, not "x""#)
        );
        let body = br#"{"model":"m","prompt":"a","seed":-9223372036854775808}"#;
        assert_eq!(parse(c, body, &limits()).unwrap().seed, Some(i64::MIN));
        let body = br#"{"model":"m","prompt":"a","seed":9223372036854775807}"#;
        assert_eq!(parse(c, body, &limits()).unwrap().seed, Some(i64::MAX));
    }

    #[test]
    fn top_p_is_checked_as_sent_and_a_tiny_one_is_accepted() {
        let c = Endpoint::Completions;
        let tiny = parse(c, br#"{"model":"m","prompt":"a","top_p":1e-60}"#, &limits()).unwrap();
        assert_eq!(tiny.top_p, f32::MIN_POSITIVE, "greater than 0 as sent, so not 0 once cast");
        let small = parse(c, br#"{"model":"m","prompt":"a","top_p":0.25}"#, &limits()).unwrap();
        assert_eq!(small.top_p, 0.25);
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","top_p":0}"#),
            invalid("top_p", "`top_p` is 0; it must be greater than 0 and at most 1")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","top_p":-1e-60}"#),
            invalid("top_p", "`top_p` is -1e-60; it must be greater than 0 and at most 1")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","top_p":1.5}"#),
            invalid("top_p", "`top_p` is 1.5; it must be greater than 0 and at most 1")
        );
    }

    #[test]
    fn floats_are_echoed_compactly() {
        let c = Endpoint::Completions;
        let number = |text: &str| shown(&serde_json::from_str(text).unwrap());
        assert_eq!(number("1e308"), "1e308");
        assert_eq!(number("-1e-60"), "-1e-60");
        assert_eq!(number("0.1"), "0.1");
        assert_eq!(number("0.0001"), "0.0001");
        assert_eq!(number("0.00001"), "1e-5");
        assert_eq!(number("100.0"), "100.0");
        assert_eq!(number("-0.0"), "-0.0");
        assert_eq!(number("12345678901234.5"), "12345678901234.5");
        assert_eq!(number("0.12345678901234567"), "0.123456789012346", "15 significant digits");
        assert_eq!(number("1234567890123450.0"), "1.23456789012345e15");
        assert_eq!(number("18446744073709551615"), "18446744073709551615");
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","max_tokens":100.0}"#),
            invalid("max_tokens", "`max_tokens` must be an integer, not 100.0")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","temperature":1e308}"#),
            invalid("temperature", "`temperature` is 1e308; it must be between 0 and 2")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","temperature":-2.5}"#),
            invalid("temperature", "`temperature` is -2.5; it must be between 0 and 2")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","n":1e300}"#),
            invalid("n", "`n` is 1e300; this server generates one choice (n = 1)")
        );
    }

    #[test]
    fn message_errors_name_the_message_and_what_was_sent() {
        let chat = Endpoint::Chat;
        let roles = "system, developer, user, assistant, tool";
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":5,"content":"b"}]}"#),
            invalid("messages", &format!("`messages[1].role` is 5; it must be one of {roles}"))
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#),
            invalid("messages", &format!(r#"`messages[0].role` is "wizard"; it must be one of {roles}"#))
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"content":"x"}]}"#),
            invalid("messages", &format!("`messages[0].role` is required; it must be one of {roles}"))
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":"a"},"hi"]}"#),
            invalid("messages", "`messages[1]` must be a {role, content} object, not a string")
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":5}]}"#),
            invalid("messages", "`messages[0].content` must be a string or a list of text parts, not a number")
        );
        let image = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},
            {"type":"image_url","image_url":{"url":"http://x"}}]}]}"#;
        assert_eq!(
            error_of(chat, image),
            invalid(
                "messages",
                r#"`messages[0].content[1].type` is "image_url"; this server accepts only text parts ({"type": "text", "text": ...})"#
            )
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}"#),
            invalid(
                "messages",
                r#"`messages[0].content[0].type` is required; this server accepts only text parts ({"type": "text", "text": ...})"#
            )
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}"#),
            invalid("messages", "`messages[0].content[0].text` must be a string, not a number")
        );
        assert_eq!(
            error_of(chat, r#"{"model":"m","messages":[{"role":"user","content":["a"]}]}"#),
            invalid(
                "messages",
                r#"`messages[0].content[0]` must be a text part ({"type": "text", "text": ...}), not a string"#
            )
        );
        let parts = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#;
        assert_eq!(parse(chat, parts, &limits()).unwrap().prompts, vec![b"user: ab\nassistant: ".to_vec()]);
    }

    #[test]
    fn list_entries_are_named_by_index() {
        let c = Endpoint::Completions;
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":["a",7]}"#),
            invalid("prompt", "`prompt[1]` must be a string, not a number")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","stop":["x",null]}"#),
            invalid("stop", "`stop[1]` must be a string, not null")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","stop":["x",""]}"#),
            invalid("stop", "`stop[1]` is an empty string; a stop sequence must not be empty")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","stop":""}"#),
            invalid("stop", "`stop` is an empty string; a stop sequence must not be empty")
        );
        assert_eq!(
            error_of(c, r#"{"model":"m","prompt":"a","stream":true,"stream_options":{"include_usage":1}}"#),
            invalid("stream_options", "`stream_options.include_usage` must be a boolean, not a number")
        );
    }

    #[test]
    fn long_values_are_cut_in_error_messages() {
        let c = Endpoint::Completions;
        let long = "w".repeat(5000);
        let (status, param, message) =
            error_of(Endpoint::Chat, &format!(r#"{{"model":"m","messages":[{{"role":"{long}","content":"x"}}]}}"#));
        assert_eq!((status, param), (400, Some("messages")));
        let cut = format!("\"{}…", "w".repeat(ECHO_LIMIT - 1));
        assert!(message.starts_with(&format!("`messages[0].role` is {cut};")), "{message}");
        let (status, param, message) = error_of(c, &format!(r#"{{"model":"{long}","prompt":"a"}}"#));
        assert_eq!((status, param), (404, Some("model")));
        assert_eq!(message, format!(r#"the model {cut} does not exist; this server serves "m""#));
        let (_, param, message) = error_of(c, &format!(r#"{{"model":"m","prompt":"a","n":"{long}"}}"#));
        assert_eq!(param, Some("n"));
        assert_eq!(message, format!("`n` is {cut}; this server generates one choice (n = 1)"));
        let (_, param, message) = error_of(c, &format!(r#"{{"model":"m","prompt":"a","max_tokens":["{long}"]}}"#));
        assert_eq!(param, Some("max_tokens"));
        assert_eq!(message, format!("`max_tokens` must be an integer, not [{}…", &cut[..ECHO_LIMIT - 1]));
        // Exactly the limit is shown whole; multi-byte characters are cut
        // between characters.
        assert_eq!(shown_text(&"é".repeat(ECHO_LIMIT - 2)), format!("\"{}\"", "é".repeat(ECHO_LIMIT - 2)));
        assert_eq!(shown_text(&"é".repeat(ECHO_LIMIT)), format!("\"{}…", "é".repeat(ECHO_LIMIT - 1)));
    }

    #[test]
    fn the_chat_template_is_role_lines_then_the_assistant_turn() {
        let prompt = chat_prompt(&[("system".into(), "be brief".into()), ("user".into(), "hi".into())]);
        assert_eq!(prompt, b"system: be brief\nuser: hi\nassistant: ");
    }
}
