//! Who this process is: its rank context, the run id, the resource it
//! reports and the deterministic job and run UUIDs.
//!
//! Everything here reads the environment through an
//! [`EnvSource`](crate::env::EnvSource), never directly, and nothing here
//! depends on OpenTelemetry: the runtime turns a [`ResourceAttributes`] into
//! an OpenTelemetry `Resource`.
//!
//! - [`RankContext::detect`]: rank, world size, local and node rank from the
//!   launcher's variables (torchrun's before SLURM's).
//! - [`resolve_run_id`], [`restart_attempt`], [`service_instance_id`]: the
//!   run's identity, shared by every rank where the launcher allows it.
//! - [`resolve_launch_id`]: the id of one launch of the run, shared by its
//!   ranks and fresh for the next launch.
//! - [`build_resource`]: the full resource of one rank, with the detectors
//!   ([`detect_host`], [`detect_slurm`], [`detect_kubernetes`]) and the
//!   precedence rule between identity, caller and detected attributes.
//! - [`lens_job_uuid`], [`lens_run_uuid`]: the original's uuid5 recipes.
//!
//! The submodules hold the details (precedence tables, recipes); their
//! items are re-exported here.

pub mod launch_id;
pub mod rank;
pub mod resource;
pub mod run_id;
pub mod uuids;

pub use launch_id::{LaunchId, LaunchIdSource, resolve_launch_id};
pub use rank::{LOCAL_RANK_VARIABLES, RankContext, RankContextError};
pub use resource::{
    FixedProbe, OsProbe, ResourceAttributes, ResourceInputs, SystemProbe, build_resource, detect_host,
    detect_kubernetes, detect_resource, detect_slurm, otel_resource_attributes, visible_gpu_count,
};
pub use run_id::{RunId, RunIdSource, random_run_id, resolve_run_id, restart_attempt, service_instance_id};
pub use uuids::{lens_job_name, lens_job_uuid, lens_run_name, lens_run_uuid, lens_uuid_attributes};
