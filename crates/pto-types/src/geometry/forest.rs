//! The region index of both TensorMaps: interval treaps over one node arena, one tree per
//! buffer.
//!
//! A lookup must cost O(entries whose byte spans meet the probe's + log n), not O(live entries
//! of the buffer): a stencil keeps thousands of disjoint writers of one grid live, and every new
//! task probes the grid. So each tree is ordered by span start, and each node also carries the
//! largest span end of its subtree, and a caller-chosen [`Summary`] of it (the chip keeps the
//! oldest version, because its version rule makes an older entry a hit whatever its bytes; the
//! node keeps nothing). A search descends only into subtrees that can hold a hit. Reaching `k`
//! hits costs `O(k · log n)`, and `O(k + log n)` when the spans are disjoint. Priorities are
//! pseudo-random, so the expected depth is `O(log n)` whatever the insertion order.
//!
//! Two simpler schemes fail common cases: a window of starts widened by the longest entry
//! degrades to a full scan as soon as one task writes the whole buffer, and block hashing needs
//! one node per block an entry spans, which a fixed pool cannot bound.
//!
//! The caller owns the ids: node `id` belongs to the caller's entry `id` (both maps keep their
//! entries in an arena with the same indices), and the caller keeps each tree's root. Nodes are
//! a `Vec` that grows only when a new id is first set, so a pool sized at construction never
//! reallocates, and [`IntervalForest::clear`] keeps the allocation.

use std::fmt;
use std::ops::Range;

/// No node: an empty tree's root, a missing child or parent.
pub const NIL: u32 = u32::MAX;

/// First state of the priority generator: a fixed seed makes every tree, and so the order of
/// search hits, reproducible.
const PRIO_SEED: u32 = 0x2545_F491;

/// What a node records about its subtree besides the largest span end.
pub trait Summary: Copy + PartialEq + fmt::Debug {
    /// The summary of a subtree holding both.
    fn combine(self, other: Self) -> Self;
}

impl Summary for () {
    fn combine(self, _other: ()) {}
}

/// Node `id` of the arena.
///
/// Invariants while the node is in a tree (besides those of [`IntervalForest`]):
/// - search order: keys `(start, id)` of the left subtree are smaller than the node's, those of
///   the right subtree larger;
/// - heap order: `prio` is at least the children's;
/// - `max_end` and `sub` are the largest `end` and the combined `own` of the subtree rooted
///   here: what a search prunes on;
/// - `parent`/`left`/`right` agree both ways; `NIL` for none, and a root's parent is `NIL`.
#[derive(Clone, Copy, Debug)]
struct Node<S> {
    start: u64,
    end: u64,
    max_end: u64,
    own: S,
    sub: S,
    left: u32,
    right: u32,
    parent: u32,
    prio: u32,
}

/// A forest of interval treaps over one node arena (module doc).
///
/// Invariants: every node is in at most one tree; a tree is named by its root, which the caller
/// keeps (`NIL` for an empty tree) and passes to every call on that tree.
#[derive(Clone, Debug)]
pub struct IntervalForest<S> {
    nodes: Vec<Node<S>>,
    /// xorshift32 state for node priorities.
    prio_state: u32,
}

impl<S: Summary> Default for IntervalForest<S> {
    fn default() -> IntervalForest<S> {
        IntervalForest::with_capacity(0)
    }
}

impl<S: Summary> IntervalForest<S> {
    /// An empty forest with room for `capacity` nodes.
    pub fn with_capacity(capacity: usize) -> IntervalForest<S> {
        IntervalForest {
            nodes: Vec::with_capacity(capacity),
            prio_state: PRIO_SEED,
        }
    }

