"""proctree and one-off samples against real processes: trees with grandchildren, known memory, VmHWM resets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from suitefit.measure import proctree
from suitefit.measure.sampler import take
from suitefit.measure.treereader import TreeReader

HOLD = "b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096])"

# A child that starts a grandchild, prints both pids, then waits for stdin to close.
CHILD_WITH_GRANDCHILD = textwrap.dedent("""
    import subprocess, sys
    {hold}
    g = subprocess.Popen([sys.executable, "-c",
                          "import sys; " + {ghold!r} + "; print('ok', flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    g.stdout.readline()
    print(g.pid, flush=True)
    sys.stdin.read()
    g.stdin.close()
    g.wait()
""")


class Tree:
    def __init__(self, child_mb: int, grandchild_mb: int) -> None:
        code = CHILD_WITH_GRANDCHILD.format(hold=HOLD.format(mb=child_mb),
                                            ghold=HOLD.format(mb=grandchild_mb))
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.child = self.proc.pid
        self.grandchild = int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def tree() -> Iterator[Tree]:
    t = Tree(child_mb=60, grandchild_mb=40)
    yield t
    t.close()


def test_tree_finds_children_and_grandchildren(tree: Tree) -> None:
    assert proctree.children(tree.child) == [tree.grandchild]
    assert proctree.tree(tree.child) == [tree.child, tree.grandchild]
    mine = proctree.tree(os.getpid())
    assert mine[0] == os.getpid()
    assert tree.child in mine and tree.grandchild in mine
    assert mine.index(tree.child) < mine.index(tree.grandchild)  # breadth first, root first
    parents = proctree.tree_parents(os.getpid())
    assert parents[os.getpid()] == 0 and parents[tree.child] == os.getpid()
    assert parents[tree.grandchild] == tree.child
    pruned = proctree.tree_parents(os.getpid(), skip=(tree.child,))
    assert tree.child not in pruned and tree.grandchild not in pruned  # a skipped process takes its subtree


def test_gone_process_reads_as_empty() -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    assert proctree.children(p.pid) == []
    assert proctree.tree(p.pid) == [p.pid]
    assert proctree.rss_mb(p.pid) == 0.0
    assert proctree.pss_mb(p.pid) is None
    assert proctree.hwm_mb(p.pid) is None


def test_rss_pss_and_hwm_of_a_process_holding_known_memory(tree: Tree) -> None:
    rss = proctree.rss_mb(tree.grandchild)
    assert 40 <= rss < 40 + 30  # 40 MiB touched plus an interpreter
    pss = proctree.pss_mb(tree.grandchild)
    assert pss is not None and 30 <= pss <= rss + 1  # PSS shares libraries, never exceeds RSS much
    hwm = proctree.hwm_mb(tree.grandchild)
    assert hwm is not None and hwm >= rss - 1
    both = proctree.sum_rss_mb([tree.child, tree.grandchild])
    assert both == pytest.approx(proctree.rss_mb(tree.child) + rss, abs=2)
    assert 100 <= both < 100 + 60


def test_reset_hwm_drops_a_past_peak() -> None:
    # in a fresh process, so this test run's own VmHWM (suitefit may be measuring it) is untouched
    code = textwrap.dedent("""
        import json
        from suitefit.measure import proctree
        b = bytearray(120 * 2**20); b[::4096] = b'x' * len(b[::4096])
        del b
        before = proctree.hwm_mb()
        ok = proctree.reset_hwm()
        print(json.dumps({"before": before, "ok": ok, "after": proctree.hwm_mb(), "rss": proctree.rss_mb(__import__('os').getpid())}))
    """)
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True, timeout=60).stdout)
    assert out["before"] >= 120
    if not out["ok"]:
        pytest.skip("clear_refs not writable here")
    assert out["after"] < out["before"] - 100
    assert out["after"] == pytest.approx(out["rss"], abs=5)


def test_cmdline_and_create_time(tree: Tree) -> None:
    assert proctree.cmdline(tree.grandchild).startswith(sys.executable)
    assert proctree.cmdline(2**22 + 12345) == "?"
    ct = proctree.create_time(tree.child)
    assert ct is not None and time.time() - 60 < ct <= time.time()


def test_take_sums_the_tree(tree: Tree) -> None:
    s = take(tree.child, with_pss=True)
    assert s.pids == (tree.child, tree.grandchild)
    assert s.procs == 2
    assert s.root_mb == pytest.approx(proctree.rss_mb(tree.child), abs=2)
    assert 100 <= s.rss_mb < 100 + 60
    assert s.pss_mb is not None and s.pss_mb <= s.rss_mb + 1
    assert take(tree.child).pss_mb is None


def test_take_with_workers_gives_each_workers_tree_and_what_is_under_it(tree: Tree) -> None:
    # What the controller reads of each worker: from the one read of the whole tree, as the
    # sampler process streams it (the same function, proctree.worker_trees, on both sides).
    s = take(os.getpid(), workers={"w": tree.child, "gone": 2**22 + 7})
    assert set(s.workers) == {"w"} and s.kids == {"w": (tree.grandchild,)}
    both = proctree.rss_mb(tree.child) + proctree.rss_mb(tree.grandchild)
    assert s.workers["w"] == pytest.approx(both, abs=2) and 100 <= s.workers["w"] < 160
    assert take(os.getpid()).workers == {}
    parents, rss = TreeReader().read(os.getpid())
    (mb, own, kids), = proctree.worker_trees(parents, rss, [("w", tree.child)]).values()
    assert kids == [tree.grandchild] and own == pytest.approx(proctree.rss_mb(tree.child), abs=2)
    assert mb == pytest.approx(both, abs=2)


def test_age_of_a_process_to_the_tenth_of_a_second() -> None:
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.8)
        age = proctree.age_s(p.pid)
        elapsed = time.monotonic() - t0
        assert age is not None and elapsed - 0.1 <= age <= elapsed + 0.02, (age, elapsed)
        assert not proctree.is_running(p.pid, (proctree.create_time(p.pid) or 0) + 5)  # a reused pid
        assert proctree.is_running(p.pid, proctree.create_time(p.pid))
    finally:
        p.kill()
        p.wait()
    assert proctree.age_s(p.pid) is None and not proctree.is_running(p.pid, None)


# A child with three threads, two of them each starting a process of their own: /proc lists
# a process's children per thread, so a reader of the main thread alone would miss them.
THREADED_CHILD = textwrap.dedent("""
    import subprocess, sys, threading
    kids = []
    def start():
        k = subprocess.Popen([sys.executable, "-c", "import sys; print('ok', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        k.stdout.readline()  # started: its RSS is an interpreter's
        kids.append(k)
    ts = [threading.Thread(target=start) for _ in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    hold = [threading.Thread(target=sys.stdin.read, daemon=True) for _ in range(2)]
    for t in hold: t.start()
    print(*[k.pid for k in kids], flush=True)
    sys.stdin.read()
    for k in kids:
        k.stdin.close(); k.wait()
""")


def test_tree_reader_reads_what_tree_parents_and_rss_read(tree: Tree) -> None:
    """The sampler's reader (files kept open between reads) against the one-off readers, on a
    tree with a grandchild and a multi-threaded child whose threads started processes; again
    after one process ends (its files are closed) and a new one starts."""
    threaded = subprocess.Popen([sys.executable, "-c", THREADED_CHILD], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    assert threaded.stdout is not None
    thread_kids = [int(x) for x in threaded.stdout.readline().split()]
    reader = TreeReader()
    try:
        def agree() -> dict[int, int]:
            parents, rss = reader.read(tree.child, skip=())
            mine = proctree.tree_parents(tree.child)
            assert parents == mine
            for p in mine:
                assert rss[p] == pytest.approx(proctree.rss_mb(p), abs=1.0)
            return parents

        assert agree() == {tree.child: 0, tree.grandchild: tree.child}
        assert agree() == {tree.child: 0, tree.grandchild: tree.child}  # from the kept files
        parents, rss = reader.read(os.getpid(), skip=(tree.child,))
        assert tree.child not in parents and tree.grandchild not in parents
        assert parents[threaded.pid] == os.getpid() and all(parents[k] == threaded.pid for k in thread_kids)
        assert parents == proctree.tree_parents(os.getpid(), skip=(tree.child,))
        assert rss[threaded.pid] > 5 and all(rss[k] > 5 for k in thread_kids)
        threaded.stdin.close()  # type: ignore[union-attr]
        threaded.wait(timeout=30)
        parents, rss = reader.read(os.getpid(), skip=(tree.child,))
        assert threaded.pid not in parents and not set(thread_kids) & set(parents)
        assert threaded.pid not in reader._open  # its files closed
        again = subprocess.Popen([sys.executable, "-c", "import sys; print('ok', flush=True); sys.stdin.read()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            again.stdout.readline()  # type: ignore[union-attr]
            parents, rss = reader.read(os.getpid(), skip=(tree.child,))
            assert parents[again.pid] == os.getpid() and rss[again.pid] > 0
        finally:
            again.stdin.close()  # type: ignore[union-attr]
            again.wait()
        gone = subprocess.Popen(["true"])
        gone.wait()
        assert reader.read(gone.pid) == ({gone.pid: 0}, {gone.pid: 0.0})
    finally:
        reader.close()
        if threaded.poll() is None:
            threaded.kill()
            threaded.wait()
    assert reader._open == {}


# One thread besides the main one; on "swap" it ends and another begins (the same number of
# threads, between two reads), which starts a process and prints its pid.
SWAPPING_CHILD = textwrap.dedent("""
    import subprocess, sys, threading
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    kids = []
    def start():
        kids.append(subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE))
        print(kids[-1].pid, flush=True)
        stop.wait()
    print("ready", flush=True)
    for line in sys.stdin:
        stop.set(); t.join(); stop.clear()
        t = threading.Thread(target=start)
        t.start()
    stop.set(); t.join()
    for k in kids:
        k.stdin.close(); k.wait()
""")


def test_tree_reader_sees_a_process_started_by_a_thread_that_replaced_another() -> None:
    """The reader keeps each thread's files between reads and lists the threads again only
    when their number changes or one of them is gone: a thread that ended and another that
    began between two reads (the same number) must not hide what the new one starts."""
    child = subprocess.Popen([sys.executable, "-c", SWAPPING_CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    reader = TreeReader()
    try:
        assert child.stdout.readline().strip() == "ready"
        kids: list[int] = []
        for _ in range(3):
            parents, _ = reader.read(child.pid)
            assert set(parents) == {child.pid, *kids}
            assert len(reader._threads[child.pid]) == 1  # its other thread's files are kept
            child.stdin.write("swap\n")
            child.stdin.flush()
            kids.append(int(child.stdout.readline()))
            parents, _ = reader.read(child.pid)
            assert parents.get(kids[-1]) == child.pid, (kids, parents)
        child.stdin.close()
        child.wait(timeout=30)
        reader.read(os.getpid())
        assert child.pid not in reader._threads and child.pid not in reader._open
    finally:
        reader.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert reader._open == {} and reader._threads == {} and reader._fds == 0


def test_create_time_is_psutils(tree: Tree) -> None:
    """Read from /proc without psutil, the same number psutil gives (runs compare the two)."""
    import psutil

    for pid in (os.getpid(), tree.child, tree.grandchild, 1):
        assert proctree.create_time(pid) == psutil.Process(pid).create_time()
    assert proctree.create_time(2**22 + 12345) is None


def test_the_machines_busy_and_stolen_ticks_are_read_from_proc_stat() -> None:
    before = proctree.cpu_ticks()
    assert before is not None and before[0] > 0 and before[1] >= 0
    deadline = time.process_time() + 1.5
    while time.process_time() < deadline:  # 1.5 s of CPU: 150 busy ticks at 100 Hz
        pass
    after = proctree.cpu_ticks()
    assert after is not None
    assert after[0] - before[0] >= 100  # at least this process's own CPU time
    share = proctree.steal_share(before, after)
    assert share is not None and 0.0 <= share < 1.0
    assert share == (after[1] - before[1]) / (after[0] - before[0] + after[1] - before[1])


def test_steal_share_needs_two_readings_and_enough_cpu_between_them() -> None:
    assert proctree.steal_share((1000, 50), (1170, 80)) == 30 / 200
    assert proctree.steal_share(None, (1170, 80)) is None
    assert proctree.steal_share((1000, 50), None) is None
    assert proctree.steal_share((1000, 50), (1050, 60)) is None  # 60 ticks: too little to say
    assert proctree.steal_share((1000, 50), (900, 60)) is None  # counters went back: not one machine's
