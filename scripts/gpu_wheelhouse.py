"""Build what the GPU machine's image lacks: a wheelhouse for Python 3.12, in parts of 55 MB.

The lent GPU machine (see DEVELOPERS.md, "The GPU kit") has Python 3.12, a CUDA
torch, numpy, pandas, scikit-learn, matplotlib and a few more, but not Ray,
Optuna or MLflow, and it reaches no package registry. This script, run here:

1. takes the versions this venv has pinned for hpsearch's runtime dependencies
   (and pytest, for ``pytest -m gpu``), less what the image already has;
2. downloads their wheels for CPython 3.12 on manylinux x86_64 (``pip download
   --no-deps --only-binary=:all:``), and builds hpsearch itself as a wheel;
3. checks the closure: every requirement of every wheel is a wheel here or a
   package of the image;
4. tars the wheelhouse and splits it into parts of at most 55 MB
   (``.gpu/parts/wheelhouse.tar.part-aa``, ``-ab``, ...), which the device
   tool carries one per call (64 MiB at most each).

``.gpu/`` is listed in ``.git/info/exclude``, so the device tool copies it
only when a call names it in ``carry``.

    python scripts/gpu_wheelhouse.py          # make gpu-wheelhouse
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / ".gpu"
PART_BYTES = 55 * 1000 * 1000
PYTHON = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")

IMAGE = frozenset(
    canonicalize_name(name)
    for name in (
        # What the GPU image lists (the device tool's README), with what they bring.
        "torch", "triton", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock",
        "fsspec", "typing-extensions", "setuptools", "nvidia-ml-py", "numpy", "pandas",
        "python-dateutil", "pytz", "tzdata", "six", "scikit-learn", "scipy", "joblib",
        "threadpoolctl", "rich", "markdown-it-py", "mdurl", "pygments", "click", "pyyaml",
        "matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "packaging", "pillow",
        "pyparsing", "grpcio", "protobuf", "msgpack",
    )
)  # fmt: skip
"""Distributions the image has: not downloaded (torch's CUDA build is the image's own)."""
EXTRA_ROOTS = ("pytest", "pytest-timeout")
"""Not runtime dependencies, but the kit runs ``pytest -m gpu``."""


def target_environment() -> dict[str, str]:
    """Marker values of CPython 3.12 on Linux x86_64, where the wheels go."""
    env = {key: str(value) for key, value in default_environment().items()}
    env.update(
        python_version=PYTHON,
        python_full_version=f"{PYTHON}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        os_name="posix",
    )
    return env


def applies(requirement: Requirement, extras: frozenset[str], env: dict[str, str]) -> bool:
    """Whether ``requirement`` is needed on the target, with these extras asked for."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in extras or {""})


def pinned_closure(roots: list[str], env: dict[str, str]) -> dict[str, str]:
    """Every distribution ``roots`` need on the target, with the version this venv has."""
    found: dict[str, str] = {}
    queue = [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is needed but not installed here: run make setup") from None
        found[key] = dist.version
        for text in dist.requires or []:
            needed = Requirement(text)
            if applies(needed, extras, env):
                queue.append(needed)
    return {key.split("[")[0]: version for key, version in found.items()}


def download(pins: dict[str, str], into: Path) -> None:
    """The wheels of ``pins`` for the target (no resolution: the versions are this venv's)."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        "-d", str(into), *(f"{name}=={version}" for name, version in sorted(pins.items())),
    ]  # fmt: skip
    subprocess.run(command, check=True)


def build_own_wheel(into: Path) -> Path:
    """hpsearch as a wheel (not editable): the GPU machine installs it like any other."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(into), str(REPO)],
        check=True,
    )
    return next(into.glob("hpsearch-*.whl"))


def wheel_requirements(wheel: Path) -> tuple[str, list[Requirement]]:
    """A wheel's distribution name and its ``Requires-Dist``."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(name).decode())
    return meta["Name"], [Requirement(text) for text in meta.get_all("Requires-Dist") or []]


def missing_from_closure(
    wheels: list[Path], env: dict[str, str], roots: dict[str, frozenset[str]]
) -> list[str]:
    """Requirements that neither a wheel here nor the image meets (the extras asked of roots)."""
    have = {canonicalize_name(wheel_requirements(w)[0]) for w in wheels} | IMAGE
    missing = []
    for wheel in wheels:
        name, requirements = wheel_requirements(wheel)
        extras = roots.get(canonicalize_name(name), frozenset())
        for requirement in requirements:
            if (
                applies(requirement, extras, env)
                and canonicalize_name(requirement.name) not in have
            ):
                missing.append(f"{name} needs {requirement}")
    return missing


def split_tar(wheelhouse: Path, parts: Path) -> list[Path]:
    """``wheelhouse`` as a tar, in parts of :data:`PART_BYTES` (joined with ``cat``)."""
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    archive = parts / "wheelhouse.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(wheelhouse, arcname="wh")
    written = []
    with archive.open("rb") as whole:
        for suffix in (f"{a}{b}" for a in "abcdefghij" for b in "abcdefghijklmnopqrstuvwxyz"):
            chunk = whole.read(PART_BYTES)
            if not chunk:
                break
            part = parts / f"wheelhouse.tar.part-{suffix}"
            part.write_bytes(chunk)
            written.append(part)
    archive.unlink()
    return written


def ignore_gpu_folder() -> None:
    """List ``.gpu/`` in ``.git/info/exclude``: ignored, so carried only where named."""
    exclude = REPO / ".git" / "info" / "exclude"
    if not (REPO / ".git").is_dir():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if ".gpu/" not in lines:
        exclude.write_text("\n".join([*lines, ".gpu/"]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GPU)
    args = parser.parse_args()
    env = target_environment()
    wheelhouse, parts = args.out / "wh", args.out / "parts"
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir(parents=True)
    ignore_gpu_folder()
    roots = ["hpsearch", *EXTRA_ROOTS]
    pins = {
        name: version
        for name, version in pinned_closure(roots, env).items()
        if name not in IMAGE and name != "hpsearch"
    }
    print(f"{len(pins)} distributions to download for CPython {PYTHON}")
    download(pins, wheelhouse)
    build_own_wheel(wheelhouse)
    wheels = sorted(wheelhouse.glob("*.whl"))
    missing = missing_from_closure(wheels, env, {"hpsearch": frozenset()})
    if missing:
        raise SystemExit("the wheelhouse is not closed:\n  " + "\n  ".join(missing))
    size = sum(w.stat().st_size for w in wheels)
    written = split_tar(wheelhouse, parts)
    print(f"{len(wheels)} wheels, {size / 1e6:.0f} MB, in {len(written)} part(s) under {parts}:")
    for part in written:
        shown = part.relative_to(REPO) if part.is_relative_to(REPO) else part
        print(f"  {shown}  {part.stat().st_size / 1e6:.1f} MB")
    largest = sorted(wheels, key=lambda w: w.stat().st_size)[-3:]
    print("largest: " + ", ".join(f"{w.name} {w.stat().st_size / 1e6:.0f} MB" for w in largest))


if __name__ == "__main__":
    main()