    /// Forgets every node and tree (the caller forgets its roots); keeps the allocation and
    /// restarts the priorities, so equal histories build equal trees.
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.prio_state = PRIO_SEED;
    }

    /// Nodes set so far (in a tree or not).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no node was set since the last clear.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Nodes the arena holds without reallocating.
    pub fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    /// Gives node `id` the span `[span.start, span.end)` and summary `own`, in no tree. `id` is
    /// either [`len`](Self::len) (a new node) or a node in no tree (removed, or never inserted).
    pub fn set(&mut self, id: u32, span: Range<u64>, own: S) {
        let node = Node {
            start: span.start,
            end: span.end,
            max_end: span.end,
            own,
            sub: own,
            left: NIL,
            right: NIL,
            parent: NIL,
            prio: self.next_prio(),
        };
        let idx = id as usize;
        assert!(
            id != NIL && idx <= self.nodes.len(),
            "node {id} out of order"
        );
        if idx == self.nodes.len() {
            self.nodes.push(node);
        } else {
            self.nodes[idx] = node;
        }
    }

    /// The span and summary node `id` was set with.
    pub fn get(&self, id: u32) -> (Range<u64>, S) {
        let n = &self.nodes[id as usize];
        (n.start..n.end, n.own)
    }

    fn next_prio(&mut self) -> u32 {
        let mut x = self.prio_state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.prio_state = x;
        x
    }

    /// Adds node `id` (set, in no tree) to the tree rooted at `*root`.
    pub fn insert(&mut self, root: &mut u32, id: u32) {
        let n = self.nodes[id as usize];
        let key = (n.start, id);
        let (mut parent, mut cur, mut left) = (NIL, *root, false);
        while cur != NIL {
            // Every node on the way gets `id` in its subtree.
            let c = &mut self.nodes[cur as usize];
            c.max_end = c.max_end.max(n.end);
            c.sub = c.sub.combine(n.own);
            left = key < (c.start, cur);
            parent = cur;
            cur = if left { c.left } else { c.right };
        }
        self.nodes[id as usize].parent = parent;
        if parent == NIL {
            *root = id;
        } else if left {
            self.nodes[parent as usize].left = id;
        } else {
            self.nodes[parent as usize].right = id;
        }
        loop {
            let p = self.nodes[id as usize].parent;
            if p == NIL || self.nodes[p as usize].prio >= n.prio {
                break;
            }
            self.rotate_up(root, id);
        }
    }

    /// Takes node `id` out of the tree rooted at `*root`: rotates it down below its
    /// higher-priority child until it has at most one child, splices it out and repairs the
    /// summaries above.
    pub fn remove(&mut self, root: &mut u32, id: u32) {
        loop {
            let n = self.nodes[id as usize];
            if n.left == NIL || n.right == NIL {
                break;
            }
            let (l, r) = (n.left, n.right);
            let up = if self.nodes[l as usize].prio > self.nodes[r as usize].prio {
                l
            } else {
                r
            };
            self.rotate_up(root, up);
        }
        let n = self.nodes[id as usize];
        let child = if n.left != NIL { n.left } else { n.right };
        if child != NIL {
            self.nodes[child as usize].parent = n.parent;
        }
        self.replace_child(root, n.parent, id, child);
        let mut up = n.parent;
        while up != NIL && self.pull(up) {
            up = self.nodes[up as usize].parent;
        }
        let gone = &mut self.nodes[id as usize];
        (gone.left, gone.right, gone.parent) = (NIL, NIL, NIL);
    }

    /// Calls `hit` for every node of the tree at `root` whose span meets `span` (`start <
    /// span.end && span.start < end`) or whose summary satisfies `also`, in no particular order;
    /// returns the number of nodes visited. `stack` is scratch (cleared first), kept by the
    /// caller so that searches reuse its allocation.
    ///
    /// `also` must be monotone: true of a node's summary whenever true of a summary combined
    /// into it (e.g. "older than v" with the oldest version as the summary), so that it prunes
    /// no subtree holding a hit.
    pub fn search(
        &self,
        root: u32,
        span: Range<u64>,
        also: impl Fn(S) -> bool,
        stack: &mut Vec<u32>,
        mut hit: impl FnMut(u32),
    ) -> usize {
        stack.clear();
        // A subtree is worth entering if some node in it ends after the span starts (the caller
        // checks that starts can be below the span's end) or satisfies `also`.
        let worth = |n: &Node<S>, starts_below: bool| {
            (starts_below && n.max_end > span.start) || also(n.sub)
        };
        if root != NIL && worth(&self.nodes[root as usize], true) {
            stack.push(root);
        }
        let mut visited = 0;
        while let Some(x) = stack.pop() {
            let n = &self.nodes[x as usize];
            visited += 1;
            if n.left != NIL && worth(&self.nodes[n.left as usize], true) {
                stack.push(n.left);
            }
            // Right starts are ≥ this start: none is below the span's end once this one is not.
            let starts_below = n.start < span.end;
            if n.right != NIL && worth(&self.nodes[n.right as usize], starts_below) {
                stack.push(n.right);
            }
            if (starts_below && span.start < n.end) || also(n.own) {
                hit(x);
            }
        }
        visited
    }

    /// Recomputes the subtree summary of `x` from its own values and its children's; returns
    /// whether it changed (when not, no ancestor's can have).
    fn pull(&mut self, x: u32) -> bool {
        let n = self.nodes[x as usize];
        let (mut max_end, mut sub) = (n.end, n.own);
        for child in [n.left, n.right] {
            if child != NIL {
                let c = &self.nodes[child as usize];
                max_end = max_end.max(c.max_end);
                sub = sub.combine(c.sub);
            }
        }
        let n = &mut self.nodes[x as usize];
        let changed = (n.max_end, n.sub) != (max_end, sub);
        (n.max_end, n.sub) = (max_end, sub);
        changed
    }

    /// Makes `new` the child of `parent` in place of `old` (the root when `parent` is `NIL`).
    fn replace_child(&mut self, root: &mut u32, parent: u32, old: u32, new: u32) {
        if parent == NIL {
            *root = new;
        } else if self.nodes[parent as usize].left == old {
            self.nodes[parent as usize].left = new;
        } else {
            debug_assert_eq!(self.nodes[parent as usize].right, old);
            self.nodes[parent as usize].right = new;
        }
    }

    /// Rotates `x` above its parent, keeping the search order and both summaries exact.
    fn rotate_up(&mut self, root: &mut u32, x: u32) {
        let p = self.nodes[x as usize].parent;
        let g = self.nodes[p as usize].parent;
        let mid = if self.nodes[p as usize].left == x {
            let mid = self.nodes[x as usize].right;
            self.nodes[p as usize].left = mid;
            self.nodes[x as usize].right = p;
            mid
        } else {
            let mid = self.nodes[x as usize].left;
            self.nodes[p as usize].right = mid;
            self.nodes[x as usize].left = p;
            mid
        };
        if mid != NIL {
            self.nodes[mid as usize].parent = p;
        }
        self.nodes[p as usize].parent = x;
        self.nodes[x as usize].parent = g;
        self.replace_child(root, g, p, x);
        self.pull(p);
        self.pull(x);
    }

    /// Checks every invariant of the tree at `root` (a consistency check for tests; panics on a
    /// broken one), calling `each` for every node; returns the tree's size.
    pub fn check_tree(&self, root: u32, mut each: impl FnMut(u32)) -> usize {
        if root == NIL {
            return 0;
        }
        assert_eq!(
            self.nodes[root as usize].parent, NIL,
            "root {root} has a parent"
        );
        self.check_subtree(root, None, None, &mut each).0
    }

    /// Checks the subtree at `x`, whose keys must lie strictly between the bounds; returns its
    /// size, largest end and summary.
    fn check_subtree(
        &self,
        x: u32,
        lo: Option<(u64, u32)>,
        hi: Option<(u64, u32)>,
        each: &mut dyn FnMut(u32),
    ) -> (usize, u64, S) {
        let n = self.nodes[x as usize];
        each(x);
        let key = (n.start, x);
        assert!(
            lo.is_none_or(|lo| lo < key) && hi.is_none_or(|hi| key < hi),
            "search order at {x}"
        );
        let (mut size, mut max_end, mut sub) = (1, n.end, n.own);
        for (child, lo, hi) in [(n.left, lo, Some(key)), (n.right, Some(key), hi)] {
            if child == NIL {
                continue;
            }
            let c = self.nodes[child as usize];
            assert_eq!(c.parent, x, "parent of {child}");
            assert!(c.prio <= n.prio, "heap order at {x}");
            let (s, m, v) = self.check_subtree(child, lo, hi, each);
            size += s;
            max_end = max_end.max(m);
            sub = sub.combine(v);
        }
        assert_eq!((n.max_end, n.sub), (max_end, sub), "summary of {x}");
        (size, max_end, sub)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The oldest version of a subtree, as the chip keeps it.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Oldest(i32);

    impl Summary for Oldest {
        fn combine(self, other: Oldest) -> Oldest {
            Oldest(self.0.min(other.0))
        }
    }

    /// One step: `(op, tree, start, len, version)`.
    type Op = (u8, usize, u64, u64, i32);

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random inserts and removals in three trees of one arena, each followed by a search of
        /// every tree: the hits are exactly the model's nodes that meet the span or are older.
        #[test]
        fn search_matches_a_scan(ops in prop::collection::vec((0u8..3, 0usize..3, 0u64..64, 0u64..16, 0i32..4), 1..120)) {
            let mut forest: IntervalForest<Oldest> = IntervalForest::with_capacity(4);
            let mut roots = [NIL; 3];
            // Model: node id → (tree, span, version); free ids for reuse.
            let mut model: BTreeMap<u32, (usize, Range<u64>, i32)> = BTreeMap::new();
            let mut free: Vec<u32> = Vec::new();
            let mut stack = Vec::new();
            for &(op, tree, start, len, version) in &ops as &[Op] {
                if op < 2 || model.is_empty() {
                    let id = free.pop().unwrap_or(forest.len() as u32);
                    forest.set(id, start..start + len, Oldest(version));
                    forest.insert(&mut roots[tree], id);
                    model.insert(id, (tree, start..start + len, version));
                } else {
                    let &id = model.keys().nth(start as usize % model.len()).unwrap();
                    let (t, _, _) = model.remove(&id).unwrap();
                    forest.remove(&mut roots[t], id);
                    free.push(id);
                }
                for (t, &root) in roots.iter().enumerate() {
                    let size = forest.check_tree(root, |id| assert_eq!(model[&id].0, t));
                    prop_assert_eq!(size, model.values().filter(|m| m.0 == t).count());
                    let probe = start..start + len;
                    let mut got = Vec::new();
                    forest.search(root, probe.clone(), |o| o.0 < version, &mut stack, |id| got.push(id));
                    got.sort_unstable();
                    let want: Vec<u32> = model
                        .iter()
                        .filter(|(_, (mt, span, v))| {
                            *mt == t && ((span.start < probe.end && probe.start < span.end) || *v < version)
                        })
                        .map(|(&id, _)| id)
                        .collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn a_search_visits_only_overlapping_nodes() {
        const N: u32 = 10_000;
        let mut forest: IntervalForest<()> = IntervalForest::with_capacity(N as usize);
        let mut root = NIL;
        // Scrambled insertion order (7919 is prime to N): the shape owes nothing to it.
        for k in 0..N {
            let i = k * 7919 % N;
            forest.set(k, u64::from(i) * 16..u64::from(i + 1) * 16, ());
            forest.insert(&mut root, k);
        }
        let mut stack = Vec::new();
        let mut worst = 0;
        for i in (0..N - 1).step_by(97) {
            let mut hits = 0;
            let probe = u64::from(i) * 16 + 8..u64::from(i) * 16 + 24;
            let visited = forest.search(root, probe, |_| false, &mut stack, |_| hits += 1);
            assert_eq!(hits, 2);
            worst = worst.max(visited);
        }
        // A treap of 10 000 nodes is about 30 deep; a scan would visit all 10 000.
        assert!(worst <= 80, "a search visited {worst} of {N} nodes");
        assert_eq!(forest.check_tree(root, |_| {}), N as usize);
        let capacity = forest.capacity();
        forest.clear();
        assert_eq!((forest.len(), forest.capacity()), (0, capacity));
    }
}
