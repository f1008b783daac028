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
