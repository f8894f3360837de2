//! End to end against real receivers: the simulator's telemetry as an OTLP
//! receiver built on the official protobuf definitions decodes it (over
//! gRPC, HTTP/protobuf and HTTP/JSON), through the `rotel` collector, and as
//! Prometheus scrapes and queries it with the seed metrics page's names and
//! run-id filter. The programs come from `.ci/run`; the harness is
//! `e2e_support` (every wait bounded, 127.0.0.1 only, every output scanned
//! for the OTLP header token at the end of each test).
#![cfg(feature = "otel")]

mod e2e_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e_support::{
    Ctx, HeldPorts, Prometheus, Protocol, Records, Rotel, Sink, SinkOptions, canary_token, documented_recipe, sim_args,
    strs,
};
use megatron_telemetry::metrics::{self, InstrumentKind};
use megatron_telemetry::taxonomy::{self, SpanDef};
use serde_json::Value;

/// A simulator run's bound (debug build, 2 CPU cores, other tests alongside).
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// How long exported data may take to show up at a receiver after the run.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(30);
/// Ranks and iterations of the OTLP runs (iteration 3 is made NaN, so the
/// skipped-iterations counter moves).
const RANKS: u32 = 2;
const ITERS: u32 = 4;

/// Spans checked by name and parent (the parent the taxonomy documents):
/// one or more from each trace and level of the tree.
const REPRESENTATIVE: &[SpanDef] = &[
    taxonomy::STARTUP,
    taxonomy::STARTUP_MODEL_INIT,
    taxonomy::STARTUP_DATALOADER,
    taxonomy::TRAIN,
    taxonomy::TRAIN_FIRST_ITERATION,
    taxonomy::TRAIN_ITERATION_FORWARD_BACKWARD,
    taxonomy::MICROBATCH_FORWARD,
    taxonomy::MICROBATCH_BACKWARD,
    taxonomy::LAYER_FORWARD,
    taxonomy::LAYER_MLP,
    taxonomy::PP_RECV_FORWARD_LINKED,
    taxonomy::GRAD_SYNC_START,
    taxonomy::TRAIN_ITERATION_OPTIMIZER,
    taxonomy::TRAIN_ITERATION_REPORT,
    taxonomy::TRAIN_LOG,
    taxonomy::CHECKPOINT_EXPOSED_SAVE,
    taxonomy::CHECKPOINT_SAVE,
    taxonomy::CHECKPOINT_SAVE_IO_WRITE,
];

/// The OTLP run's arguments.
fn otlp_args() -> Vec<String> {
    let mut args = sim_args(RANKS, ITERS);
    args.extend(["--inject-nan-at", "3"].map(String::from));
    args
}

