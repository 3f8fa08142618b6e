//! [`Graph::builder`]: state channels, nodes and edges, compiled the way
//! LangGraph's `StateGraph.compile()` lays them out (a `branch:to:<node>`
//! trigger channel per node, a `join:<a+b>:<node>` barrier per join edge,
//! `__start__` and `__pregel_tasks`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::channel::ChannelSpec;
#[cfg(feature = "tokio")]
use super::node::AsyncNodeFn;
use super::node::{panic_message, Goto, NodeError, NodeFn, RouterFn, State, Update};
use super::retry::RetryPolicy;
use super::run::CompiledGraph;
use super::{END, START, TASKS};
use crate::checkpoint::Checkpointer;
use crate::error::{Error, Result};

/// What a compiled node runs.
#[derive(Clone)]
pub(crate) enum NodeKind {
    /// A function.
    Fn(NodeFn),
    /// A compiled subgraph (see [`GraphBuilder::subgraph`]).
    Subgraph(Arc<Compiled>),
}

/// A compiled node (`__start__` has no function: it passes the input on).
#[derive(Clone)]
pub(crate) struct NodeSpec {
    pub(crate) name: String,
    pub(crate) triggers: Vec<String>,
    pub(crate) func: Option<NodeKind>,
    /// For `__start__`: the channel it reads.
    pub(crate) reads_single: String,
    /// Channel writes after every run (edges and join barriers).
    pub(crate) static_writes: Vec<(String, Value)>,
    pub(crate) routers: Vec<RouterFn>,
    /// How the node is retried when it fails ([`GraphBuilder::retry`]).
    pub(crate) retry: Option<RetryPolicy>,
}

/// The compiled graph: channels, nodes, triggers.
pub(crate) struct Compiled {
    pub(crate) channels: Vec<(String, Arc<ChannelSpec>)>,
    pub(crate) state_keys: Vec<String>,
    pub(crate) nodes: Vec<NodeSpec>,
    pub(crate) trigger_to_nodes: BTreeMap<String, Vec<String>>,
    pub(crate) recursion_limit: i64,
    /// The builder set `recursion_limit` (a subgraph without its own runs
    /// under the limit of the graph that runs it).
    pub(crate) own_limit: bool,
    pub(crate) interrupt_before: Vec<String>,
    pub(crate) interrupt_after: Vec<String>,
}

impl NodeSpec {
    /// The subgraph this node runs, if it is one.
    pub(crate) fn subgraph(&self) -> Option<&Arc<Compiled>> {
        match &self.func {
            Some(NodeKind::Subgraph(g)) => Some(g),
            _ => None,
        }
    }
}

impl Compiled {
    pub(crate) fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// How deep [`GraphBuilder::subgraph`]s may nest: a run recurses once per
/// level, so an unbounded depth would overflow the stack (LangGraph hits
/// Python's recursion limit).
const MAX_SUBGRAPH_DEPTH: usize = 32;

/// Entry point: [`Graph::builder`].
#[derive(Debug)]
pub struct Graph;

impl Graph {
    /// A new, empty graph.
    pub fn builder() -> GraphBuilder {
        GraphBuilder::default()
    }
}

/// Builds a graph: state keys, nodes, edges; then [`compile`](Self::compile).
#[derive(Default)]
#[must_use]
pub struct GraphBuilder {
    state: Vec<(String, ChannelSpec)>,
    nodes: Vec<(String, NodeKind)>,
    /// (position among the nodes as declared, name, graph).
    subgraphs: Vec<(usize, String, GraphBuilder)>,
    edges: Vec<(String, String)>,
    joins: Vec<(Vec<String>, String)>,
    routers: Vec<(String, RouterFn)>,
    recursion_limit: Option<i64>,
    interrupt_before: Vec<String>,
    interrupt_after: Vec<String>,
    retries: Vec<(String, RetryPolicy)>,
}

/// Drops nested subgraphs one by one: a builder nested however deep is
/// dropped without recursing (a refused one included).
impl Drop for GraphBuilder {
    fn drop(&mut self) {
        let mut todo: Vec<GraphBuilder> = self.subgraphs.drain(..).map(|(_, _, child)| child).collect();
        while let Some(mut b) = todo.pop() {
            todo.extend(b.subgraphs.drain(..).map(|(_, _, child)| child));
        }
    }
}

impl fmt::Debug for GraphBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuilder")
            .field("state", &self.state.iter().map(|s| &s.0).collect::<Vec<_>>())
            .field("nodes", &self.nodes.iter().map(|n| &n.0).collect::<Vec<_>>())
            .field("edges", &self.edges)
            .finish_non_exhaustive()
    }
}

