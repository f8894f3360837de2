//! lens's own current span (SPEC A25): a per-thread stack of the facade's
//! current spans, so that making a span current costs a push and a pop
//! instead of the OpenTelemetry [`Context`]'s boxed span, reference counts
//! and attach.
//!
//! The stack is the default (`<PREFIX>_CONTEXT_PER_SPAN` unset or `false`).
//! With it, lens's own readers of "the current span" see both the stack and
//! the OpenTelemetry context: a span started through the facade, a span of
//! the `tracing` bridge, `traceparent` injection ([`current_context`]), a
//! log record's trace ids and `add_event_to_current` all take the innermost
//! of the two. What does not see the stack is code that reads
//! [`Context::current`] itself: a span started through the OpenTelemetry
//! API inside a lens span starts a new trace unless the job sets
//! `<PREFIX>_CONTEXT_PER_SPAN=true`, which puts every current lens span in
//! the OpenTelemetry context as well (docs/performance.md has the cost).
//!
//! Which of the two is innermost: each frame remembers the span of the
//! OpenTelemetry context that was current when the frame was pushed. While
//! the OpenTelemetry context still has that span, nothing was attached
//! since and the frame is the current span; once another context is
//! attached (a remote parent from `RemoteContext::attach`, an OpenTelemetry
//! API span, a future's span on poll), that context's span is.
//!
//! A frame owns its span: the guard that pushed it names it by id, edits it
//! in place and ends it in place when dropped. Frames are found by id, so
//! guards dropped out of order end the right spans. A span is built where
//! its frame lies and ended there: it is a few hundred bytes, and each move
//! would be a copy.

use std::borrow::Cow;
use std::cell::RefCell;
use std::num::NonZeroU64;
use std::time::SystemTime;

use opentelemetry::trace::{Span as _, SpanContext, SpanId, TraceContextExt as _};
use opentelemetry::{Context, ContextGuard, KeyValue};

use crate::lens_tracer::{LensSpan, LensTracer, StartWith};

/// One current span.
struct Frame {
    id: NonZeroU64,
    /// The OpenTelemetry context's span when the frame was pushed.
    otel_span: SpanId,
    /// The span: the frame's own, or, for a span kept elsewhere (the
    /// `tracing` bridge's, in `tracing`'s registry), one that records
    /// nothing and carries that span's context.
    span: LensSpan,
    /// Where a span kept elsewhere is edited ([`enter_kept`]).
    kept: Option<Kept>,
}

/// How a span kept outside the stack is reached: `edit(keeper, key, f)`
/// runs `f` on it, if it is still there.
#[derive(Clone, Copy)]
struct Kept {
    keeper: usize,
    key: u64,
    edit: EditKept,
}

/// Runs a closure on the span that `key` names in `keeper` (see
/// [`enter_kept`]).
pub type EditKept = fn(usize, u64, &mut dyn FnMut(&mut LensSpan));

/// The frames, innermost last. The first `live` are the current spans;
/// those past them are ended frames kept for reuse, so that a push
/// re-initialises a few fields in place instead of copying a whole frame
/// (a span is a few hundred bytes) and a pop drops nothing.
struct Stack {
    frames: Vec<Frame>,
    live: usize,
    next_id: u64,
}

impl Stack {
    fn live(&self) -> &[Frame] {
        &self.frames[..self.live]
    }

    fn live_mut(&mut self) -> &mut [Frame] {
        &mut self.frames[..self.live]
    }
}

/// A thread that exits with current spans (their guards forgotten, or
/// dropped after the stack by another thread-local's destructor) ends them
/// here, innermost first, marked truncated: their end is the thread's exit,
/// not one the program chose.
impl Drop for Stack {
    fn drop(&mut self) {
        use crate::closer::{SPAN_TRUNCATED, SPAN_TRUNCATED_REASON, SPAN_TRUNCATED_REASON_THREAD_EXITED};
        for frame in self.frames[..self.live].iter_mut().rev() {
            if frame.kept.is_some() || !frame.span.is_recording() {
                continue;
            }
            let span = &mut frame.span;
            span.set_attribute(KeyValue::new(SPAN_TRUNCATED, true));
            span.add_event(
                SPAN_TRUNCATED,
                vec![KeyValue::new(SPAN_TRUNCATED_REASON, SPAN_TRUNCATED_REASON_THREAD_EXITED)],
            );
            span.end();
        }
    }
}

thread_local! {
    static STACK: RefCell<Stack> = const { RefCell::new(Stack { frames: Vec::new(), live: 0, next_id: 1 }) };
}

/// A frame of this thread's stack, held by the guard that pushed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameId(NonZeroU64);

