//! Node retry policies, LangGraph's `RetryPolicy`: a failing node is run
//! again inside its task (no checkpoint between attempts) and only the last
//! attempt's outcome is stored.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::node::NodeError;

/// Which errors a [`RetryPolicy`] retries.
pub type RetryOnFn = Arc<dyn Fn(&NodeError) -> bool + Send + Sync>;

/// How a node is retried when it fails (LangGraph's `RetryPolicy`), set with
/// [`GraphBuilder::retry`](super::GraphBuilder::retry).
///
/// A failing attempt's error is dropped and the node runs again in the same
/// task after a sleep: `min(max_interval, initial_interval *
/// backoff_factor^(n - 1))` after the `n`th failure, plus a random 0 to 1 s
/// with `jitter`. Nothing is stored between attempts; the task stores the
/// writes of the attempt that succeeds, or the `__error__` of the last one.
/// An [`interrupt()`](super::interrupt()) is not a failure and is never
/// retried. Each run of the task (a resume included) starts counting
/// attempts from one.
///
/// ```
/// use agentstate::engine::{NodeError, RetryPolicy};
/// use std::time::Duration;
///
/// let p = RetryPolicy::new().max_attempts(5).initial_interval(Duration::from_millis(100));
/// assert!(p.retries(&NodeError::with_kind("ConnectionError", "reset")));
/// assert!(!p.retries(&NodeError::with_kind("ValueError", "bad input")));
/// let only_timeouts = RetryPolicy::new().retry_on(|e| e.kind() == "TimeoutError");
/// assert!(only_timeouts.retries(&NodeError::with_kind("TimeoutError", "slow")));
/// ```
#[derive(Clone)]
#[must_use]
pub struct RetryPolicy {
    initial_interval: Duration,
    backoff_factor: f64,
    max_interval: Duration,
    max_attempts: u32,
    jitter: bool,
    retry_on: Option<RetryOnFn>,
}

impl Default for RetryPolicy {
    /// LangGraph's defaults: 3 attempts, 0.5 s then doubling up to 128 s,
    /// with jitter, [`default_retry_on`].
    fn default() -> RetryPolicy {
        RetryPolicy {
            initial_interval: Duration::from_millis(500),
            backoff_factor: 2.0,
            max_interval: Duration::from_secs(128),
            max_attempts: 3,
            jitter: true,
            retry_on: None,
        }
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("initial_interval", &self.initial_interval)
            .field("backoff_factor", &self.backoff_factor)
            .field("max_interval", &self.max_interval)
            .field("max_attempts", &self.max_attempts)
            .field("jitter", &self.jitter)
            .field("retry_on", &if self.retry_on.is_some() { "custom" } else { "default_retry_on" })
            .finish()
    }
}

impl RetryPolicy {
    /// The default policy (see [`Default`](#impl-Default-for-RetryPolicy)).
    pub fn new() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// The sleep before the first retry (default 0.5 s).
    pub fn initial_interval(mut self, interval: Duration) -> Self {
        self.initial_interval = interval;
        self
    }

    /// The factor the sleep grows by after each retry (default 2).
    pub fn backoff_factor(mut self, factor: f64) -> Self {
        self.backoff_factor = factor;
        self
    }

    /// The longest sleep between attempts, jitter aside (default 128 s).
    pub fn max_interval(mut self, interval: Duration) -> Self {
        self.max_interval = interval;
        self
    }

    /// How many times the node runs at most, the first included (default
    /// 3; 0 and 1 both mean no retry).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether a random 0 to 1 s is added to each sleep (default true, as
    /// in LangGraph: `interval + random.uniform(0, 1)`).
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Which errors are retried (default [`default_retry_on`]), e.g.
    /// `|e| e.kind() == "RateLimitError"`.
    pub fn retry_on<F>(mut self, f: F) -> Self
    where
        F: Fn(&NodeError) -> bool + Send + Sync + 'static,
    {
        self.retry_on = Some(Arc::new(f));
        self
    }

    /// Retries errors of these kinds only ([`NodeError::kind`]; LangGraph's
    /// `retry_on=[KeyError, ...]`, without Python's subclasses).
    pub fn retry_on_kinds<I, S>(self, kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let kinds: Vec<String> = kinds.into_iter().map(Into::into).collect();
        self.retry_on(move |e| kinds.iter().any(|k| k == e.kind()))
    }

    /// Whether this policy retries `error` (never an interrupt).
    pub fn retries(&self, error: &NodeError) -> bool {
        !error.is_interrupt() && self.retry_on.as_ref().map_or_else(|| default_retry_on(error), |f| f(error))
    }

