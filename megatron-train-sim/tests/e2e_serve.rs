//! `megatron-train-sim serve` end to end: a checkpoint trained here, one
//! server, real clients nobody here wrote.
//!
//! - `openai_clients_load_and_telemetry`: the official `openai` Python
//!   package (`e2e/openai_client.py`, `max_retries=0`) for completions and
//!   chat, streaming and not, each with its own `traceparent`, then 64
//!   concurrent streaming requests; the OTLP sink sees the HTTP server span
//!   as the child of that context, the GenAI span under it with the GenAI
//!   attributes, usage equal to the tokens returned, token-usage totals
//!   equal to the sum over the responses, the TTFT, TPOT and duration
//!   histograms bounded by the times the client measured and counting
//!   every request exactly.
//! - `bad_requests_get_openai_errors_and_the_server_keeps_serving`: raw
//!   HTTP/1.1 over `TcpStream`: malformed JSON, wrong types, bad values,
//!   unknown model, over-long prompt, a `prompt` list longer than the server
//!   ever holds (400, not 429), oversized body, a client that
//!   disconnects mid-stream, a full queue, and the drain's 503, each with
//!   its status and an OpenAI-shaped error naming the problem, while good
//!   requests keep succeeding.
//!
//! The tests hold for any model: they check token counts, lengths,
//! printable text and statuses, never the text itself.

// Spans, metrics and token totals need telemetry compiled in; the otel-off
// build of the server is exercised by its unit tests.
#![cfg(feature = "otel")]

mod e2e_support;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use e2e_support::{Ctx, Proc, Protocol, READY_LIMIT, SMALL, Sink, clean_command, python, repo_root};
use serde_json::Value;

const MODEL: &str = "megatron-sim";

/// Trains the smallest checkpoint (two iterations) into `ckpt/`.
fn train_checkpoint(ctx: &Ctx) {
    let mut args = vec!["--train-iters", "2", "--save", "ckpt"];
    args.extend_from_slice(SMALL);
    ctx.sim(&args).label("train").run(Duration::from_secs(120)).assert_success("training the checkpoint");
}

/// Starts the server with `extra` flags; returns it and its port.
fn start_server(ctx: &Ctx, sink: Option<&Sink>, extra: &[&str]) -> (Proc, u16) {
    let mut args = vec!["serve", "--load", "ckpt", "--port", "0"];
    args.extend_from_slice(extra);
    let mut sim = ctx.sim(&args).label("serve");
    if let Some(sink) = sink {
        sim = sim.otlp(Protocol::HttpProtobuf, &sink.endpoint(Protocol::HttpProtobuf));
    }
    let mut server = sim.spawn();
    let served = extra.iter().position(|a| *a == "--served-model-name").map_or(MODEL, |at| extra[at + 1]);
    let line = server.wait_for_stdout_line(&format!("serving {served} on http://127.0.0.1:"), READY_LIMIT);
    let port = line.rsplit(':').next().and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    (server, port)
}

fn stop_server(server: Proc, what: &str) -> String {
    server.signal(libc::SIGTERM);
    let finished = server.wait(Duration::from_secs(60));
    finished.assert_success(what);
    finished.stderr
}

fn attr<'a>(span: &'a e2e_support::SinkSpan, key: &str) -> &'a Value {
    span.attributes.get(key).unwrap_or_else(|| panic!("{} has no {key}: {:?}", span.name, span.attributes))
}

