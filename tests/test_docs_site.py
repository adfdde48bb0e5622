"""The documentation site: it builds strict, offline, with its generated pages; and every
code block of Getting started runs as written, so the first page cannot lie."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.process

_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_CDN = re.compile(r"""<(?:script[^>]*\ssrc|link[^>]*\shref)="(?:https?:)?//""")
"""A script, stylesheet or font fetched from another host (a hyperlink is not one)."""


def test_the_site_builds_strict_and_offline_with_its_generated_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    pages = list(site.rglob("*.html"))
    assert len(pages) > 15
    assert [p.name for p in pages if _CDN.search(p.read_text(encoding="utf-8"))] == []
    config = (site / "reference" / "config.html").read_text(encoding="utf-8")
    for key in ("n_trials", "max_members", "metrics_file", "fused_member_cost"):
        assert f"<code>{key}</code>" in config, key  # every key, from the models
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "hpsearch schema" in cli
    assert "--runner" in cli
    benchmarks = (site / "benchmarks.html").read_text(encoding="utf-8")
    for result in (REPO_ROOT / "benchmarks" / "results").glob("*.json"):
        assert result.name in benchmarks
    # The figures, drawn from the files at build time (the theme's icons are SVG too).
    for title in ("Fused members against separate processes", "Fusion auto against the oracle"):
        heading = benchmarks.rindex(title)  # the page's heading (the first is the contents)
        assert "<svg" in benchmarks[heading : heading + 2000], title


@pytest.mark.usefixtures("seeded_store")
def test_every_block_of_getting_started_runs_as_written(project: Path) -> None:
    page = (REPO_ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    blocks = _BLOCK.findall(page)
    assert [kind for kind, _, _ in blocks] == ["bash", "yaml", "bash", "bash", "python"]
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for kind, attributes, body in blocks[1:]:  # the first is make test: this run
        if kind == "yaml":
            title = re.search(r'title="([^"]+)"', attributes)
            assert title is not None
            (project / title.group(1)).write_text(body)
            continue
        command = ["bash", "-e", "-c", body] if kind == "bash" else [sys.executable, "-c", body]
        done = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{kind} block failed:\n{body}\n{done.stderr[-3000:]}"