    /// The sleep after the `failures`th failed attempt, if another attempt
    /// follows (`None`: give up).
    pub(crate) fn backoff(&self, failures: u32) -> Option<Duration> {
        if failures >= self.max_attempts {
            return None;
        }
        let exp = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.initial_interval.as_secs_f64() * self.backoff_factor.powi(exp);
        let secs = secs.min(self.max_interval.as_secs_f64());
        let mut sleep = Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(self.max_interval);
        if self.jitter {
            // A uniform fraction of a second (53 random bits).
            let bits = crate::checkpoint::id::uuid4().as_u128() as u64 >> 11;
            sleep += Duration::from_secs_f64(bits as f64 / (1u64 << 53) as f64);
        }
        Some(sleep)
    }
}

/// The kinds [`default_retry_on`] does not retry: LangGraph's list
/// (`ValueError`, `TypeError`, `ArithmeticError`, `ImportError`,
/// `LookupError`, `NameError`, `SyntaxError`, `RuntimeError`,
/// `ReferenceError`, `StopIteration`, `StopAsyncIteration`, `OSError`) and
/// their Python subclasses, but for `ConnectionError` and its subclasses.
const NOT_RETRIED: &[&str] = &[
    "ValueError",
    "UnicodeError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeTranslateError",
    "JSONDecodeError",
    "TypeError",
    "ArithmeticError",
    "ZeroDivisionError",
    "OverflowError",
    "FloatingPointError",
    "ImportError",
    "ModuleNotFoundError",
    "LookupError",
    "KeyError",
    "IndexError",
    "NameError",
    "UnboundLocalError",
    "SyntaxError",
    "IndentationError",
    "TabError",
    "RuntimeError",
    "NotImplementedError",
    "RecursionError",
    "ReferenceError",
    "StopIteration",
    "StopAsyncIteration",
    "OSError",
    "IOError",
    "EnvironmentError",
    "BlockingIOError",
    "ChildProcessError",
    "FileExistsError",
    "FileNotFoundError",
    "InterruptedError",
    "IsADirectoryError",
    "NotADirectoryError",
    "PermissionError",
    "ProcessLookupError",
    "TimeoutError",
];

/// LangGraph's `default_retry_on`, by [`NodeError::kind`]: every error is
/// retried but those of the kinds Python raises for a bug or a bad input
/// (`ValueError`, `TypeError`, `KeyError`, `RuntimeError`, `OSError`, ...,
/// subclasses included), except `ConnectionError` (an `OSError`), which is
/// retried. So a plain [`NodeError::new`], a `Panic`, an
/// `InvalidUpdateError` or a `ConnectionError` is retried. (LangGraph also
/// retries an `httpx` / `requests` HTTP error only for a 5xx status; a kind
/// carries no status: those kinds are retried.)
pub fn default_retry_on(error: &NodeError) -> bool {
    !error.is_interrupt() && !NOT_RETRIED.contains(&error.kind())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_langgraph() {
        let p = RetryPolicy::new().jitter(false).max_attempts(5).max_interval(Duration::from_secs(3));
        let secs: Vec<Option<f64>> = (1..=5).map(|n| p.backoff(n).map(|d| d.as_secs_f64())).collect();
        assert_eq!(secs, vec![Some(0.5), Some(1.0), Some(2.0), Some(3.0), None]);
        let j = RetryPolicy::new().backoff(1).unwrap();
        assert!(j >= Duration::from_millis(500) && j < Duration::from_millis(1500));
        assert_eq!(RetryPolicy::new().max_attempts(1).backoff(1), None);
        assert_eq!(RetryPolicy::new().max_attempts(0).backoff(1), None);
    }

    #[test]
    fn default_retry_on_matches_langgraph() {
        for kind in ["NodeError", "Panic", "ConnectionError", "InvalidUpdateError", "Exception"] {
            assert!(default_retry_on(&NodeError::with_kind(kind, "x")), "{kind}");
        }
        for kind in ["ValueError", "KeyError", "RuntimeError", "OSError", "TimeoutError", "TypeError"] {
            assert!(!default_retry_on(&NodeError::with_kind(kind, "x")), "{kind}");
        }
        let only = RetryPolicy::new().retry_on_kinds(["KeyError"]);
        assert!(only.retries(&NodeError::with_kind("KeyError", "x")));
        assert!(!only.retries(&NodeError::with_kind("ConnectionError", "x")));
    }
}
