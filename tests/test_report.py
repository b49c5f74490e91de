"""The HTML report: escaping of hostile labels, a single self-contained file, the JSON sidecar,
re-rendering without retraining, and the AUC ceiling it draws."""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import dpaudit
from defenses.baselines import MLPDP
from dpaudit.datasets import csbm, from_data
from dpaudit.registry import register_defense
from dpaudit.statistics import auc_ceiling as statistics_auc_ceiling
from reports.aggregate import auc_ceiling, build_report_data
from reports.render import render_html

HOSTILE_DATASET = "<script>alert(1)</script> $x$ {{ 7*7 }}"
HOSTILE_DEFENSE = "<img src=x onerror=alert(2)>"


class HostileLabelMLPDP(MLPDP):
    """mlp-dp under a hostile name: the label reaches the report through the whole pipeline."""

    name = HOSTILE_DEFENSE


@dataclass
class Page:
    tags: list
    attrs: list
    text: str


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.chunks = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v or "") for k, v in attrs)

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.chunks.append(data)


def parse(html: str) -> Page:
    c = _Collector()
    c.feed(html)
    return Page(c.tags, c.attrs, "".join(c.chunks))


@pytest.fixture(scope="module")
def hostile_defense():
    """Registered only while this module's tests run, so no other test sees it."""
    from dpaudit import registry

    register_defense(HostileLabelMLPDP)
    yield HOSTILE_DEFENSE
    registry._DEFENSES.pop(HOSTILE_DEFENSE, None)


@pytest.fixture(scope="module")
def study(tmp_path_factory, hostile_defense):
    base = csbm(num_nodes=160, num_classes=3, num_features=8, avg_degree=5, homophily=0.85, feature_signal=1.0, seed=5)
    hostile = from_data(base.data, name=HOSTILE_DATASET)
    out = tmp_path_factory.mktemp("report") / "study"
    result = dpaudit.compare(
        hostile,
        defenses=[HOSTILE_DEFENSE, "gcn"],
        epsilons=[2, "inf"],
        attacks=["mia-threshold", "embedding-probe"],
        overrides={HOSTILE_DEFENSE: {"epochs": 3}, "gcn": {"epochs": 30}},
        attack_settings={"mia-threshold": {"n_boot": 50},
                         "embedding-probe": {"projections": ["tsne"], "max_plot_nodes": 80, "n_boot": 50}},
        out=out,
        progress=False,
    )  # fmt: skip
    assert len(result.done) == 3 and not result.failed
    html_path = result.to_html(out / "report.html")
    return result, html_path


