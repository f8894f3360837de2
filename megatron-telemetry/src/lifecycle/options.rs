//! [`LifecycleOptions`]: what setup takes besides the command line, the
//! rank and the environment.

use lens_fallbacks::{KeyValue, SetupOptions};

use super::startup::StartupTimestamps;

type LazyResource = Box<dyn FnOnce() -> Vec<KeyValue> + Send + 'static>;

/// What setup takes besides the command line, the rank and the environment.
///
/// ```
/// use megatron_telemetry::lifecycle::LifecycleOptions;
///
/// let options = LifecycleOptions::new()
///     .with_resource(Vec::new) // from megatron_telemetry::resource, computed only when enabled
///     .with_gpu_identity(Vec::new) // NVML, probed only on an exporting rank
///     .with_exit_signal_handler(true); // --exit-signal-handler: signals only flush
/// # drop(options);
/// ```
#[must_use]
pub struct LifecycleOptions {
    pub(super) resource: Option<LazyResource>,
    pub(super) gpu_identity: Option<LazyResource>,
    pub(super) startup: StartupTimestamps,
    pub(super) model_type: Option<String>,
    pub(super) exit_signal_handler: bool,
    pub(super) signal_handlers: bool,
    pub(super) setup: SetupOptions,
}

impl Default for LifecycleOptions {
    fn default() -> Self {
        LifecycleOptions::new()
    }
}

impl std::fmt::Debug for LifecycleOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LifecycleOptions")
            .field("resource", &self.resource.is_some())
            .field("gpu_identity", &self.gpu_identity.is_some())
            .field("startup", &self.startup)
            .field("model_type", &self.model_type)
            .field("exit_signal_handler", &self.exit_signal_handler)
            .field("signal_handlers", &self.signal_handlers)
            .finish_non_exhaustive()
    }
}

impl LifecycleOptions {
    /// No resource attributes, no startup stamps (the launcher's are still
    /// read from the environment), signal handlers that terminate.
    pub fn new() -> LifecycleOptions {
        LifecycleOptions {
            resource: None,
            gpu_identity: None,
            startup: StartupTimestamps::default(),
            model_type: None,
            exit_signal_handler: false,
            signal_handlers: true,
            setup: SetupOptions::new(),
        }
    }

    /// Resource attributes from the training arguments
    /// ([`crate::resource`]); `compute` runs only when telemetry is enabled.
    pub fn with_resource(mut self, compute: impl FnOnce() -> Vec<KeyValue> + Send + 'static) -> LifecycleOptions {
        self.resource = Some(Box::new(compute));
        self
    }

    /// The GPU identity attributes (NVML); `probe` runs only on an exporting
    /// rank, after the export decision.
    pub fn with_gpu_identity(mut self, probe: impl FnOnce() -> Vec<KeyValue> + Send + 'static) -> LifecycleOptions {
        self.gpu_identity = Some(Box::new(probe));
        self
    }

    /// The startup stamps captured so far.
    pub fn with_startup(mut self, stamps: StartupTimestamps) -> LifecycleOptions {
        self.startup = stamps;
        self
    }

    /// The model type, set as `megatron.model_type` on the startup span.
    pub fn with_model_type(mut self, model_type: impl Into<String>) -> LifecycleOptions {
        self.model_type = Some(model_type.into());
        self
    }

    /// `--exit-signal-handler`: the training loop drains on SIGTERM by
    /// itself, so the handlers only flush ([`ExitMode::Graceful`](crate::signals::ExitMode::Graceful)).
    pub fn with_exit_signal_handler(mut self, graceful: bool) -> LifecycleOptions {
        self.exit_signal_handler = graceful;
        self
    }

    /// Whether to install SIGTERM/SIGINT handlers at all on an exporting rank
    /// (default true; embedders that own signal handling turn it off).
    pub fn with_signal_handlers(mut self, install: bool) -> LifecycleOptions {
        self.signal_handlers = install;
        self
    }

    /// The facade's setup options (custom exporters in tests, a rank
    /// strategy). Their environment is replaced by the one given to setup.
    pub fn with_setup_options(mut self, options: SetupOptions) -> LifecycleOptions {
        self.setup = options;
        self
    }
}