#[test]
fn openai_clients_load_and_telemetry() {
    let ctx = Ctx::new("serve-openai");
    train_checkpoint(&ctx);
    let sink = Sink::start(&ctx);
    let (server, port) = start_server(
        &ctx,
        Some(&sink),
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "default,inference_step",
            "--max-batch-size",
            "16",
            "--max-queue",
            "128",
        ],
    );
    let out = ctx.path("client.json");
    let mut client = clean_command(python());
    client
        .arg(repo_root().join("e2e/openai_client.py"))
        .args(["--base-url", &format!("http://127.0.0.1:{port}/v1"), "--model", MODEL])
        .args(["--max-tokens", "12", "--concurrency", "64", "--load-tokens", "24", "--out"])
        .arg(&out);
    let finished = Proc::spawn(&ctx, "openai-client", client).wait(Duration::from_secs(180));
    finished.assert_success("the openai client (is the `openai` package installed? see .ci/run)");
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    stop_server(server, "the server's drain after the clients");

    // What the clients got.
    let mut prompt_total = 0;
    let mut completion_total = 0;
    for case in ["completions", "completions_stream", "chat", "chat_stream"] {
        let result = &results[case];
        let text = result["text"].as_str().unwrap();
        let usage = &result["usage"];
        assert_eq!(text.len(), 12, "{case}: max_tokens 12 and no stop sequence: {result}");
        assert!(text.bytes().all(|b| b == b'\n' || (0x20..0x7f).contains(&b)), "{case}: printable: {text:?}");
        assert_eq!(usage["completion_tokens"].as_u64(), Some(text.len() as u64), "{case}: usage = tokens returned");
        let (prompt, completion) =
            (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
        assert_eq!(usage["total_tokens"].as_u64(), Some(prompt + completion), "{case}");
        assert_eq!(result["finish_reason"], "length", "{case}");
        prompt_total += prompt;
        completion_total += completion;
    }
    assert_eq!(results["chat"]["role"], "assistant");
    assert_eq!(results["models"], serde_json::json!([MODEL]));
    // `models.retrieve`: the served model, and model_not_found for another.
    assert_eq!(results["retrieved"], MODEL);
    assert_eq!(results["unknown_retrieved"]["status"], 404);
    assert_eq!(results["unknown_retrieved"]["body"]["code"], "model_not_found");
    assert_eq!(results["unknown_model"]["status"], 404);
    assert_eq!(results["unknown_model"]["body"]["param"], "model");
    let load = results["load"].as_array().unwrap();
    assert_eq!(load.len(), 64);
    for (i, response) in load.iter().enumerate() {
        assert!(response["error"].is_null(), "load request {i}: {response}");
        assert_eq!(response["text_len"], 24, "load request {i}: tokens as asked");
        assert_eq!(response["usage"]["completion_tokens"], 24, "load request {i}");
        prompt_total += response["usage"]["prompt_tokens"].as_u64().unwrap();
        completion_total += 24;
    }

    // What the sink got: the traces.
    let records = sink.stop();
    // tower-http's trace layer makes the server span of every route, not
    // only the generating ones: the model list, and the 404 of an unknown
    // model with its `error.type`.
    let listed: Vec<_> = records.spans_named("GET /v1/models").collect();
    assert_eq!(listed.len(), 1, "one GET /v1/models server span");
    assert_eq!(listed[0].kind, "server");
    assert_eq!(attr(listed[0], "http.route"), "/v1/models");
    assert_eq!(attr(listed[0], "http.response.status_code"), 200);
    let rejected: Vec<_> = records
        .spans_named("POST /v1/completions")
        .filter(|s| s.attributes.get("http.response.status_code") == Some(&serde_json::json!(404)))
        .collect();
    assert_eq!(rejected.len(), 1, "the unknown model's request");
    assert_eq!(attr(rejected[0], "error.type"), "404");
    for (case, route, operation) in [
        ("completions", "/v1/completions", "text_completion"),
        ("completions_stream", "/v1/completions", "text_completion"),
        ("chat", "/v1/chat/completions", "chat"),
        ("chat_stream", "/v1/chat/completions", "chat"),
    ] {
        let result = &results[case];
        let traceparent: Vec<&str> = result["traceparent"].as_str().unwrap().split('-').collect();
        let (trace_id, parent_id) = (traceparent[1], traceparent[2]);
        let server_name = format!("POST {route}");
        let server: Vec<_> = records
            .spans_named(&server_name)
            .filter(|s| s.trace_id == trace_id && s.parent_span_id == parent_id)
            .collect();
        assert_eq!(server.len(), 1, "{case}: one {server_name} span, the child of its traceparent");
        let server = server[0];
        assert_eq!(server.kind, "server", "{case}");
        assert_eq!(attr(server, "http.request.method"), "POST");
        assert_eq!(attr(server, "url.path"), route);
        assert_eq!(attr(server, "url.scheme"), "http");
        // The openai client names the server 127.0.0.1:<port> in its Host.
        assert_eq!(attr(server, "server.address"), "127.0.0.1", "{case}");
        assert_eq!(attr(server, "server.port"), port, "{case}");
        assert_eq!(attr(server, "http.route"), route);
        assert_eq!(attr(server, "http.response.status_code"), 200);
        let genai_name = format!("{operation} {MODEL}");
        let genai: Vec<_> = records.spans_named(&genai_name).filter(|s| s.parent_span_id == server.span_id).collect();
        assert_eq!(genai.len(), 1, "{case}: one {genai_name} span under the server span");
        let genai = genai[0];
        assert_eq!(genai.trace_id, trace_id, "{case}: the GenAI span is in the client's trace");
        assert_eq!(genai.kind, "internal");
        assert_eq!(attr(genai, "gen_ai.operation.name"), operation);
        assert_eq!(attr(genai, "gen_ai.provider.name"), "nemo");
        assert_eq!(attr(genai, "gen_ai.request.model"), MODEL);
        assert_eq!(attr(genai, "gen_ai.response.model"), MODEL);
        assert_eq!(attr(genai, "gen_ai.request.max_tokens"), 12);
        assert_eq!(attr(genai, "gen_ai.response.finish_reasons"), &serde_json::json!(["length"]));
        assert_eq!(attr(genai, "gen_ai.usage.input_tokens"), &result["usage"]["prompt_tokens"]);
        assert_eq!(attr(genai, "gen_ai.usage.output_tokens"), &result["usage"]["completion_tokens"]);
        assert!(attr(genai, "gen_ai.response.id").as_str().is_some_and(|id| !id.is_empty()));
        if let Some(id) = result["id"].as_str() {
            assert_eq!(attr(genai, "gen_ai.response.id"), id, "{case}");
        }
        assert!(attr(genai, "gen_ai.request.temperature").is_number());
        assert!(attr(genai, "gen_ai.request.top_p").is_number());
        for child in ["megatron.inference.queue", "megatron.inference.prefill", "megatron.inference.decode"] {
            let found = records.spans_named(child).filter(|s| s.parent_span_id == genai.span_id).count();
            assert_eq!(found, 1, "{case}: one {child} under the GenAI span");
        }
        let linked = records
            .spans_named("megatron.inference.step")
            .filter(|s| s.parent_span_id.is_empty() && s.links.iter().any(|(_, span)| *span == genai.span_id))
            .count();
        assert!(linked >= 12, "{case}: every decode step of the request is a root linked to it ({linked})");
    }
    let completions = &records.spans_named("text_completion megatron-sim").next().unwrap();
    assert_eq!(attr(completions, "gen_ai.request.seed"), 11);
    // As the client sent them (the model samples with their f32).
    assert_eq!(attr(completions, "gen_ai.request.temperature"), 0.7);
    assert_eq!(attr(completions, "gen_ai.request.top_p"), 0.9);

    // The token-usage totals: the last (cumulative) export's sum per token
    // type, over its series (one per operation), equals the sum over every
    // response.
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for metric in records.metrics_named("gen_ai.client.token.usage") {
        assert_eq!(metric.temporality.as_deref(), Some("cumulative"));
        let mut export: BTreeMap<String, f64> = BTreeMap::new();
        for point in &metric.data_points {
            let kind = point["attributes"]["gen_ai.token.type"].as_str().unwrap().to_string();
            *export.entry(kind).or_default() += point["sum"].as_f64().unwrap();
        }
        for (kind, sum) in export {
            let entry = totals.entry(kind).or_default();
            *entry = entry.max(sum);
        }
    }
    assert_eq!(totals.get("input"), Some(&(prompt_total as f64)), "input tokens exported = prompt tokens returned");
    assert_eq!(totals.get("output"), Some(&(completion_total as f64)), "output tokens exported = tokens returned");
    server_latencies_are_bounded_by_the_clients_times(&records, &results);
    ctx.finish();
}