/// The spans each rank reported as exported in its summary line
/// (`spans: N exported`).
fn reported_exported_spans(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.starts_with("telemetry (rank"))
        .filter_map(|l| l.split("spans: ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Checks the spans of one `RANKS`-rank run at a receiver.
fn check_spans(records: &Records) {
    let by_id = records.by_id();
    let names: BTreeSet<&str> = records.spans.iter().map(|s| s.name.as_str()).collect();
    for def in REPRESENTATIVE {
        let spans: Vec<_> = records.spans_named(def.name).collect();
        assert!(!spans.is_empty(), "no {} span arrived; names: {names:?}", def.name);
        let ranks: BTreeSet<_> = spans.iter().filter_map(|s| s.rank()).collect();
        // The last stage receives activations; every other span is on every rank.
        let expected: BTreeSet<i64> = if def.name == taxonomy::PP_RECV_FORWARD_LINKED.name {
            [i64::from(RANKS) - 1].into()
        } else {
            (0..i64::from(RANKS)).collect()
        };
        assert_eq!(ranks, expected, "{} from ranks {ranks:?}", def.name);
        for span in &spans {
            match def.parent {
                None => assert!(span.parent_span_id.is_empty(), "{} should be a trace root", def.name),
                Some(parent) => assert_eq!(
                    records.parent_name(&by_id, span),
                    Some(parent),
                    "{} ({}) should be a child of {parent}",
                    def.name,
                    span.span_id
                ),
            }
        }
    }
    // Iterations under the interval (the first one under first_iteration).
    let iterations: Vec<_> = records.spans_named(taxonomy::TRAIN_ITERATION.name).collect();
    assert_eq!(iterations.len(), (RANKS * ITERS) as usize, "one iteration span per rank and iteration");
    for span in &iterations {
        let parent = records.parent_name(&by_id, span);
        assert!(
            parent == Some(taxonomy::TRAIN.name) || parent == Some(taxonomy::TRAIN_FIRST_ITERATION.name),
            "an iteration under {parent:?}"
        );
        let iteration = span.attributes.get(taxonomy::attr::ITERATION).and_then(Value::as_i64);
        assert!(iteration.is_some(), "iteration span without {}: {:?}", taxonomy::attr::ITERATION, span.attributes);
    }
    for rank in 0..i64::from(RANKS) {
        let numbers: BTreeSet<i64> = iterations
            .iter()
            .filter(|s| s.rank() == Some(rank))
            .filter_map(|s| s.attributes.get(taxonomy::attr::ITERATION)?.as_i64())
            .collect();
        assert_eq!(numbers.len(), ITERS as usize, "rank {rank}: distinct megatron.iteration values {numbers:?}");
        let skipped = iterations
            .iter()
            .filter(|s| s.rank() == Some(rank))
            .filter(|s| s.attributes.get(taxonomy::attr::SKIPPED) == Some(&Value::Bool(true)))
            .count();
        assert_eq!(skipped, 1, "rank {rank}: the NaN iteration is marked {}", taxonomy::attr::SKIPPED);
    }
    // Links: each rank's first interval links to its startup span, each
    // later interval to the interval before.
    for rank in 0..i64::from(RANKS) {
        let startup: Vec<_> = records.spans_named(taxonomy::STARTUP.name).filter(|s| s.rank() == Some(rank)).collect();
        assert_eq!(startup.len(), 1, "rank {rank}: one startup span");
        let mut intervals: Vec<_> =
            records.spans_named(taxonomy::TRAIN.name).filter(|s| s.rank() == Some(rank)).collect();
        intervals.sort_by_key(|s| s.start_ns);
        assert_eq!(intervals.len(), (ITERS / 2) as usize, "rank {rank}: one interval per --save-interval");
        let mut previous = startup[0];
        for interval in intervals {
            assert_eq!(
                interval.links,
                vec![(previous.trace_id.clone(), previous.span_id.clone())],
                "rank {rank}: interval {} links to {} {}",
                interval.span_id,
                previous.name,
                previous.span_id
            );
            previous = interval;
        }
    }
    // The pipeline's linked spans point at the other rank's send span.
    for linked in records.spans_named(taxonomy::PP_RECV_FORWARD_LINKED.name) {
        assert_eq!(linked.links.len(), 1, "a recv_forward.linked span has one link");
        let target = by_id.get(linked.links[0].1.as_str()).expect("the link target (a send span) arrived");
        assert_ne!(target.rank(), linked.rank(), "the link points at the sending rank");
    }
    // Resource attributes: one run id, an instance per rank, the model.
    let run_ids: BTreeSet<String> =
        records.spans.iter().map(|s| s.resource["nemo.run.id"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(run_ids.len(), 1, "one nemo.run.id across ranks: {run_ids:?}");
    let run_id = run_ids.first().unwrap().as_str();
    assert!(!run_id.is_empty(), "nemo.run.id is a non-empty string");
    let mut instances = BTreeMap::new();
    for span in &records.spans {
        let rank = span.rank().expect("dl.rank on every span's resource");
        let instance = span.resource["service.instance.id"].as_str().expect("service.instance.id").to_string();
        assert_eq!(instance, format!("{run_id}-rank{rank}"));
        instances.insert(rank, instance);
        assert_eq!(span.resource["megatron.num_layers"], 4, "megatron.num_layers");
        assert_eq!(span.resource["dl.world_size"], i64::from(RANKS));
        assert_eq!(span.resource["service.name"], "megatron-lm");
    }
    assert_eq!(instances.len(), RANKS as usize, "{instances:?}");
}

/// Checks the training metrics of one run at a receiver.
fn check_metrics(records: &Records) {
    for def in metrics::METRICS {
        let exported: Vec<_> = records.metrics_named(def.name).collect();
        assert!(!exported.is_empty(), "{} did not arrive", def.name);
        for metric in exported {
            let (kind, monotonic) = match def.kind {
                InstrumentKind::Histogram => ("histogram", None),
                InstrumentKind::Gauge => ("gauge", None),
                InstrumentKind::Counter => ("sum", Some(true)),
            };
            assert_eq!(metric.kind, kind, "{} kind", def.name);
            assert_eq!(metric.is_monotonic, monotonic, "{} monotonic", def.name);
            assert_eq!(metric.unit, def.unit.unwrap_or(""), "{} unit", def.name);
            assert!(!metric.data_points.is_empty(), "{}: a metric without points", def.name);
            assert!(metric.resource.contains_key("nemo.run.id"), "{}: no nemo.run.id", def.name);
        }
    }
    let step = records.metrics_named(metrics::STEP_DURATION_MS.name).last().unwrap();
    assert_eq!(step.unit, "ms");
    let point = &step.data_points[0];
    assert!(point["count"].as_u64().unwrap() >= 1, "a step-duration histogram point with a count: {point}");
    assert!(!point["explicit_bounds"].as_array().unwrap().is_empty(), "histogram bounds");
    let skipped: Vec<_> = records
        .metrics_named(metrics::SKIPPED_ITERS.name)
        .flat_map(|m| m.data_points.iter().filter_map(|p| p["value"].as_i64()))
        .collect();
    assert_eq!(skipped.iter().max(), Some(&1), "one skipped iteration counted: {skipped:?}");
    let losses: Vec<f64> = records
        .metrics_named(metrics::LOSS.name)
        .flat_map(|m| m.data_points.iter().filter_map(|p| p["value"].as_f64()))
        .collect();
    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0), "finite losses: {losses:?}");
}

/// One run exporting over `protocol` straight to the sink.
fn run_to_sink(name: &str, protocol: Protocol) {
    let ctx = Ctx::new(name);
    let sink = Sink::start_with(
        &ctx,
        SinkOptions { required_token: Some(canary_token().to_string()), ..SinkOptions::default() },
    );
    let args = otlp_args();
    let run = ctx.sim(&strs(&args)).otlp(protocol, &sink.endpoint(protocol)).run(RUN_LIMIT);
    run.assert_success("the simulator");
    let exported = reported_exported_spans(&run.stderr);
    assert!(exported > 0, "the summary reports exported spans:\n{}", run.stderr);
    let records =
        sink.wait_for("the reported spans at the sink", ARRIVAL_LIMIT, |r| r.accepted_items("traces") >= exported);
    assert_eq!(records.spans.len() as u64, exported, "exported (per the summaries) = received");
    assert!(records.requests.iter().all(|r| r.header_ok && r.outcome == "ok"), "every request had the header");
    assert!(records.spans.iter().all(|s| s.transport == protocol.as_str()));
    assert!(records.metrics.iter().all(|m| m.transport == protocol.as_str()));
    check_spans(&records);
    check_metrics(&records);
    let records = sink.stop();
    assert!(records.requests.iter().all(|r| r.outcome != "undecodable"), "the sink decoded every request");
    ctx.finish();
}

#[test]
fn grpc_export_decodes_at_a_protobuf_receiver() {
    run_to_sink("grpc", Protocol::Grpc);
}

#[test]
fn http_protobuf_export_decodes_at_a_protobuf_receiver() {
    run_to_sink("http-protobuf", Protocol::HttpProtobuf);
}

#[test]
fn http_json_export_decodes_at_a_protobuf_receiver() {
    run_to_sink("http-json", Protocol::HttpJson);
}

#[test]
fn spans_and_metrics_pass_through_the_rotel_collector() {
    let ctx = Ctx::new("rotel");
    let sink = Sink::start(&ctx);
    let rotel = Rotel::start(&ctx, &sink.endpoint(Protocol::Grpc));
    let args = otlp_args();
    let run = ctx.sim(&strs(&args)).otlp(Protocol::Grpc, &rotel.endpoint(Protocol::Grpc)).run(RUN_LIMIT);
    run.assert_success("the simulator");
    let exported = reported_exported_spans(&run.stderr);
    let records = sink.wait_for("every span through rotel", ARRIVAL_LIMIT, |r| {
        r.spans.len() as u64 >= exported && metrics::METRICS.iter().all(|d| r.metrics_named(d.name).next().is_some())
    });
    assert_eq!(records.spans.len() as u64, exported, "rotel forwarded each span once");
    check_spans(&records);
    check_metrics(&records);
    let rotel_exit = rotel.stop();
    assert!(rotel_exit.stderr.is_empty() || !rotel_exit.stderr.contains("panicked"), "{}", rotel_exit.stderr);
    sink.stop();
    ctx.finish();
}

#[test]
fn prometheus_scrapes_every_seed_metric_name_with_the_run_id_filter() {
    let ctx = Ctx::new("prometheus");
    let ports = HeldPorts::hold(RANKS as u16);
    let targets: Vec<String> = (0..RANKS as u16).map(|i| format!("127.0.0.1:{}", ports.base() + i)).collect();
    let prometheus = Prometheus::start(&ctx, &targets);
    let base = ports.release();
    let run_id = format!("e2e-prom-{}", std::process::id());
    let mut args = sim_args(RANKS, 6);
    args.extend(["--inject-nan-at", "3"].map(String::from));
    let sim = ctx
        .sim(&strs(&args))
        .envs(&[
            ("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks"),
            ("MEGATRON_OTEL_RUN_ID", &run_id),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &base.to_string()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("MEGATRON_OTEL_PROMETHEUS_LINGER_MS", "12000"),
        ])
        .spawn();

    // Every Prometheus name of the seed page (the histogram through its
    // three series), each with the run's id on every series.
    let mut names = Vec::new();
    for def in metrics::METRICS {
        if def.kind == InstrumentKind::Histogram {
            names.extend(["_count", "_sum", "_bucket"].map(|s| format!("{}{s}", def.prometheus_name)));
        } else {
            names.push(def.prometheus_name.to_string());
        }
    }
    assert!(names.contains(&"megatron_training_step_duration_ms_milliseconds_bucket".to_string()));
    assert!(names.contains(&"megatron_training_skipped_iters_total".to_string()));
    // The counter moves at the NaN iteration: wait until its 1 is scraped
    // from every rank (the final values stay up during the linger).
    let skipped = format!("megatron_training_skipped_iters_total{{nemo_run_id=\"{run_id}\"}} == 1");
    prometheus.wait_for_series(&skipped, Duration::from_secs(60));
    wait_until_len(&prometheus, &skipped, RANKS as usize);
    for name in &names {
        let series = prometheus.wait_for_series(name, Duration::from_secs(20));
        for s in &series {
            assert_eq!(s["metric"]["nemo_run_id"], run_id.as_str(), "{name}: {s}");
        }
        let instances: BTreeSet<_> = series.iter().map(|s| s["metric"]["service_instance_id"].to_string()).collect();
        assert_eq!(instances.len(), RANKS as usize, "{name} from every rank: {instances:?}");
    }
    let buckets = prometheus.query("megatron_training_step_duration_ms_milliseconds_bucket");
    assert!(buckets.iter().any(|s| s["metric"]["le"] == "+Inf"), "a +Inf bucket");
    // The seed page's run filter.
    let filter = format!("{{nemo_run_id=\"{run_id}\", __name__=~\"megatron_training_.*\"}}");
    let found: BTreeSet<String> =
        prometheus.query(&filter).iter().filter_map(|s| s["metric"]["__name__"].as_str().map(str::to_string)).collect();
    let expected: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(found, expected, "the run filter returns exactly the seed page's names");
    let other = prometheus.query("{nemo_run_id=\"another-run\", __name__=~\"megatron_training_.*\"}");
    assert!(other.is_empty(), "another run id matches nothing");

    let run = sim.wait(RUN_LIMIT);
    run.assert_success("the simulator");
    prometheus.stop();
    ctx.finish();
}

/// The Prometheus port is the base port when at most one
/// rank of a host exports metrics (`single_rank`: only the last rank, local
/// rank 3 of 4, serves, on the base port), and base + local rank when several
/// do (`all_ranks`: base..base+3, each page from its own rank). Both runs at
/// once, scraped over HTTP during the run and the linger; each summary line
/// names the address that served.
#[test]
fn prometheus_port_is_the_base_unless_several_ranks_of_the_host_export() {
    const NODE_RANKS: u16 = 4;
    let ctx = Ctx::new("prometheus-ports");
    // The two runs are at the same time: each saves to its own directory.
    let run = |strategy: &str, base: u16| {
        let mut args = sim_args(u32::from(NODE_RANKS), 2);
        for arg in &mut args {
            if arg == "ckpt" {
                *arg = format!("ckpt-{strategy}");
            }
        }
        ctx.sim(&strs(&args))
            .label(strategy)
            .envs(&[
                ("MEGATRON_OTEL_RANK_STRATEGY", strategy),
                ("OTEL_TRACES_EXPORTER", "none"),
                ("OTEL_METRICS_EXPORTER", "prometheus"),
                ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
                ("OTEL_EXPORTER_PROMETHEUS_PORT", &base.to_string()),
                ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ("MEGATRON_OTEL_PROMETHEUS_LINGER_MS", "6000"),
            ])
            .spawn()
    };
    let single_base = HeldPorts::hold(2 * NODE_RANKS).release();
    let all_base = single_base + NODE_RANKS;
    let single = run("single_rank", single_base);
    let all = run("all_ranks", all_base);

    // Every port's page once it has the training metrics; each must be the
    // page of its rank (target_info carries dl.rank). The ports are polled
    // together, not one after another: a run serves its pages only while it
    // trains and lingers, and on a loaded machine the later ports of a
    // one-at-a-time poll could be reached after their run had gone.
    let mut pending: Vec<(u16, u16)> =
        std::iter::once((single_base, NODE_RANKS - 1)).chain((0..NODE_RANKS).map(|i| (all_base + i, i))).collect();
    let mut served = Vec::new();
    e2e_support::wait_until("the training metrics on every port", Duration::from_secs(60), || {
        pending.retain(|&(port, rank)| {
            let page = e2e_support::http_get(port, "/metrics")
                .ok()
                .filter(|(status, body)| *status == 200 && body.contains("megatron_training_"));
            match page {
                Some((_, body)) => {
                    served.push((port, rank, body));
                    false
                }
                None => true,
            }
        });
        pending.is_empty().then_some(())
    });
    for (port, rank, page) in &served {
        assert!(page.contains(&format!("dl_rank=\"{rank}\"")), "port {port} serves rank {rank}:\n{page}");
    }
    assert_eq!(served.len(), 1 + usize::from(NODE_RANKS));
    for i in 1..NODE_RANKS {
        assert!(e2e_support::http_get(single_base + i, "/metrics").is_err(), "single_rank serves only the base port");
    }

    let single = single.wait(RUN_LIMIT);
    single.assert_success("single_rank");
    let all = all.wait(RUN_LIMIT);
    all.assert_success("all_ranks");
    let summary = |rank: u16, port: u16| {
        format!("telemetry (rank {rank}) -> metrics: Prometheus http://127.0.0.1:{port}/metrics")
    };
    assert!(single.stderr.contains(&summary(NODE_RANKS - 1, single_base)), "{}", single.stderr);
    for i in 0..NODE_RANKS {
        assert!(all.stderr.contains(&summary(i, all_base + i)), "{}", all.stderr);
    }
    ctx.finish();
}

/// Polls `promql` until it returns `len` series (at most 20 s).
fn wait_until_len(prometheus: &Prometheus, promql: &str, len: usize) {
    e2e_support::wait_until(&format!("{len} series for {promql}"), Duration::from_secs(20), || {
        (prometheus.query(promql).len() == len).then_some(())
    });
}

/// Issue #12 item 3(b): the documented PromQL straggler recipe, asked of a
/// real Prometheus that scrapes four data-parallel ranks (one of them made
/// late in `backward` by `--inject-straggler`), returns that rank and that
/// phase, and nobody else; the dashboard's straggler panel runs the same
/// query.
#[test]
fn prometheus_names_the_injected_straggler_rank_and_phase() {
    const DP: u16 = 4;
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/backends.md")).unwrap();
    let recipe = documented_recipe(&page, "straggler");
    let dashboard = page.split("```json\n").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
    let dashboard: Value = serde_json::from_str(dashboard).expect("the dashboard JSON of docs/backends.md parses");
    let panel_exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|target| target["expr"].as_str().map(|e| e.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect();
    let one_line = recipe.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(panel_exprs.contains(&one_line), "the dashboard has a panel with the straggler recipe");

    let ctx = Ctx::new("prometheus-straggler");
    let ports = HeldPorts::hold(DP);
    let targets: Vec<String> = (0..DP).map(|i| format!("127.0.0.1:{}", ports.base() + i)).collect();
    let prometheus = Prometheus::start(&ctx, &targets);
    // The recipe takes rates: Prometheus must scrape while the counters
    // rise, so the run starts once it scrapes (the targets still down).
    prometheus.wait_for_series("up", Duration::from_secs(30));
    let run_id = format!("e2e-straggler-{}", std::process::id());
    let args = [
        "--otel-enabled",
        "--nproc-per-node",
        "4",
        "--hidden-size",
        "16",
        "--num-attention-heads",
        "2",
        "--num-layers",
        "2",
        "--seq-length",
        "8",
        // Long enough (64 x 50 ms of straggling) for several scrapes a
        // second apart while the counters rise: the recipe takes rates.
        "--train-iters",
        "64",
        "--log-interval",
        "2",
        "--inject-straggler",
        "2:backward:50",
    ];
    let base = ports.release();
    let sim = ctx
        .sim(&args)
        .envs(&[
            ("MEGATRON_OTEL_RUN_ID", &run_id),
            ("MEGATRON_OTEL_RANK_METRICS", "1"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", &base.to_string()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
            ("MEGATRON_OTEL_PROMETHEUS_LINGER_MS", "15000"),
        ])
        .spawn();

    // Every rank's last iteration scraped (the values stay up during the
    // linger), then the recipe.
    let done = format!("dl_training_iterations_total{{nemo_run_id=\"{run_id}\"}} == 64");
    prometheus.wait_for_series(&done, Duration::from_secs(60));
    wait_until_len(&prometheus, &done, usize::from(DP));
    let query = recipe.replace("$run_id", &run_id);
    let culprits = prometheus.wait_for_series(&query, Duration::from_secs(20));
    let found: Vec<(String, String)> = culprits
        .iter()
        .map(|s| {
            (
                s["metric"]["dl_rank"].as_str().unwrap_or("").into(),
                s["metric"]["dl_phase"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(found, vec![("2".to_string(), "backward".to_string())], "{culprits:?}");
    let lateness: f64 = culprits[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(lateness > 10.0, "the lateness is over the threshold: {lateness} ms");

    let run = sim.wait(RUN_LIMIT);
    run.assert_success("the simulator");
    prometheus.stop();
    ctx.finish();
}
