"""``suitefit audit-workflows``: find workflow guards that cannot block the edit they guard.

A *guard* is a test module that reads a GitHub Actions workflow file. The edit it
exists to reject is an edit to that workflow file, so it must be run by a job
that starts on a change to only that file. A job whose path filter leaves the
file out never collects the guard on such a pull request: the guard runs after
the merge, when it can no longer block anything. Nothing goes red; that is why
it is audited.

Also audited: background work a job starts and never collects (``suitefit lanes
start`` without a later ``lanes wait``, a shell ``&`` with no later ``wait``) and
background launches that keep the step's stdout/stderr (the step then waits for
them and the overlap silently disappears).

Static and heuristic by nature: it reads ``run:`` scripts (and the ``*.sh``
files they call) for pytest invocations; job ``if:`` conditions and matrix
expressions are not evaluated.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.selection import pytest_selection

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PR_EVENTS = ("pull_request", "pull_request_target", "merge_group")
FILTERABLE = ("push", "pull_request", "pull_request_target")
SKIP_DIRS = {".git", "node_modules", "site-packages", "__pycache__", ".suitefit", ".tox", ".nox"}
_SEGMENT_SPLIT = re.compile(r"\|\||&&|;|\|(?!\|)|\n")


# --------------------------------------------------------------------- model
@dataclass(frozen=True)
class Trigger:
    event: str
    paths: tuple[str, ...] | None = None
    paths_ignore: tuple[str, ...] | None = None

    def fires_for(self, changed: str) -> bool:
        """Would this trigger start the workflow for a change to only ``changed``?"""
        if self.paths is not None:
            return path_filter_matches(self.paths, changed)
        if self.paths_ignore is not None:
            return not path_filter_matches(self.paths_ignore, changed)
        return True

    def describe(self) -> str:
        if self.paths is not None:
            return f"{self.event}: paths {', '.join(self.paths)}"
        if self.paths_ignore is not None:
            return f"{self.event}: paths-ignore {', '.join(self.paths_ignore)}"
        return f"{self.event}: all paths"


@dataclass(frozen=True)
class Step:
    index: int
    run: str  # the step's run script, with called *.sh files appended
    working_directory: str
    own: str = ""  # the step's own run script only


@dataclass
class Job:
    workflow: str  # repo-relative path of the workflow file
    job_id: str
    triggers: list[Trigger]
    steps: list[Step]

    @property
    def label(self) -> str:
        return f"{Path(self.workflow).name}/{self.job_id}"

    def filtered(self) -> bool:
        return any(t.paths is not None or t.paths_ignore is not None for t in self.triggers)


@dataclass(frozen=True)
class Guard:
    module: str  # repo-relative
    reads: tuple[str, ...]  # repo-relative workflow files it reads


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str
    workflow: str | None = None
    job: str | None = None
    module: str | None = None

    def key(self) -> tuple[str, str | None, str | None, str | None]:
        return (self.kind, self.workflow, self.job, self.module)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "workflow": self.workflow,
            "job": self.job,
            "module": self.module,
            "message": self.message,
        }


@dataclass
class Audit:
    root: Path
    jobs: list[Job] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    runs: dict[str, list[str]] = field(default_factory=dict)  # module -> job labels
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "jobs": [
                {
                    "workflow": j.workflow,
                    "job": j.job_id,
                    "filtered": j.filtered(),
                    "triggers": [
                        {"event": t.event, "paths": t.paths, "paths_ignore": t.paths_ignore}
                        for t in j.triggers
                    ],
                }
                for j in self.jobs
            ],
            "guards": [
                {"module": g.module, "reads": list(g.reads), "run_by": self.runs.get(g.module, [])}
                for g in self.guards
            ],
            "findings": [f.to_json() for f in self.findings],
        }


# ------------------------------------------------------------ path filters
@functools.lru_cache(maxsize=4096)
def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """GitHub's filter glob: ``*`` within a segment, ``**`` across, ``?``/``+`` on the previous char."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c in "?+" and out:
            out.append(c)
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                out.append(pattern[i : j + 1])
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def path_filter_matches(patterns: Iterable[str], path: str) -> bool:
    """Whether ``path`` is selected by a list of filter patterns (``!`` negates; last match wins)."""
    selected = False
    for p in patterns:
        neg = p.startswith("!")
        body = p[1:] if neg else p
        if glob_to_regex(body).match(path):
            selected = not neg
    return selected