/// The OpenTelemetry context's span id, and whether it suppresses
/// telemetry: what a span started as current reads of it.
#[inline]
fn otel_current() -> (SpanId, bool) {
    Context::map_current(|cx| (cx.span().span_context().span_id(), cx.is_telemetry_suppressed()))
}

/// The innermost frame's span context, when it is the current span (the
/// OpenTelemetry context still has the span it had at the push, and the
/// span's telemetry lifetime has not shut down).
#[inline]
fn lens_parent(otel_span: SpanId) -> Option<SpanContext> {
    STACK
        .try_with(|stack| {
            let stack = stack.try_borrow().ok()?;
            let top = stack.live().last()?;
            top.is_current(otel_span).then(|| top.span.span_context().clone())
        })
        .ok()
        .flatten()
}

impl Frame {
    /// Whether this frame, the innermost, is the current span: the
    /// OpenTelemetry context is still `otel_span`, the one it had at the
    /// push, and the frame's span is of a lifetime that has not shut down
    /// (a span kept current across a shutdown was exported truncated, and a
    /// later lifetime's spans start new traces, not children of it).
    #[inline]
    fn is_current(&self, otel_span: SpanId) -> bool {
        self.otel_span == otel_span && !self.span.tracer().is_closed()
    }
}

/// Starts a span named `name` on `tracer` and makes it this thread's
/// current span on this stack: its parent is the current span (the
/// stack's innermost frame or the OpenTelemetry context's span, whichever
/// is innermost), or none when `new_trace`. `None` (no
/// span) when the thread is exiting, or when the stack is in use (a
/// custom sampler that starts a lens span while deciding one).
pub fn start(
    tracer: &'static LensTracer,
    name: Cow<'static, str>,
    attributes: Vec<KeyValue>,
    with: StartWith,
    new_trace: bool,
) -> Option<FrameId> {
    let (otel_span, suppressed) = otel_current();
    // One borrow of the stack: the frame is pushed, and its span is built
    // where it lies (a span is a few hundred bytes, and each move is a
    // copy), its parent read in place from the frame below.
    STACK
        .try_with(|stack| {
            let mut stack = stack.try_borrow_mut().ok()?;
            let (id, at) = push_frame(&mut stack, otel_span, tracer, None)?;
            let (outer, frame) = stack.frames.split_at_mut(at);
            let span = &mut frame[0].span;
            if suppressed || tracer.is_closed() {
                // A frame that records nothing (its context empty).
                span.carry_context(SpanContext::empty_context());
            } else if new_trace {
                tracer.begin_in(span, name, None, None, attributes, with);
            } else if let Some(top) = outer.last().filter(|top| top.is_current(otel_span)) {
                tracer.begin_in(span, name, Some(top.span.span_context()), None, attributes, with);
            } else {
                Context::map_current(|cx| {
                    let parent = cx.span();
                    let parent = parent.span_context();
                    let parent = parent.is_valid().then_some(parent);
                    tracer.begin_in(span, name, parent, Some(cx), attributes, with);
                });
            }
            Some(id)
        })
        .ok()
        .flatten()
}

/// Pushes a frame for `tracer` on `stack` (reusing an ended one in place),
/// for a span `kept` elsewhere or (`None`) its own, and returns its id and
/// index; its span records nothing yet, and its context is the caller's to
/// set (an ended frame's is stale). `otel_span` is the OpenTelemetry
/// context's span now.
fn push_frame(
    stack: &mut Stack,
    otel_span: SpanId,
    tracer: &'static LensTracer,
    kept: Option<Kept>,
) -> Option<(FrameId, usize)> {
    let id = NonZeroU64::new(stack.next_id)?;
    stack.next_id += 1;
    let at = stack.live;
    match stack.frames.get_mut(at) {
        Some(ended) => {
            ended.id = id;
            ended.otel_span = otel_span;
            ended.span.rebind(tracer);
            ended.kept = kept;
        }
        None => {
            let span = LensSpan::not_recording(SpanContext::empty_context(), tracer);
            stack.frames.push(Frame { id, otel_span, span, kept });
        }
    }
    stack.live = at + 1;
    Some((FrameId(id), at))
}

