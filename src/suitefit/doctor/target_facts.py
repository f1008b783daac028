"""Run by the *target* interpreter (``--python``): what its pytest makes of the suite's options.

Executed as a plain script (``python target_facts.py OUT.json [PYTEST ARGS]``) in the
project folder, so it must not import suitefit and must run on any Python pytest
supports. It lets pytest itself read the ini file, ``PYTEST_ADDOPTS``, the plugins and
the initial conftests (``_prepareconfig``: parse only, no ``pytest_configure``, no
collection, no tests), then writes the resolved options as JSON to OUT. Anything that
goes wrong is written as ``{"error": kind, "message": ...}``.
"""

import contextlib
import json
import os
import shlex
import sys


def _version(dist):
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _cpus():
    out = {"os_cpu_count": os.cpu_count(), "affinity": None, "psutil_physical": None,
           "psutil_logical": None, "psutil": False}
    with contextlib.suppress(AttributeError, OSError):
        out["affinity"] = len(os.sched_getaffinity(0))
    try:
        import psutil
    except ImportError:
        return out
    out["psutil"] = True
    out["psutil_physical"] = psutil.cpu_count(logical=False)
    out["psutil_logical"] = psutil.cpu_count(logical=True)
    return out


def _describe(e):
    text = f"{type(e).__name__}: {' '.join(str(e).split())}"
    cause = e.__cause__ or e.__context__
    if cause is not None:
        text += f" ({type(cause).__name__}: {' '.join(str(cause).split())})"
    return text


def _usage_message(text):
    """argparse's multi-line complaint -> "unrecognized arguments: --x (inifile: ...)"."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
    ini = [ln for ln in lines if ln.startswith("inifile:")]
    if not errors:
        return " ".join(text.split())
    return errors[0] + (f" ({ini[0]})" if ini else "")


def _opt(config, name):
    return getattr(config.option, name, None)


def _facts(args):
    try:
        import pytest
        from _pytest.config import UsageError, _prepareconfig
    except ImportError as e:
        return {"error": "no-pytest", "message": str(e)}
    blas_before = {k: os.environ.get(k) for k in BLAS}
    try:
        config = _prepareconfig(list(args))
    except UsageError as e:
        return {"error": "usage", "message": _usage_message(str(e))}
    except SystemExit as e:
        return {"error": "usage", "message": f"pytest exited with {e.code!r} while reading its options"}
    except Exception as e:  # a conftest that fails to import, a broken plugin
        return {"error": "config", "message": _describe(e)}
    try:
        ini_addopts = list(config.getini("addopts"))
    except (ValueError, KeyError):
        ini_addopts = []
    plugins = {}
    for _plugin, dist in config.pluginmanager.list_plugin_distinfo():
        name = getattr(dist, "project_name", None) or dist.metadata["name"]
        plugins[name] = dist.version
    auto_workers = None
    numprocesses = _opt(config, "numprocesses")
    if config.pluginmanager.hasplugin("xdist") and numprocesses in ("auto", "logical"):
        try:
            auto_workers = config.hook.pytest_xdist_auto_num_workers(config=config)
        except Exception:
            auto_workers = None
    env_ini = None
    try:
        env_ini = list(config.getini("env"))  # pytest-env's ini key, when installed
    except (ValueError, KeyError):
        env_ini = None
    collect = {}
    for key in ("testpaths", "python_files", "norecursedirs"):
        try:
            collect[key] = [str(x) for x in config.getini(key)]
        except (ValueError, KeyError):
            collect[key] = []
    facts = {
        "collect": collect,
        "python": sys.executable,
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "pytest": pytest.__version__,
        "xdist": _version("pytest-xdist"),
        "pytest_cov": _version("pytest-cov"),
        "coverage": _version("coverage"),
        "plugins": plugins,
        "rootpath": str(config.rootpath),
        "inipath": str(config.inipath) if config.inipath else None,
        "ini_addopts": ini_addopts,
        "env_addopts": shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        "args": list(args),
        "numprocesses": numprocesses,
        "maxprocesses": _opt(config, "maxprocesses"),
        "auto_workers": auto_workers,
        "dist": _opt(config, "dist"),
        "maxworkerrestart": _opt(config, "maxworkerrestart"),
        "cov_source": _opt(config, "cov_source"),
        "cov_report": _opt(config, "cov_report"),
        "cov_fail_under": _opt(config, "cov_fail_under"),
        "cov_config": _opt(config, "cov_config"),
        "no_cov": bool(_opt(config, "no_cov")),
        "blas_env_before": blas_before,
        "blas_env": {k: os.environ.get(k) for k in BLAS},
        "env_ini": env_ini,
        "cpus": _cpus(),
    }
    # JSON cannot carry every option type (pytest-cov's report dict holds None values: fine).
    if isinstance(facts["cov_report"], dict):
        facts["cov_report"] = sorted(facts["cov_report"])
    return facts


BLAS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def main():
    out, args = sys.argv[1], sys.argv[2:]
    facts = _facts(args)
    with open(out, "w") as f:
        json.dump(facts, f, default=str)


if __name__ == "__main__":
    main()