# ------------------------------------------------------------ reading YAML
def _load_yaml(path: Path, rel: str) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SuitefitError(f"{rel}: cannot read: not UTF-8 text") from None
    except OSError as e:
        raise SuitefitError(f"{rel}: cannot read: {e.strerror or e}") from None
    try:
        # libyaml when the wheel has it: the pure-Python parser takes seconds on big workflows.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise SuitefitError(f"{rel}: not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SuitefitError(f"{rel}: a workflow must be a YAML mapping, got {type(data).__name__}")
    return data


def _as_patterns(value: object, rel: str, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SuitefitError(f"{rel}: {what} must be a list of path patterns")


def parse_triggers(data: dict[Any, Any], rel: str) -> list[Trigger]:
    # YAML 1.1 reads a bare `on:` key as the boolean True.
    on = data.get("on", data.get(True))
    if on is None:
        return []
    if isinstance(on, str):
        return [Trigger(on)]
    if isinstance(on, list):
        return [Trigger(str(e)) for e in on]
    if not isinstance(on, dict):
        raise SuitefitError(f"{rel}: 'on' must be an event name, a list or a mapping")
    triggers = []
    for event, cfg in on.items():
        paths = ignore = None
        if isinstance(cfg, dict) and event in FILTERABLE:
            if "paths" in cfg:
                paths = _as_patterns(cfg["paths"], rel, f"on.{event}.paths")
            if "paths-ignore" in cfg:
                ignore = _as_patterns(cfg["paths-ignore"], rel, f"on.{event}.paths-ignore")
        triggers.append(Trigger(str(event), paths, ignore))
    return triggers


_WORD_SPLIT = re.compile(r"[\s\"'`;|&()<>=]+")


@functools.lru_cache(maxsize=4096)
def _read_script(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _script_files(text: str, root: Path, cwd: str, depth: int) -> str:
    """The text of ``*.sh`` files a script calls (``depth`` levels), so their pytest calls count."""
    if depth <= 0:
        return ""
    extra = []
    real_root = root.resolve()
    seen: set[Path] = set()
    for word in set(_WORD_SPLIT.split(text)):
        if not word.endswith(".sh") or "$" in word:
            continue
        for base in (root / cwd, root):
            p = (base / word).resolve()
            if p in seen or real_root not in p.parents:
                continue
            body = _read_script(p)
            if body is not None:
                seen.add(p)
                extra.append(body + "\n" + _script_files(body, root, cwd, depth - 1))
                break
    return "\n".join(extra)


def read_jobs(root: Path, wf_dir: Path) -> list[Job]:
    files = sorted([*wf_dir.glob("*.yml"), *wf_dir.glob("*.yaml")])
    parsed: dict[str, dict[str, Any]] = {}
    for f in files:
        rel = _rel(f, root)
        parsed[rel] = _load_yaml(f, rel)
    jobs: list[Job] = []
    for rel, data in parsed.items():
        triggers = parse_triggers(data, rel)
        raw_jobs = data.get("jobs", {}) or {}
        if not isinstance(raw_jobs, dict):
            raise SuitefitError(f"{rel}: 'jobs' must be a mapping of job ids to jobs")
        wf_cwd = _working_dir(data)
        for job_id, job in raw_jobs.items():
            if not isinstance(job, dict):
                raise SuitefitError(f"{rel}: job {job_id!r} must be a mapping")
            steps = _steps(job, rel, str(job_id), root, _working_dir(job) or wf_cwd)
            uses = job.get("uses")
            if isinstance(uses, str) and uses.startswith("./"):
                # A local reusable workflow: its jobs' steps run under this job's triggers.
                called = parsed.get(uses[2:].split("@")[0])
                for sub_id, sub in ((called or {}).get("jobs") or {}).items():
                    if isinstance(sub, dict):
                        steps += _steps(sub, uses[2:], str(sub_id), root, _working_dir(sub))
            jobs.append(Job(rel, str(job_id), triggers, steps))
    return jobs


def _working_dir(node: dict[str, Any]) -> str:
    defaults = node.get("defaults")
    if isinstance(defaults, dict) and isinstance(defaults.get("run"), dict):
        wd = defaults["run"].get("working-directory")
        if isinstance(wd, str):
            return wd
    return ""


def _steps(job: dict[str, Any], rel: str, job_id: str, root: Path, job_cwd: str) -> list[Step]:
    raw = job.get("steps", []) or []
    if not isinstance(raw, list):
        raise SuitefitError(f"{rel}: job {job_id!r}: 'steps' must be a list")
    steps = []
    for i, step in enumerate(raw):
        if not isinstance(step, dict) or not isinstance(step.get("run"), str):
            continue
        wd = step.get("working-directory")
        cwd = wd if isinstance(wd, str) else job_cwd
        text = step["run"]
        steps.append(Step(i, text + "\n" + _script_files(text, root, cwd, depth=2), cwd, text))
    return steps


# ------------------------------------------------------------ guards
def find_test_modules(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIP_DIRS
            and not d.startswith(".venv")
            and not (d.startswith(".") and d != ".github")
        )
        for fn in sorted(filenames):
            if fn.endswith(".py") and (fn.startswith("test_") or fn.endswith("_test.py")):
                found.append(Path(dirpath) / fn)
    return found


def _code_strings(text: str) -> str:
    """The module's string literals, docstrings left out (a mention there reads nothing).

    Falls back to the whole text when the module does not parse.
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return "\n".join(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    )


def find_guards(root: Path, workflow_files: list[str]) -> list[Guard]:
    """Test modules that read workflow files, and which ones (all, when it globs the folder)."""
    guards = []
    for mod in find_test_modules(root):
        try:
            text = mod.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "workflows" not in text:
            continue  # cheap test first: most modules are not guards
        strings = _code_strings(text)
        named = tuple(
            w
            for w in workflow_files
            if Path(w).name in strings
            and re.search(rf"(?<![\w.-]){re.escape(Path(w).name)}\b", strings)
        )
        # It must also reach into the folder: ".github/workflows", or the path
        # components ".github" and "workflows" as separate literals.
        folder = ".github/workflows" in strings or (
            re.search(r"^\.github$", strings, re.M) and re.search(r"^workflows$", strings, re.M)
        )
        if named and (folder or re.search(r"(^|/)workflows(/|$)", strings, re.M)):
            guards.append(Guard(_rel(mod, root), named))
        elif folder:
            guards.append(Guard(_rel(mod, root), tuple(workflow_files)))
    return guards


# ------------------------------------------------------------ who runs what
def _segments(script: str) -> list[list[str]]:
    """Shell command words, one list per simple command (good enough for CI scripts)."""
    return [list(words) for words in _segments_cached(script)]


_RELEVANT = re.compile(r"pytest|py\.test|suitefit|^wait\b")


@functools.lru_cache(maxsize=16384)
def _segments_cached(script: str) -> tuple[tuple[str, ...], ...]:
    # The same called scripts appear in many steps: split each text once.
    out = []
    joined = script.replace("\\\n", " ")
    for seg in _SEGMENT_SPLIT.split(joined):
        seg = seg.strip().rstrip("&").strip()
        if not seg or seg.startswith("#") or not _RELEVANT.search(seg):
            continue  # only these words matter here, and shlex is slow on big scripts
        try:
            words = shlex.split(seg, comments=True)
        except ValueError:
            words = seg.split()
        if words:
            out.append(tuple(words))
    return tuple(out)


_WRAPPERS = {
    "uv", "run", "poetry", "pipenv", "hatch", "pdm", "rye", "timeout", "env", "time",
    "xvfb-run", "sudo", "exec", "nice", "command",
}  # fmt: skip


def _is_prefix_word(word: str) -> bool:
    """Words that may stand before the program (assignments, runners like `uv run`)."""
    return "=" in word or word in _WRAPPERS or word.startswith("-") or word[:1].isdigit()


def _pytest_args(words: list[str]) -> list[str] | None:
    """Arguments of a pytest call in ``words``, or None when it is not one."""
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base in ("pytest", "py.test"):
            via_python = i > 0 and words[i - 1] == "-m"
            in_command_position = all(_is_prefix_word(p) for p in words[:i])
            if via_python or in_command_position:
                return words[i + 1 :]
        if (
            base == "suitefit"
            and i + 1 < len(words)
            and words[i + 1] in ("run", "profile", "sweep")
        ):
            rest = words[i + 2 :]
            return rest[rest.index("--") + 1 :] if "--" in rest else []
    return None


def _commands(step: Step, lanes: dict[str, str]) -> Iterator[list[str]]:
    """Each command a step runs: its own, what follows `--`, and the lanes it starts."""
    for words in _segments(step.run):
        yield words
        if "--" in words:
            yield words[words.index("--") + 1 :]
        for verb in ("start", "run"):
            names = _lane_names(words, verb)
            if names is not None:
                for n in names or list(lanes):
                    yield from _segments(lanes.get(n, ""))


def modules_run_by(
    job: Job, modules: list[str], testpaths: tuple[str, ...], lanes: dict[str, str] | None = None
) -> set[str]:
    ran: set[str] = set()
    for step in job.steps:
        for words in _commands(step, lanes or {}):
            args = _pytest_args(words)
            if args is None:
                continue
            paths, ignores = pytest_selection(args)
            known = [p for p in paths if "${{" not in p and "$" not in p]
            if paths and not known:
                ran.update(modules)  # unresolvable selection: assume everything
                continue
            selectors = (
                [_norm(step.working_directory, p) for p in known]
                or [_norm(step.working_directory, t) for t in testpaths]
                or [_norm(step.working_directory, ".")]
            )
            ignored = [_norm(step.working_directory, p) for p in ignores]
            for m in modules:
                if any(_covers(s, m) for s in selectors) and not any(
                    _covers(s, m) for s in ignored
                ):
                    ran.add(m)
    return ran


def _norm(cwd: str, p: str) -> str:
    joined = os.path.normpath(os.path.join(cwd or ".", p))
    return "" if joined == "." else joined


def _covers(selector: str, module: str) -> bool:
    if selector in ("", "."):
        return True
    if any(c in selector for c in "*?["):
        return path_filter_matches([selector.replace("**", "*").replace("*", "**")], module)
    return module == selector or module.startswith(selector.rstrip("/") + "/")


# ------------------------------------------------------------ lanes
def _lane_names(words: list[str], verb: str) -> list[str] | None:
    """Lane names of ``suitefit lanes VERB [NAMES]`` (empty list = all), None if not that call."""
    for i, w in enumerate(words):
        if w.rsplit("/", 1)[-1] == "suitefit" and words[i + 1 : i + 3] == ["lanes", verb]:
            names = []
            rest = words[i + 3 :]
            skip = False
            for a in rest:
                if a == "--":
                    break
                if skip:
                    skip = False
                    continue
                if a.startswith("-"):
                    skip = "=" not in a and a in (
                        "--state-dir",
                        "--venv-dir",
                        "--lane",
                        "--timeout",
                    )
                    continue
                names.append(a)
            return names
    return None


def _code_lines(script: str) -> list[str]:
    """The script's lines with continuations joined and comments dropped."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        out.append("" if line.lstrip().startswith("#") else line.split(" #", 1)[0].rstrip())
    return out


def _is_background(code: str) -> bool:
    return code.endswith("&") and not code.endswith("&&") and not code.endswith(">&")


def _has_wait(code: str) -> bool:
    return any(w[0] == "wait" for w in _segments(code))


def _detached(line: str) -> bool:
    if "&>" in line:
        return True
    out = re.search(r"(?<![0-9&])>{1,2}\s*\S", line) or re.search(r"\b1>{1,2}\s*\S", line)
    err = re.search(r"\b2>{1,2}\s*\S", line)
    return bool(out and err)


def lane_findings(job: Job) -> list[Finding]:
    findings = []
    started: dict[str, int] = {}  # lane name ("*" = all) -> step index
    for step in job.steps:
        for words in _segments(step.run):
            names = _lane_names(words, "start")
            if names is not None:
                for n in names or ["*"]:
                    started.setdefault(n, step.index)
            names = _lane_names(words, "wait")
            if names is not None:
                if not names:
                    started.clear()
                for n in names:
                    started.pop(n, None)
    for n in started:
        what = "lanes started" if n == "*" else f"lane {n!r} started"
        findings.append(
            Finding(
                "lane-never-collected",
                f"{job.label}: {what} (step {started[n] + 1}) but no later `suitefit lanes wait` "
                "collects it: its failure can never fail the job",
                job.workflow,
                job.job_id,
            )
        )
    # Each step is its own shell: only a `wait` later in the same step collects a
    # background job, and only then does the step wait for it anyway. A launch left
    # running past its step must not hold the step's stdout/stderr.
    seen: set[str] = set()
    for step in job.steps:
        lines = _code_lines(step.own)
        for lineno, code in enumerate(lines):
            if not _is_background(code) or "suitefit lanes" in code or _detached(code):
                continue
            if any(_has_wait(later) for later in lines[lineno + 1 :]) or code in seen:
                continue
            seen.add(code)
            findings.append(
                Finding(
                    "background-not-detached",
                    f"{job.label}: `{code.strip()}` outlives its step but keeps the step's "
                    "stdout/stderr: the step waits for it and the overlap disappears "
                    "(redirect both to a log file)",
                    job.workflow,
                    job.job_id,
                )
            )
    return findings


# ------------------------------------------------------------ the audit
def locate(target: Path) -> tuple[Path, Path]:
    """(repo root, workflows folder) from a repo root or a workflows folder."""
    if not target.exists():
        raise SuitefitError(f"{target}: no such directory")
    if not target.is_dir():
        raise SuitefitError(f"{target}: not a directory")
    if (target / ".github" / "workflows").is_dir():
        return target, target / ".github" / "workflows"
    if target.name == "workflows" and target.parent.name == ".github":
        return target.parent.parent, target
    raise SuitefitError(f"{target}: has no .github/workflows folder (give the repository root)")


def _pyproject(root: Path) -> dict[str, Any]:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _testpaths(pyproject: dict[str, Any]) -> tuple[str, ...]:
    tp = pyproject.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths", [])
    if isinstance(tp, str):
        tp = tp.split()
    return tuple(str(t) for t in tp) if isinstance(tp, list) else ()


def _lane_commands(pyproject: dict[str, Any]) -> dict[str, str]:
    """Lane name -> its command as shell text, from [tool.suitefit.lanes]."""
    lanes = pyproject.get("tool", {}).get("suitefit", {}).get("lanes", {})
    out = {}
    if isinstance(lanes, dict):
        for name, table in lanes.items():
            cmd = table.get("command") if isinstance(table, dict) else None
            if isinstance(cmd, list):
                cmd = shlex.join(str(c) for c in cmd)
            if isinstance(cmd, str):
                out[str(name)] = cmd
    return out


def audit(target: Path) -> Audit:
    root, wf_dir = locate(target.resolve())
    result = Audit(root=root)
    result.jobs = read_jobs(root, wf_dir)
    wf_files = sorted(
        {j.workflow for j in result.jobs} | {_rel(f, root) for f in wf_dir.glob("*.y*ml")}
    )
    result.guards = find_guards(root, wf_files)
    modules = [g.module for g in result.guards]
    pyproject = _pyproject(root)
    testpaths = _testpaths(pyproject)
    lanes = _lane_commands(pyproject)
    events = set(PR_EVENTS)
    if not any(t.event in events for j in result.jobs for t in j.triggers):
        events = {"push"}  # no pull-request workflow: pushes are where checks run
    for job in result.jobs:
        for m in sorted(modules_run_by(job, modules, testpaths, lanes)):
            result.runs.setdefault(m, []).append(job.label)
    for g in result.guards:
        uncovered = []
        for wf in g.reads:
            starters = [
                j
                for j in result.jobs
                if any(t.event in events and t.fires_for(wf) for t in j.triggers)
            ]
            if not any(j.label in result.runs.get(g.module, []) for j in starters):
                uncovered.append(wf)
        if uncovered:
            ran = ", ".join(result.runs.get(g.module, [])) or "no job"
            if len(uncovered) > 3:
                what = (
                    f"{len(uncovered)} workflow files it reads (e.g. {Path(uncovered[0]).name}) "
                    "can change with no job running it"
                )
            else:
                what = (
                    f"no job that starts on a change to only "
                    f"{' or '.join(Path(u).name for u in uncovered)} runs it"
                )
            result.findings.append(
                Finding(
                    "guard-not-run-unfiltered",
                    f"{g.module} reads workflow files, but {what} (run by: {ran}): a "
                    "workflow-only pull request never collects this guard",
                    module=g.module,
                )
            )
    for job in result.jobs:
        result.findings.extend(lane_findings(job))
    return result


def _rel(p: Path, root: Path) -> str:
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def render(a: Audit) -> list[str]:
    """The human report: jobs, guards, findings."""
    lines = [f"jobs ({len(a.jobs)}):"]
    width = max((len(j.label) for j in a.jobs), default=0)
    for j in a.jobs:
        trig = "; ".join(t.describe() for t in j.triggers) or "no triggers"
        lines.append(f"  {j.label:<{width}}  {trig}")
    lines.append(f"guards: test modules that read workflow files ({len(a.guards)}):")
    for g in a.guards:
        reads = ", ".join(Path(w).name for w in g.reads)
        ran = ", ".join(a.runs.get(g.module, [])) or "no job"
        lines.append(f"  {g.module}  reads {reads}; run by {ran}")
    if a.findings:
        lines.append(f"findings ({len(a.findings)}):")
        lines.extend(f"  [{f.kind}] {f.message}" for f in a.findings)
    else:
        lines.append("findings: none")
    return lines