impl GraphBuilder {
    /// A state key and its channel kind (declaration order is the order
    /// nodes see keys in).
    pub fn state(mut self, key: impl Into<String>, spec: ChannelSpec) -> Self {
        self.state.push((key.into(), spec));
        self
    }

    /// A node.
    pub fn node<F>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(&State) -> std::result::Result<Update, NodeError> + std::marker::Send + Sync + 'static,
    {
        self.nodes.push((name.into(), NodeKind::Fn(NodeFn::Sync(Arc::new(f)))));
        self
    }

    /// An async node (an LLM call, a tool over the network): `f` gets the
    /// state and returns a future. Run the graph with
    /// [`ainvoke`](super::CompiledGraph::ainvoke) /
    /// [`aresume`](super::CompiledGraph::aresume) from async code: the run
    /// goes on tokio's blocking pool and each async node on the runtime, so
    /// no runtime worker thread waits. [`interrupt()`](super::interrupt())
    /// works inside `f`'s future (not inside tasks it spawns).
    ///
    /// Under the blocking [`invoke`](super::CompiledGraph::invoke), an async
    /// node's task fails: with kind `RuntimeError` (naming `ainvoke`)
    /// outside any runtime, and with kind `Panic` (tokio refuses to block a
    /// runtime's worker thread) when `invoke` is called from async code.
    #[cfg(feature = "tokio")]
    pub fn async_node<F, Fut>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(State) -> Fut + std::marker::Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Update, NodeError>>
            + std::marker::Send
            + 'static,
    {
        let f: AsyncNodeFn = Arc::new(move |s| Box::pin(f(s)));
        self.nodes.push((name.into(), NodeKind::Fn(NodeFn::Async(f))));
        self
    }

    /// A node that runs `child` (a graph with its own state keys): its
    /// input is this graph's state, its final state the node's update. It
    /// checkpoints on the parent's checkpointer in namespace
    /// `<name>:<task id>` (metadata `parents` names the parent's
    /// checkpoint), and an [`interrupt()`](super::interrupt()) inside it
    /// pauses the parent; resuming the parent resumes it.
    pub fn subgraph(mut self, name: impl Into<String>, child: GraphBuilder) -> Self {
        let at = self.nodes.len() + self.subgraphs.len();
        self.subgraphs.push((at, name.into(), child));
        self
    }

    /// An edge: `to` runs in the superstep after `from` (either may be
    /// [`START`] / [`END`]). The same edge twice is one edge.
    pub fn edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// A join: `to` runs once every node of `from` has run (a
    /// `NamedBarrierValue` channel `join:<a+b>:<to>`). The same join twice
    /// is one join.
    pub fn join<I, S>(mut self, from: I, to: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.joins.push((from.into_iter().map(Into::into).collect(), to.into()));
        self
    }

