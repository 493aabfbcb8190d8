"""The report as one self-contained HTML file: plotly.js, the page's script and styles, and the run's data
inlined, so it opens from disk with no network."""

from __future__ import annotations

import base64
import html
import json
import os
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from agentfly_train.report.charts import chart_data
from agentfly_train.report.run_data import RunData, load_run

REPORT_FILE = "report.html"
"""The report's name in the run directory."""
INLINE_IMAGE_BYTES = 64 * 2**20
"""The most PNG bytes of screenshots the page holds (inline, as data URIs), newest steps first."""


def _asset(name: str) -> str:
    return resources.files("agentfly_train.report").joinpath("assets", name).read_text()


def _script_json(value: Any) -> str:
    """JSON that is safe inside ``<script>``: no ``</script>`` or ``<!--`` can end or comment it out."""
    return json.dumps(value, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _summary(data: RunData) -> dict[str, Any]:
    config = data.config
    trainer, agent = config.get("trainer") or {}, config.get("agent") or {}
    algorithm = config.get("algorithm") or {}
    rollout = (config.get("actor_rollout_ref") or {}).get("rollout") or {}
    model = agent.get("model_name_or_path") or ((config.get("actor_rollout_ref") or {}).get("model") or {}).get("path")
    facts = {
        "env": agent.get("env"),
        "model": model,
        "estimator": algorithm.get("adv_estimator"),
        "backend": rollout.get("name"),
        "steps logged": max((record["step"] for record in data.metrics), default=None),
        "steps planned": trainer.get("total_training_steps"),
    }
    for name, key in (("validation before", "val_before"), ("validation after", "val_after")):
        accuracy = (data.result.get(key) or {}).get("val/accuracy")
        if isinstance(accuracy, int | float):
            facts[f"{name} (accuracy)"] = round(float(accuracy), 4)
    return {name: value for name, value in facts.items() if value is not None}


def _image_sources(data: RunData, budget: int) -> tuple[dict[str, str], list[str]]:
    """``data:`` URIs of the run's screenshots, newest step first, until their PNG bytes would pass ``budget``; and a
    sentence saying how many older ones were left out and where they are, if any were."""
    sources: dict[str, str] = {}
    used = 0
    for name, path in data.images.items():
        png = path.read_bytes()
        used += len(png)
        if used > budget:
            return sources, [
                f"screenshots left out of this page: {len(data.images) - len(sources)} (older ones; it holds "
                f"{budget:,} bytes of them, newest steps first); their PNG files are in the run directory, e.g. {name}"
            ]
        sources[name] = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return sources, []


def render(data: RunData, image_bytes: int = INLINE_IMAGE_BYTES) -> str:
    """The HTML page for a loaded run, with up to ``image_bytes`` of its screenshots inline."""
    from plotly.offline import get_plotlyjs

    images, left_out = _image_sources(data, image_bytes)
    payload = {
        "run_dir": str(data.run_dir),
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "summary": _summary(data),
        "groups": chart_data(data.metrics),
        "pass_at_k": data.pass_at_k,
        "samples": {split: {str(step): rows for step, rows in steps.items()} for split, steps in data.samples.items()},
        "images": images,
        "problems": [*data.problems, *left_out],
    }
    title = f"agentfly run: {html.escape(data.run_dir.name or str(data.run_dir))}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>{title}</title>\n'
        f"<style>{_asset('report.css')}</style>\n"
        f"<script>{get_plotlyjs()}</script>\n"
        f"</head><body>\n{_asset('body.html')}\n"
        f'<script type="application/json" id="run-data">{_script_json(payload)}</script>\n'
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )


def build_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Writes the report of ``run_dir`` (default ``<run_dir>/report.html``) and returns its path.

    The file is written beside its final name and moved into place, so a reader never sees half a page
    (the report can be rebuilt while the run is going).

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist or is not a directory")
    path = Path(out) if out is not None else run_dir / REPORT_FILE
    page = render(load_run(run_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return path
