"""Screenshots of what a search leaves in the MLflow UI, taken in headless Chromium.

Runs a small two-objective search on simulated GPUs under Ray (as ``hpsearch run``
does), starts ``hpsearch ui`` on it, and photographs, into ``docs/``:

* ``mlflow-runs-table.png``: the experiment's runs table (the URL the end of a run
  prints), with the objectives' and parameters' columns a user would choose;
* ``mlflow-system-metrics.png``: a trial's System metrics tab (its GPU series);
* ``mlflow-analysis-<figure>.png``: the parent run's analysis figures, as its
  Artifacts tab shows them (the accuracy-against-speed Pareto front, parameter
  importances, parallel coordinates, the optimisation history).

Needs Chromium (``apt-get install chromium``, or ``--chromium PATH``) and the
``docs`` extra (``pip install -e ".[docs]"``: Playwright drives it). The
figures' HTML loads plotly.js from its CDN; the browser is always given the
plotly package's own copy instead, so the pictures are the same with or without
internet.

    python scripts/screenshots.py                 # a new search in a temporary folder
    python scripts/screenshots.py --project DIR   # DIR's search.yaml, run there once
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPO = Path(__file__).resolve().parent.parent
FIGURES = (
    "pareto_front",
    "param_importances_val_accuracy",
    "parallel_coordinate_val_accuracy",
    "optimization_history_val_accuracy",
)
SETTLE_MS = 8000
COLUMNS = ("val_accuracy", "samples_per_sec", "batch_size", "width", "depth", "lr")
HIDDEN = ("Dataset", "Source", "Models")  # shown by default, empty for a search's runs
SEARCH: dict[str, Any] = {
    "study": {"name": "screenshots", "n_trials": 16, "sampler": {"type": "tpe", "seed": 0}},
    "objectives": [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": "samples_per_sec", "direction": "maximize"},
    ],
    "train": "hpsearch.workloads.simulated_gpu:train",
    "space": {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "batch_size": [32, 64, 128, 256],
        "width": [128, 256, 512, 1024],
        "depth": {"type": "int", "low": 1, "high": 3},
        "epochs": 4,
        "steps_per_epoch": 40,
    },
    "execution": {"num_cpus": 4},
    "telemetry": {
        "backend": "simulated",
        "interval_s": 0.5,
        "simulated": {"source": "load", "gpus": 1, "name": "Simulated RTX 4060"},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--project", type=Path, help="keep the search here (run once)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        project = args.project or Path(folder)
        project.mkdir(parents=True, exist_ok=True)
        hpsearch = [sys.executable, "-m", "hpsearch"]
        if not (project / "search.yaml").exists():
            (project / "search.yaml").write_text(yaml.safe_dump(SEARCH, sort_keys=False))
            subprocess.run([*hpsearch, "run", "search.yaml"], cwd=project, check=True)
        port = _free_port()
        ui = subprocess.Popen(
            [*hpsearch, "ui", "search.yaml", "--port", str(port)],
            cwd=project,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            address = f"http://127.0.0.1:{port}"
            _wait_for(address)
            _photograph(address, project, args.chromium, args.out)
        finally:
            ui.terminate()
            ui.wait(timeout=30)


def _photograph(address: str, project: Path, chromium: str, out: Path) -> None:
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import Route, sync_playwright

    from hpsearch.tracking import runs_table_url

    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("screenshots")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    child = next(r for r in runs if r.data.tags.get("mlflow.parentRunId"))
    base = f"{address}/#/experiments/{experiment.experiment_id}"
    plotly_js = _plotly_js()

    def plotly_from_package(route: Route) -> None:
        route.fulfill(body=plotly_js, content_type="application/javascript")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.route("https://cdn.plot.ly/**", plotly_from_package)
        # The runs table as the end of a run prints its address: sorted by the first
        # objective, best first.
        table = runs_table_url(address, experiment.experiment_id, "val_accuracy")
        page.goto(table, wait_until="load")
        page.wait_for_timeout(SETTLE_MS)
        _as_a_user_sets_it_up(page)
        shots = {
            "mlflow-runs-table.png": (table, None),
            "mlflow-system-metrics.png": (
                f"{base}/runs/{child.info.run_id}/system-metrics",
                None,
            ),
            **{
                # MLflow 3.17 opens the tab on the file chosen last: choose it.
                f"mlflow-analysis-{name}.png": (
                    f"{base}/runs/{parent.info.run_id}/artifacts",
                    f"{name}.html",
                )
                for name in FIGURES
            },
        }
        for file, (url, artifact) in shots.items():
            page.goto(url, wait_until="load")
            # The UI polls for ever (never network-idle) and draws after its data arrives.
            page.wait_for_timeout(SETTLE_MS)
            if artifact is not None:
                listed = page.get_by_text(artifact, exact=True)
                if not listed.is_visible():  # its folder is folded
                    page.get_by_text("analysis", exact=True).click()
                listed.click()
                page.wait_for_timeout(SETTLE_MS)
            page.screenshot(path=str(out / file))
            print(f"{out / file}: {url} {artifact or ''}")
        browser.close()


def _as_a_user_sets_it_up(page: Page) -> None:
    """What a user does once in MLflow 3.17's UI (the browser keeps it): close the
    assistant panel it opens with, take the model-training workspace, and show the
    objectives' and a few parameters' columns in the runs table (none are shown
    until chosen under Columns) instead of the empty dataset, source and model ones."""
    page.get_by_role("button", name="Close").click()
    page.get_by_text("Model training", exact=True).click()
    page.wait_for_timeout(SETTLE_MS)  # the workspace's table loads again
    page.get_by_role("button", name="Columns", exact=True).click()
    search, menu = page.get_by_placeholder("Search columns"), page.get_by_role("dialog")
    for column in (*HIDDEN, *COLUMNS):  # a click hides a shown column, shows a hidden one
        search.fill(column)
        page.wait_for_timeout(500)
        # A tree node's title, whole (a search also highlights "width" in "space.width").
        title = re.compile(f"^{re.escape(column)}$")
        menu.locator("[class*=tree-title]").filter(has_text=title).first.click()
    page.keyboard.press("Escape")


def _plotly_js() -> bytes:
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for(address: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"the MLflow UI at {address} did not answer in {timeout:.0f} s")


if __name__ == "__main__":
    main()