/// One request as the client measured it (monotonic clock, from just before
/// it was sent): the whole response, the first chunk with text (streams),
/// and the tokens it got.
struct Measured {
    seconds: f64,
    first_chunk_seconds: Option<f64>,
    completion_tokens: f64,
}

/// Per `gen_ai.operation.name`: the data point of `name`'s last cumulative
/// export (the one with the largest count).
fn final_points<'a>(records: &'a e2e_support::Records, name: &'a str) -> BTreeMap<String, &'a Value> {
    let mut points: BTreeMap<String, &Value> = BTreeMap::new();
    for metric in records.metrics_named(name) {
        assert_eq!(metric.temporality.as_deref(), Some("cumulative"), "{name}");
        for point in &metric.data_points {
            let operation = point["attributes"]["gen_ai.operation.name"].as_str().unwrap_or_default().to_string();
            let count = |p: &Value| p["count"].as_u64().unwrap_or(0);
            if points.get(&operation).is_none_or(|seen| count(seen) <= count(point)) {
                points.insert(operation, point);
            }
        }
    }
    points
}

/// The server's GenAI latency histograms against the client's clocks, and
/// the request counters exactly.
///
/// Bounds (each server interval lies inside the client's, on the same
/// machine's monotonic clock, so they hold however slow the machine is):
/// - counts: each histogram counts every finished request once, 66
///   `text_completion` (two single, 64 load) and 2 `chat`; the 404 of an
///   unknown model is not a generation and is not counted;
/// - TTFT: `0 ≤ min`; each request's TTFT (arrival to the first token
///   generated) ≤ the client's time to its first chunk with text (streams)
///   or to the whole response (not streamed): so `max` ≤ the largest of
///   those and `sum` ≤ their sum;
/// - request duration (arrival to the last token) ≤ the client's whole
///   response time: `max` and `sum` likewise, and `sum` ≥ TTFT's `sum`;
/// - TPOT (last token − first token over the tokens after the first):
///   `0 ≤ min`, each ≤ the client's whole time over those tokens, so
///   `max` and `sum` likewise; and per request duration = TTFT + TPOT ×
///   (tokens − 1) exactly (the same instants), which the chat series, whose
///   two requests got 12 tokens each, checks on its sums;
/// - `requests.running` and `requests.waiting` end at 0.
fn server_latencies_are_bounded_by_the_clients_times(records: &e2e_support::Records, results: &Value) {
    let measured = |result: &Value| Measured {
        seconds: result["seconds"].as_f64().unwrap_or_else(|| panic!("no client time: {result}")),
        first_chunk_seconds: result["first_chunk_seconds"].as_f64(),
        completion_tokens: result["usage"]["completion_tokens"].as_f64().unwrap(),
    };
    let mut clients: BTreeMap<&str, Vec<Measured>> = BTreeMap::new();
    for (case, operation, stream) in [
        ("completions", "text_completion", false),
        ("completions_stream", "text_completion", true),
        ("chat", "chat", false),
        ("chat_stream", "chat", true),
    ] {
        let m = measured(&results[case]);
        assert_eq!(m.first_chunk_seconds.is_some(), stream, "{case}: a first chunk time for streams only");
        clients.entry(operation).or_default().push(m);
    }
    for response in results["load"].as_array().unwrap() {
        let m = measured(response);
        assert!(m.first_chunk_seconds.is_some(), "a load stream's first chunk time: {response}");
        clients.entry("text_completion").or_default().push(m);
    }
    let ttft = final_points(records, "gen_ai.server.time_to_first_token");
    let tpot = final_points(records, "gen_ai.server.time_per_output_token");
    let duration = final_points(records, "gen_ai.server.request.duration");
    let f = |point: &Value, key: &str| point[key].as_f64().unwrap_or_else(|| panic!("no {key}: {point}"));
    // Float sums of up to 66 values: this much slack and no more.
    const ROUNDING: f64 = 1e-9;
    let operations: Vec<&str> = clients.keys().copied().collect();
    for histogram in [&ttft, &tpot, &duration] {
        assert_eq!(histogram.keys().map(String::as_str).collect::<Vec<_>>(), operations);
    }
    for (operation, client) in &clients {
        let sent = client.len() as u64;
        assert_eq!(sent, if *operation == "chat" { 2 } else { 66 });
        let (ttft, tpot, duration) = (ttft[*operation], tpot[*operation], duration[*operation]);
        for (name, point) in [("TTFT", ttft), ("TPOT", tpot), ("request duration", duration)] {
            assert_eq!(point["count"].as_u64(), Some(sent), "{operation} {name}: one per request sent: {point}");
            assert!(f(point, "min") >= 0.0, "{operation} {name}: {point}");
        }
        let first_bound: Vec<f64> = client.iter().map(|m| m.first_chunk_seconds.unwrap_or(m.seconds)).collect();
        let total: Vec<f64> = client.iter().map(|m| m.seconds).collect();
        let per_token: Vec<f64> = client.iter().map(|m| m.seconds / (m.completion_tokens - 1.0)).collect();
        for (name, point, bound) in
            [("TTFT", ttft, &first_bound), ("request duration", duration, &total), ("TPOT", tpot, &per_token)]
        {
            let (largest, sum) = (bound.iter().copied().fold(0.0, f64::max), bound.iter().sum::<f64>());
            assert!(
                f(point, "max") <= largest + ROUNDING,
                "{operation}: the server's largest {name} {} s exceeds the client's bound {largest} s",
                f(point, "max")
            );
            assert!(
                f(point, "sum") <= sum + ROUNDING,
                "{operation}: the server's {name} sum {} s exceeds the client's {sum} s",
                f(point, "sum")
            );
        }
        assert!(f(tpot, "sum") > 0.0, "{operation}: decoding took time: {tpot}");
        assert!(f(duration, "sum") >= f(ttft, "sum"), "{operation}: duration ≥ TTFT: {duration} {ttft}");
    }
    let (ttft, tpot, duration) = (ttft["chat"], tpot["chat"], duration["chat"]);
    let composed = f(ttft, "sum") + 11.0 * f(tpot, "sum");
    assert!(
        (f(duration, "sum") - composed).abs() <= 1e-6,
        "chat: duration sum {} = TTFT sum + 11 × TPOT sum = {composed}",
        f(duration, "sum")
    );
    for name in ["megatron.inference.requests.running", "megatron.inference.requests.waiting"] {
        let last = records.metrics_named(name).last().unwrap_or_else(|| panic!("{name} was exported"));
        let value: f64 = last.data_points.iter().map(|p| p["value"].as_f64().unwrap()).sum();
        assert_eq!(value, 0.0, "{name}: every request left: {:?}", last.data_points);
    }
}

