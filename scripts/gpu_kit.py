"""The GPU kit: what the lent GPU machine's image lacks, as one xz payload of at most 55 MB.

The lent GPU machine (DEVELOPERS.md, "The GPU machine") has Python 3.12, a CUDA
torch and some 230 more distributions (``scripts/gpu_image_packages.txt``, from
the device tool's KINDS.md), but not Ray, Optuna or MLflow, and reaches no
package registry; a call carries at most 64 MiB. This script, run here:

1. takes the versions this venv has pinned for hpsearch's runtime dependencies,
   less every distribution the image has (pyarrow, grpcio, torch among them);
2. downloads their wheels for CPython 3.12 on manylinux x86_64 (``pip download
   --no-deps --only-binary=:all:``) and installs them into a site folder
   (``pip install --no-deps --target``, foreign-platform flags);
3. leaves out what no search needs there: ``ray/jars`` (Java workers) and
   ``mlflow/server/js`` (the UI's web assets), and points ``bin/*`` scripts at
   ``/usr/bin/env python3``;
4. packs the site as ``.gpu/kit.tar.xz`` (``xz -9``): about 325 MB of files in
   50 MB. The repository's code travels beside it, as the device tool's working
   tree; hpsearch is imported from there.

On the GPU machine ``scripts/gpu_evidence.py`` unpacks it, makes it and the
repository visible to every process through a ``.pth`` file, and compiles it once.
``--python 3.11`` builds the same kit for this interpreter (the test's stand-in
where no 3.12 is at hand).

    python scripts/gpu_kit.py              # make gpu-kit
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

from gpu_evidence import KIT as KIT_PATH  # where the GPU run looks for it
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
GPU = KIT_PATH.parent
KIT = KIT_PATH.name
LIMIT_BYTES = 55 * 1000 * 1000
PYTHON = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")
IMAGE_LIST = Path(__file__).with_name("gpu_image_packages.txt")
PRUNED = ("ray/jars", "mlflow/server/js")
"""What no search on the GPU machine loads (Java workers, the MLflow UI's web assets)."""
SITE = "site"
"""The kit's top folder."""


def image_packages(path: Path = IMAGE_LIST) -> frozenset[str]:
    """The distributions the GPU image has (its list, comments left out)."""
    names = " ".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return frozenset(canonicalize_name(name) for name in names.split())


def target_environment(python: str) -> dict[str, str]:
    """Marker values of CPython ``python`` on Linux x86_64, where the kit goes."""
    env = {key: str(value) for key, value in default_environment().items()}
    env.update(
        python_version=python,
        python_full_version=f"{python}.0",
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


def pinned_closure(roots: list[str], env: dict[str, str], image: frozenset[str]) -> dict[str, str]:
    """Every distribution ``roots`` need on the target and the image lacks, at this venv's version.

    The image's distributions are not followed: what they need, the image has.
    """
    found: dict[str, str] = {}
    seen: set[str] = set()
    queue = [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen or name in image:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is needed but not installed here: run make setup") from None
        found[name] = dist.version
        for text in dist.requires or []:
            needed = Requirement(text)
            if applies(needed, extras, env):
                queue.append(needed)
    return found


def _platform_flags(python: str) -> list[str]:
    return [
        "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
    ]  # fmt: skip


def download(pins: dict[str, str], into: Path, python: str) -> list[Path]:
    """The wheels of ``pins`` for the target (no resolution: the versions are this venv's)."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *_platform_flags(python),
        "-d", str(into), *(f"{name}=={version}" for name, version in sorted(pins.items())),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return sorted(into.glob("*.whl"))


def install(wheels: list[Path], site: Path, python: str) -> None:
    """Unpack ``wheels`` into ``site`` as pip installs them for the target (not compiled)."""
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
        "--target", str(site), *_platform_flags(python), *map(str, wheels),
    ]  # fmt: skip
    subprocess.run(command, check=True)


def prune(site: Path) -> int:
    """Remove what no search needs there, and compiled leftovers; the bytes removed."""
    removed = 0
    for relative in PRUNED:
        folder = site / relative
        if folder.is_dir():
            removed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            shutil.rmtree(folder)
    for cache in list(site.rglob("__pycache__")):
        removed += sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
        shutil.rmtree(cache)
    return removed


def fix_shebangs(site: Path) -> int:
    """Point the site's scripts at the machine's ``python3`` (pip wrote this venv's)."""
    fixed = 0
    for script in sorted((site / "bin").glob("*")) if (site / "bin").is_dir() else []:
        data = script.read_bytes()
        if data.startswith(b"#!") and b"python" in data.split(b"\n", 1)[0]:
            script.write_bytes(b"#!/usr/bin/env python3\n" + data.split(b"\n", 1)[1])
            fixed += 1
    return fixed


def pack(site: Path, out: Path) -> Path:
    """``site`` as ``out`` (tar, then ``xz -9`` on every core; Python's lzma without xz)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tar = out.with_suffix("")  # kit.tar
    with tarfile.open(tar, "w") as archive:
        archive.add(site, arcname=SITE)
    xz = shutil.which("xz")
    if xz is not None:
        subprocess.run([xz, "-9", "-T0", "-f", str(tar)], check=True)
    else:
        import lzma

        with tar.open("rb") as raw, lzma.open(out, "wb", preset=9) as packed:
            shutil.copyfileobj(raw, packed, 1 << 20)
        tar.unlink()
    return out


def build(out_dir: Path, python: str = PYTHON) -> Path:
    """Build the kit for CPython ``python`` under ``out_dir``; its path."""
    image = image_packages()
    env = target_environment(python)
    pins = pinned_closure(["hpsearch"], env, image)
    pins.pop("hpsearch", None)  # imported from the repository, carried beside the kit
    work = out_dir / f"build-{python}"
    wheels_dir, site = work / "wheels", work / SITE
    shutil.rmtree(site, ignore_errors=True)
    wheels_dir.mkdir(parents=True, exist_ok=True)
    for old in wheels_dir.glob("*.whl"):
        old.unlink()
    print(f"{len(pins)} distributions the image lacks, for CPython {python}", flush=True)
    wheels = download(pins, wheels_dir, python)
    install(wheels, site, python)
    removed = prune(site)
    fixed = fix_shebangs(site)
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    print(f"site: {size / 1e6:.0f} MB ({removed / 1e6:.0f} MB left out, {fixed} scripts)")
    kit = pack(site, out_dir / KIT)
    shutil.rmtree(work)
    return kit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GPU)
    parser.add_argument("--python", default=PYTHON, help="the target CPython (default 3.12)")
    args = parser.parse_args()
    kit = build(args.out, args.python)
    size = kit.stat().st_size
    shown = kit.relative_to(REPO) if kit.is_relative_to(REPO) else kit
    verdict = "within" if size <= LIMIT_BYTES else "OVER"
    print(f"{shown}: {size / 1e6:.1f} MB, {verdict} the {LIMIT_BYTES / 1e6:.0f} MB a call carries")
    return 0 if size <= LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
