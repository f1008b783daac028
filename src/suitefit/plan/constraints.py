"""Learned order constraints turned into groups: one worker, this order.

A constraint ("A before B on one worker") means exactly what a declared
``[tool.suitefit] groups`` entry means, so it is honoured the same way: it becomes a
group, and the planner and scheduler need nothing new. A constraint inside one file
(both tests in it) makes that file a group of its own, or keeps it in the group it is in:
a group's unit is never split, so the file's tests keep pytest's order. Constraints that touch a
declared group join it; constraints that share a file join each other. Within a
group the order is a topological order of the declared sequence plus the
constraints; a constraint that would close a cycle (it contradicts the declared
order or an earlier constraint) is dropped with a line saying so. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

from suitefit.model import OrderConstraint

LEARNED_PREFIX = "order-"


def merge_constraints(declared: Mapping[str, Sequence[str]], constraints: Sequence[OrderConstraint]
                      ) -> tuple[dict[str, tuple[str, ...]], list[OrderConstraint], list[str]]:
    """(groups, constraints honoured, lines for those dropped); declared groups keep their names."""
    as_declared = {str(k): tuple(v) for k, v in declared.items()}
    listed = [f for fs in declared.values() for f in fs]
    if not constraints:
        return as_declared, [], []
    if len(listed) != len(set(listed)):  # the planner names the overlap as an error
        return as_declared, [], [f"{len(constraints)} learned constraint(s) not applied: "
                                 "[tool.suitefit] groups list a file twice"]
    rank: dict[str, int] = {}  # tie-break: declared files in declared order, then first seen
    edges: dict[str, set[str]] = {}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        return _root(parent, x)

    def reaches(a: str, b: str) -> bool:
        stack, seen = [a], {a}
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for y in edges.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def add_node(f: str) -> None:
        rank.setdefault(f, len(rank))
        find(f)

    owner: dict[str, str] = {}
    for name, files in declared.items():
        for f in files:
            add_node(f)
            owner.setdefault(f, name)
        for a, b in pairwise(files):
            edges.setdefault(a, set()).add(b)
            parent[find(b)] = find(a)
    kept: list[OrderConstraint] = []
    dropped: list[str] = []
    for c in constraints:
        if c.first == c.second:  # the file's own order, kept by never splitting it: a group's unit
            add_node(c.first)
            kept.append(c)
            continue
        add_node(c.first)
        add_node(c.second)
        if reaches(c.second, c.first):
            dropped.append(f"constraint dropped: {c.first} before {c.second} contradicts the declared "
                           "groups or an earlier constraint")
            continue
        edges.setdefault(c.first, set()).add(c.second)
        parent[find(c.second)] = find(c.first)
        kept.append(c)
    members: dict[str, list[str]] = {}
    for f in rank:
        members.setdefault(find(f), []).append(f)
    groups: dict[str, tuple[str, ...]] = {}
    learned = 0
    for files in sorted(members.values(), key=lambda fs: min(rank[f] for f in fs)):
        order = _topo(files, edges, rank)
        names = list(dict.fromkeys(owner[f] for f in order if f in owner))
        if names:
            name = "+".join(names)
        else:
            learned += 1
            while f"{LEARNED_PREFIX}{learned}" in as_declared:  # never take a declared group's name
                learned += 1
            name = f"{LEARNED_PREFIX}{learned}"
        groups[name] = tuple(order)
    return groups, kept, dropped


def _topo(files: Sequence[str], edges: Mapping[str, set[str]], rank: Mapping[str, int]) -> list[str]:
    """Kahn's order, always taking the lowest-ranked ready file (declared order first)."""
    inside = set(files)
    indeg = {f: 0 for f in files}
    for f in files:
        for g in edges.get(f, ()):
            if g in inside:
                indeg[g] += 1
    ready = sorted((f for f in files if indeg[f] == 0), key=rank.__getitem__)
    out: list[str] = []
    while ready:
        f = ready.pop(0)
        out.append(f)
        for g in sorted(edges.get(f, ()), key=rank.__getitem__):
            if g in inside:
                indeg[g] -= 1
                if indeg[g] == 0:
                    ready.append(g)
        ready.sort(key=rank.__getitem__)
    return out


XDIST_PREFIX = "xdist_group:"


def _root(parent: dict[str, str], x: str) -> str:
    """Union-find's root of ``x`` (halving the path on the way)."""
    while parent.setdefault(x, x) != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def join_marked_groups(groups: Mapping[str, Sequence[str]], marked: Mapping[str, Iterable[str]]
                       ) -> dict[str, tuple[str, ...]]:
    """``groups`` (ordered, disjoint: declared and learned) joined by the files of each
    ``xdist_group`` mark (name -> files), which must share one worker in any order, as
    ``--dist loadgroup`` keeps a group's tests: a mark touching groups merges them (in their
    order, its other files after, sorted; named by all of them, joined by "+"); one touching
    none is a group of its own, ``xdist_group:NAME``, even of one file (a group's unit is never
    split). Pure."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        return _root(parent, x)

    named = {n: sorted(set(fs)) for n, fs in sorted(marked.items()) if fs}
    for files in (*groups.values(), *named.values()):
        for a, b in pairwise(files):
            parent[find(b)] = find(a)
        for f in files:
            find(f)
    order: dict[str, list[str]] = {}  # component root -> its files, in order
    names: dict[str, list[str]] = {}
    for name, files in (*groups.items(), *((f"{XDIST_PREFIX}{n}", fs) for n, fs in named.items())):
        if not files:
            continue
        root = find(files[0])
        names.setdefault(root, []).append(name)
        have = order.setdefault(root, [])
        have += [f for f in files if f not in have]
    return {"+".join(names[root]): tuple(files) for root, files in order.items()}