def test_hostile_labels_are_escaped(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    page = parse(html)
    assert "<script" not in html.lower() and "script" not in page.tags
    assert "<img src=x" not in html
    assert not [a for a in page.attrs if a[1].lower().startswith("on")]  # no event handler attribute
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert HOSTILE_DATASET in page.text and HOSTILE_DEFENSE in page.text  # shown, as text
    assert "{{ 7*7 }}" in page.text  # rendered as text, never evaluated as a template
    # labels inside the SVG figures are escaped text too (matplotlib), and `$` did not start mathtext
    headline = html[html.index('id="headline-figure"') :]
    assert "&lt;img src=x onerror=alert(2)&gt;" in headline[: headline.index("</figure>")]
    imgs = [v for tag, k, v in page.attrs if tag == "img" and k == "src"]
    assert imgs and all(v.startswith("data:image/png;base64,") for v in imgs)  # the t-SNE panels


def test_single_self_contained_file(study):
    result, html_path = study
    html = html_path.read_text(encoding="utf-8")
    page = parse(html)
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", html, flags=re.I)
    assert not {"link", "script", "iframe", "object", "embed", "base"} & set(page.tags)
    for tag, key, value in page.attrs:
        if key in ("src", "href", "xlink:href", "action", "poster"):
            assert value.startswith(("data:", "#")), (tag, key, value[:60])
    for url in re.findall(r"url\(([^)]*)\)", html):
        assert url.strip("'\" ").startswith("#"), url
    assert "@import" not in html
    csp = [v for tag, k, v in page.attrs if tag == "meta" and k == "content" and "default-src" in v]
    assert csp == ["default-src 'none'; img-src data:; style-src 'unsafe-inline'"]
    assert "@media print" in html and "@media (max-width" in html and 'name="viewport"' in html
    for section in (
        "summary",
        "headline",
        "utility",
        "roc",
        "embeddings",
        "lower-bounds",
        "ledgers",
        "reproducibility",
    ):
        assert f'<section id="{section}">' in html
    assert html.count("<svg") >= 4  # headline, utility, ROC, lower bounds


def _numbers(data) -> set[str]:
    """Every number in the sidecar in each format the report prints numbers in."""
    out: set[str] = set()

    def walk(v):
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            out.update({f"{v:.3f}", f"{v:.1f}", f"{v:.1e}", f"{v:g}", str(v)})
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(data)
    return out


def test_sidecar_holds_every_number_of_the_summary(study):
    result, html_path = study
    sidecar = json.loads(html_path.with_suffix(".json").read_text())
    assert sidecar["schema"] == "dpaudit.report-data" and len(sidecar["summary"]) == 3
    html = html_path.read_text(encoding="utf-8")
    table = html[html.index('id="summary-table"') : html.index("</table>", html.index('id="summary-table"'))]
    body = parse(table[table.index("<tbody>") :]).text
    known = _numbers(sidecar)
    shown = re.findall(r"\d+\.\d+e[-+]\d+|\d+\.\d+|\d+", body)
    assert len(shown) > 20
    missing = [n for n in shown if n not in known]
    assert not missing, missing
    gcn = next(r for r in sidecar["summary"] if r["defense"] == "gcn")
    assert f"{gcn['test_accuracy']:.3f}" in body
    assert "images" in json.dumps(sidecar) and "base64" not in json.dumps(sidecar)  # names, not payloads


def test_report_rerenders_without_retraining(study, capsys):
    result, html_path = study
    from dpaudit.cli import main

    before = {p: p.stat().st_mtime_ns for p in result.dir.rglob("*") if p.is_file() and "report" not in p.name}
    out = result.dir / "again.html"
    assert main(["report", str(result.dir), "--out", str(out)]) == 0
    assert "report:" in capsys.readouterr().out
    after = {
        p: p.stat().st_mtime_ns
        for p in result.dir.rglob("*")
        if p.is_file() and p.name not in {"again.html", "again.json"} and "report" not in p.name
    }  # noqa: E501
    assert before == after  # nothing trained or rewritten
    first = json.loads(html_path.with_suffix(".json").read_text())
    second = json.loads(out.with_suffix(".json").read_text())
    assert first["summary"] == second["summary"] and first["lower_bounds"] == second["lower_bounds"]


def test_broken_guarantee_is_flagged(study):
    """A claimed ε below an attack's proven lower bound is flagged in red, only when covered."""
    result, _ = study
    records = copy.deepcopy(result.done)
    private = next(r for r in records if r["privacy"]["unit"] == "node")
    attack = private["attacks"]["mia-threshold"]
    attack["covered_by_guarantee"] = True
    attack["epsilon_lower_bound"] = private["privacy"]["epsilon"] + 0.5  # a bound above the claim
    data = build_report_data(records, result.report_meta())
    assert [(p["defense"], p["attack"]) for p in data["broken"]] == [(HOSTILE_DEFENSE, "mia-threshold")]
    html = render_html(data)
    assert 'id="broken-banner"' in html and '<tr class="broken ' in html
    attack["covered_by_guarantee"] = False  # an uncovered attack never breaks the guarantee
    assert build_report_data(records, result.report_meta())["broken"] == []
    # edges against non-edges are not units assigned at random: above the claim, but not "broken"
    attack["covered_by_guarantee"] = True
    attack["ceiling"] = {**attack["ceiling"], "attack_unit": "edge"}
    data = build_report_data(records, result.report_meta())
    assert data["broken"] == [] and len(data["exceeds_not_valid"]) == 1
    assert "not valid audits" in render_html(data)


@pytest.mark.parametrize("epsilon,delta", [(0.1, 0.0), (1.0, 1e-4), (4.0, 1e-3), (8.0, 1e-5)])
def test_auc_ceiling_matches_the_tradeoff_integral(epsilon, delta):
    """Closed form vs dpaudit.statistics vs numerically integrating the (ε, δ) trade-off curve."""
    alpha = np.linspace(0, 1, 200001)
    f = np.maximum.reduce([np.zeros_like(alpha), 1 - delta - math.exp(epsilon) * alpha,
                           math.exp(-epsilon) * (1 - delta - alpha)])  # fmt: skip
    integral = 1 - np.trapezoid(f, alpha)
    assert auc_ceiling(epsilon, delta) == pytest.approx(integral, abs=1e-6)
    assert auc_ceiling(epsilon, delta) == pytest.approx(statistics_auc_ceiling(epsilon, delta), abs=1e-9)
    assert auc_ceiling(None, delta) == 1.0


def test_report_path_must_not_be_the_sidecar(study, tmp_path):
    from dpaudit.errors import ConfigurationError

    result, _ = study
    with pytest.raises(ConfigurationError):
        result.to_html(tmp_path / "report.json")
    assert Path(result.to_html(tmp_path / "r.html")).exists() and (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "svg",
    [
        '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><g onload="alert(1)"/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<a xlink:href="javascript:alert(1)"/></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject/></svg>',
    ],
)
def test_active_svg_is_never_embedded(svg):
    from reports.figures import _assert_inert

    with pytest.raises(ValueError, match="active content"):
        _assert_inert(svg, "fig-test")