/// Makes `span`, a span kept outside the stack (the `tracing` bridge keeps
/// its spans in `tracing`'s registry), this thread's current span until
/// [`end`] takes its frame off: its children take it as their parent, and
/// [`with_current`] edits it through `edit(keeper, key, ..)` (`keeper`
/// tells the keeper's instances apart: a `tracing` span's id names a span
/// in one registry only). Ending the frame does not end the span. `None` as
/// for [`start`].
pub fn enter_kept(span: &LensSpan, keeper: usize, key: u64, edit: EditKept) -> Option<FrameId> {
    let (otel_span, _) = otel_current();
    let span_context = span.span_context().clone();
    STACK
        .try_with(|stack| {
            let mut stack = stack.try_borrow_mut().ok()?;
            let (id, at) = push_frame(&mut stack, otel_span, span.tracer(), Some(Kept { keeper, key, edit }))?;
            stack.frames[at].span.carry_context(span_context);
            Some(id)
        })
        .ok()
        .flatten()
}

/// Runs `edit` on the span of frame `id` (`None` once it was popped).
#[inline]
pub fn with_frame<R>(id: FrameId, edit: impl FnOnce(&mut LensSpan) -> R) -> Option<R> {
    STACK
        .try_with(|stack| {
            let mut stack = stack.try_borrow_mut().ok()?;
            let frame = stack.live_mut().iter_mut().rev().find(|frame| frame.id == id.0)?;
            Some(edit(&mut frame.span))
        })
        .ok()
        .flatten()
}

/// Ends the span of frame `id` (at `end_time`, else now) where it lies,
/// and takes the frame off the stack.
pub fn end(id: FrameId, end_time: Option<SystemTime>) {
    let _ = STACK.try_with(|stack| {
        let Ok(mut stack) = stack.try_borrow_mut() else { return };
        let Some(at) = stack.live().iter().rposition(|frame| frame.id == id.0) else { return };
        let span = &mut stack.frames[at].span;
        match end_time {
            Some(end_time) => span.end_with_timestamp(end_time),
            None => span.end(),
        }
        // The span is ended (its record is gone): the innermost frame stays
        // for the next push; one ended out of order goes (dropping it ends
        // nothing again).
        if at + 1 != stack.live {
            stack.frames.remove(at);
        }
        stack.live -= 1;
    });
}

/// Runs `edit` on the current span when it is a frame of this stack (not
/// when the OpenTelemetry context's span is innermost); a span kept
/// outside the stack ([`enter_kept`]) is edited where it is kept, with the
/// stack no longer borrowed.
pub fn with_current<R>(edit: impl FnOnce(&mut LensSpan) -> R) -> Option<R> {
    let (otel_span, _) = otel_current();
    let mut edit = Some(edit);
    let kept = STACK
        .try_with(|stack| {
            let mut stack = stack.try_borrow_mut().ok()?;
            let top = stack.live_mut().last_mut().filter(|top| top.is_current(otel_span))?;
            match top.kept {
                Some(kept) => Some(Err(kept)),
                None => Some(Ok(edit.take()?(&mut top.span))),
            }
        })
        .ok()
        .flatten()?;
    match kept {
        Ok(result) => Some(result),
        Err(Kept { keeper, key, edit: edit_kept }) => {
            let mut result = None;
            edit_kept(keeper, key, &mut |span| {
                if let Some(edit) = edit.take() {
                    result = Some(edit(span));
                }
            });
            result
        }
    }
}

/// The current span's parent for a span started now, as lens sees it: the
/// innermost frame's span context when that frame is the current span (and
/// telemetry is not suppressed), else the OpenTelemetry context.
pub fn current_parent() -> CurrentParent {
    let (otel_span, suppressed) = otel_current();
    match lens_parent(otel_span).filter(|_| !suppressed) {
        Some(span_context) => CurrentParent::Frame(span_context),
        None => CurrentParent::Context(Context::current()),
    }
}

/// What [`current_parent`] found.
#[derive(Clone, Debug)]
pub enum CurrentParent {
    /// A frame of this stack is the current span: its span context.
    Frame(SpanContext),
    /// The OpenTelemetry context is innermost (its span may be none).
    Context(Context),
}

/// The current context as lens sees it: the OpenTelemetry context, with the
/// innermost frame as its span when that frame is the current span. What
/// `traceparent` injection, non-current spans and the `tracing` bridge take
/// their parent from.
pub fn current_context() -> Context {
    let (otel_span, _) = otel_current();
    match lens_parent(otel_span) {
        Some(span_context) => Context::current().with_remote_span_context(span_context),
        None => Context::current(),
    }
}

/// Makes the innermost frame current in the OpenTelemetry context too, when
/// it is the current span, until the guard drops: for code that reads only
/// [`Context::current`] (the SDK's log records take their trace ids there).
pub fn attach_frame() -> Option<ContextGuard> {
    let (otel_span, _) = otel_current();
    let span_context = lens_parent(otel_span)?;
    Some(Context::current().with_remote_span_context(span_context).attach())
}