// ---- Raw HTTP/1.1 -------------------------------------------------------------

/// One response: status, headers (lower-case names), body.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn error(&self) -> &'static str {
        let value: Value = serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body));
        let error = &value["error"];
        for field in ["message", "type", "param", "code"] {
            assert!(error.get(field).is_some(), "OpenAI-shaped error lacks {field}: {}", self.body);
        }
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        Box::leak(error["param"].as_str().unwrap_or("").to_string().into_boxed_str())
    }
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream
}

/// Sends `head` + `body` raw and reads the whole response.
fn raw(port: u16, head: &str, body: &[u8]) -> Reply {
    let mut stream = connect(port);
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    read_reply(BufReader::new(stream))
}

fn read_reply(mut reader: BufReader<TcpStream>) -> Reply {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (k, v) = trimmed.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut body = Vec::new();
    let length = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse::<usize>().ok());
    match length {
        Some(length) => {
            body.resize(length, 0);
            reader.read_exact(&mut body).unwrap();
        }
        None => {
            // Chunked (the event stream): read to the end.
            let _ = reader.read_to_end(&mut body);
        }
    }
    Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

fn post(port: u16, path: &str, body: &str) -> Reply {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    raw(port, &head, body.as_bytes())
}

/// Posts `body` to `/v1/completions` and returns the connection unread:
/// dropping it is a client that leaves.
fn send_completion(port: u16, body: &str) -> TcpStream {
    let mut stream = connect(port);
    let head = format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    stream
}

/// Posts `body` (a streamed completion) to `/v1/completions`, calls
/// `started` once the first server-sent event has arrived, and returns the
/// status and the rest of the stream.
fn stream_after_first_event(port: u16, body: &str, started: impl FnOnce()) -> Reply {
    let mut stream = connect(port);
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    let mut body = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("the stream ended before its first event: {body}");
        }
        body.push_str(&line);
        if line.starts_with("data:") {
            break;
        }
    }
    started();
    let _ = reader.read_to_string(&mut body);
    Reply { status, headers: Vec::new(), body }
}

