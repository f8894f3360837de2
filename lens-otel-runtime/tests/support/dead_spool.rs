//! A dead writer's spool as the replay tests need it, shared by the test
//! files through `#[path]`: a spool left as a killed process leaves it, and
//! the configuration of a rank that keeps its spool in a test directory.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lens_core::config::LensConfig;
use lens_core::identity::RankContext;
use lens_otel_runtime::spool::{Identity, SpoolTable};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let dir = std::env::temp_dir().join(format!("lens-spool-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub(crate) fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
}

pub(crate) fn span(name: &'static str, id: u64, parent: u64, start: SystemTime) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            TraceId::from(0x5eed_u128),
            SpanId::from(id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::from(parent),
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Borrowed(name),
        start_time: start,
        end_time: start,
        attributes: vec![KeyValue::new("dl.iteration", 17_i64)],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("nemo.lens").build(),
    }
}

pub(crate) fn identity(rank: u32, world_size: u32) -> Identity {
    Identity { rank, world_size, run_id: "dead-run".into(), host: "node-07".into() }
}

/// A spool left as a killed process leaves it: `megatron.train` and its
/// iteration open, the iteration's forward-backward ended but not yet
/// exported, progress at iteration 17 (completed 16, durable 10), then the
/// writer's lock dropped as its death would.
pub(crate) fn dead_spool(dir: &Path, rank: u32) -> PathBuf {
    let table = SpoolTable::create(dir, 256 * 1024, &identity(rank, 2)).expect("spool");
    table.write_meta(&identity(rank, 2), &[KeyValue::new("service.name", "dead-service")]);
    table.span_started(&span("megatron.train", 1, 0, at(0)));
    table.span_started(&span("megatron.train.iteration", 2, 1, at(10)));
    let mut child = span("megatron.train.iteration.forward_backward", 3, 2, at(11));
    table.span_started(&child);
    child.end_time = at(12);
    table.span_ended(&child);
    table.write_progress(17, Some(16), Some(10), at(12));
    table.touch(at(13));
    let path = table.path().expect("a file").to_path_buf();
    table.stop();
    table.close_file();
    path
}

/// The one rank of a world of one.
pub(crate) const RANK_0: RankContext = RankContext { rank: 0, world_size: 1, local_rank: 0, node_rank: None };

/// Telemetry on for every rank, traces only, with its spool in `dir`.
pub(crate) fn spooling_config(dir: &Path) -> LensConfig {
    LensConfig {
        enabled: true,
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
        spool_dir: Some(dir.to_path_buf()),
        ..LensConfig::default()
    }
}
