"""The public surface is exactly what ``suitefit.__all__`` names, and each name resolves."""

import importlib.metadata

import suitefit


def test_all_names_resolve_and_nothing_else_is_public() -> None:
    for name in suitefit.__all__:
        assert hasattr(suitefit, name), name
    public = {n for n in vars(suitefit) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(suitefit, n)).__name__ == "module"}
    assert public - modules == set(suitefit.__all__) - {"__version__"}


def test_version_matches_the_installed_distribution() -> None:
    assert suitefit.__version__ == importlib.metadata.version("suitefit")


def test_the_pytest_plugin_and_console_script_are_registered() -> None:
    eps = importlib.metadata.entry_points()
    assert any(e.value == "suitefit.plugin" for e in eps.select(group="pytest11"))
    assert any(e.value == "suitefit.cli:main" for e in eps.select(group="console_scripts"))


def test_the_plugin_imports_nothing_heavy_until_asked() -> None:
    """A plain pytest run must not pay for suitefit being installed."""
    import subprocess
    import sys

    code = ("import sys, suitefit.plugin\n"
            "heavy = [m for m in ('psutil', 'sqlite3', 'rich', 'suitefit.session', 'suitefit.history') if m in sys.modules]\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_measured_run_loads_no_planner_or_run_control(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`pytest --suitefit` records; the planner and the run controller are `suitefit run`'s.

    Measured: importing them at the end of a run (for one constant and one stream helper)
    cost ~25 ms after the last test, on every recorded run.
    """
    import os
    import subprocess
    import sys

    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    mods = ('suitefit.plan.planner', 'suitefit.plan.dispatch', 'suitefit.run_control', 'suitefit.summary')\n"
        "    open('loaded.txt', 'w').write(' '.join(m for m in mods if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--suitefit",
                          f"--suitefit-history={tmp_path / 'h.sqlite'}"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "loaded.txt").read_text().split() == ["suitefit.summary"]  # the summary ran, alone


def test_planner_functions_named_like_their_modules_stay_functions() -> None:
    """`suitefit.plan.simulate` is a module and `suitefit.plan.simulate` the function: the package binds the function.

    A lazy package (module ``__getattr__``) returned the module whenever the submodule had
    been imported first; a clean-clone CI run caught it under one test order.
    """
    import subprocess
    import sys

    code = ("import suitefit.plan.simulate, suitefit.plan.shards\n"
            "from suitefit.plan import simulate, hash_shard, make_plan\n"
            "print(callable(simulate), callable(hash_shard), callable(make_plan))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "True"]
