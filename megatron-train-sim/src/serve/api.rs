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

fn present<'a>(body: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    body.get(key).filter(|value| !value.is_null())
}

fn number(body: &Map<String, Value>, key: &'static str, default: f64, range: (f64, f64)) -> Result<f64, ApiError> {
    let Some(value) = present(body, key) else { return Ok(default) };
    let Some(number) = value.as_f64() else {
        return Err(ApiError::invalid(key, format!("`{key}` must be a number, not {}", type_name(value))));
    };
    if !(range.0..=range.1).contains(&number) {
        return Err(ApiError::invalid(
            key,
            format!("`{key}` is {number}; it must be between {} and {}", range.0, range.1),
        ));
    }
    Ok(number)
}

fn boolean(body: &Map<String, Value>, key: &'static str) -> Result<bool, ApiError> {
    match present(body, key) {
        None => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(other) => Err(ApiError::invalid(key, format!("`{key}` must be a boolean, not {}", type_name(other)))),
    }
}

fn text_of(value: &Value, param: &'static str, what: &str) -> Result<Vec<u8>, ApiError> {
    match value {
        Value::String(text) => Ok(text.as_bytes().to_vec()),
        other => Err(ApiError::invalid(param, format!("{what} must be a string, not {}", type_name(other)))),
    }
}

fn prompts(body: &Map<String, Value>) -> Result<Vec<Vec<u8>>, ApiError> {
    let Some(prompt) = present(body, "prompt") else {
        return Err(ApiError::invalid("prompt", "`prompt` is required (a string or a list of strings)"));
    };
    match prompt {
        Value::String(_) => Ok(vec![text_of(prompt, "prompt", "`prompt`")?]),
        Value::Array(items) if items.is_empty() => Err(ApiError::invalid("prompt", "`prompt` is an empty list")),
        Value::Array(items) => items.iter().map(|item| text_of(item, "prompt", "every entry of `prompt`")).collect(),
        other => Err(ApiError::invalid(
            "prompt",
            format!("`prompt` must be a string or a list of strings, not {}", type_name(other)),
        )),
    }
}

fn message_content(content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(part_text)) => text.push_str(part_text),
                    _ => {
                        return Err(ApiError::invalid(
                            "messages",
                            "a message's content parts must be `{\"type\": \"text\", \"text\": ...}`",
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(
            "messages",
            format!("a message's `content` must be a string or a list of text parts, not {}", type_name(other)),
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
    let mut parsed = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(message) = item else {
            return Err(ApiError::invalid(
                "messages",
                format!("every message must be an object, not {}", type_name(item)),
            ));
        };
        let role = match message.get("role") {
            Some(Value::String(role))
                if ["system", "developer", "user", "assistant", "tool"].contains(&role.as_str()) =>
            {
                role.clone()
            }
            Some(Value::String(role)) => {
                return Err(ApiError::invalid(
                    "messages",
                    format!("unknown role {role:?}: use system, developer, user, assistant or tool"),
                ));
            }
            _ => return Err(ApiError::invalid("messages", "every message needs a string `role`")),
        };
        parsed.push((role, message_content(message.get("content"))?));
    }
    Ok(chat_prompt(&parsed))
}

fn stop(body: &Map<String, Value>) -> Result<Vec<Vec<u8>>, ApiError> {
    let list = match present(body, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(text)) => vec![text.as_bytes().to_vec()],
        Some(Value::Array(items)) => {
            items.iter().map(|item| text_of(item, "stop", "every entry of `stop`")).collect::<Result<_, _>>()?
        }
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
    if list.iter().any(Vec::is_empty) {
        return Err(ApiError::invalid("stop", "`stop` sequences must not be empty"));
    }
    Ok(list)
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
        Some(Value::String(model)) => {
            return Err(ApiError {
                status: 404,
                kind: "invalid_request_error",
                param: Some("model"),
                code: "model_not_found",
                message: format!("the model {model:?} does not exist; this server serves {:?}", limits.model_name),
            });
        }
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
        Some(n) => return Err(ApiError::invalid("n", format!("`n` is {n}; this server generates one choice (n = 1)"))),
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
    let max_tokens = match present(&body, "max_tokens").or_else(|| present(&body, "max_completion_tokens")) {
        None => DEFAULT_MAX_TOKENS.min(limits.max_tokens).min(room),
        Some(value) => {
            let Some(requested) = value.as_i64().or_else(|| value.as_u64().map(|_| i64::MAX)) else {
                return Err(ApiError::invalid("max_tokens", format!("`max_tokens` must be an integer, not {value}")));
            };
            if requested < 1 {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!("`max_tokens` is {requested}; it must be at least 1"),
                ));
            }
            let requested = requested as u64;
            if requested > limits.max_tokens {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!(
                        "`max_tokens` is {requested}; this server allows at most {} (--max-tokens)",
                        limits.max_tokens
                    ),
                ));
            }
            if requested > room {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!(
                        "the prompt ({longest} tokens) plus `max_tokens` ({requested}) exceeds the maximum context length of {} tokens (--max-model-len)",
                        limits.max_model_len
                    ),
                ));
            }
            requested
        }
    };
    let temperature = number(&body, "temperature", 1.0, (0.0, 2.0))? as f32;
    let top_p = number(&body, "top_p", 1.0, (0.0, 1.0))? as f32;
    if top_p <= 0.0 {
        return Err(ApiError::invalid("top_p", "`top_p` must be greater than 0"));
    }
    let seed = match present(&body, "seed") {
        None => None,
        Some(value) => match value.as_i64() {
            Some(seed) => Some(seed),
            None => return Err(ApiError::invalid("seed", format!("`seed` must be an integer, not {value}"))),
        },
    };
    let stop = stop(&body)?;
    let stream = boolean(&body, "stream")?;
    let include_usage = match present(&body, "stream_options") {
        None => false,
        Some(Value::Object(options)) => boolean(options, "include_usage").map_err(|mut error| {
            error.param = Some("stream_options");
            error
        })?,
        Some(other) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("`stream_options` must be an object, not {}", type_name(other)),
            ));
        }
    };
    if include_usage && !stream {
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

    #[test]
    fn the_chat_template_is_role_lines_then_the_assistant_turn() {
        let prompt = chat_prompt(&[("system".into(), "be brief".into()), ("user".into(), "hi".into())]);
        assert_eq!(prompt, b"system: be brief\nuser: hi\nassistant: ");
    }
}
