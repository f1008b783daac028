"""Each lane's own virtualenv: built from its requirements, cached, never shared mid-install.

The packages are two tiny wheels written here (no network, no build step), kept
at a stable path under .venvs/ so the cached lane venvs are reused across runs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import textwrap
import zipfile
from pathlib import Path

from lanes_helpers import suitefit, write_project

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".venvs" / "lanes-wheels"
VENVS = ROOT / ".venvs" / "lanes"


def make_wheel(name: str, version: str = "1.0") -> Path:
    """A minimal pure-Python wheel holding one module ``name`` (deterministic bytes)."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    path = WHEELS / f"{name}-{version}-py3-none-any.whl"
    if path.exists():
        return path
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"WHO = {name!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: suitefit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for fn, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()).rstrip(b"=")
        record.append(f"{fn},sha256={digest.decode()},{len(body.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for fn, body in files.items():
            z.writestr(zipfile.ZipInfo(fn, date_time=(2020, 1, 1, 0, 0, 0)), body)
    tmp.replace(path)
    return path


PROBE = "import importlib.util as u, sys; print('LANE', sys.prefix, [m for m in ('lanepkga', 'lanepkgb') if u.find_spec(m)])"


def test_two_lanes_each_import_only_their_own_packages(tmp_path: Path) -> None:
    a, b = make_wheel("lanepkga"), make_wheel("lanepkgb")
    proj = write_project(
        tmp_path / "proj",
        textwrap.dedent(
            f"""
            [tool.suitefit.lanes.one]
            command = ["python", "-c", "{PROBE}"]
            requirements = ["{a}"]
            [tool.suitefit.lanes.two]
            command = ["python", "-c", "{PROBE}"]
            requirements = ["{b}"]
            """
        ),
    )
    assert suitefit(proj, "lanes", "start", "--venv-dir", str(VENVS)).rc == 0
    r = suitefit(proj, "lanes", "wait", timeout=300)
    assert r.rc == 0, r.out + r.err
    lines = {ln.split("LANE ")[1] for ln in r.out.splitlines() if ln.startswith("LANE ")}
    one = next(ln for ln in lines if "lanepkga" in ln)
    two = next(ln for ln in lines if "lanepkgb" in ln)
    assert one.endswith("['lanepkga']") and two.endswith("['lanepkgb']")
    assert one.split()[0] != two.split()[0]  # two different venvs
    assert str(VENVS) in one and str(VENVS) in two
    # The foreground interpreter got neither.
    import importlib.util

    assert importlib.util.find_spec("lanepkga") is None
    assert importlib.util.find_spec("lanepkgb") is None


def test_lanes_sharing_requirements_build_one_venv_once(tmp_path: Path) -> None:
    """Two lanes, same requirements, cold cache: one install, the other waits and reuses it."""
    a = make_wheel("lanepkga")
    lane = f'command = ["python", "-c", "{PROBE}"]\nrequirements = ["{a}"]\n'
    proj = write_project(
        tmp_path / "proj", f"[tool.suitefit.lanes.x]\n{lane}[tool.suitefit.lanes.y]\n{lane}"
    )
    venvs = tmp_path / "venvs"
    assert suitefit(proj, "lanes", "start", "--venv-dir", str(venvs)).rc == 0
    r = suitefit(proj, "lanes", "wait", timeout=300)
    assert r.rc == 0, r.out + r.err
    assert r.out.count("suitefit-lane: building venv") == 1
    assert r.out.count("suitefit-lane: using cached venv") == 1
    assert r.out.count("['lanepkga']") == 2
    assert len([p for p in venvs.iterdir() if p.is_dir()]) == 1


def test_failed_install_is_a_lane_error(tmp_path: Path) -> None:
    proj = write_project(
        tmp_path / "proj",
        '[tool.suitefit.lanes.broken]\ncommand = "true"\n'
        f'requirements = ["{tmp_path}/no-such-package-1.0-py3-none-any.whl"]\n',
    )
    assert suitefit(proj, "lanes", "start", "--venv-dir", str(tmp_path / "venvs")).rc == 0
    r = suitefit(proj, "lanes", "wait", timeout=300)
    assert r.rc == 1
    assert "lane broken: error: pip install into" in r.out