    /// A conditional edge: after `from` runs, `router` reads the state
    /// (with `from`'s writes applied) and returns the next nodes and
    /// [`Send`]s. A router that panics fails `from`'s task like a
    /// panicking node (error kind `Panic`).
    pub fn conditional_edges<F>(mut self, from: impl Into<String>, router: F) -> Self
    where
        F: Fn(&State) -> std::result::Result<Vec<Goto>, NodeError> + std::marker::Send + Sync + 'static,
    {
        let router = move |s: &State| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| router(s)))
                .unwrap_or_else(|panic| Err(NodeError::with_kind("Panic", panic_message(&*panic))))
        };
        self.routers.push((from.into(), Arc::new(router)));
        self
    }

    /// The most supersteps one [`invoke`](CompiledGraph::invoke) runs
    /// (default 25, LangGraph's). A subgraph whose builder does not set one
    /// runs under the limit of the graph that runs it, as LangGraph's
    /// subgraphs inherit the `recursion_limit` config (each run of the
    /// subgraph counts its own supersteps against it).
    pub fn recursion_limit(mut self, limit: i64) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// Breakpoints: the run stops before a superstep that would run one of
    /// `nodes` (`"*"`: any node; LangGraph's `interrupt_before`);
    /// `invoke(None, ..)` goes on.
    pub fn interrupt_before<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.interrupt_before.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Breakpoints: the run stops after a superstep that ran one of `nodes`
    /// (`"*"`: any node; LangGraph's `interrupt_after`); `invoke(None, ..)`
    /// goes on.
    pub fn interrupt_after<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.interrupt_after.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Retries node `name` when it fails, as `policy` says (LangGraph's
    /// `add_node(name, f, retry_policy=policy)`): the node runs again in
    /// the same task, nothing is stored between attempts, and the task
    /// stores the writes of the attempt that succeeds or the error of the
    /// last one. An [`interrupt()`](super::interrupt()) is not retried. The
    /// sleep between attempts blocks the task's thread (never a tokio
    /// worker: under [`ainvoke`](super::CompiledGraph::ainvoke) the run is
    /// on tokio's blocking pool). On a [`subgraph`](Self::subgraph) node, a
    /// retry resumes the subgraph from its last checkpoint (LangGraph
    /// passes it `resuming`). Set twice, the last policy counts.
    pub fn retry(mut self, name: impl Into<String>, policy: RetryPolicy) -> Self {
        self.retries.push((name.into(), policy));
        self
    }

    /// Checks the graph and compiles it to run on `checkpointer`.
    ///
    /// # Errors
    /// [`Error::InvalidGraph`] for a duplicate or reserved name, an edge or
    /// join naming an unknown node, a retry policy for an unknown node, two different joins whose barrier
    /// channels would have the same name (`join(["a+b"], "c")` and
    /// `join(["a", "b"], "c")`), no edge from [`START`], a limit < 1, or
    /// subgraphs nested more than 32 deep (a subgraph of a subgraph ...:
    /// each level runs inside its parent's run, on its stack).
    pub fn compile(self, checkpointer: Checkpointer) -> Result<CompiledGraph> {
        let depth = self.nesting();
        if depth > MAX_SUBGRAPH_DEPTH {
            return Err(Error::InvalidGraph(format!(
                "subgraphs nest {depth} levels deep; at most {MAX_SUBGRAPH_DEPTH} are supported \
                 (each level runs inside its parent's run, on its stack)"
            )));
        }
        Ok(CompiledGraph::new(Arc::new(self.build()?), checkpointer))
    }

    /// How deep subgraphs nest (0: none), counted without recursion.
    fn nesting(&self) -> usize {
        let mut deepest = 0;
        let mut todo = vec![(self, 0)];
        while let Some((b, depth)) = todo.pop() {
            deepest = deepest.max(depth);
            todo.extend(b.subgraphs.iter().map(|(_, _, child)| (child, depth + 1)));
        }
        deepest
    }

    fn build(mut self) -> Result<Compiled> {
        // In declaration order, as LangGraph lists a graph's nodes (a
        // snapshot's `next` and `tasks` follow it).
        for (at, name, child) in std::mem::take(&mut self.subgraphs) {
            let child = child.build().map_err(|e| Error::InvalidGraph(format!("subgraph {name}: {e}")))?;
            self.nodes.insert(at.min(self.nodes.len()), (name, NodeKind::Subgraph(Arc::new(child))));
        }
        let bad = |m: String| Err(Error::InvalidGraph(m));
        // Edges and joins are sets, as in LangGraph: a repeated one is one.
        let mut seen = BTreeSet::new();
        self.edges.retain(|e| seen.insert(e.clone()));
        let mut seen = BTreeSet::new();
        self.joins.retain(|j| seen.insert(j.clone()));
        let mut names = BTreeSet::new();
        for (n, _) in &self.nodes {
            if n.is_empty() || n.starts_with("__") || n.contains('|') || n.contains(':') {
                return bad(format!("node name {n:?} is reserved or has a reserved character (| :)"));
            }
            if !names.insert(n.clone()) {
                return bad(format!("node {n:?} is defined twice"));
            }
        }
        let mut keys = BTreeSet::new();
        for (k, _) in &self.state {
            if k.starts_with("__")
                || k.starts_with("branch:")
                || k.starts_with("join:")
                || !keys.insert(k.clone())
            {
                return bad(format!("state key {k:?} is reserved or defined twice"));
            }
            if names.contains(k) {
                return bad(format!("{k:?} is both a state key and a node"));
            }
        }
        let known = |n: &str, allow: &str| n == allow || names.contains(n);
        for (from, to) in &self.edges {
            if !known(from, START) || !known(to, END) {
                return bad(format!("edge {from:?} -> {to:?} names an unknown node"));
            }
        }
        for (from, to) in &self.joins {
            if from.is_empty() || from.iter().any(|f| !names.contains(f)) || !names.contains(to) {
                return bad(format!("join {from:?} -> {to:?} names an unknown node"));
            }
        }
        let mut join_channels = BTreeSet::new();
        for (from, to) in &self.joins {
            let chan = format!("join:{}:{to}", from.join("+"));
            if !join_channels.insert(chan.clone()) {
                return bad(format!(
                    "two joins into {to:?} would share the channel {chan:?} (a node name contains '+'): rename the node"
                ));
            }
        }
        for (from, _) in &self.routers {
            if !known(from, START) {
                return bad(format!("conditional edge from unknown node {from:?}"));
            }
        }
        if let Some(n) = self
            .interrupt_before
            .iter()
            .chain(&self.interrupt_after)
            .find(|n| *n != "*" && !names.contains(*n))
        {
            return bad(format!("breakpoint on unknown node {n:?}"));
        }
        if let Some((n, _)) = self.retries.iter().find(|(n, _)| !names.contains(n)) {
            return bad(format!("retry policy for unknown node {n:?}"));
        }
        if !self.edges.iter().any(|(f, _)| f == START) && !self.routers.iter().any(|(f, _)| f == START) {
            return bad("the graph has no edge from START".into());
        }
        let recursion_limit = self.recursion_limit.unwrap_or(25);
        if recursion_limit < 1 {
            return bad(format!("recursion limit {recursion_limit} < 1"));
        }

        let mut channels: Vec<(String, Arc<ChannelSpec>)> = Vec::new();
        let state_keys: Vec<String> = self.state.iter().map(|(k, _)| k.clone()).collect();
        for (k, spec) in std::mem::take(&mut self.state) {
            channels.push((k, Arc::new(spec)));
        }
        channels.push((START.into(), Arc::new(ChannelSpec::ephemeral())));
        channels.push((TASKS.into(), Arc::new(ChannelSpec::topic(false))));
        let mut nodes = vec![NodeSpec {
            name: START.into(),
            triggers: vec![START.into()],
            func: None,
            reads_single: START.into(),
            static_writes: Vec::new(),
            routers: Vec::new(),
            retry: None,
        }];
        for (name, func) in std::mem::take(&mut self.nodes) {
            let branch = format!("branch:to:{name}");
            channels.push((branch.clone(), Arc::new(ChannelSpec::branch())));
            let retry = self.retries.iter().rev().find(|(n, _)| *n == name).map(|(_, p)| p.clone());
            nodes.push(NodeSpec {
                name,
                triggers: vec![branch],
                func: Some(func),
                reads_single: String::new(),
                static_writes: Vec::new(),
                routers: Vec::new(),
                retry,
            });
        }
        for (from, to) in &self.edges {
            if to == END {
                continue;
            }
            let node = nodes.iter_mut().find(|n| &n.name == from).expect("checked above");
            node.static_writes.push((format!("branch:to:{to}"), Value::Null));
        }
        for (from, to) in &self.joins {
            let chan = format!("join:{}:{to}", from.join("+"));
            channels.push((chan.clone(), Arc::new(ChannelSpec::barrier(from.iter().cloned().collect()))));
            for f in from {
                let node = nodes.iter_mut().find(|n| &n.name == f).expect("checked above");
                node.static_writes.push((chan.clone(), Value::String(f.clone())));
            }
            let target = nodes.iter_mut().find(|n| &n.name == to).expect("checked above");
            target.triggers.push(chan);
        }
        for (from, router) in std::mem::take(&mut self.routers) {
            let node = nodes.iter_mut().find(|n| n.name == from).expect("checked above");
            node.routers.push(router);
        }
        let mut trigger_to_nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in &nodes {
            for t in &n.triggers {
                trigger_to_nodes.entry(t.clone()).or_default().push(n.name.clone());
            }
        }
        Ok(Compiled {
            channels,
            state_keys,
            nodes,
            trigger_to_nodes,
            recursion_limit,
            own_limit: self.recursion_limit.is_some(),
            interrupt_before: std::mem::take(&mut self.interrupt_before),
            interrupt_after: std::mem::take(&mut self.interrupt_after),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Reducer;

    fn noop(_: &State) -> std::result::Result<Update, NodeError> {
        Ok(Update::new())
    }

    #[test]
    fn compiles_like_langgraph() {
        let g = Graph::builder()
            .state("results", ChannelSpec::reducer(Reducer::Append))
            .node("x", noop)
            .node("y", noop)
            .node("join", noop)
            .edge(START, "x")
            .edge(START, "y")
            .join(["x", "y"], "join")
            .edge("join", END)
            .build()
            .unwrap();
        let join = g.node("join").unwrap();
        assert_eq!(join.triggers, ["branch:to:join", "join:x+y:join"]);
        assert_eq!(
            g.node("x").unwrap().static_writes,
            [("join:x+y:join".to_string(), Value::String("x".into()))]
        );
        assert_eq!(g.node(START).unwrap().static_writes.len(), 2);
        assert_eq!(g.trigger_to_nodes["join:x+y:join"], ["join"]);
    }

    #[test]
    fn bad_graphs_are_typed_errors() {
        let err = |b: GraphBuilder| matches!(b.build(), Err(Error::InvalidGraph(_)));
        assert!(err(Graph::builder().node("a", noop)));
        assert!(err(Graph::builder().node("a", noop).node("a", noop).edge(START, "a")));
        assert!(err(Graph::builder().node("__x", noop).edge(START, "__x")));
        assert!(err(Graph::builder().node("a", noop).edge(START, "b")));
        assert!(err(Graph::builder().node("a", noop).edge(START, "a").join(["a", "q"], "a")));
        assert!(err(Graph::builder().node("a", noop).edge(START, "a").recursion_limit(0)));
        assert!(err(Graph::builder().state("a", ChannelSpec::last_value()).node("a", noop).edge(START, "a")));
        assert!(err(Graph::builder().node("a", noop).edge(START, "a").retry("b", RetryPolicy::new())));
        assert!(Graph::builder()
            .node("a", noop)
            .edge(START, "a")
            .retry("a", RetryPolicy::new())
            .build()
            .is_ok());
    }
}