/// A streamed completion of `max_tokens` tokens (prompt `slow`) on its
/// own thread, returned once its first event has arrived: a request in
/// flight, whose thread yields the rest of the stream.
fn streaming_in_flight(port: u16, model: &str, max_tokens: u64) -> std::thread::JoinHandle<Reply> {
    let (first_event, streaming) = std::sync::mpsc::channel();
    let body = format!(r#"{{"model":"{model}","prompt":"slow","max_tokens":{max_tokens},"stream":true}}"#);
    let in_flight = std::thread::spawn(move || stream_after_first_event(port, &body, || first_event.send(()).unwrap()));
    streaming.recv_timeout(READY_LIMIT).expect("the request in flight streams its first event");
    in_flight
}

fn good_request_succeeds(port: u16) {
    let reply = post(port, "/v1/completions", r#"{"model":"megatron-sim","prompt":"ok","max_tokens":3}"#);
    assert_eq!(reply.status, 200, "a good request still succeeds: {}", reply.body);
    let value: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(value["usage"]["completion_tokens"], 3);
    assert_eq!(value["choices"][0]["text"].as_str().map(str::len), Some(3));
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let ctx = Ctx::new("serve-bad");
    train_checkpoint(&ctx);
    let sink = Sink::start(&ctx);
    let (server, port) = start_server(
        &ctx,
        Some(&sink),
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "default",
            "--header-read-timeout",
            "1",
            "--body-read-timeout",
            "1",
            "--max-connections",
            "6",
            "--max-batch-size",
            "1",
            "--max-queue",
            "1",
            "--max-tokens",
            "400",
            "--max-model-len",
            "512",
            "--max-body-bytes",
            "4096",
            "--decode-step-delay-ms",
            "5",
            "--drain-timeout",
            "20",
        ],
    );
    let c = "/v1/completions";
    let chat = "/v1/chat/completions";
    let long_prompt = format!(r#"{{"model":"megatron-sim","prompt":"{}"}}"#, "a".repeat(600));
    let long_plus_output = format!(r#"{{"model":"megatron-sim","prompt":"{}","max_tokens":100}}"#, "a".repeat(450));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (c, "{not json".into(), 400, ""),
        (c, "[1, 2]".into(), 400, ""),
        (c, r#"{"prompt":"a"}"#.into(), 400, "model"),
        (c, r#"{"model":5,"prompt":"a"}"#.into(), 400, "model"),
        (c, r#"{"model":"gpt-4","prompt":"a"}"#.into(), 404, "model"),
        (c, r#"{"model":"megatron-sim"}"#.into(), 400, "prompt"),
        (c, r#"{"model":"megatron-sim","prompt":42}"#.into(), 400, "prompt"),
        (c, r#"{"model":"megatron-sim","prompt":["a",7]}"#.into(), 400, "prompt"),
        (c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":-5}"#.into(), 400, "max_tokens"),
        (c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":0}"#.into(), 400, "max_tokens"),
        (c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":100000000000}"#.into(), 400, "max_tokens"),
        (c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":1e300}"#.into(), 400, "max_tokens"),
        (c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":"ten"}"#.into(), 400, "max_tokens"),
        (c, r#"{"model":"megatron-sim","prompt":"a","n":2}"#.into(), 400, "n"),
        (c, r#"{"model":"megatron-sim","prompt":"a","temperature":"hot"}"#.into(), 400, "temperature"),
        (c, r#"{"model":"megatron-sim","prompt":"a","temperature":9}"#.into(), 400, "temperature"),
        (c, r#"{"model":"megatron-sim","prompt":"a","top_p":1.5}"#.into(), 400, "top_p"),
        (c, r#"{"model":"megatron-sim","prompt":"a","seed":"x"}"#.into(), 400, "seed"),
        (c, r#"{"model":"megatron-sim","prompt":"a","stop":[1]}"#.into(), 400, "stop"),
        (c, r#"{"model":"megatron-sim","prompt":"a","stream":"yes"}"#.into(), 400, "stream"),
        (
            c,
            r#"{"model":"megatron-sim","prompt":"a","stream_options":{"include_usage":true}}"#.into(),
            400,
            "stream_options",
        ),
        (c, r#"{"model":"megatron-sim","prompt":"a","stream_options":{}}"#.into(), 400, "stream_options"),
        (c, long_prompt, 400, "prompt"),
        (c, long_plus_output, 400, "max_tokens"),
        (chat, r#"{"model":"megatron-sim","messages":"hi"}"#.into(), 400, "messages"),
        (chat, r#"{"model":"megatron-sim","messages":[]}"#.into(), 400, "messages"),
        (chat, r#"{"model":"megatron-sim","messages":[{"role":"wizard","content":"x"}]}"#.into(), 400, "messages"),
        (chat, r#"{"model":"megatron-sim","messages":[{"role":"user","content":5}]}"#.into(), 400, "messages"),
    ];
    for (i, (path, body, status, param)) in cases.iter().enumerate() {
        let reply = post(port, path, body);
        assert_eq!(reply.status, *status, "case {i} ({body}): {}", reply.body);
        assert_eq!(reply.error(), *param, "case {i} ({body}) names {param:?}: {}", reply.body);
        if i % 9 == 0 {
            good_request_succeeds(port);
        }
    }

    // A `prompt` list longer than the server ever holds (--max-batch-size 1
    // plus --max-queue 1): 400 naming the limit, not a 429 to retry for ever.
    let reply = post(port, c, r#"{"model":"megatron-sim","prompt":["a","b","c"],"max_tokens":1}"#);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.error(), "prompt");
    assert!(reply.header("retry-after").is_none(), "nothing to retry: {:?}", reply.headers);
    assert!(reply.body.contains("at most 2 at once (--max-batch-size plus --max-queue)"), "{}", reply.body);
    let reply = post(port, c, r#"{"model":"megatron-sim","prompt":["a","b"],"max_tokens":1}"#);
    assert_eq!(reply.status, 200, "a list the server can hold runs: {}", reply.body);

    // Oversized: 413 from Content-Length alone, before any body byte.
    let head = format!(
        "POST {c} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n"
    );
    let reply = raw(port, &head, b"");
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert_eq!(reply.error(), "");
    assert!(reply.body.contains("4096"), "names the limit: {}", reply.body);
    assert!(reply.body.contains("\"code\":\"request_too_large\""), "{}", reply.body);
    // A chunked body announces no size: cut off past the limit, and said so.
    let head = format!(
        "POST {c} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: \
         close\r\n\r\n"
    );
    let chunk = [format!("{:x}\r\n", 5000).into_bytes(), vec![b'x'; 5000], b"\r\n0\r\n\r\n".to_vec()].concat();
    let reply = raw(port, &head, &chunk);
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert!(
        reply.body.contains("the request body is over 4096 bytes; this server accepts at most 4096 bytes"),
        "{}",
        reply.body
    );
    // Unknown fields are ignored.
    let reply = post(port, c, r#"{"model":"megatron-sim","prompt":"a","max_tokens":2,"logit_bias":{},"user":"u"}"#);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = post(port, "/v2/nothing", "{}");
    assert_eq!(reply.status, 404);
    reply.error();

    // A client that disconnects mid-stream: the server goes on.
    {
        let body = r#"{"model":"megatron-sim","prompt":"bye","max_tokens":300,"stream":true}"#;
        let mut stream = connect(port);
        let head = format!("POST {c} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.contains(" 200 "), "{line:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !line.starts_with("data: {") && Instant::now() < deadline {
            line.clear();
            reader.read_line(&mut line).unwrap();
        }
        assert!(line.starts_with("data: {"), "the stream started: {line:?}");
        drop(reader);
    }
    good_request_succeeds(port);

    // A client that disconnects while a non-streaming request generates:
    // the server goes on (the GenAI span says so, checked at the end).
    {
        let _stream = send_completion(port, r#"{"model":"megatron-sim","prompt":"bye","max_tokens":301}"#);
        // 301 tokens at 5 ms a step take 1.5 s at least: the client leaves
        // half-way.
        std::thread::sleep(Duration::from_millis(800));
    }
    good_request_succeeds(port);

    // A client that leaves while its request waits for the batch (a slow
    // request holds --max-batch-size 1): its job leaves the queue then,
    // place and memory with it, not once the batch has room (its queue
    // span, checked at the end, ends long before the slow request does).
    {
        // 399 tokens at 5 ms a step: 2 s at least.
        let slow = streaming_in_flight(port, MODEL, 399);
        let stream = send_completion(port, r#"{"model":"megatron-sim","prompt":"bye","max_tokens":302}"#);
        // Long enough for the server to have queued it on a loaded machine.
        std::thread::sleep(Duration::from_millis(700));
        drop(stream);
        assert_eq!(slow.join().unwrap().status, 200, "the slow request runs to its end");
    }
    good_request_succeeds(port);

    // A known path with a method it does not answer: 405 in the OpenAI
    // error shape, naming the method and the one it answers.
    let reply = raw(port, &format!("GET {c} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), b"");
    assert_eq!(reply.status, 405, "{}", reply.body);
    assert_eq!(reply.header("allow"), Some("POST"));
    assert_eq!(reply.error(), "");
    assert!(reply.body.contains("GET /v1/completions: this path answers POST only"), "{}", reply.body);

    // Slow clients (--header-read-timeout 1, --body-read-timeout 1): half a
    // header is closed after a second; a body that stops gets 408.
    {
        let mut stream = connect(port);
        stream.write_all(b"POST /v1/completions HTTP/1.1\r\nHo").unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(rest.is_empty(), "no answer to half a header: {:?}", String::from_utf8_lossy(&rest));
        assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(10), "closed after {waited:?}");
    }
    let head = format!("POST {c} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n");
    let reply = raw(port, &head, br#"{"model""#);
    assert_eq!(reply.status, 408, "{}", reply.body);
    assert_eq!(reply.error(), "");
    assert!(reply.body.contains("within 1 s") && reply.body.contains("--body-read-timeout"), "{}", reply.body);
    // Connections past --max-connections 6: 503 in the OpenAI error shape.
    {
        // The kernel queues connections in order, so the server accepts the
        // six before the seventh (each is closed after a second idle).
        let held: Vec<TcpStream> = (0..6).map(|_| connect(port)).collect();
        let reply = raw(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", b"");
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert!(reply.header("retry-after").is_some());
        assert_eq!(reply.error(), "");
        assert!(reply.body.contains("--max-connections"), "{}", reply.body);
        drop(held);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"").status != 200 {
        assert!(Instant::now() < deadline, "the held connections' places come back");
        std::thread::sleep(Duration::from_millis(50));
    }
    good_request_succeeds(port);

    // The queue overflowing: one running (slow), one waiting, the rest 429.
    let slow = r#"{"model":"megatron-sim","prompt":"slow","max_tokens":200}"#;
    let holders: Vec<_> = (0..2)
        .map(|_| {
            let handle = std::thread::spawn(move || post(port, "/v1/completions", slow));
            std::thread::sleep(Duration::from_millis(200));
            handle
        })
        .collect();
    let quick: Vec<Reply> =
        (0..3).map(|_| post(port, c, r#"{"model":"megatron-sim","prompt":"x","max_tokens":1}"#)).collect();
    let slow: Vec<Reply> = holders.into_iter().map(|holder| holder.join().unwrap()).collect();
    // The first slow request runs; the second is usually admitted to the
    // queue 200 ms later, but on a loaded machine a quick one may take the
    // queue's place first and the second slow one is refused instead.
    // Either way each request is served or refused with a 429, and at
    // least one is refused.
    assert_eq!(slow[0].status, 200, "the first slow request finishes: {}", slow[0].body);
    let mut rejected = 0;
    for reply in slow.iter().chain(&quick) {
        if reply.status == 429 {
            assert!(reply.header("retry-after").is_some(), "429 carries Retry-After");
            assert_eq!(reply.error(), "");
            assert!(reply.body.contains("queue"), "{}", reply.body);
            rejected += 1;
        } else {
            assert_eq!(reply.status, 200, "a request is served or refused: {}", reply.body);
        }
    }
    assert!(rejected >= 1, "with --max-batch-size 1 --max-queue 1 and two slow requests, new ones get 429");
    good_request_succeeds(port);

    // The drain: a request in flight finishes, new ones get 503. The
    // signal goes once the server streams the request's first event, so
    // that it is in flight however loaded the machine (a fixed sleep let a
    // slow machine signal before the server had read it).
    let in_flight = streaming_in_flight(port, MODEL, 200);
    server.signal(libc::SIGTERM);
    // Polled with `GET /health`, which is never queued: a completion posted
    // before the server saw the signal would be admitted, wait out the
    // stream in flight, and leave the next probe to a closed listener.
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        let reply = raw(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", b"");
        if reply.status == 503 || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(health.status, 503, "GET /health while draining: {}", health.body);
    let draining = post(port, c, r#"{"model":"megatron-sim","prompt":"x","max_tokens":1}"#);
    assert_eq!(draining.status, 503, "{}", draining.body);
    assert!(draining.header("retry-after").is_some(), "503 carries Retry-After");
    draining.error();
    let finished = in_flight.join().unwrap();
    assert_eq!(finished.status, 200, "the request in flight finished during the drain: {}", finished.body);
    assert!(
        finished.body.contains("data: [DONE]") && !finished.body.contains("\"error\""),
        "the stream in flight ran to its end: {}",
        finished.body
    );
    let done = server.wait(Duration::from_secs(60));
    done.assert_success("the drain");
    assert!(!done.stderr.contains("panicked"), "{}", done.stderr);

    // The two clients that went away: each GenAI span says so, with the
    // tokens generated before (more than none, fewer than asked).
    let records = sink.stop();
    for (max_tokens, how) in [(300, "streaming"), (301, "non-streaming")] {
        let spans: Vec<_> = records
            .spans_named("text_completion megatron-sim")
            .filter(|s| s.attributes.get("gen_ai.request.max_tokens") == Some(&serde_json::json!(max_tokens)))
            .collect();
        assert_eq!(spans.len(), 1, "{how}: one GenAI span of the request that was left");
        assert_eq!(attr(spans[0], "error.type"), "client_disconnected", "{how}");
        let output = attr(spans[0], "gen_ai.usage.output_tokens").as_u64().unwrap();
        assert!(output > 0 && output < max_tokens, "{how}: {output} tokens generated before the client left");
        // Its time is in its phases as for a request that ran to its end:
        // one queue, one prefill and one decode span under the GenAI span,
        // the decode with the tokens sent before the client left.
        let phases: Vec<&str> = records
            .spans
            .iter()
            .filter(|s| s.parent_span_id == spans[0].span_id)
            .map(|s| s.name.as_str())
            .filter(|name| name.starts_with("megatron.inference."))
            .collect();
        for phase in ["megatron.inference.queue", "megatron.inference.prefill", "megatron.inference.decode"] {
            assert_eq!(phases.iter().filter(|p| **p == phase).count(), 1, "{how}: {phases:?}");
        }
        let decode = records
            .spans
            .iter()
            .find(|s| s.parent_span_id == spans[0].span_id && s.name == "megatron.inference.decode")
            .unwrap();
        assert!(attr(decode, "gen_ai.usage.output_tokens").as_u64().unwrap() > 0, "{how}: {decode:?}");
        let server = records.spans.iter().find(|s| s.span_id == spans[0].parent_span_id).expect("the HTTP span");
        assert_eq!(server.name, "POST /v1/completions");
        if how == "non-streaming" {
            assert!(
                !spans[0].attributes.contains_key("gen_ai.response.id"),
                "no response reached the client: no response id, not an empty one"
            );
            // No response: no status code, and the HTTP span says why.
            assert_eq!(attr(server, "error.type"), "client_disconnected", "{server:?}");
            assert!(!server.attributes.contains_key("http.response.status_code"), "{server:?}");
        } else {
            // The response began (200); the GenAI span says the client left.
            assert_eq!(attr(server, "http.response.status_code"), 200, "{server:?}");
            assert!(!server.attributes.contains_key("error.type"), "{server:?}");
        }
    }
    let genai = |max_tokens: u64| {
        records
            .spans_named("text_completion megatron-sim")
            .find(|s| s.attributes.get("gen_ai.request.max_tokens") == Some(&serde_json::json!(max_tokens)))
            .unwrap_or_else(|| panic!("the GenAI span of the request with max_tokens {max_tokens}"))
    };
    // The three requests whose clients left (mid-stream, mid-generation,
    // while queued) record their duration with error.type, and no other
    // request of this server ended early.
    let ended_early: u64 = records
        .metrics_named("gen_ai.server.request.duration")
        .flat_map(|metric| &metric.data_points)
        .filter(|point| point["attributes"].get("error.type").is_some())
        .map(|point| {
            assert_eq!(point["attributes"]["error.type"], "client_disconnected", "{point}");
            point["count"].as_u64().unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    assert_eq!(ended_early, 3, "requests that ended early, in the duration histogram");
    let (left, slow) = (genai(302), genai(399));
    assert_eq!(attr(left, "error.type"), "client_disconnected");
    let phases: Vec<_> = records.spans.iter().filter(|s| s.parent_span_id == left.span_id).collect();
    assert_eq!(phases.len(), 1, "a request that never got in has its queue span only: {phases:?}");
    assert_eq!(phases[0].name, "megatron.inference.queue");
    assert!(
        phases[0].end_ns + 500_000_000 < slow.end_ns,
        "the queue span of a request whose client left ends when it leaves ({} ns), not when the slow request \
         ends ({} ns)",
        phases[0].end_ns,
        slow.end_ns
    );
    ctx.finish();
}

/// A request the drain timeout cuts short: the client gets 503
/// `shutting_down`, and its GenAI span counts the tokens generated until
/// then (as its decode span does), not none.
#[test]
fn a_request_cut_by_the_drain_timeout_counts_the_tokens_it_got() {
    let ctx = Ctx::new("serve-drain-cut");
    train_checkpoint(&ctx);
    let sink = Sink::start(&ctx);
    let (server, port) = start_server(
        &ctx,
        Some(&sink),
        &["--otel-enabled", "--decode-step-delay-ms", "20", "--drain-timeout", "1", "--max-tokens", "1000"],
    );
    // 900 tokens at 20 ms each: about 18 s, far past the 1 s drain. The
    // request has no event to wait for (it is not streamed): 3 s leaves a
    // loaded machine time to admit it (a 503 `draining` would fail below).
    let in_flight = std::thread::spawn(move || {
        post(port, "/v1/completions", r#"{"model":"megatron-sim","prompt":"slow","max_tokens":900}"#)
    });
    std::thread::sleep(Duration::from_secs(3));
    server.signal(libc::SIGTERM);
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(reply.body.contains("shutting_down"), "{}", reply.body);
    server.wait(Duration::from_secs(60)).assert_success("the drain that timed out");
    let records = sink.stop();
    let spans: Vec<_> = records.spans_named("text_completion megatron-sim").collect();
    assert_eq!(spans.len(), 1, "one GenAI span");
    assert_eq!(attr(spans[0], "error.type"), "shutting_down");
    let output = attr(spans[0], "gen_ai.usage.output_tokens").as_u64().unwrap();
    let decode = records
        .spans
        .iter()
        .find(|s| s.parent_span_id == spans[0].span_id && s.name == "megatron.inference.decode")
        .expect("the decode span");
    let decoded = attr(decode, "gen_ai.usage.output_tokens").as_u64().unwrap();
    assert!(output > 0 && output <= decoded && output < 900, "{output} tokens counted, {decoded} decoded");
    // Its duration is recorded with the error, and nothing else of it.
    let points: Vec<&Value> = records
        .metrics_named("gen_ai.server.request.duration")
        .flat_map(|metric| &metric.data_points)
        .filter(|point| point["count"].as_u64() > Some(0))
        .collect();
    assert!(!points.is_empty(), "the request's duration is recorded");
    for point in &points {
        assert_eq!(point["attributes"]["error.type"], "shutting_down", "{point}");
        assert_eq!(point["count"], 1, "{point}");
    }
    assert!(
        records.metrics_named("gen_ai.server.time_to_first_token").all(|m| m.data_points.is_empty()),
        "no latency of a request that did not finish"
    );
    ctx.finish();
}

/// A second SIGTERM during the drain ends the requests in flight at once
/// (503 `shutting_down`, as a drain timeout does) instead of waiting out
/// `--drain-timeout`, and the server still exits 0 with its telemetry
/// flushed. The same signal twice at once (a launcher forwarding the
/// terminal's) is one signal: the drain goes on.
#[test]
fn a_second_signal_ends_the_drain_at_once() {
    let ctx = Ctx::new("serve-second-signal");
    train_checkpoint(&ctx);
    let flags = ["--decode-step-delay-ms", "20", "--drain-timeout", "600", "--max-tokens", "1000"];
    {
        // A served name with a slash, as Hugging Face names are: retrieved
        // by its path.
        let named: Vec<&str> = flags.iter().copied().chain(["--served-model-name", "org/sim"]).collect();
        let (server, port) = start_server(&ctx, None, &named);
        let model = raw(port, "GET /v1/models/org/sim HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"");
        assert_eq!(model.status, 200, "{}", model.body);
        assert!(model.body.contains(r#""id":"org/sim""#), "{}", model.body);
        // 60 tokens at 20 ms each: about 1.2 s.
        let in_flight = streaming_in_flight(port, "org/sim", 60);
        server.signal(libc::SIGTERM);
        server.signal(libc::SIGTERM);
        let reply = in_flight.join().unwrap();
        assert!(!reply.body.contains("shutting_down"), "the drain went on: {}", reply.body);
        let done = server.wait(Duration::from_secs(60));
        done.assert_success("the drain of a signal sent twice at once");
        assert!(done.stderr.contains("drained: every request in flight finished"), "{}", done.stderr);
    }
    let (mut server, port) = start_server(&ctx, None, &flags);
    // 900 tokens at 20 ms each: about 18 s, and the drain waits 600 s.
    let in_flight = streaming_in_flight(port, MODEL, 900);
    server.signal(libc::SIGTERM);
    server.wait_for_stderr_lines(&["draining: 1 requests in flight".to_string()], Duration::from_secs(20));
    // A signal within a second of the first is that one forwarded again.
    std::thread::sleep(Duration::from_millis(1200));
    server.signal(libc::SIGTERM);
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 200, "the stream had begun: {}", reply.body);
    let error = reply.body.find(r#"data: {"error":{"code":"shutting_down""#);
    let done = reply.body.rfind("data: [DONE]");
    assert!(
        error.zip(done).is_some_and(|(error, done)| error < done),
        "the stream ends with an error event, then [DONE]: {}",
        reply.body
    );
    let done = server.wait(Duration::from_secs(60));
    done.assert_success("the drain a second signal cut short");
    assert!(
        done.stderr.contains("drain cut short by a second signal: 1 requests ended with an error"),
        "{}",
        done.stderr
    );
    ctx.finish();
}
